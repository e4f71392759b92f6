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

"""Nova's services as real processes, for start tests.

:class:`ControlPlane` runs what a nova-compute needs to start and work:
a private RabbitMQ node (:mod:`.rabbitmq`), placement (a small WSGI
server around placement's own application, noauth2, sqlite, schema
created on start-up), and ``nova-conductor`` with one worker on sqlite
databases set up by ``nova-manage``. :meth:`ControlPlane.start_compute`
starts ``nova-compute-revert-lock`` (or any command) on the fake driver
against it.

Every process runs in its own session; stopping one signals that session
only, by its id. Everything lives in one temporary directory, removed on
cleanup unless ``NRL_KEEP_START_DIR=1``.
"""

import json
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
import urllib.request

import fixtures

from nova_revert_lock.tests.integration import rabbitmq

START_TIMEOUT = 90
STOP_TIMEOUT = 30
COMMAND_TIMEOUT = 240
KEEP_ENV = 'NRL_KEEP_START_DIR'


def bin_path(name):
    """A console script of this environment (where ``python`` lives)."""
    return os.path.join(os.path.dirname(sys.executable), name)


def script(name):
    """Path of a module of this package, to run as a script.

    Run by path, a module does not import the ``nova_revert_lock.tests``
    package, which imports ``nova.monkey_patch`` (eventlet, up to 31.x):
    such a process starts as the command it stands for would.
    """
    return os.path.join(os.path.dirname(os.path.abspath(__file__)), name)


def wait_for(predicate, timeout, what, interval=0.25, process=None):
    """Poll ``predicate`` until it returns something true; return that.

    :param process: a :class:`Process` that must stay up meanwhile
    :raises AssertionError: on timeout, or if ``process`` exits
    """
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if process is not None and not process.alive():
            raise AssertionError('%s exited (%s) while waiting for %s:\n%s'
                                 % (process.name, process.returncode(),
                                    what, process.tail()))
        if time.monotonic() > deadline:
            raise AssertionError('timed out after %ss waiting for %s'
                                 % (timeout, what))
        time.sleep(interval)


class Process(object):
    """One service process, output in a log file.

    :ivar name: for messages
    :ivar log_path: its stdout and stderr
    """

    def __init__(self, name, args, log_path, env=None, cwd=None):
        self.name = name
        self.args = list(args)
        self.log_path = log_path
        self.env = env
        self.cwd = cwd
        self.popen = None

    def start(self):
        with open(self.log_path, 'ab') as log:
            self.popen = subprocess.Popen(
                self.args, stdout=log, stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL, env=self.env, cwd=self.cwd,
                start_new_session=True)
        self.started_at = time.monotonic()
        return self

    @property
    def pid(self):
        return self.popen.pid

    def alive(self):
        return self.popen is not None and self.popen.poll() is None

    def returncode(self):
        return None if self.popen is None else self.popen.poll()

    def log(self):
        try:
            with open(self.log_path) as f:
                return f.read()
        except OSError:
            return ''

    def tail(self, lines=40):
        return ''.join(self.log().splitlines(True)[-lines:])

    def stop(self, timeout=STOP_TIMEOUT):
        """SIGTERM the process's own session, then SIGKILL it if needed."""
        if self.popen is None:
            return None
        if self.popen.poll() is None:
            self._signal(signal.SIGTERM)
            try:
                self.popen.wait(timeout)
            except subprocess.TimeoutExpired:
                self._signal(signal.SIGKILL)
                self.popen.wait(timeout)
        # NOTE: workers a service forked (the conductor's) share its
        # session: make sure none outlives it.
        self._signal(signal.SIGKILL)
        return self.popen.returncode

    def _signal(self, sig):
        try:
            os.killpg(self.popen.pid, sig)
        except (ProcessLookupError, PermissionError):
            pass


def run(args, env=None, timeout=COMMAND_TIMEOUT, cwd=None):
    """Run a command to completion; return (exit code, output)."""
    proc = subprocess.run(args, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                          universal_newlines=True, env=env, cwd=cwd,
                          timeout=timeout)
    return proc.returncode, proc.stdout


