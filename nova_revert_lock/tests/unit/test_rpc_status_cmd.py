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

"""``nova-revert-lock status`` over oslo.messaging's fake driver."""

import io
import json
import logging
import os
import threading
import time

import fixtures
import testtools

from nova_revert_lock.audit import client
from nova_revert_lock.audit import query
from nova_revert_lock.audit import rows as audit_rows
from nova_revert_lock.cmd import manage
from nova_revert_lock.cmd import status
from nova_revert_lock.tests.unit import test_rpc


class CommandMixin(object):

    def setUp(self):
        super(CommandMixin, self).setUp()
        self.tmp = self.useFixture(fixtures.TempDir()).path
        self.stdout = self.useFixture(fixtures.MonkeyPatch(
            'sys.stdout', io.StringIO())).new_value
        self.stderr = self.useFixture(fixtures.MonkeyPatch(
            'sys.stderr', io.StringIO())).new_value
        # NOTE: the command sets the log levels of the messaging libraries
        # for its own process; keep them as they were for other tests.
        self.useFixture(fixtures.FakeLogger())
        for name in status.QUIET_LOGGERS:
            logger = logging.getLogger(name)
            self.addCleanup(setattr, logger, 'propagate', logger.propagate)
            self.addCleanup(logger.setLevel, logger.level)

    def config(self, text):
        path = os.path.join(self.tmp, 'nova-%d.conf' % len(os.listdir(
            self.tmp)))
        with open(path, 'w') as f:
            f.write(text)
        return path

    def run_cmd(self, *args):
        start = time.monotonic()
        code = manage.main(['status'] + list(args))
        self.elapsed = time.monotonic() - start
        return code


class TestStatusCommand(CommandMixin, test_rpc.FakeTransportMixin,
                        testtools.TestCase):
    """--host against compute servers on a fake:// transport."""

    def setUp(self):
        super(TestStatusCommand, self).setUp()
        # NOTE: fake:// transports only reach servers on the very same
        # transport object; the command gets the test's.
        self.useFixture(fixtures.MockPatch(
            'nova_revert_lock.audit.client.get_transport',
            return_value=self.transport))
        self.conf_file = self.config(
            '[DEFAULT]\ntransport_url = fake://\n')
        self.serve(test_rpc.extension_manager(test_rpc.FakeReport())(
            'host1'))
        self.serve(test_rpc.extension_manager(test_rpc.FakeReport(
            'already-fixed', ()))('host2'))
        self.serve(test_rpc.extension_manager(test_rpc.FakeReport(
            'refused', ()))('host3'))
        self.serve(test_rpc.extension_manager(test_rpc.FakeReport(
            'incomplete', ['confirm'], missing=['revert']))('host4'))
        self.serve(test_rpc.PlainManager('plain1'))

    def rows(self, *hosts, **kwargs):
        args = ['--config-file', self.conf_file, '--format', 'json',
                '--timeout', str(kwargs.get('timeout', 5))]
        for host in hosts:
            args += ['--host', host]
        code = self.run_cmd(*args)
        return code, json.loads(self.stdout.getvalue())

    def test_all_protected_exits_0(self):
        code, rows = self.rows('host1', 'host2')
        self.assertEqual(0, code, self.stderr.getvalue())
        self.assertEqual(['host1', 'host2'], [r['host'] for r in rows])
        self.assertEqual(['patched', 'already-fixed'],
                         [r['state'] for r in rows])
        self.assertEqual([True, True], [r['reachable'] for r in rows])
        self.assertEqual([None, None], [r['error'] for r in rows])
        for key in audit_rows.ROW_KEYS:
            self.assertIn(key, rows[0])
        self.assertEqual(['confirm', 'revert'], rows[0]['mixins'])
        self.assertEqual('21.1.0', rows[0]['nova_version'])

    def test_every_kind_of_row(self):
        code, rows = self.rows('host1', 'host3', 'plain1', 'ghost',
                               timeout=1)
        self.assertEqual(1, code)
        by_host = {r['host']: r for r in rows}
        self.assertEqual(['host1', 'host3', 'plain1', 'ghost'],
                         [r['host'] for r in rows])
        self.assertEqual('refused', by_host['host3']['state'])
        self.assertTrue(by_host['host3']['reachable'])
        self.assertIn('not protected', by_host['host3']['error'])
        plain = by_host['plain1']
        self.assertTrue(plain['reachable'])
        self.assertIsNone(plain['state'])
        self.assertTrue(plain['error'].startswith(
            'not running the extension'), plain['error'])
        ghost = by_host['ghost']
        self.assertFalse(ghost['reachable'])
        self.assertIn('no answer within 1s', ghost['error'])
        # asked in parallel: one timeout, not one per host
        self.assertLess(self.elapsed, 4)
        self.assertNotIn('Traceback', self.stderr.getvalue())

    def test_incomplete_is_not_protected(self):
        code, rows = self.rows('host1', 'host4')
        self.assertEqual(1, code)
        row = rows[1]
        self.assertTrue(row['reachable'])
        self.assertEqual('incomplete', row['state'])
        self.assertEqual(['revert'], row['missing'])
        self.assertEqual('not protected: state incomplete (missing revert)',
                         row['error'])

    def test_table(self):
        code = self.run_cmd('--config-file', self.conf_file, '--host',
                            'host1', '--host', 'plain1', '--timeout', '2')
        self.assertEqual(1, code)
        out = self.stdout.getvalue().splitlines()
        self.assertEqual(['HOST', 'REACHABLE', 'STATE', 'NOVA', 'SERIES',
                          'MIXINS', 'OPEN', 'TO', 'PERIODIC', 'DEGRADED',
                          'SECTIONS',
                          'MAX', 'HOLD', 'MS', 'ERRORS', 'NOTE'],
                         out[0].split())
        self.assertTrue(out[1].startswith('host1 '), out)
        self.assertIn('patched', out[1])
        self.assertIn('confirm,revert', out[1])
        self.assertIn('not running the extension', out[2])
        self.assertEqual('1 of 2 host(s) protected', out[-1])

    def test_degraded_hosts_in_the_row_and_counted(self):
        period = {'fix': 'source_window', 'node': 'n1', 'count': 3,
                  'since': '2026-12-05T10:00:00Z', 'what': 'look up',
                  'reason': 'MessagingTimeout: no reply'}
        rows = [audit_rows.new_row('h1', reachable=True, state='patched',
                                   degraded=[period]),
                audit_rows.new_row('h2', reachable=True, state='patched',
                                   degraded=[])]
        self.assertEqual('source_window@n1 x3 since 2026-12-05T10:00:00Z '
                         '(MessagingTimeout)', audit_rows.degraded(rows[0]))
        self.assertIsNone(audit_rows.degraded(rows[1]))
        self.assertIn('source_window@n1 x3', status.format_table(rows))
        self.assertEqual('2 of 2 host(s) protected; 1 with a degraded fix '
                         '(a read fails, or a live migration rollback '
                         'outlasted the wait: see DEGRADED)',
                         status.summary(rows))

    def test_duplicate_hosts_asked_once(self):
        code, rows = self.rows('host1', 'host1')
        self.assertEqual(0, code)
        self.assertEqual(1, len(rows))


