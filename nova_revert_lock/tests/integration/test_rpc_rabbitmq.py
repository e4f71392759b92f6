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

"""``nova-revert-lock status`` against a real RabbitMQ.

A private RabbitMQ node (:mod:`.rabbitmq`), and compute RPC servers in
separate processes (:mod:`.status_server`): ``ext1`` and ``ext2`` serve
the status endpoint, ``plain1`` is plain nova-compute, and nobody serves
``ghost``. The command runs as a subprocess, as an operator runs it.

Skipped when rabbitmq-server is not installed, unless
``NRL_REQUIRE_RABBITMQ=1`` (the ``rpc`` tox env), where that fails.
"""

import collections
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import unittest

import fixtures
from oslo_config import cfg
import testtools
from testtools import content

from nova_revert_lock import activation
from nova_revert_lock.tests.integration import rabbitmq

SERVER_START_TIMEOUT = 60
#: --timeout given to the command
TIMEOUT = 5
#: what the command may take beyond one --timeout (start-up, probe)
SLACK = 15


def command():
    """How to run nova-revert-lock from this environment."""
    script = os.path.join(os.path.dirname(sys.executable),
                          'nova-revert-lock')
    if os.path.exists(script):
        return [script]
    return [sys.executable, '-m', 'nova_revert_lock.cmd.manage']


def run_status(conf_file, hosts, fmt='json', timeout=TIMEOUT):
    """Run the command; return (exit code, stdout, stderr, seconds).

    :param hosts: host names for ``--host``, or None for ``--all``
    """
    args = command() + ['status', '--config-file', conf_file,
                        '--timeout', str(timeout), '--format', fmt]
    if hosts is None:
        args.append('--all')
    for host in hosts or ():
        args += ['--host', host]
    start = time.monotonic()
    proc = subprocess.run(args, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, universal_newlines=True,
                          timeout=timeout + SLACK + 30)
    return (proc.returncode, proc.stdout, proc.stderr,
            time.monotonic() - start)


