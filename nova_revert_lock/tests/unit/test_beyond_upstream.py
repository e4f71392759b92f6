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

"""Activation with a mixin that goes beyond upstream (source_window).

Runs the guard against the Nova installed in the test environment: the
expectations depend on whether it carries upstream's fix for bug 1879878
(21.1.1+, 31.x) or not (20.x, 21.0.0-21.1.0), and, for the family's
other mixins (``fixes.FAMILY``), whether it carries theirs.
"""

import sys

import fixtures
from oslo_config import cfg
from oslotest import base as test_base

from nova_revert_lock import activation
from nova_revert_lock.cmd import manage
from nova_revert_lock import conf as nrl_conf
from nova_revert_lock import fixes
from nova_revert_lock.guard import assess
from nova_revert_lock.guard import decision
from nova_revert_lock.guard import fingerprint_table
from nova_revert_lock.mixins import confirm
from nova_revert_lock.mixins import source_window
from nova_revert_lock import report as nrl_report
from nova_revert_lock.tests.unit import guard_helpers

CORE = ['confirm', 'revert']


def _fixed_here(report):
    """The shipped bug-1879878 mixins that apply to this Nova."""
    return [m for m in list(fixes.NAMES)
            if not fixes.is_extra(m) and m not in report.not_applicable]


def _family(outcome):
    """The shipped family mixins whose check on this Nova is ``outcome``.

    Sibling races upstream fixed in other releases than bug 1879878
    (bug 1944759: 22.4.0): on 21.1.2 they still apply.
    """
    report = activation.build(_default_conf())
    return [c.name for c in report.checks
            if fixes.FIXES[c.name].kind == fixes.FAMILY and
            c.outcome == outcome]


def _default_conf():
    conf = cfg.ConfigOpts()
    nrl_conf.register_opts(conf)
    conf([], project='nova', default_config_files=[])
    return conf


def nova_has_upstream_fix():
    return confirm.SPEC.check().outcome == decision.FIXED_UPSTREAM


def skip_unless_source_window_applies(test):
    """Skip where source_window is not verified on the installed code.

    (Victoria 22.0.0-22.3.0, Wallaby, Xena: the tests of those releases
    run for the family's mixins; source_window is left out there.)
    """
    check = source_window.SPEC.check()
    if check.outcome != decision.MATCH:
        test.skipTest('source_window is %s on the installed Nova'
                      % check.outcome)