class TestStuckTransport(CommandMixin, testtools.TestCase):
    """A driver that never gives up on its broker still ends in time."""

    def test_stuck_call_becomes_an_unreachable_row(self):
        release = threading.Event()
        self.addCleanup(release.set)

        def stuck(api, context, host):
            logging.getLogger('oslo_messaging._drivers.impl_rabbit').error(
                'Connection failed: [Errno 111] ECONNREFUSED (retrying in '
                '4.0 seconds)')
            release.wait(30)

        self.useFixture(fixtures.MockPatchObject(
            client.StatusAPI, 'get_status', stuck))
        self.useFixture(fixtures.MockPatchObject(query, 'GRACE', 0.5))
        conf = self.config('[DEFAULT]\ntransport_url = fake://\n')
        code = self.run_cmd('--config-file', conf, '--host', 'h1',
                            '--host', 'h2', '--timeout', '0.5',
                            '--format', 'json')
        self.assertEqual(1, code)
        rows = json.loads(self.stdout.getvalue())
        self.assertEqual([False, False], [r['reachable'] for r in rows])
        self.assertIn('the transport kept retrying: Connection failed: '
                      '[Errno 111] ECONNREFUSED', rows[0]['error'])
        self.assertLess(self.elapsed, 3)


class TestBrokerDown(CommandMixin, testtools.TestCase):
    """A rabbit:// URL nobody listens on: rows, not a hang or a trace."""

    def test_unreachable_rows_exit_1(self):
        from nova_revert_lock.tests.integration import rabbitmq
        port = rabbitmq.free_port()
        conf = self.config('[DEFAULT]\ntransport_url = '
                           'rabbit://guest:guest@127.0.0.1:%d/\n' % port)
        code = self.run_cmd('--config-file', conf, '--host', 'h1',
                            '--host', 'h2', '--timeout', '3',
                            '--format', 'json')
        self.assertEqual(1, code)
        rows = json.loads(self.stdout.getvalue())
        self.assertEqual(['h1', 'h2'], [r['host'] for r in rows])
        for row in rows:
            self.assertFalse(row['reachable'])
            self.assertIsNone(row['state'])
            self.assertIn('broker unreachable (127.0.0.1:%d: ' % port,
                          row['error'])
            self.assertIn('refused', row['error'].lower())
        self.assertLess(self.elapsed, 10)
        self.assertNotIn('Traceback', self.stderr.getvalue())


class TestUsage(CommandMixin, testtools.TestCase):

    def assertUsage(self, expected, *args):
        e = self.assertRaises(SystemExit, self.run_cmd, *args) if (
            expected is None) else None
        if e is not None:
            self.assertEqual(2, e.code)
            return
        self.assertEqual(2, self.run_cmd(*args))
        self.assertIn(expected, self.stderr.getvalue())

    def test_host_or_all_required(self):
        self.assertUsage(None)

    def test_host_and_all_exclusive(self):
        self.assertUsage(None, '--all', '--host', 'h1')

    def test_timeout_must_be_positive(self):
        self.assertUsage(None, '--host', 'h1', '--timeout', '0')
        self.assertUsage(None, '--host', 'h1', '--timeout', 'soon')

    def test_host_without_transport_url(self):
        conf = self.config('[DEFAULT]\ndebug = false\n')
        self.assertUsage('[DEFAULT] transport_url is not set in %s' % conf,
                         '--config-file', conf, '--host', 'h1')

    def test_unknown_transport_driver(self):
        conf = self.config('[DEFAULT]\ntransport_url = bogus://x/\n')
        self.assertUsage('[DEFAULT] transport_url is unusable',
                         '--config-file', conf, '--host', 'h1')

    def test_missing_config_file(self):
        self.assertUsage('configuration: ', '--config-file',
                         os.path.join(self.tmp, 'absent.conf'),
                         '--host', 'h1')

    def test_all_without_api_database(self):
        try:
            import nova.conf  # noqa: F401
        except ImportError:
            self.skipTest('--all needs Nova')
        conf = self.config('[DEFAULT]\ntransport_url = fake://\n')
        self.assertUsage('--all needs [api_database] connection',
                         '--config-file', conf, '--all')
