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

"""A private RabbitMQ node for tests, from the distribution's package.

The node listens on loopback only, on random ports, with its own data,
log and configuration files in a temporary directory, and its own
``epmd`` on a random port: it shares nothing with a RabbitMQ the machine
may already run, and two test runs can have a node each.

Run as root, the Debian ``rabbitmq-server`` wrapper drops to the
``rabbitmq`` user, so the private directory is handed to that user. Run
as any other user, the server scripts run as that user, with the private
directory as ``HOME`` (for Erlang's cookie).

``NRL_REQUIRE_RABBITMQ=1`` (set by the ``rpc`` tox env) turns "RabbitMQ
is not installed" from a skip into a failure.
"""

import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import time
import unittest
import uuid

import fixtures

WRAPPER_DIRS = ('/usr/sbin', '/usr/lib/rabbitmq/bin', '/usr/local/sbin',
                '/usr/lib/rabbitmq/sbin')
SERVER_DIRS = ('/usr/lib/rabbitmq/bin', '/usr/lib/rabbitmq/sbin',
               '/usr/local/sbin', '/usr/sbin')
START_TIMEOUT = 90
STOP_TIMEOUT = 30
REQUIRE_ENV = 'NRL_REQUIRE_RABBITMQ'


class RabbitMQUnavailable(Exception):
    """RabbitMQ cannot be run here; the message says why."""


def required():
    """True when a missing RabbitMQ must fail the tests, not skip them."""
    return os.environ.get(REQUIRE_ENV, '') == '1'


def skip_unless_available():
    """Skip the test when RabbitMQ cannot run here; fail if it must.

    :raises unittest.SkipTest: RabbitMQ is missing and not required
    :raises RuntimeError: RabbitMQ is missing and ``REQUIRE_ENV`` is 1
    """
    try:
        locate()
    except RabbitMQUnavailable as e:
        if required():
            raise RuntimeError('%s=1 but %s' % (REQUIRE_ENV, e))
        raise unittest.SkipTest(str(e))


