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

"""The wrapper's refusal paths, end to end, in a fresh process each.

``nova-compute-revert-lock`` is run as nova-compute would be: a new Python
process, Nova's configuration file, ``nova_revert_lock.cmd.compute.main``.
Only ``nova.cmd.compute.main`` is replaced, by a probe that records what
nova-compute would have started with (the manager class named in
``SERVICE_MANAGERS``) and returns. Each case checks the documented outcome
(exit code, message, service started or not) and that no half-composed
manager is left anywhere: ``SERVICE_MANAGERS`` as shipped, no
``RevertLockComputeManager`` attribute, Nova's classes untouched, no
composed subclass alive.

To make the installed Nova look like unknown code (or like an already
fixed release) the probe changes, in that process only, the fingerprint
table and the mixins' "fixed upstream" test: nothing on disk.
"""

import json
import subprocess
import sys
import textwrap

from oslotest import base

from nova_revert_lock import activation
from nova_revert_lock import report as nrl_report

PLAIN = 'nova.compute.manager.ComputeManager'

_PROBE = textwrap.dedent('''
    import gc
    import json
    import sys

    import nova.cmd  # noqa: monkey patches eventlet first, as nova-compute
    from nova.cmd import compute as nova_compute
    from nova.compute import manager as nova_manager
    from nova.compute import resource_tracker
    from nova import service

    from nova_revert_lock import activation
    from nova_revert_lock.cmd import compute as wrapper
    from nova_revert_lock.guard import fingerprint_table
    from nova_revert_lock.mixins import confirm
    from nova_revert_lock.mixins import revert

    pretend, config = sys.argv[1], sys.argv[2]
    if pretend == 'unknown':
        # Code neither known nor carrying the fix.
        fingerprint_table.FINGERPRINTS.clear()
        confirm.SPEC.fixed_upstream = lambda: False
        revert.SPEC.fixed_upstream = lambda: False
    elif pretend == 'extra-unknown':
        # A distribution changed a function only source_window relies on.
        del fingerprint_table.FINGERPRINTS[
            'nova.compute.resource_tracker:ResourceTracker.'
            '_pair_instances_to_migrations']
    elif pretend == 'fixed':
        # Every bug-1879878 mixin sees upstream's fix (cross-cell ones
        # only exist from Ussuri on).
        import stevedore
        for ext in stevedore.ExtensionManager(
                'nova_revert_lock.compute_mixins', invoke_on_load=False):
            if not ext.plugin.beyond_upstream:
                ext.plugin.fixed_upstream = lambda: True

    shipped = (dict(service.SERVICE_MANAGERS),
               dict(vars(nova_manager.ComputeManager)),
               dict(vars(resource_tracker.ResourceTracker)))
    started = {}

    def probe():
        from oslo_utils import importutils
        path = service.SERVICE_MANAGERS['nova-compute']
        started['manager'] = path
        started['mro'] = [c.__name__
                          for c in importutils.import_class(path).__mro__]
        return 0

    nova_compute.main = probe
    code = wrapper.main(['nova-compute', '--config-file', config])
    gc.collect()
    composed_alive = [c.__name__ for c in
                      nova_manager.ComputeManager.__subclasses__()
                      if c.__module__ == activation.__name__]
    if started.get('manager') != activation.MANAGER_PATH:
        # A half-composed manager would show here.
        after = (dict(service.SERVICE_MANAGERS),
                 dict(vars(nova_manager.ComputeManager)),
                 dict(vars(resource_tracker.ResourceTracker)))
        untouched = after == shipped
    else:
        untouched = None
    sys.stdout.write('\\nPROBE ' + json.dumps({
        'code': code, 'started': started,
        'service_manager': service.SERVICE_MANAGERS['nova-compute'],
        'attribute': hasattr(activation, 'RevertLockComputeManager'),
        'composed_alive': composed_alive,
        'untouched': untouched}) + '\\n')
    sys.stdout.flush()
''')


