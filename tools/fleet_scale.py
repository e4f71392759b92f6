# Licensed under the Apache License, Version 2.0 (the "License"); you may
# not use this file except in compliance with the License. You may obtain
# a copy of the License at
#
#      http://www.apache.org/licenses/LICENSE-2.0
#
# Unless required by applicable law or agreed to in writing, software
# distributed under the License is distributed on an "AS IS" BASIS, WITHOUT
# WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied. See the
# License for the specific language governing permissions and limitations
# under the License.

"""The fleet audit at scale: ``nova-revert-lock status --all`` on N hosts.

For each fleet size, on one private RabbitMQ node (loopback only,
:mod:`nova_revert_lock.tests.integration.rabbitmq`):

* N compute services are registered in a cell's database, found through
  the API database's cell mapping exactly as ``--all`` finds them in a
  real deployment (the tables the integration tests create);
* N - K of them answer: real oslo.messaging RPC servers on Nova's
  ``compute`` topic with ``server=<host>``, each on its own connection,
  serving Nova's ``BaseRPCAPI`` and the real status endpoint
  (:mod:`nova_revert_lock.tests.integration.status_server`, many hosts
  per process); the K others, spread through the list, have no server;
* the real command runs as a subprocess, as an operator runs it, and its
  wall time and peak resident memory (``wait4()``: that process alone)
  are measured;
* every row is checked: each answering host reachable, protected, with
  the state and release this Nova reports; each silent host unreachable,
  saying that it did not answer in time.

Run from a checkout, in the Python environment of the ``all-ussuri`` (or
``rpc``) tox env::

    .tox/all-ussuri/bin/python -m tools.fleet_scale [--sizes 100,250,500]
        [--down 10] [--timeout 10] [--json results/fleet_scale.json]

The exit status is 1 when a row is wrong (or the command's exit status is
not the 1 that unreachable hosts give), 0 otherwise. The targets (30 s,
200 MB at 500 hosts) are reported, never enforced: the machine is shared.
"""

import argparse
import datetime
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import threading
import time

from oslo_config import cfg

from nova_revert_lock import activation
from nova_revert_lock.tests.integration import rabbitmq
from nova_revert_lock.tests.integration import test_rpc_rabbitmq as rpc_tests

DEFAULT_SIZES = (100, 250, 500)
DEFAULT_DOWN = 10
#: computes one server process stands for
HOSTS_PER_PROCESS = 100
#: the command's default --timeout
DEFAULT_TIMEOUT = 10.0
#: what the issue asks of 500 hosts
TARGET_SECONDS = 30
TARGET_MB = 200
#: seconds a server process may take per host it serves, to be ready
START_SECONDS_PER_HOST = 1.0
#: the command is killed after this many --timeout (it must not hang)
KILL_AFTER_TIMEOUTS = 30


def host_names(size, down):
    """The fleet's host names, and the ``down`` ones spread through it.

    Names carry the size, so that one broker serves several sizes in turn
    without a queue of one run standing for a host of the next.

    :returns: (sorted names, set of the names of the silent hosts)
    """
    names = ['cmp%d-%04d' % (size, i) for i in range(size)]
    if not down:
        return names, set()
    step = size / float(down)
    return names, {names[int(step * i + step / 2)] for i in range(down)}