class BeyondUpstreamActivationTest(test_base.BaseTestCase):

    def _evaluate(self, mixins=None, on_unknown_code=None):
        return guard_helpers.evaluate(mixins, on_unknown_code)

    def _forget_lookup_fingerprints(self):
        """Make source_window's code unknown to the guard.

        The look-up's instance query: no other mixin relies on it.
        """
        ref = 'nova.objects.instance:InstanceList.get_by_filters'
        table = dict(fingerprint_table.FINGERPRINTS)
        table.pop(ref)
        self.useFixture(fixtures.MockPatchObject(
            fingerprint_table, 'FINGERPRINTS', table))

    def test_shipped_by_default(self):
        self.assertIn('source_window', list(fixes.NAMES))
        self.assertIn('source_window', assess.available_mixins())

    def test_default_mixins(self):
        skip_unless_source_window_applies(self)
        report = self._evaluate()
        self.assertEqual([], report.problems)
        self.assertEqual([], report.warnings)
        self.assertEqual([], report.not_applied)
        self.assertIsNotNone(report.manager)
        self.assertTrue(issubclass(report.manager,
                                   source_window.SourceWindowMixin))
        tracker = guard_helpers.composed_tracker(report.manager)
        self.assertTrue(issubclass(tracker,
                                   source_window.SourceWindowTracker))
        if nova_has_upstream_fix():
            # The family mixins that apply (21.1.2) do not change the
            # state: it is about bug 1879878.
            self.assertEqual(nrl_report.ALREADY_FIXED, report.state)
            self.assertEqual(['source_window'] + _family(decision.MATCH),
                             report.mixins)
            self.assertEqual(
                _fixed_here(report) + _family(decision.FIXED_UPSTREAM),
                report.fixed_upstream)
            # Upstream's tracker has its own _drop_move_claim, which its
            # drop_move_claim calls: the composed tracker keeps it.
            self.assertNotIn('_drop_move_claim', tracker.__dict__)
        else:
            self.assertEqual(nrl_report.PATCHED, report.state)
            self.assertEqual(
                _fixed_here(report) + ['source_window'] +
                _family(decision.MATCH), report.mixins)
            self.assertEqual(_family(decision.FIXED_UPSTREAM),
                             report.fixed_upstream)
            self.assertIn('_drop_move_claim', tracker.__dict__)

    def test_core_mixins_only(self):
        report = self._evaluate(CORE)
        if nova_has_upstream_fix():
            self.assertEqual(nrl_report.ALREADY_FIXED, report.state)
            self.assertEqual([], report.mixins)
            self.assertEqual(CORE, report.fixed_upstream)
            self.assertIsNone(report.manager)
        else:
            # The cross-cell fixes are missing where Nova has cross-cell
            # resize (Ussuri): not protected.
            missing = [m for m in _fixed_here(self._evaluate())
                       if m not in CORE]
            self.assertEqual(missing, report.missing)
            self.assertEqual(
                nrl_report.INCOMPLETE if missing else nrl_report.PATCHED,
                report.state)
            self.assertEqual(CORE, report.mixins)

    def test_unknown_code_on_fixed_nova_warns_and_stands_back(self):
        if not nova_has_upstream_fix():
            self.skipTest('the installed Nova lacks upstream fix')
        self._forget_lookup_fingerprints()
        report = self._evaluate()
        self.assertEqual(nrl_report.ALREADY_FIXED, report.state)
        self.assertEqual(_family(decision.MATCH), report.mixins)
        if not report.mixins:
            self.assertIsNone(report.manager)
        self.assertEqual([], report.problems)
        self.assertEqual(['source_window'], report.not_applied)
        self.assertEqual(2, len(report.warnings), report.warnings)
        self.assertIn('source_window not applied', report.warnings[0])
        self.assertIn('InstanceList.get_by_filters', report.warnings[0])
        # The second names the surveyed release nearest to this code.
        self.assertIn('nearest known release: Nova', report.warnings[1])

    def test_unknown_code_on_affected_nova_keeps_the_fix(self):
        # NOTE: source_window must never cost a host the 1879878 fix: it
        # is left out with a warning, as on a fixed Nova, whatever
        # on_unknown_code says.
        if nova_has_upstream_fix():
            self.skipTest('the installed Nova carries upstream fix')
        self._forget_lookup_fingerprints()
        for choice in ('fail', 'warn'):
            report = self._evaluate(on_unknown_code=choice)
            self.assertEqual(nrl_report.PATCHED, report.state)
            self.assertEqual([], report.problems)
            self.assertEqual(_fixed_here(report) + _family(decision.MATCH),
                             report.mixins)
            self.assertEqual(['source_window'], report.not_applied)
            self.assertEqual([], report.missing)
            self.assertEqual(2, len(report.warnings), report.warnings)
            self.assertIn('source_window not applied', report.warnings[0])
            self.assertIn('InstanceList.get_by_filters',
                          report.warnings[0])
            self.assertIn('nearest known release: Nova',
                          report.warnings[1])
            self.assertFalse(issubclass(report.manager,
                                        source_window.SourceWindowMixin))
            self.assertTrue(issubclass(report.manager,
                                       confirm.ConfirmUnderLockMixin))
            table = manage.format_check_table(report)
            self.assertIn('State:     patched', table)
            self.assertIn('Not applied: source_window', table)
            self.assertIn('Warnings:\n  - source_window not applied', table)

    def test_overriding_manager_leaves_the_extra_out(self):
        if nova_has_upstream_fix():
            self.skipTest('the installed Nova carries upstream fix')
        from nova.compute import manager
        from nova import service

        class Vendor(manager.ComputeManager):
            # relied on by source_window only
            def finish_revert_resize(self, *args, **kwargs):
                pass

        module = sys.modules[__name__]
        module.Vendor = Vendor
        self.addCleanup(delattr, module, 'Vendor')
        self.useFixture(fixtures.MockPatchObject(
            service, 'SERVICE_MANAGERS',
            dict(service.SERVICE_MANAGERS,
                 **{'nova-compute': __name__ + '.Vendor'})))
        report = self._evaluate(['revert', 'source_window'])
        # revert relies on finish_revert_resize too: refused, named once
        self.assertEqual(nrl_report.REFUSED, report.state)
        self.assertEqual(['Vendor overrides finish_revert_resize'],
                         report.problems)
        report = self._evaluate(['confirm', 'source_window'])
        self.assertEqual(nrl_report.INCOMPLETE, report.state)
        self.assertEqual(['confirm'], report.mixins)
        self.assertEqual(
            ['source_window not applied: Vendor overrides '
             'finish_revert_resize'], report.warnings)

    def test_core_fixes_configured_out_on_affected_nova(self):
        if nova_has_upstream_fix():
            self.skipTest('the installed Nova carries upstream fix')
        report = self._evaluate(['source_window'])
        report_all = self._evaluate()
        expected = [m for m in report_all.mixins if not fixes.is_extra(m)]
        self.assertEqual(nrl_report.INCOMPLETE, report.state)
        self.assertEqual(expected, report.missing)
        self.assertEqual(['source_window'], report.mixins)
        self.assertEqual([], report.problems)
        self.assertIsNotNone(report.manager)
        self.assertEqual(expected, report.to_dict()['missing'])
        table = manage.format_check_table(report)
        self.assertIn('State:     incomplete', table)
        self.assertIn('MISSING:   %s' % ', '.join(expected), table)
        self.assertIn('NOT PROTECTED against bug 1879878', table)

        report = self._evaluate(['confirm', 'source_window'])
        self.assertEqual(nrl_report.INCOMPLETE, report.state)
        self.assertEqual([m for m in expected if m != 'confirm'],
                         report.missing)
        self.assertEqual(['confirm', 'source_window'], report.mixins)

    def test_core_fixes_configured_out_on_fixed_nova(self):
        if not nova_has_upstream_fix():
            self.skipTest('the installed Nova lacks upstream fix')
        skip_unless_source_window_applies(self)
        report = self._evaluate(['source_window'])
        self.assertEqual(nrl_report.ALREADY_FIXED, report.state)
        self.assertEqual([], report.missing)
        self.assertEqual(['source_window'], report.mixins)

    def test_activate_registers_on_fixed_nova(self):
        from nova import service
        if not nova_has_upstream_fix():
            self.skipTest('the installed Nova lacks upstream fix')
        self.addCleanup(activation.deactivate)
        before = service.SERVICE_MANAGERS['nova-compute']
        report = activation.activate()
        self.assertEqual(nrl_report.ALREADY_FIXED, report.state)
        self.assertEqual(activation.MANAGER_PATH,
                         service.SERVICE_MANAGERS['nova-compute'])
        activation.deactivate()
        self.assertEqual(before, service.SERVICE_MANAGERS['nova-compute'])

    def test_report_and_check_table_say_what_applied(self):
        skip_unless_source_window_applies(self)
        report = self._evaluate()
        data = report.to_dict()
        self.assertEqual(report.mixins, data['mixins'])
        self.assertEqual(report.fixed_upstream, data['fixed_upstream'])
        self.assertEqual([], data['not_applied'])
        self.assertEqual([], data['warnings'])
        table = manage.format_check_table(report)
        self.assertIn('Applied:   %s' % ', '.join(report.mixins), table)
        self.assertIn('mixin source_window        match', table)
        if nova_has_upstream_fix():
            self.assertIn('State:     already-fixed', table)
            self.assertIn('Fixed upstream (standing aside): confirm, revert',
                          table)

    def test_check_table_shows_warnings(self):
        if not nova_has_upstream_fix():
            self.skipTest('the installed Nova lacks upstream fix')
        self._forget_lookup_fingerprints()
        table = manage.format_check_table(self._evaluate())
        self.assertIn('Applied:   %s' % (', '.join(_family(decision.MATCH)) or
                                         '-'), table)
        self.assertIn('Not applied: source_window', table)
        self.assertIn('Warnings:\n  - source_window not applied', table)