class WrapperRefusalTest(base.BaseTestCase):
    """nova-compute-revert-lock in a subprocess, one case each."""

    def setUp(self):
        super(WrapperRefusalTest, self).setUp()
        self.installed = activation.build().state

    def _run(self, pretend, config_text):
        path = self.create_tempfiles([('nova', config_text)],
                                     ext='.conf')[0]
        proc = subprocess.run(
            [sys.executable, '-c', _PROBE, pretend, path],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            universal_newlines=True, timeout=120)
        lines = [line for line in proc.stdout.splitlines()
                 if line.startswith('PROBE ')]
        self.assertEqual(1, len(lines), proc.stdout + proc.stderr)
        result = json.loads(lines[0][len('PROBE '):])
        self.assertEqual(0, proc.returncode, proc.stderr)
        result['stdout'], result['stderr'] = proc.stdout, proc.stderr
        return result

    def _assert_not_started(self, result, code):
        self.assertEqual(code, result['code'], result['stderr'])
        self.assertEqual({}, result['started'])
        self._assert_plain(result)

    def _assert_started_plain(self, result):
        self.assertEqual(0, result['code'], result['stderr'])
        self.assertEqual(PLAIN, result['started']['manager'])
        self._assert_plain(result)

    def _assert_plain(self, result):
        self.assertEqual(PLAIN, result['service_manager'])
        self.assertFalse(result['attribute'])
        self.assertEqual([], result['composed_alive'])
        self.assertTrue(result['untouched'])

    def test_unknown_code_fail_exits_before_nova_compute(self):
        result = self._run('unknown',
                           '[revert_lock]\non_unknown_code = fail\n')
        self._assert_not_started(result, 3)
        self.assertIn('refused to patch Nova', result['stderr'])
        self.assertIn('on_unknown_code = warn', result['stderr'])

    def test_unknown_code_warn_starts_plain_with_error(self):
        result = self._run('unknown',
                           '[revert_lock]\non_unknown_code = warn\n')
        self._assert_started_plain(result)
        self.assertIn('ERROR', result['stdout'])
        self.assertIn('WITHOUT the fix for bug 1879878', result['stdout'])

    def test_disabled_starts_plain(self):
        result = self._run('as-is', '[revert_lock]\nenabled = false\n')
        self._assert_started_plain(result)
        self.assertIn('nova-revert-lock: disabled', result['stdout'])

    def test_already_fixed_stands_aside(self):
        result = self._run('fixed', '')
        self.assertEqual(0, result['code'], result['stderr'])
        self.assertIn('already carries the fix', result['stdout'])
        # What goes beyond upstream (source_window) and the status
        # endpoint may be composed; nothing of the bug-1879878 fix is.
        for name in ('ConfirmUnderLockMixin', 'RevertUnderLockMixin',
                     'TrainRevertUnderLockMixin'):
            self.assertNotIn(name, result['started']['mro'])
        self.assertIn('ComputeManager', result['started']['mro'])

    def test_bad_option_values_exit_2(self):
        for text, word in (
                ('[revert_lock]\non_unknown_code = maybe\n', 'maybe'),
                ('[revert_lock]\nenabled = perhaps\n', 'perhaps'),
                ('[revert_lock]\nmixins = confirm,bogus\n', 'bogus'),
                ('[revert_lock]\nmixins =\n', 'mixins is empty')):
            result = self._run('as-is', text)
            self._assert_not_started(result, 2)
            self.assertIn(word, result['stderr'])

    def test_unknown_extra_starts_with_the_fix(self):
        """source_window's unknown code never stops the 1879878 fix."""
        if self.installed != nrl_report.PATCHED:
            self.skipTest('the installed Nova is not an affected release')
        result = self._run('extra-unknown',
                           '[revert_lock]\non_unknown_code = fail\n')
        self.assertEqual(0, result['code'], result['stderr'])
        self.assertEqual(activation.MANAGER_PATH,
                         result['started']['manager'])
        mro = result['started']['mro']
        self.assertNotIn('SourceWindowMixin', mro)
        self.assertIn('ConfirmUnderLockMixin', mro)
        self.assertIn('source_window not applied', result['stdout'])
        self.assertIn('_pair_instances_to_migrations', result['stdout'])

    def test_patched_starts_composed_manager(self):
        """The contrast: the same probe sees the composed manager."""
        if self.installed != nrl_report.PATCHED:
            self.skipTest('the installed Nova is not an affected release')
        result = self._run('as-is', '')
        self.assertEqual(0, result['code'], result['stderr'])
        self.assertEqual(activation.MANAGER_PATH,
                         result['started']['manager'])
        self.assertEqual('RevertLockComputeManager',
                         result['started']['mro'][0])
        self.assertIn('ComputeManager', result['started']['mro'])
