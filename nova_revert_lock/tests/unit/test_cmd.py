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

import json
from unittest import mock

import fixtures
from oslotest import base

from nova_revert_lock import activation
from nova_revert_lock.cmd import compute as cmd_compute
from nova_revert_lock.cmd import manage
from nova_revert_lock.guard import fingerprint_table
from nova_revert_lock import report as nrl_report
from nova_revert_lock import startup


class _CommandTestCase(base.BaseTestCase):

    def setUp(self):
        super(_CommandTestCase, self).setUp()
        self.addCleanup(activation.deactivate)
        self.stdout = self.useFixture(fixtures.StringStream('stdout')).stream
        self.stderr = self.useFixture(fixtures.StringStream('stderr')).stream
        self.useFixture(fixtures.MonkeyPatch('sys.stdout', self.stdout))
        self.useFixture(fixtures.MonkeyPatch('sys.stderr', self.stderr))
        self.expected = activation.build(self._conf_with())

    def _conf_with(self, text=''):
        self.config = self.create_tempfiles([('nova', text)])[0]
        return manage._load_config([self.config])

    def _check(self, *args):
        return manage.main(['check', '--config-file', self.config] +
                           list(args))

    def _out(self):
        self.stdout.seek(0)
        return self.stdout.read()

    def _err(self):
        self.stderr.seek(0)
        return self.stderr.read()


class CheckTestCase(_CommandTestCase):

    def test_json_keys_and_exit_code(self):
        code = self._check('--format', 'json')
        data = json.loads(self._out())
        for key in ('state', 'nova_version', 'series', 'mixins',
                    'problems'):
            self.assertIn(key, data)
        self.assertEqual(self.expected.state, data['state'])
        expected = 0 if data['state'] in ('patched', 'already-fixed') else 1
        self.assertEqual(expected, code)

    def test_table(self):
        self._check()
        out = self._out()
        self.assertIn('State:', out)
        for name in self.expected.to_dict()['mixins']:
            self.assertIn(name, out)

    def test_disabled_exits_1(self):
        self._conf_with('[revert_lock]\nenabled = false\n')
        self.assertEqual(1, self._check('--format', 'json'))
        self.assertEqual('disabled', json.loads(self._out())['state'])

    def test_refused_exits_1(self):
        if self.expected.state != nrl_report.PATCHED:
            self.skipTest('installed Nova is not an affected release')
        with mock.patch.dict(fingerprint_table.FINGERPRINTS, clear=True):
            self.assertEqual(1, self._check())
        self.assertIn('UNKNOWN CODE', self._out())

    def test_unknown_mixin_exits_2(self):
        self._conf_with('[revert_lock]\nmixins = confirm,bogus\n')
        self.assertEqual(2, self._check())
        self.assertIn('bogus', self._err())

    def test_bad_value_exits_2(self):
        self._conf_with('[revert_lock]\non_unknown_code = maybe\n')
        self.assertEqual(2, self._check())

    def test_missing_config_file_exits_2(self):
        self.config = '/nonexistent/nova.conf'
        self.assertEqual(2, self._check())

    def test_usage_errors_exit_2(self):
        for argv in ([], ['bogus'], ['check', '--format', 'xml']):
            e = self.assertRaises(SystemExit, manage.main, argv)
            self.assertEqual(2, e.code)

    def test_nova_not_importable_exits_1(self):
        with mock.patch.dict('sys.modules', {'nova.compute.manager': None}):
            self.assertEqual(1, self._check())
        self.assertIn('same Python environment', self._err())


class CheckCommandTestCase(_CommandTestCase):
    """check says what the nova-compute command starts."""

    def _command(self, starts):
        path = '/var/lib/kolla/venv/bin/nova-compute'
        self.useFixture(fixtures.MockPatch(
            'nova_revert_lock.startup.nova_compute_command',
            return_value=(path, starts)))
        return path

    def test_table_and_json_say_what_it_starts(self):
        path = self._command(startup.STARTS_FIX)
        self._check()
        self.assertIn('Command:   %s starts nova-compute-revert-lock'
                      % path, self._out())
        self.stdout.seek(0)
        self.stdout.truncate()
        self._check('--format', 'json')
        self.assertEqual({'path': path, 'starts': 'nova-revert-lock'},
                         json.loads(self._out())['command'])

    def test_command_starts_fix(self):
        self._command(startup.STARTS_FIX)
        expected = 0 if self.expected.state in (
            nrl_report.PATCHED, nrl_report.ALREADY_FIXED) else 1
        self.assertEqual(expected, self._check('--command-starts-fix'))

    def test_command_starts_nova_exits_1(self):
        for starts in (startup.STARTS_NOVA, startup.STARTS_UNKNOWN, None):
            self.useFixture(fixtures.MockPatch(
                'nova_revert_lock.startup.nova_compute_command',
                return_value=(None if starts is None else '/usr/bin/x',
                              starts)))
            self.assertEqual(1, self._check('--command-starts-fix'))
            self.assertIn('does not start through the fix', self._err())
        # Without the option the command is only reported.
        code = self._check()
        self.assertEqual(0 if self.expected.state in (
            nrl_report.PATCHED, nrl_report.ALREADY_FIXED) else 1, code)