def run_audit(conf_file, timeout, out_path):
    """Run ``status --all --format json``; measure that process alone.

    :returns: dict with ``exit_code``, ``seconds``, ``cpu_seconds`` (user
        and system), ``peak_rss_mb`` and ``stderr`` (its last lines); the
        JSON is written to ``out_path``
    """
    args = rpc_tests.command() + ['status', '--config-file', conf_file,
                                  '--all', '--timeout', '%g' % timeout,
                                  '--format', 'json']
    with open(out_path, 'w') as out, tempfile.TemporaryFile('w+') as err:
        started = time.monotonic()
        proc = subprocess.Popen(args, stdout=out, stderr=err,
                                stdin=subprocess.DEVNULL)
        watchdog = threading.Timer(timeout * KILL_AFTER_TIMEOUTS, proc.kill)
        watchdog.start()
        try:
            # NOTE: wait4() reports the resources of this child only;
            # RUSAGE_CHILDREN would mix in the servers and rabbitmqctl.
            _pid, status, usage = os.wait4(proc.pid, 0)
        finally:
            watchdog.cancel()
        seconds = time.monotonic() - started
        proc.returncode = (os.WEXITSTATUS(status) if os.WIFEXITED(status)
                           else -os.WTERMSIG(status))
        err.seek(0)
        stderr = err.read()
    return {'exit_code': proc.returncode, 'seconds': round(seconds, 2),
            'cpu_seconds': round(usage.ru_utime + usage.ru_stime, 2),
            # ru_maxrss is in KiB on Linux
            'peak_rss_mb': round(usage.ru_maxrss / 1024.0, 1),
            'stderr': stderr[-2000:]}


def check_rows(rows, names, down, expected):
    """What is wrong with the rows (an empty list: nothing).

    :param rows: the command's JSON rows
    :param names: every registered host; ``down``: those with no server
    :param expected: the activation report of the Nova installed here,
        which every answering host serves
    :returns: (answering hosts right, silent hosts right, problems)
    """
    problems = []
    hosts = [r.get('host') for r in rows]
    if hosts != sorted(names):
        problems.append('hosts: %d rows, expected %d, sorted by name'
                        % (len(hosts), len(names)))
    want = {'reachable': True, 'error': None, 'state': str(expected.state),
            'nova_version': expected.nova_version,
            'series': expected.series, 'mixins': list(expected.mixins)}
    up_right = down_right = 0
    for row in rows:
        if row.get('host') in down:
            error = row.get('error') or ''
            if row.get('reachable') is False and error.startswith(
                    'no answer within'):
                down_right += 1
            else:
                problems.append('%s: expected no answer, got %r' % (
                    row.get('host'), row))
            continue
        wrong = dict((k, row.get(k)) for k, v in want.items()
                     if row.get(k) != v)
        if not row.get('activated_at'):
            wrong['activated_at'] = None
        if wrong:
            problems.append('%s: %r' % (row.get('host'), wrong))
        else:
            up_right += 1
    return up_right, down_right, problems


def measure(node, size, down, timeout=DEFAULT_TIMEOUT,
            per_process=HOSTS_PER_PROCESS, workdir=None):
    """One fleet of ``size`` hosts, ``down`` silent, on ``node``.

    :returns: dict: the figures of :func:`run_audit`, the rows' check
        (``up``, ``up_right``, ``down``, ``down_right``, ``problems``),
        ``load`` (1-minute load average before the command ran) and
        ``rows_right``
    """
    names, silent = host_names(size, down)
    answering = [n for n in names if n not in silent]
    directory = tempfile.mkdtemp(prefix='nrl-fleet-%d-' % size, dir=workdir)
    servers = rpc_tests.ComputeServers(node.url)
    try:
        for i in range(0, len(answering), per_process):
            chunk = answering[i:i + per_process]
            servers.start(chunk[0], 'extension', more_hosts=chunk[1:])
        servers.wait_ready(timeout=rpc_tests.SERVER_START_TIMEOUT +
                           START_SECONDS_PER_HOST * per_process)
        tails = servers.drain()
        api = rpc_tests.make_cells(directory, node.url, names)
        conf = os.path.join(directory, 'api.conf')
        with open(conf, 'w') as f:
            f.write('[api_database]\nconnection = %s\n' % api)
        load = os.getloadavg()[0]
        out = os.path.join(directory, 'rows.json')
        result = run_audit(conf, timeout, out)
        with open(out) as f:
            text = f.read()
        try:
            rows = json.loads(text)
        except ValueError:
            rows = []
        up_right, down_right, problems = check_rows(
            rows, names, silent, activation.build(cfg.ConfigOpts()))
        if result['exit_code'] != 1:
            problems.append('exit code %s, expected 1 (hosts unreachable)'
                            % result['exit_code'])
        if problems:
            problems.append('stderr: %s' % result['stderr'])
            for name, tail in tails.items():
                if servers.procs[name].poll() is not None:
                    problems.append('server %s exited: %s'
                                    % (name, ''.join(tail)))
    finally:
        servers.stop()
        shutil.rmtree(directory, True)
    del result['stderr']
    result.update({
        'hosts': size, 'up': len(answering), 'up_right': up_right,
        'down': len(silent), 'down_right': down_right, 'timeout': timeout,
        'load': round(load, 2), 'problems': problems,
        'rows_right': not problems})
    return result