def free_port():
    """A TCP port nobody listens on at the moment, on loopback."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        sock.bind(('127.0.0.1', 0))
        return sock.getsockname()[1]
    finally:
        sock.close()


def _find(name, dirs):
    for d in dirs:
        path = os.path.join(d, name)
        if os.path.isfile(path) and os.access(path, os.X_OK):
            return path
    return shutil.which(name)


def locate():
    """Paths of (rabbitmq-server, rabbitmqctl, epmd) to use here.

    :raises RabbitMQUnavailable: saying what is missing
    """
    as_root = os.geteuid() == 0
    dirs = WRAPPER_DIRS if as_root else SERVER_DIRS
    server = _find('rabbitmq-server', dirs)
    ctl = _find('rabbitmqctl', dirs)
    epmd = shutil.which('epmd') or _find('epmd', ('/usr/bin',
                                                  '/usr/lib/erlang/bin'))
    if not server or not ctl:
        raise RabbitMQUnavailable(
            'rabbitmq-server is not installed (Debian/Ubuntu: apt-get '
            'install rabbitmq-server; tools/run-tests rpc installs it)')
    if not epmd:
        raise RabbitMQUnavailable('epmd (Erlang) not found next to '
                                  'rabbitmq-server')
    if as_root:
        try:
            pwd.getpwnam('rabbitmq')
        except KeyError:
            raise RabbitMQUnavailable(
                'running as root but there is no "rabbitmq" user for the '
                'server to drop to')
    return server, ctl, epmd


class RabbitMQNode(fixtures.Fixture):
    """Start a private RabbitMQ node; stop it and its epmd on cleanup.

    :ivar url: oslo.messaging transport URL (``rabbit://guest:guest@...``)
    :ivar port: the AMQP port
    :ivar nodename: the Erlang node name, for ``rabbitmqctl -n``
    """

    def __init__(self, start_timeout=START_TIMEOUT):
        super(RabbitMQNode, self).__init__()
        self.start_timeout = start_timeout

    def _setUp(self):
        self.server, self.ctl, self.epmd = locate()
        self.base = tempfile.mkdtemp(prefix='nrl-rabbitmq-')
        self.addCleanup(shutil.rmtree, self.base, True)
        self.port = free_port()
        self.dist_port = free_port()
        self.epmd_port = free_port()
        self.nodename = 'nrl-%s@localhost' % uuid.uuid4().hex[:12]
        self.url = 'rabbit://guest:guest@127.0.0.1:%d/' % self.port
        self.env = self._environment()
        self._write_files()
        self._start()

    def _path(self, *parts):
        return os.path.join(self.base, *parts)

    def _environment(self):
        env = dict(os.environ)
        env.update({
            'RABBITMQ_NODENAME': self.nodename,
            'RABBITMQ_NODE_IP_ADDRESS': '127.0.0.1',
            'RABBITMQ_NODE_PORT': str(self.port),
            'RABBITMQ_DIST_PORT': str(self.dist_port),
            'RABBITMQ_MNESIA_BASE': self._path('mnesia'),
            'RABBITMQ_LOG_BASE': self._path('log'),
            'RABBITMQ_ENABLED_PLUGINS_FILE': self._path('enabled_plugins'),
            'RABBITMQ_FEATURE_FLAGS_FILE': self._path('feature_flags'),
            'RABBITMQ_CONFIG_FILE': self._path('rabbitmq.conf'),
            'RABBITMQ_ADVANCED_CONFIG_FILE': self._path('advanced.config'),
            'RABBITMQ_CONF_ENV_FILE': self._path('rabbitmq-env.conf'),
            'RABBITMQ_PID_FILE': self._path('rabbitmq.pid'),
            # NOTE: a private epmd, on loopback: stopping it cannot take
            # the names of any other Erlang node on the machine with it.
            'ERL_EPMD_PORT': str(self.epmd_port),
            'ERL_EPMD_ADDRESS': '127.0.0.1',
        })
        if os.geteuid() != 0:
            env['HOME'] = self.base
        return env

    def _write_files(self):
        for d in ('mnesia', 'log'):
            os.mkdir(self._path(d))
        files = {
            'enabled_plugins': '[].\n',
            'rabbitmq-env.conf': '',
            'advanced.config': '[].\n',
            'rabbitmq.conf': (
                'listeners.tcp.1 = 127.0.0.1:%d\n'
                'loopback_users.guest = true\n'
                'log.console = true\n'
                'log.console.level = warning\n'
                'log.file.level = info\n'
                'disk_free_limit.absolute = 10MB\n' % self.port),
        }
        for name, text in files.items():
            with open(self._path(name), 'w') as f:
                f.write(text)
        if os.geteuid() == 0:
            user = pwd.getpwnam('rabbitmq')
            for root, dirs, names in os.walk(self.base):
                for name in [root] + [os.path.join(root, n)
                                      for n in dirs + names]:
                    os.chown(name, user.pw_uid, user.pw_gid)
            os.chmod(self.base, 0o750)

    def ctl_call(self, *args, timeout=60):
        """Run ``rabbitmqctl -n NODE args``; return (rc, output)."""
        proc = subprocess.run(
            [self.ctl, '-n', self.nodename] + list(args), env=self.env,
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
            universal_newlines=True, timeout=timeout)
        return proc.returncode, proc.stdout

    def _start(self):
        self.log_file = open(self._path('console.log'), 'w')
        self.addCleanup(self.log_file.close)
        started = time.monotonic()
        self.process = subprocess.Popen(
            [self.server], env=self.env, stdout=self.log_file,
            stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            start_new_session=True)
        self.addCleanup(self._stop)
        deadline = started + self.start_timeout
        while True:
            if self.process.poll() is not None:
                raise RabbitMQUnavailable(
                    'rabbitmq-server exited with %s before it was up: %s'
                    % (self.process.returncode, self.console_tail()))
            if self._accepts_amqp():
                rc, out = self.ctl_call('await_startup', timeout=max(
                    5, deadline - time.monotonic()))
                if rc == 0:
                    break
            if time.monotonic() > deadline:
                raise RabbitMQUnavailable(
                    'rabbitmq-server not up after %ds: %s'
                    % (self.start_timeout, self.console_tail()))
            time.sleep(0.25)
        self.startup_seconds = time.monotonic() - started

    def _accepts_amqp(self):
        try:
            socket.create_connection(('127.0.0.1', self.port), 1).close()
            return True
        except OSError:
            return False

    def console_tail(self, lines=20):
        try:
            with open(self._path('console.log')) as f:
                return ''.join(f.readlines()[-lines:])
        except OSError:
            return '(no console output)'

    def _stop(self):
        try:
            self.ctl_call('stop', timeout=STOP_TIMEOUT)
        except subprocess.TimeoutExpired:
            pass
        try:
            self.process.wait(STOP_TIMEOUT)
        except subprocess.TimeoutExpired:
            # NOTE: the wrapper runs in its own session: end the whole
            # group the server started, never anything else.
            os.killpg(self.process.pid, 9)
            self.process.wait(STOP_TIMEOUT)
        self._stop_epmd()

    def _stop_epmd(self):
        env = dict(self.env)
        subprocess.run([self.epmd, '-port', str(self.epmd_port), '-kill'],
                       env=env, stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL, timeout=STOP_TIMEOUT)