class ComputeWrapperTestCase(_CommandTestCase):
    """nova-compute-revert-lock up to the point nova-compute would start."""

    def setUp(self):
        super(ComputeWrapperTestCase, self).setUp()
        # prepare() parses into Nova's global CONF, as nova-compute does.
        from nova import conf as nova_conf
        self.addCleanup(nova_conf.CONF.reset)
        self.addCleanup(nova_conf.CONF.clear)

    def _prepare(self, text):
        path = self.create_tempfiles([('nova', text)])[0]
        with mock.patch('oslo_log.log.setup'):
            return cmd_compute.prepare(['nova-compute', '--config-file',
                                        path])

    def test_patched_or_fixed_starts(self):
        if self.expected.state not in (nrl_report.PATCHED,
                                       nrl_report.ALREADY_FIXED):
            self.skipTest('installed Nova is not supported')
        self.assertIsNone(self._prepare(''))

    def test_unknown_code_fail_stops_before_start(self):
        if self.expected.state != nrl_report.PATCHED:
            self.skipTest('installed Nova is not an affected release')
        with mock.patch.dict(fingerprint_table.FINGERPRINTS, clear=True):
            code = self._prepare('[revert_lock]\non_unknown_code = fail\n')
        self.assertEqual(cmd_compute.EXIT_REFUSED, code)
        self.assertIn('refused to patch', self._err())
        self.assertIn('on_unknown_code = warn', self._err())
        from nova import service
        self.assertEqual('nova.compute.manager.ComputeManager',
                         service.SERVICE_MANAGERS['nova-compute'])

    def test_unknown_code_warn_starts_plain(self):
        if self.expected.state != nrl_report.PATCHED:
            self.skipTest('installed Nova is not an affected release')
        logger = self.useFixture(fixtures.FakeLogger(level='ERROR'))
        with mock.patch.dict(fingerprint_table.FINGERPRINTS, clear=True):
            code = self._prepare('[revert_lock]\non_unknown_code = warn\n')
        self.assertIsNone(code)
        self.assertIn('WITHOUT the fix', logger.output)
        from nova import service
        self.assertEqual('nova.compute.manager.ComputeManager',
                         service.SERVICE_MANAGERS['nova-compute'])

    def test_bad_value_exits_2(self):
        code = self._prepare('[revert_lock]\non_unknown_code = maybe\n')
        self.assertEqual(cmd_compute.EXIT_CONFIG, code)
        self.assertIn('maybe', self._err())

    def test_main_hands_over_to_nova_compute(self):
        if self.expected.state != nrl_report.PATCHED:
            self.skipTest('installed Nova is not an affected release')
        path = self.create_tempfiles([('nova', '')])[0]
        seen = {}

        def fake_nova_main():
            from nova import conf as nova_conf
            from nova import service
            # What nova.cmd.compute.main() would find.
            seen['manager'] = service.SERVICE_MANAGERS['nova-compute']
            seen['parsed'] = nova_conf.CONF._args is not None
            return 0

        with mock.patch('oslo_log.log.setup'), \
                mock.patch('nova.cmd.compute.main', fake_nova_main):
            self.assertEqual(0, cmd_compute.main(
                ['nova-compute', '--config-file', path]))
        self.assertEqual({'manager': activation.MANAGER_PATH,
                          'parsed': False}, seen)

    def test_unrecognised_entry_point_starts_nothing(self):
        unrecognised = startup.UnrecognisedEntryPoint(
            'nova-compute of Nova 99.0.0 is started in a way ...')
        with mock.patch.object(startup, 'recognise',
                               side_effect=unrecognised), \
                mock.patch.object(startup, 'import_entry_module') as imp, \
                mock.patch.object(cmd_compute, 'prepare') as prepare:
            code = cmd_compute.main(['nova-compute'])
        self.assertEqual(cmd_compute.EXIT_UNRECOGNISED, code)
        self.assertIn('Nova 99.0.0', self._err())
        imp.assert_not_called()
        prepare.assert_not_called()

    def test_no_nova_exits_2(self):
        with mock.patch.object(startup, 'recognise',
                               side_effect=startup.NovaNotFound('no Nova')), \
                mock.patch.object(startup, 'import_entry_module') as imp:
            self.assertEqual(cmd_compute.EXIT_CONFIG,
                             cmd_compute.main(['nova-compute']))
        imp.assert_not_called()

    def test_entry_module_first_then_configuration_then_main(self):
        calls = mock.Mock()
        entry_point = startup.EntryPoint(startup.MODULE, startup.THREADING,
                                         'compute.py', '34.0.0')
        calls.recognise.return_value = entry_point
        calls.prepare.return_value = None
        calls.import_entry_module.return_value.main.return_value = 0
        with mock.patch.object(startup, 'recognise', calls.recognise), \
                mock.patch.object(startup, 'import_entry_module',
                                  calls.import_entry_module), \
                mock.patch.object(cmd_compute, 'prepare', calls.prepare):
            self.assertEqual(0, cmd_compute.main(['nova-compute']))
        self.assertEqual(
            [mock.call.recognise(), mock.call.import_entry_module(),
             mock.call.prepare(['nova-compute'], entry_point),
             mock.call.import_entry_module().main()],
            calls.mock_calls)

    def test_prepare_logs_the_concurrency_model(self):
        if self.expected.state not in (nrl_report.PATCHED,
                                       nrl_report.ALREADY_FIXED):
            self.skipTest('installed Nova is not supported')
        logger = self.useFixture(fixtures.FakeLogger(level='INFO'))
        entry_point = startup.recognise()
        path = self.create_tempfiles([('nova', '')])[0]
        with mock.patch('oslo_log.log.setup'):
            self.assertIsNone(cmd_compute.prepare(
                ['nova-compute', '--config-file', path], entry_point))
        self.assertIn('concurrency set up by %s' % entry_point.shape,
                      logger.output)
        self.assertIn('running with %s' % startup.running_backend(),
                      logger.output)
