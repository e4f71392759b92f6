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

"""Run the benchmark: plain 21.1.0, the extension, upstream 21.1.2.

::

    python -m tools.bench [--cycles N] [--format json]
        [--results-dir DIR] [--write-docs]

Runs in an environment holding Nova 21.1.0 (``tox -e bench``); the
upstream mode runs in a second environment with Nova 21.1.2, made once
under ``--venv-dir`` (or given with ``--upstream-python``). The three mode
processes start together and run the same blocks of cycles at the same
time (``--serial``: one after another, in rotating order), so that the
ratios compare modes under the same load. Progress goes to stderr; the
table or the JSON object to stdout; ``bench.json``, the plot and each
mode's log to the results directory.

Exit status: 0 when the measurement is valid, 1 when it is not (a mode
process failed, plain Nova showed no wrong cycle, so the harness did not
race, or the extension left wrong books), 2 for bad usage. Timing targets
are reported, never enforced.
"""

import argparse
import datetime
import json
import os
import queue
import shutil
import subprocess
import sys
import threading
import time

from tools.bench import cycle_driver
from tools.bench import family
from tools.bench import periodic
from tools.bench import report
from tools.bench import venvs

MODES = cycle_driver.MODES
PERIODIC_MODES = cycle_driver.PERIODIC_MODES
UPSTREAM_EXT = cycle_driver.UPSTREAM_EXT
SAME_PROCESS = cycle_driver.SAME_PROCESS
KINDS = cycle_driver.KINDS
#: what the guard must say of each mode's Nova, and of the extension
EXPECTED_STATE = {'plain': 'patched', 'extension': 'patched',
                  'upstream': 'already-fixed',
                  cycle_driver.UPSTREAM_EXT: 'already-fixed'}
READY_TIMEOUT = 600
CYCLE_TIMEOUT = 180
PERIODIC_TIMEOUT = 300
#: seconds a family cycle may take: its own services start and stop
FAMILY_TIMEOUT = 240


class BenchError(Exception):
    """The measurement cannot be trusted or completed."""


def _log(message):
    sys.stderr.write('bench: %s\n' % message)
    sys.stderr.flush()


class ModeProcess(object):
    """One harness process, spoken to in JSON lines."""

    def __init__(self, mode, python, options, log_path, command=None):
        """Start the process.

        :param command: the module and its arguments after ``-m``
            (default: :mod:`.harness` for ``mode`` with ``options``)
        """
        env = dict(os.environ)
        for name in ('OS_STDOUT_CAPTURE', 'OS_STDERR_CAPTURE',
                     'OS_LOG_CAPTURE'):
            env.setdefault(name, '1')
        # NOTE: the whole run is one test case for Nova's framework; its
        # per-test timeout (tox sets one for the functional tests) would
        # end it. The driver times each block itself.
        env['OS_TEST_TIMEOUT'] = '0'
        self.mode = mode
        self.log_path = log_path
        self.log = open(log_path, 'w')
        if command is None:
            command = (
                ['tools.bench.harness', mode,
                 '--hammer-sleep', str(options.hammer_sleep),
                 '--probe-interval', str(options.probe_interval)] +
                ([] if options.trigger else ['--no-trigger']))
        self.proc = subprocess.Popen(
            [python, '-m'] + command,
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.log,
            universal_newlines=True, env=env)
        self.lines = queue.Queue()
        reader = threading.Thread(target=self._read, daemon=True)
        reader.start()

    def _read(self):
        for line in self.proc.stdout:
            self.lines.put(line)
        self.lines.put(None)

    def send(self, **message):
        self.proc.stdin.write(json.dumps(message) + '\n')
        self.proc.stdin.flush()

    def receive(self, timeout):
        try:
            line = self.lines.get(timeout=timeout)
        except queue.Empty:
            raise BenchError('%s: no answer in %d s (see %s)' % (
                self.mode, timeout, self.log_path))
        if line is None:
            raise BenchError('%s: the process ended (exit %s; see %s)' % (
                self.mode, self.proc.wait(), self.log_path))
        message = json.loads(line)
        if message.get('failed'):
            raise BenchError('%s: %s (see %s)' % (
                self.mode, message.get('error'), self.log_path))
        return message

    def close(self):
        if self.proc.poll() is None:
            try:
                self.send(cmd='quit')
                self.proc.wait(timeout=60)
            except (OSError, ValueError, subprocess.TimeoutExpired):
                self.proc.kill()
                self.proc.wait()
        self.log.close()