def format_table(results):
    lines = ['%6s  %5s  %6s  %5s  %8s  %10s  %-16s  %5s' % (
        'HOSTS', 'DOWN', 'WALL S', 'CPU S', 'PEAK MB', 'ROWS RIGHT',
        'ANSWERED/SILENT', 'LOAD')]
    for r in results:
        lines.append('%6d  %5d  %6.1f  %5.1f  %8.1f  %10s  %-16s  %5.2f' % (
            r['hosts'], r['down'], r['seconds'], r['cpu_seconds'],
            r['peak_rss_mb'],
            'yes' if r['rows_right'] else 'NO',
            '%d/%d %d/%d' % (r['up_right'], r['up'], r['down_right'],
                             r['down']), r['load']))
    return '\n'.join(lines)


def _sizes(text):
    try:
        sizes = [int(s) for s in text.split(',') if s.strip()]
    except ValueError:
        sizes = []
    if not sizes or min(sizes) < 1:
        raise argparse.ArgumentTypeError('sizes: positive integers, comma '
                                         'separated, not %r' % text)
    return sizes


def main(argv=None):
    parser = argparse.ArgumentParser(
        prog='python -m tools.fleet_scale',
        description='Measure nova-revert-lock status --all on fleets of '
                    'fake computes served over a private RabbitMQ.')
    parser.add_argument('--sizes', type=_sizes, default=list(DEFAULT_SIZES),
                        help='fleet sizes, comma separated (default '
                             '%(default)s)')
    parser.add_argument('--down', type=int, default=DEFAULT_DOWN,
                        help='hosts per fleet with no server (default '
                             '%(default)s)')
    parser.add_argument('--timeout', type=float, default=DEFAULT_TIMEOUT,
                        help='the command\'s --timeout (default '
                             '%(default)s, its own default)')
    parser.add_argument('--per-process', type=int,
                        default=HOSTS_PER_PROCESS,
                        help='computes one server process stands for '
                             '(default %(default)s)')
    parser.add_argument('--json', metavar='PATH',
                        help='also write the results there as JSON')
    args = parser.parse_args(argv)
    if any(args.down >= size for size in args.sizes):
        parser.error('--down must be below every size')

    node = rabbitmq.RabbitMQNode()
    node.setUp()
    results = []
    try:
        for size in args.sizes:
            results.append(measure(node, size, args.down, args.timeout,
                                   args.per_process))
            print(format_table(results[-1:]).splitlines()[-1], flush=True)
    finally:
        node.cleanUp()
    print()
    print(format_table(results))
    biggest = max(results, key=lambda r: r['hosts'])
    print('targets at %d hosts: %.1f s (target %d), %.1f MB (target %d)'
          % (biggest['hosts'], biggest['seconds'], TARGET_SECONDS,
             biggest['peak_rss_mb'], TARGET_MB))
    for r in results:
        for problem in r['problems']:
            print('%d hosts: %s' % (r['hosts'], problem), file=sys.stderr)
    if args.json:
        with open(args.json, 'w') as f:
            json.dump({'date': datetime.datetime.utcnow().isoformat() + 'Z',
                       'machine': {'cpus': os.cpu_count(),
                                   'python': platform.python_version()},
                       'results': results}, f, indent=2, sort_keys=True)
    return 0 if all(r['rows_right'] for r in results) else 1


if __name__ == '__main__':
    sys.exit(main())