class ComputeServers(object):
    """Compute RPC server processes; each prints READY once consuming."""

    def __init__(self, url):
        self.url = url
        self.procs = {}
        self._drains = []

    def start(self, host, mode, sections=0, failed=0, more_hosts=()):
        """Start a server process for ``host`` (and ``more_hosts``).

        The process stands for every host it is given, one RPC server
        each; it is known here by the last, whose READY line it prints
        last.
        """
        hosts = [host] + list(more_hosts)
        args = [sys.executable, '-m',
                'nova_revert_lock.tests.integration.status_server',
                '--url', self.url, '--mode', mode,
                '--sections', str(sections), '--failed-sections', str(failed)]
        for name in hosts:
            args += ['--host', name]
        self.procs[hosts[-1]] = subprocess.Popen(
            args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
            universal_newlines=True)

    def wait_ready(self, timeout=SERVER_START_TIMEOUT):
        deadline = time.monotonic() + timeout
        for host, proc in self.procs.items():
            lines = []
            while True:
                # NOTE: readline blocks; the servers print READY or exit.
                line = proc.stdout.readline()
                if line.strip() == 'READY %s' % host:
                    break
                lines.append(line)
                if not line or time.monotonic() > deadline:
                    raise RuntimeError('compute server %s did not start: %s'
                                       % (host, ''.join(lines[-30:])))

    def drain(self):
        """Keep reading the servers' output: a full pipe would stall them.

        Call after :meth:`wait_ready`; :meth:`stop` joins the readers.

        :returns: per host, a deque of its last lines (for diagnosis)
        """
        tails = {}
        for host, proc in self.procs.items():
            tails[host] = collections.deque(maxlen=30)
            thread = threading.Thread(target=tails[host].extend,
                                      args=(proc.stdout,),
                                      name='drain-' + host)
            thread.daemon = True
            thread.start()
            self._drains.append(thread)
        return tails

    def stop(self):
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.terminate()
        for proc in self.procs.values():
            try:
                proc.wait(20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(5)
        # NOTE: with eventlet's monkey patching (Nova's test modules
        # apply it) the readers are green threads of this OS thread, so
        # closing a pipe one of them is reading raises "reentrant call
        # inside <_io.BufferedReader>". The pipes reach EOF once the
        # servers have exited: let the readers end first.
        for thread in self._drains:
            thread.join(10)
        if not any(thread.is_alive() for thread in self._drains):
            for proc in self.procs.values():
                proc.stdout.close()
        self._drains = []


def _write_conf(directory, name, url):
    path = os.path.join(directory, name)
    with open(path, 'w') as f:
        f.write('[DEFAULT]\ntransport_url = %s\n' % url)
    return path


def make_cells(directory, url, hosts):
    """An API database mapping cell0 and cell1, and cell1's services.

    Only the two tables ``--all`` reads, created from Nova's own models
    (a full schema sync takes minutes); returns the API database URL.
    """
    from nova.db.sqlalchemy import api_models
    from nova.db.sqlalchemy import models
    import sqlalchemy

    api = 'sqlite:///%s' % os.path.join(directory, 'api.db')
    cell1 = 'sqlite:///%s' % os.path.join(directory, 'cell1.db')
    engine = sqlalchemy.create_engine(api)
    table = api_models.CellMapping.__table__
    table.create(engine)
    engine.execute(table.insert(), [
        {'uuid': '00000000-0000-0000-0000-000000000000', 'name': 'cell0',
         'transport_url': 'none:///', 'database_connection': 'sqlite://',
         'disabled': False},
        {'uuid': 'c9e1c7a2-56a5-4bd4-9e55-7d3c1e0f0c11', 'name': 'cell1',
         'transport_url': url, 'database_connection': cell1,
         'disabled': False}])
    engine.dispose()
    engine = sqlalchemy.create_engine(cell1)
    table = models.Service.__table__
    table.create(engine)
    engine.execute(table.insert(), [
        {'uuid': '9f0f6a55-2a4e-4d8e-8a0b-%012d' % i, 'host': host,
         'binary': 'nova-compute', 'topic': 'compute', 'version': 51}
        for i, host in enumerate(hosts)])
    engine.dispose()
    return api


class StatusOverRabbitMQTest(testtools.TestCase):
    """One broker and four hosts for the whole class (starting is slow)."""

    @classmethod
    def setUpClass(cls):
        super(StatusOverRabbitMQTest, cls).setUpClass()
        rabbitmq.skip_unless_available()
        cls.node = rabbitmq.RabbitMQNode()
        cls.node.setUp()
        cls.servers = ComputeServers(cls.node.url)
        try:
            cls.servers.start('ext1', 'extension', sections=3, failed=1)
            cls.servers.start('ext2', 'extension')
            cls.servers.start('plain1', 'plain')
            cls.servers.wait_ready()
        except Exception:
            cls.servers.stop()
            cls.node.cleanUp()
            raise
        cls.tmp = tempfile.mkdtemp(prefix='nrl-status-')
        cls.conf = _write_conf(cls.tmp, 'nova.conf', cls.node.url)
        cls.expected = activation.build(cfg.ConfigOpts())

    @classmethod
    def tearDownClass(cls):
        cls.servers.stop()
        cls.node.cleanUp()
        shutil.rmtree(cls.tmp, True)
        super(StatusOverRabbitMQTest, cls).tearDownClass()

    def assertProtectedRow(self, row, host):
        self.assertEqual(host, row['host'])
        self.assertIs(True, row['reachable'])
        self.assertIsNone(row['error'])
        self.assertEqual(str(self.expected.state), row['state'])
        self.assertIn(row['state'], ('patched', 'already-fixed'))
        self.assertEqual(self.expected.nova_version, row['nova_version'])
        self.assertEqual(self.expected.series, row['series'])
        self.assertEqual(self.expected.mixins, row['mixins'])
        self.assertIsNotNone(row['activated_at'])

    def test_rows_for_every_kind_of_host(self):
        code, out, err, elapsed = run_status(
            self.conf, ['ext1', 'ext2', 'plain1', 'ghost'])
        self.assertEqual(1, code, err)
        self.assertNotIn('Traceback', err)
        rows = json.loads(out)
        self.assertEqual(['ext1', 'ext2', 'plain1', 'ghost'],
                         [r['host'] for r in rows])
        ext1, ext2, plain1, ghost = rows
        self.assertProtectedRow(ext1, 'ext1')
        self.assertEqual((3, 1), (ext1['critical_sections'],
                                  ext1['critical_section_errors']))
        self.assertGreater(ext1['max_lock_hold_ms'], 0)
        self.assertProtectedRow(ext2, 'ext2')
        self.assertEqual((0, 0, 0.0), (ext2['critical_sections'],
                                       ext2['critical_section_errors'],
                                       ext2['max_lock_hold_ms']))
        # plain nova-compute answered UnsupportedVersion
        self.assertIs(True, plain1['reachable'])
        self.assertIsNone(plain1['state'])
        self.assertTrue(plain1['error'].startswith(
            'not running the extension'), plain1['error'])
        self.assertIn('UnsupportedVersion', plain1['error'])
        self.assertIs(False, ghost['reachable'])
        self.assertIn('no answer within %ds' % TIMEOUT, ghost['error'])
        # the four hosts are asked at once: one timeout in all
        self.assertLess(elapsed, TIMEOUT + SLACK)
        self.addDetail('elapsed', content.text_content('%.2fs' % elapsed))

    def test_all_protected_exit_0_table(self):
        code, out, err, elapsed = run_status(self.conf, ['ext1', 'ext2'],
                                             fmt='table')
        self.assertEqual(0, code, err)
        lines = out.splitlines()
        self.assertEqual('HOST', lines[0].split()[0])
        self.assertEqual(['ext1', 'ext2'], [ln.split()[0]
                                            for ln in lines[1:3]])
        self.assertEqual('2 of 2 host(s) protected', lines[-1])
        self.assertLess(elapsed, SLACK)

    def test_all_asks_every_compute_of_every_cell(self):
        api = make_cells(self.tmp, self.node.url,
                         ['plain1', 'ext1', 'ghost'])
        conf = os.path.join(self.tmp, 'api.conf')
        with open(conf, 'w') as f:
            f.write('[api_database]\nconnection = %s\n' % api)
        code, out, err, elapsed = run_status(conf, None)
        self.assertEqual(1, code, err)
        self.assertNotIn('Traceback', err)
        rows = json.loads(out)
        self.assertEqual(['ext1', 'ghost', 'plain1'],
                         [r['host'] for r in rows])
        self.assertEqual({'cell1'}, {r['cell'] for r in rows})
        ext1, ghost, plain1 = rows
        self.assertProtectedRow(ext1, 'ext1')
        self.assertIs(False, ghost['reachable'])
        self.assertTrue(plain1['error'].startswith(
            'not running the extension'), plain1['error'])
        self.assertLess(elapsed, TIMEOUT + SLACK)

    def test_wrong_credentials(self):
        conf = _write_conf(self.tmp, 'badpw.conf', self.node.url.replace(
            'guest:guest@', 'guest:wrong@'))
        code, out, err, elapsed = run_status(conf, ['ext1', 'ext2'])
        self.assertEqual(1, code, err)
        self.assertNotIn('Traceback', err)
        rows = json.loads(out)
        for row in rows:
            self.assertIs(False, row['reachable'])
            self.assertIn('broker unreachable', row['error'])
            self.assertIn('ACCESS_REFUSED', row['error'])
        self.assertLess(elapsed, SLACK)


class BrokerDownTest(testtools.TestCase):
    """No broker at all on the configured port: rows, exit 1, in time.

    Needs no RabbitMQ: the point is that none answers.
    """

    def test_broker_down(self):
        tmp = self.useFixture(fixtures.TempDir()).path
        port = rabbitmq.free_port()
        conf = _write_conf(tmp, 'nova.conf',
                           'rabbit://guest:guest@127.0.0.1:%d/' % port)
        code, out, err, elapsed = run_status(conf, ['ext1', 'ghost'])
        self.assertEqual(1, code, err)
        self.assertNotIn('Traceback', err)
        rows = json.loads(out)
        self.assertEqual(['ext1', 'ghost'], [r['host'] for r in rows])
        for row in rows:
            self.assertIs(False, row['reachable'])
            self.assertIn('broker unreachable (127.0.0.1:%d: ' % port,
                          row['error'])
            self.assertIn('Connection refused', row['error'])
        self.assertLess(elapsed, TIMEOUT + SLACK)


class RabbitMQAbsentTest(testtools.TestCase):
    """Without rabbitmq-server: a skip with the reason, or a failure."""

    def setUp(self):
        super(RabbitMQAbsentTest, self).setUp()
        self.useFixture(fixtures.MockPatchObject(
            rabbitmq, 'locate', side_effect=rabbitmq.RabbitMQUnavailable(
                'rabbitmq-server is not installed (...)')))
        self.useFixture(fixtures.MockPatchObject(
            rabbitmq, 'RabbitMQNode', side_effect=AssertionError('started')))

    def test_skips_with_the_reason(self):
        self.useFixture(fixtures.EnvironmentVariable(rabbitmq.REQUIRE_ENV))
        e = self.assertRaises(unittest.SkipTest,
                              StatusOverRabbitMQTest.setUpClass)
        self.assertEqual('rabbitmq-server is not installed (...)', str(e))

    def test_fails_when_required(self):
        self.useFixture(fixtures.EnvironmentVariable(rabbitmq.REQUIRE_ENV,
                                                     '1'))
        e = self.assertRaises(RuntimeError,
                              StatusOverRabbitMQTest.setUpClass)
        self.assertEqual('NRL_REQUIRE_RABBITMQ=1 but rabbitmq-server is not '
                         'installed (...)', str(e))