def _activation_runs(python, count):
    runs = []
    for _i in range(count):
        out = subprocess.check_output(
            [python, '-m', 'tools.bench.activation_cost'],
            universal_newlines=True)
        runs.append(json.loads(out.strip().splitlines()[-1]))
    return runs


def _blocks(cycles, block):
    """[(kind, count)...]: the kinds alternate, ``block`` cycles at most."""
    left = {k: cycles for k in KINDS}
    order = []
    while any(left.values()):
        for kind in KINDS:
            count = min(block, left[kind])
            if count:
                order.append((kind, count))
                left[kind] -= count
    return order


def _run_blocks(procs, blocks, serial, cpu):
    records = {m: [] for m in procs}
    started = time.time()

    def collect(mode, count):
        answer = procs[mode].receive(CYCLE_TIMEOUT * count)
        records[mode].extend(answer['records'])
        cpu[mode] = round(cpu.get(mode, 0.0) + answer['cpu_s'], 1)

    for number, (kind, count) in enumerate(blocks):
        modes = list(procs)
        if serial:
            shift = number % len(modes)
            modes = modes[shift:] + modes[:shift]
            for mode in modes:
                procs[mode].send(cmd='run', kind=kind, count=count)
                collect(mode, count)
        else:
            for mode in modes:
                procs[mode].send(cmd='run', kind=kind, count=count)
            for mode in modes:
                collect(mode, count)
        _log('block %d/%d (%d %s): wrong so far %s; %.0f s' % (
            number + 1, len(blocks), count, kind,
            ', '.join('%s %d' % (m, sum(1 for r in records[m]
                                        if r.get('wrong')))
                      for m in procs), time.time() - started))
    return records


def _rotated(modes, shift):
    shift %= len(modes)
    return modes[shift:] + modes[:shift]