def ini(sections):
    """Render {section: {key: value}} as an ini file's text."""
    out = []
    for section, values in sections.items():
        out.append('[%s]' % section)
        out.extend('%s = %s' % (k, v) for k, v in values.items())
        out.append('')
    return '\n'.join(out)


class ControlPlane(fixtures.Fixture):
    """RabbitMQ, placement and nova-conductor, as processes.

    :ivar base: the temporary directory
    :ivar transport_url: the broker's URL
    :ivar nova_conf: the configuration file the control plane uses
    :ivar timings: seconds each step took, by name
    """

    def __init__(self, env=None):
        super(ControlPlane, self).__init__()
        self.base_env = dict(os.environ if env is None else env)
        self.processes = []
        self.timings = {}

    def _setUp(self):
        self.base = tempfile.mkdtemp(prefix='nrl-start-')
        if os.environ.get(KEEP_ENV) != '1':
            self.addCleanup(shutil.rmtree, self.base, True)
        self.addCleanup(self.stop_all)
        self._timed('rabbitmq', self._start_rabbitmq)
        self._timed('placement', self._start_placement)
        self._timed('databases', self._create_databases)
        self._timed('conductor', self._start_conductor)

    def _timed(self, name, func):
        start = time.monotonic()
        func()
        self.timings[name] = round(time.monotonic() - start, 1)

    def path(self, *parts):
        return os.path.join(self.base, *parts)

    def _start_rabbitmq(self):
        self.rabbit = self.useFixture(rabbitmq.RabbitMQNode())
        self.transport_url = self.rabbit.url

    # --- placement ------------------------------------------------------

    def _start_placement(self):
        self.placement_port = rabbitmq.free_port()
        self.placement_url = 'http://127.0.0.1:%d' % self.placement_port
        conf_dir = self.path('placement')
        os.mkdir(conf_dir)
        with open(os.path.join(conf_dir, 'placement.conf'), 'w') as f:
            f.write(ini({
                'DEFAULT': {'debug': 'false'},
                'api': {'auth_strategy': 'noauth2'},
                'placement_database': {
                    'connection': 'sqlite:///%s' % self.path('placement.db'),
                    'sync_on_startup': 'true'},
            }))
        env = dict(self.base_env, OS_PLACEMENT_CONFIG_DIR=conf_dir)
        # NOTE: run by path: importing nova_revert_lock.tests would import
        # nova.monkey_patch, which patches eventlet up to Nova 31.x.
        self.placement = self.start(
            'placement', [sys.executable, script('placement_server.py'),
                          str(self.placement_port)], env=env)
        wait_for(self._placement_answers, START_TIMEOUT, 'placement',
                 process=self.placement)

    def _placement_answers(self):
        try:
            with urllib.request.urlopen(self.placement_url + '/',
                                        timeout=2) as resp:
                return resp.status == 200
        except OSError:
            return False

    # --- nova -----------------------------------------------------------

    def nova_sections(self):
        """Configuration every Nova process here shares."""
        return {
            'DEFAULT': {
                'transport_url': self.transport_url,
                'state_path': self.path('state'),
                'debug': 'false',
                'use_stderr': 'true',
            },
            'api_database': {
                'connection': 'sqlite:///%s' % self.path('api.db')},
            'database': {
                'connection': 'sqlite:///%s' % self.path('cell1.db')},
            'conductor': {'workers': '1'},
            'oslo_concurrency': {'lock_path': self.path('locks')},
            'placement': {
                'auth_type': 'admin_token',
                'endpoint': self.placement_url,
                'token': 'admin',
                'region_name': 'RegionOne'},
        }

    def write_conf(self, name, sections):
        path = self.path(name)
        with open(path, 'w') as f:
            f.write(ini(sections))
        return path

    def _create_databases(self):
        os.makedirs(self.path('state'))
        os.makedirs(self.path('locks'))
        self.nova_conf = self.write_conf('nova.conf', self.nova_sections())
        manage = [bin_path('nova-manage'), '--config-file', self.nova_conf]
        steps = (
            ['api_db', 'sync'],
            ['cell_v2', 'map_cell0', '--database_connection',
             'sqlite:///%s' % self.path('cell0.db')],
            ['cell_v2', 'create_cell', '--name', 'cell1'],
            ['db', 'sync'],
        )
        for step in steps:
            code, out = run(manage + step, env=self.base_env)
            if code != 0:
                raise AssertionError('nova-manage %s exited %s:\n%s'
                                     % (' '.join(step), code, out))

    def _start_conductor(self):
        self.conductor = self.start(
            'nova-conductor',
            [bin_path('nova-conductor'), '--config-file', self.nova_conf])
        wait_for(lambda: self.service_row('nova-conductor'),
                 START_TIMEOUT, 'nova-conductor to register',
                 process=self.conductor)

    def start(self, name, args, env=None):
        """Start a process whose log goes to ``<base>/<name>.log``."""
        process = Process(name, args, self.path('%s.log' % name),
                          env=self.base_env if env is None else env,
                          cwd=self.base)
        self.processes.append(process)
        return process.start()

    def start_compute(self, host, extra=None, env=None,
                      command='nova-compute-revert-lock'):
        """Start a compute service on the fake driver as ``host``.

        :param extra: {section: {key: value}} merged into its configuration
        :param env: variables added to its environment
        :returns: (:class:`Process`, configuration file)
        """
        sections = self.nova_sections()
        sections['DEFAULT'].update({
            'host': host,
            'compute_driver': 'fake.SmallFakeDriver',
            'update_resources_interval': '2',
            'report_interval': '2',
            'periodic_fuzzy_delay': '0',
            'debug': 'true',
            'state_path': self.path('state-%s' % host),
        })
        for section, values in (extra or {}).items():
            sections.setdefault(section, {}).update(values)
        conf = self.write_conf('%s.conf' % host, sections)
        os.makedirs(self.path('state-%s' % host), exist_ok=True)
        process = self.start(host, [bin_path(command), '--config-file', conf],
                             env=dict(self.base_env, **(env or {})))
        return process, conf

    def stop_all(self):
        for process in reversed(self.processes):
            process.stop()

    # --- what the processes did ------------------------------------------

    def query(self, sql, *args):
        """Rows of a query on the cell database (read-only)."""
        db = sqlite3.connect('file:%s?mode=ro' % self.path('cell1.db'),
                             uri=True, timeout=10)
        try:
            return db.execute(sql, args).fetchall()
        except sqlite3.OperationalError:
            return []
        finally:
            db.close()

    def service_row(self, binary, host=None):
        sql = ('SELECT host, report_count, version FROM services WHERE '
               '"binary" = ? AND deleted = 0')
        args = [binary]
        if host is not None:
            sql += ' AND host = ?'
            args.append(host)
        rows = self.query(sql, *args)
        return rows[0] if rows else None

    def compute_node_row(self, host):
        rows = self.query(
            'SELECT hypervisor_hostname, vcpus, memory_mb, updated_at '
            'FROM compute_nodes WHERE host = ? AND deleted = 0', host)
        return rows[0] if rows else None


def _run_json(args, timeout):
    proc = subprocess.run(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          stdin=subprocess.DEVNULL, universal_newlines=True,
                          timeout=timeout)
    try:
        data = json.loads(proc.stdout)
    except ValueError:
        data = None
    return proc.returncode, data, proc.stdout + proc.stderr


def revert_lock_status(conf, host, timeout=10):
    """``nova-revert-lock status --host``; return (code, rows, output)."""
    return _run_json([bin_path('nova-revert-lock'), 'status', '--host', host,
                      '--config-file', conf, '--format', 'json',
                      '--timeout', str(timeout)], timeout + 60)


def revert_lock_check(conf):
    """``nova-revert-lock check``'s report, as a dict."""
    code, data, out = _run_json(
        [bin_path('nova-revert-lock'), 'check', '--config-file', conf,
         '--format', 'json'], COMMAND_TIMEOUT)
    if data is None:
        raise AssertionError('nova-revert-lock check exited %s:\n%s'
                             % (code, out))
    return data