def _periodic_order(scenarios, runs, modes):
    """[(scenario, mode)...]: one mode at a time, the modes interleaved.

    Run after run, scenario after scenario, each mode takes one turn. The
    order of the modes is the run's, the same for every scenario, and
    changes from run to run: the rotations of the modes, every other run
    in the reverse order. So, per scenario, each mode runs as often first
    as last, and as often just after a given other mode as just before
    it: the run right after another mode of the same process (a warm
    one) and the run after a wait for another process (a cold one) fall
    to each mode alike.

    NOTE: a turn's order must not follow the turn's index across the
    scenarios: with as many scenarios as modes (3 and 3 in
    ``periodic_pair``) every scenario then had one order in every run.
    """
    order = []
    backwards = list(reversed(modes))
    for run in range(runs):
        turn = _rotated(list(modes) if run % 2 == 0 else backwards,
                        run // 2)
        for scenario in scenarios:
            for mode in turn:
                order.append((scenario, mode))
    return order


def _run_periodic(procs, scenarios, runs, collect=False):
    """Time the periodic task on every scenario host, in every mode.

    :param collect: the garbage collector runs, untimed, before each run
    """
    setup = {}
    for mode in procs:
        procs[mode].send(cmd='periodic_setup', scenarios=scenarios)
    for mode in procs:
        setup[mode] = procs[mode].receive(READY_TIMEOUT)
    _log('periodic task: scenario hosts ready (%s)' % ', '.join(
        '%s %.0f s' % (m, setup[m]['setup_s']) for m in procs))
    _log('periodic task: set-up steps in %s mode: %s' % (
        MODES[0], setup[MODES[0]]['steps']))
    names = [s['name'] for s in scenarios]
    # NOTE: an extension mode's process also runs with Nova's own tracker
    # class (its "@nova-rt" pseudo-mode), in the same turns as the others.
    modes = list(procs) + [same for mode, same in SAME_PROCESS.items()
                           if mode in procs]
    samples = {name: {mode: [] for mode in modes} for name in names}
    started = time.time()
    for scenario, mode in _periodic_order(names, runs, modes):
        proc = procs[mode.split('@')[0]]
        proc.send(cmd='periodic', scenario=scenario,
                  nova_tracker='@' in mode, collect=collect)
        samples[scenario][mode].append(proc.receive(PERIODIC_TIMEOUT))
    _log('periodic task: %d runs per scenario and mode in %.0f s' % (
        runs, time.time() - started))
    return {'runs': runs, 'scenarios': scenarios, 'samples': samples,
            'setup_s': {m: setup[m]['setup_s'] for m in procs},
            'wall_s': round(time.time() - started, 1),
            'load': _load()}


def _family_blocks(bugs, cycles, block):
    """[(bug, count)...]: each bug's cycles in blocks, bug after bug."""
    order = []
    for bug in bugs:
        left = cycles
        while left:
            order.append((bug, min(block, left)))
            left -= order[-1][1]
    return order


def _run_family(args, upstream_python):
    """Run the family's rows: every mode of a row runs each block together.

    :param upstream_python: python of the environment with Nova
        :data:`family.EVACUATE_FIX_NOVA`, or None: no upstream column
    :returns: the dict :func:`report.summarize` reads as ``family``
    """
    bugs = args.family or list(family.BUGS)
    pythons = {'plain': sys.executable, 'extension': sys.executable}
    if upstream_python:
        pythons['upstream'] = upstream_python
    procs = {}
    records = {bug: {} for bug in bugs}
    cpu = {}
    started = time.time()
    try:
        for mode in pythons:
            procs[mode] = ModeProcess(
                mode, pythons[mode], args,
                os.path.join(args.results_dir, 'family-%s.log' % mode),
                command=['tools.bench.family', mode])
        ready = {mode: procs[mode].receive(READY_TIMEOUT) for mode in procs}
        for mode in procs:
            _log('family %s ready: Nova %s' % (
                mode, ready[mode]['nova_version']))
        for number, (bug, count) in enumerate(_family_blocks(
                bugs, args.family_cycles, args.family_block)):
            modes = [m for m in family.modes_of(
                family.BUGS[bug], 'upstream' in procs) if m in procs]
            for mode in modes:
                procs[mode].send(cmd='run', bug=bug, count=count)
            for mode in modes:
                answer = procs[mode].receive(FAMILY_TIMEOUT * count)
                records[bug].setdefault(mode, []).extend(answer['records'])
                cpu[mode] = round(cpu.get(mode, 0.0) + answer['cpu_s'], 1)
            _log('family block %d (%d x %s): wrong %s; %.0f s' % (
                number + 1, count, bug, ', '.join(
                    '%s %d' % (m, sum(1 for r in records[bug][m]
                                      if r.get('right') is False))
                    for m in modes), time.time() - started))
    finally:
        for proc in procs.values():
            proc.close()
    return {'cycles': args.family_cycles, 'bugs': bugs, 'records': records,
            'ready': ready, 'cpu_s': cpu,
            'upstream_skipped': None if upstream_python else (
                'not measured in this run (--no-family-upstream)'),
            'wall_s': round(time.time() - started, 1)}


#: options whose values are this machine's paths: left out of the record
_PATH_OPTIONS = ('--venv-dir', '--results-dir', '--upstream-python',
                 '--family-upstream-python')


def _command(argv):
    """How the run was started, for the record, without local paths."""
    words, skip = [], False
    for word in argv:
        if skip:
            skip = False
        elif word in _PATH_OPTIONS:
            skip = True
        elif not word.startswith(tuple(o + '=' for o in _PATH_OPTIONS)):
            words.append(word)
    command = ' '.join(['python -m tools.bench'] + words)
    if os.environ.get('TOX_ENV_NAME'):
        command += ' (tox -e %s)' % os.environ['TOX_ENV_NAME']
    return command


def _load():
    try:
        return ', '.join('%.1f' % v for v in os.getloadavg())
    except OSError:
        return '?'


def parse_args(argv):
    parser = argparse.ArgumentParser(
        prog='python -m tools.bench',
        description=__doc__.split('\n\n')[0])
    parser.add_argument(
        '--cycles', type=int,
        default=int(os.environ.get('NRL_BENCH_CYCLES', 200)),
        help='migrate+confirm and migrate+revert cycles per mode, each '
             '(default 200, or $NRL_BENCH_CYCLES)')
    parser.add_argument('--block', type=int, default=10,
                        help='cycles per block; the modes take turns or run '
                             'together block by block (default 10)')
    parser.add_argument('--format', choices=('table', 'json'),
                        default='table')
    parser.add_argument('--results-dir', default='results',
                        help='where bench.json, lock_hold.png and the mode '
                             'logs go (default results/)')
    parser.add_argument('--write-docs', action='store_true',
                        help='regenerate the results section of '
                             'doc/source/benchmarks.rst')
    parser.add_argument('--venv-dir',
                        default=os.environ.get('NRL_BENCH_VENV_DIR'),
                        help='the Nova %s environment for the upstream '
                             'mode, made once and reused (default '
                             '.tox/bench-nova-%s in the source tree)'
                             % (venvs.UPSTREAM_NOVA, venvs.UPSTREAM_NOVA))
    parser.add_argument('--upstream-python',
                        help='python of an existing environment with Nova '
                             '%s and this project' % venvs.UPSTREAM_NOVA)
    parser.add_argument('--serial', action='store_true',
                        help='run the modes one after another within each '
                             'block instead of together')
    parser.add_argument('--hammer-sleep', type=float, default=0.02,
                        help='seconds between periodic tasks per compute '
                             '(default 0.02)')
    parser.add_argument('--probe-interval', type=float, default=0.02,
                        help='seconds between the lock probes during '
                             'reverts (default 0.02; 0: no probe)')
    parser.add_argument('--no-trigger', dest='trigger',
                        action='store_false',
                        help='do not start a periodic task at the status '
                             'change: the hammering periodic tasks alone '
                             'must find the window')
    parser.add_argument('--activation-runs', type=int, default=5,
                        help='fresh processes timing activate() (default 5)')
    group = parser.add_argument_group(
        'periodic task', 'the cost of update_available_resource on loaded '
        'hosts, timed after the cycles, one mode at a time, in rounds of '
        'fresh processes')
    group.add_argument('--periodic-runs', type=int, default=10,
                       help='timed runs per scenario and mode in each '
                            'round (default 10; 0: none)')
    group.add_argument('--periodic-rounds', type=int, default=5,
                       help='rounds, each in a fresh process per mode; '
                            'the ratios are medians over the rounds '
                            '(default 5)')
    group.add_argument('--no-periodic-collect', dest='periodic_collect',
                       action='store_false',
                       help='do not run the garbage collector (untimed) '
                            'before each run: the garbage of earlier work '
                            'is then collected in whichever run crosses '
                            'the collector\'s threshold')
    group.add_argument('--periodic-instances', type=int, default=200,
                       help='instances on the one-node host (default 200)')
    group.add_argument('--periodic-nodes', type=int, default=50,
                       help='nodes of the multi-node host (default 50)')
    group.add_argument('--periodic-node-instances', type=int, default=4,
                       help='instances per node there (default 4)')
    group.add_argument('--periodic-reverts', type=int, default=5,
                       help='reverts in flight on the multi-node host in '
                            'the third scenario, one per node (default 5; '
                            '0: no third scenario)')
    group = parser.add_argument_group(
        'the family', 'the sibling fixes: each one\'s operation, raced as '
        'its functional test races it, one fresh test case per cycle')
    group.add_argument('--family-cycles', type=int,
                       default=int(os.environ.get('NRL_BENCH_FAMILY_CYCLES',
                                                  10)),
                       help='cycles per bug and mode (default 10, or '
                            '$NRL_BENCH_FAMILY_CYCLES; 0: none)')
    group.add_argument('--family-block', type=int, default=5,
                       help='cycles per block; the modes of a row run each '
                            'block together (default 5)')
    group.add_argument('--family', action='append',
                       choices=list(family.BUGS), metavar='BUG',
                       help='only this bug\'s row (repeat for more; '
                            'default: all of %s)' % ', '.join(family.BUGS))
    group.add_argument('--no-family-upstream', dest='family_upstream',
                       action='store_false',
                       help='no upstream column where upstream fixed the '
                            'bug on Ussuri (1896463: Nova %s, a third '
                            'environment made once)'
                            % family.EVACUATE_FIX_NOVA)
    group.add_argument('--family-upstream-python',
                       help='python of an existing environment with Nova '
                            '%s and this project' % family.EVACUATE_FIX_NOVA)
    args = parser.parse_args(argv)
    if args.family_cycles < 0 or args.family_block < 1:
        parser.error('--family-cycles must be at least 0, --family-block '
                     'at least 1')
    if args.cycles < 0 or args.block < 1 or args.activation_runs < 0:
        parser.error('--cycles must be at least 0, --block at least 1')
    if args.periodic_runs < 0 or args.periodic_reverts < 0:
        parser.error('--periodic-runs and --periodic-reverts must be at '
                     'least 0')
    if args.periodic_rounds < 1:
        parser.error('--periodic-rounds must be at least 1')
    if (args.periodic_instances < 1 or args.periodic_nodes < 1 or
            args.periodic_node_instances < 1):
        parser.error('the periodic scenarios need at least one node and '
                     'one instance per node')
    if not args.cycles and not args.periodic_runs and not args.family_cycles:
        parser.error('nothing to measure: --cycles, --periodic-runs and '
                     '--family-cycles are all 0')
    return args


def run(args):
    """Measure; return the run dict that :func:`report.summarize` takes."""
    environment = {
        'date': datetime.date.today().isoformat(),
        'cpus': os.cpu_count(),
        'load_start': _load(),
        'command': _command(sys.argv[1:]),
        'layout': ('modes run one after another per block' if args.serial
                   else 'the three mode processes run each block '
                        'together'),
    }
    activation = []
    if args.activation_runs:
        _log('timing activate() in %d fresh processes' %
             args.activation_runs)
        activation = _activation_runs(sys.executable, args.activation_runs)

    records, samples, ready, periodic_data = {}, {}, {}, None
    if args.cycles or args.periodic_runs:
        records, samples, ready, periodic_data = _run_race(args,
                                                           environment)
    family_data = None
    if args.family_cycles:
        family_data = _run_family(args, _family_upstream_python(args))
        environment['family'] = {k: family_data[k]
                                 for k in ('wall_s', 'cpu_s')}
    environment['load_end'] = _load()
    return {'cycles': args.cycles, 'records': records, 'samples': samples,
            'ready': ready, 'activation': activation,
            'periodic': periodic_data, 'family': family_data,
            'settings': {'block': args.block,
                         'hammer_sleep': args.hammer_sleep,
                         'probe_interval': args.probe_interval,
                         'trigger': args.trigger,
                         'serial': args.serial,
                         'family_block': args.family_block},
            'environment': environment}


def _venv_dir(args, nova_version):
    """Where the environment with ``nova_version`` is made.

    Beside the upstream mode's (``--venv-dir``), one per Nova release.
    """
    default = os.path.join(venvs.project_root(), '.tox',
                           'bench-nova-%s' % venvs.UPSTREAM_NOVA)
    upstream = args.venv_dir or default
    if nova_version == venvs.UPSTREAM_NOVA:
        return upstream
    return os.path.join(os.path.dirname(upstream),
                        'bench-nova-%s' % nova_version)


def _family_upstream_python(args):
    """The python of the family's upstream column, or None for none."""
    if not args.family_upstream or not any(
            family.BUGS[bug]['upstream']
            for bug in (args.family or family.BUGS)):
        return None
    if args.family_upstream_python:
        return args.family_upstream_python
    return venvs.ensure(_venv_dir(args, family.EVACUATE_FIX_NOVA),
                        family.EVACUATE_FIX_NOVA)


def _run_race(args, environment):
    """The race cycles and the periodic task, in the three modes."""
    python = args.upstream_python or venvs.ensure(
        _venv_dir(args, venvs.UPSTREAM_NOVA))
    pythons = {'plain': sys.executable, 'extension': sys.executable,
               'upstream': python, UPSTREAM_EXT: python}
    records, samples, ready = {}, {}, {}
    if args.cycles:
        procs = {}
        try:
            ready = _start_modes(procs, MODES, pythons, args, '')
            environment['cpu_s'] = {}
            started = time.time()
            records = _run_blocks(procs, _blocks(args.cycles, args.block),
                                  args.serial, environment['cpu_s'])
            environment['cycles_wall_s'] = round(time.time() - started, 1)
            for mode in MODES:
                procs[mode].send(cmd='samples')
                samples[mode] = procs[mode].receive(
                    READY_TIMEOUT)['samples']
        finally:
            for proc in procs.values():
                proc.close()
    periodic_data = None
    if args.periodic_runs:
        # NOTE: the extension on upstream's release only times the periodic
        # task (its cost against that release plain); it runs no cycle.
        periodic_data = _run_periodic_rounds(args, pythons)
        for mode, message in periodic_data.pop('ready').items():
            ready.setdefault(mode, message)
    return records, samples, ready, periodic_data


def _start_modes(procs, modes, pythons, args, prefix):
    """Start a process per mode into ``procs``; return their ready messages.

    :param prefix: of each mode's log file name in the results directory
    """
    for mode in modes:
        procs[mode] = ModeProcess(
            mode, pythons[mode], args,
            os.path.join(args.results_dir, '%s%s.log' % (prefix, mode)))
    ready = {}
    for mode in modes:
        ready[mode] = procs[mode].receive(READY_TIMEOUT)
        _log('%s ready: Nova %s (%s)' % (
            mode, ready[mode]['nova_version'], ready[mode]['nova_state']))
    _check_ready(ready)
    return ready


def _run_periodic_rounds(args, pythons):
    """The periodic part in rounds, each in fresh mode processes.

    Two processes of the same Nova differ by a few percent in their
    periodic task's median for as long as they live (heap layout, hash
    seeds: doc/source/benchmarks.rst), more than a 2% target; so each
    round starts a fresh process per mode, sets up its scenario hosts,
    times its runs and stops, and the report takes each ratio's median
    over the rounds. The cycles' processes are never reused: they carry
    the cycles' heap.

    :returns: ``{'rounds': [...]}`` with what :func:`_run_periodic` gave
        per round, plus ``runs``, ``scenarios``, ``wall_s``, ``load`` and
        ``ready`` (the first round's ready messages)
    """
    scenarios = periodic.scenarios(
        args.periodic_instances, args.periodic_nodes,
        args.periodic_node_instances, args.periodic_reverts)
    rounds, ready = [], None
    started = time.time()
    for number in range(args.periodic_rounds):
        _log('periodic task: round %d of %d, fresh processes' % (
            number + 1, args.periodic_rounds))
        procs = {}
        try:
            prefix = 'periodic-%d-' % (number + 1)
            round_ready = _start_modes(procs, PERIODIC_MODES, pythons, args,
                                       prefix)
            ready = ready or round_ready
            rounds.append(_run_periodic(procs, scenarios,
                                        args.periodic_runs,
                                        args.periodic_collect))
        finally:
            for proc in procs.values():
                proc.close()
    return {'rounds': rounds, 'runs': args.periodic_runs,
            'collect': args.periodic_collect,
            'scenarios': scenarios, 'ready': ready,
            'wall_s': round(time.time() - started, 1), 'load': _load()}


def _check_ready(ready):
    for mode, message in ready.items():
        if message['nova_state'] != EXPECTED_STATE[mode]:
            raise BenchError(
                '%s mode needs a Nova the guard calls %s; Nova %s here is %s'
                % (mode, EXPECTED_STATE[mode], message['nova_version'],
                   message['nova_state']))
    if ready['extension']['activation'] != 'patched':
        raise BenchError('the extension did not activate: %s'
                         % ready['extension']['activation'])
    beyond = ready.get(UPSTREAM_EXT)
    if beyond and beyond['activation'] != 'already-fixed':
        raise BenchError('the extension on Nova %s did not apply its fixes '
                         'beyond upstream: %s' % (beyond['nova_version'],
                                                  beyond['activation']))


def validity_problems(result):
    """Why the measurement does not hold, as a list of sentences."""
    problems = []
    for mode, count in result['failed_cycles'].items():
        if count:
            problems.append('%d %s cycles failed to complete: %s' % (
                count, mode, '; '.join(result['failures'][mode][:2])))
    if result['cycles'] and not result['wrong_cycles']['plain']:
        problems.append('plain Nova showed no wrong cycle: the harness did '
                        'not race')
    if result['wrong_cycles']['extension']:
        problems.append('the extension left wrong books in %d cycles (%s)'
                        % (result['wrong_cycles']['extension'],
                           result['wrong_categories']['extension']))
    for name, per_mode in sorted(result['periodic_wrong_runs'].items()):
        for mode in sorted(per_mode):
            if per_mode.get(mode):
                problems.append(
                    '%s: %d periodic task runs left wrong books in %s '
                    'mode (a node failed, or counted its instances other '
                    'than once)' % (name, per_mode[mode], mode))
    for bug, row in result['family'].items():
        problems.extend('family %s (%s): %s' % (bug, row['mixin'], problem)
                        for problem in row['problems'])
    return problems


def main(argv=None):
    args = parse_args(argv)
    if not os.path.isdir(args.results_dir):
        os.makedirs(args.results_dir)
    try:
        data = run(args)
    except (BenchError, subprocess.CalledProcessError, RuntimeError) as e:
        _log('FAILED: %s' % e)
        return 1
    result = report.summarize(data)
    with open(os.path.join(args.results_dir, 'bench.json'), 'w') as f:
        json.dump(result, f, indent=2)
    image = None
    if args.cycles:
        image = os.path.join(args.results_dir, 'lock_hold.png')
        try:
            report.plot(data, image)
            result['plot'] = os.path.abspath(image)
        except ImportError:
            _log('matplotlib is not installed here: no plot')
            image = None
    if args.write_docs:
        _write_docs(result, image)
    if args.format == 'json':
        print(json.dumps(result, indent=2))
    else:
        print('\n'.join(report.table(result)))
        print('\nResults in %s' % os.path.abspath(args.results_dir))
    problems = validity_problems(result)
    for problem in problems:
        _log('INVALID: %s' % problem)
    return 1 if problems else 0


def _write_docs(result, image):
    root = venvs.project_root()
    source = os.path.join(root, 'doc', 'source')
    if not os.path.isdir(os.path.join(source, 'images')):
        os.makedirs(os.path.join(source, 'images'))
    name = 'images/bench-lock-hold.png'
    if image:
        shutil.copyfile(image, os.path.join(source, name))
    path = os.path.join(source, 'benchmarks.rst')
    if not os.path.exists(path):
        with open(path, 'w') as f:
            f.write('Benchmarks\n==========\n')
    _log('docs: %s' % report.write_docs(path, result, name))
