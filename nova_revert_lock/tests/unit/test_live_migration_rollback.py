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

"""The live_migration_rollback family mixin (bug 1894095).

No release fixes the bug, so the mixin stands aside only on a build
with a stable series of patches/: it applies where its code is known and
verified, and is left out alone, with a warning, where it is not. Runs
the guard against the installed Nova.
"""

import re
import sys

import fixtures
from oslotest import base as test_base

from nova_revert_lock import fixes
from nova_revert_lock.guard import decision
from nova_revert_lock.guard import fingerprint_table
from nova_revert_lock.mixins import live_migration_rollback
from nova_revert_lock.tests.unit import guard_helpers

NAME = 'live_migration_rollback'
DROP_AT_DEST = ('nova.compute.manager:'
                'ComputeManager.drop_move_claim_at_destination')


def _tracker_class():
    from nova.compute import resource_tracker
    return resource_tracker.ResourceTracker


class DeclarationsTest(test_base.BaseTestCase):

    def test_family_shipped_and_reported(self):
        self.assertEqual(fixes.FAMILY, fixes.FIXES[NAME].kind)
        self.assertTrue(fixes.is_extra(NAME))
        self.assertNotEqual(fixes.BEYOND_UPSTREAM, fixes.FIXES[NAME].kind)
        self.assertIn(NAME, list(fixes.NAMES))
        self.assertEqual((NAME,), fixes.BUGS['1894095'])
        spec = live_migration_rollback.SPEC
        self.assertTrue(spec.extra)
        self.assertEqual(sorted(fixes.FIXES[NAME].verified),
                         sorted(spec.implementations))

    def test_no_upstream_fix_and_no_feature_bound(self):
        # Upstream never fixed it (reproducer 99850a0481 only): only the
        # builds of this project's patch series carry the fix the guard
        # recognises (Train, Ussuri and the stable series from 2025.1 on).
        # NUMA live migration exists in every release this package knows.
        self.assertIsNone(fixes.FIXES[NAME].upstream)
        self.assertTrue(fixes.FIXES[NAME].fixed_when)
        fixed = fingerprint_table.FIXED[NAME]
        for label in fixed:
            self.assertTrue(label.endswith('+patches'), label)
        for label in ('20.6.1+patches', '21.1.0+patches', '21.2.4+patches',
                      '31.3.1+patches'):
            self.assertIn(label, fixed)
        self.assertIsNone(fixes.FIXES[NAME].applies_from)

    def test_support_matrix_outcomes(self):
        expected = {
            # verified, and releases that ship the same code
            '21.0.0': decision.MATCH, '21.1.0': decision.MATCH,
            '21.1.2': decision.MATCH, 'ussuri-eol': decision.MATCH,
            '31.3.1': decision.MATCH, '34.0.0': decision.MATCH,
            '20.4.1': decision.MATCH, '20.6.1': decision.MATCH,
            'train-eol': decision.MATCH,
            '22.0.0': decision.MATCH, '22.3.0': decision.MATCH,
            '22.4.0': decision.MATCH, 'victoria-eol': decision.MATCH,
            '23.0.0': decision.MATCH, '23.1.0': decision.MATCH,
            'wallaby-eol': decision.MATCH, '24.0.0': decision.MATCH,
            # the code 25.3.0 and 26.2.2 ship (Yoga to 2024.1)
            '24.2.1': decision.MATCH, '25.0.1': decision.MATCH,
            '26.2.2': decision.MATCH, '27.5.1': decision.MATCH,
            '29.2.1': decision.MATCH, '30.0.0': decision.MATCH,
            # affected, known, not verified
            '20.4.0': decision.UNKNOWN,
        }
        found = {label: decision.check_release(NAME, label).outcome
                 for label in expected}
        self.assertEqual(expected, found)
        self.assertEqual(
            'train', decision.check_release(NAME, 'train-eol').series)
        self.assertEqual(
            'ussuri', decision.check_release(NAME, '21.1.0').series)
        self.assertEqual(
            '2025.1', decision.check_release(NAME, '31.3.1').series)
        # 34.0.0's rollback_live_migration_at_destination is its own
        self.assertEqual(
            '2026.2', decision.check_release(NAME, '34.0.0').series)
        self.assertEqual(
            'zed', decision.check_release(NAME, '29.2.1').series)
        for label, series in (('22.3.0', 'victoria'), ('23.1.0', 'wallaby'),
                              ('24.0.0', 'xena')):
            self.assertEqual(
                series, decision.check_release(NAME, label).series)

    def test_writes_no_migration(self):
        # The record is the source's: the mixin neither reads nor saves
        # it (the functional tests show it through the conductor). It
        # saves the instance once: back what its migration context had
        # replaced.
        import inspect
        source = inspect.getsource(live_migration_rollback)
        self.assertEqual(['instance.save('],
                         re.findall(r'\w+\.save\(', source))
        self.assertNotIn('Migration.get_by', source)


class WaitDegradesTest(test_base.BaseTestCase):
    """A rollback outlasting the drop's wait: a degraded period."""

    def setUp(self):
        super(WaitDegradesTest, self).setUp()
        from unittest import mock

        from nova_revert_lock import sections
        self.sections = sections
        sections.COUNTERS.reset()
        self.addCleanup(sections.COUNTERS.reset)
        self.useFixture(fixtures.MockPatchObject(
            live_migration_rollback, '_wait_timeout', return_value=0.01))
        self.manager = mock.Mock(spec=['_nrl_rollbacks_running',
                                       '_get_nodename', 'rt'])
        self.rollbacks = live_migration_rollback.Rollbacks()
        self.manager._nrl_rollbacks_running.return_value = self.rollbacks
        self.manager._get_nodename.return_value = 'n1'
        self.instance = mock.Mock(uuid='u1')
        self.log = self.useFixture(fixtures.MockPatchObject(
            live_migration_rollback, 'LOG')).mock

    def _drop(self):
        live_migration_rollback.LiveMigrationRollbackMixin.\
            drop_move_claim_at_destination(self.manager, 'ctxt',
                                           self.instance)
        self.manager.rt.drop_move_claim_at_live_migration_dest.\
            assert_called_with('ctxt', self.instance, 'n1')

    def test_timeout_starts_then_in_time_ends(self):
        self.rollbacks.start('u1')
        self._drop()
        self._drop()
        (period,) = self.sections.snapshot()['degraded']
        self.assertEqual(('live_migration_rollback', 'n1', 2),
                         (period['fix'], period['node'], period['count']))
        self.assertIn('RollbackOutlastedWait: the rollback of instance u1 '
                      'still ran after', period['reason'])
        self.assertEqual(2, self.log.warning.call_count)
        self.rollbacks.end('u1')
        self._drop()
        snapshot = self.sections.snapshot()
        self.assertEqual([], snapshot['degraded'])
        self.assertEqual({'live_migration_rollback': 1},
                         snapshot['degraded_ended'])
        self.log.info.assert_called_once()

    def test_in_time_records_nothing(self):
        self._drop()
        self.assertEqual([], self.sections.snapshot()['degraded'])
        self.log.warning.assert_not_called()
        self.log.info.assert_not_called()


def _own_warnings(report, before):
    """The warnings of ``report`` that ``before`` did not have."""
    return [w for w in report.warnings if w not in before.warnings]


class LiveGuardTest(test_base.BaseTestCase):

    def _evaluate(self, mixin_names=None, on_unknown_code=None):
        return guard_helpers.evaluate(mixin_names, on_unknown_code)

    def _applies_here(self):
        return live_migration_rollback.SPEC.check().outcome == decision.MATCH

    def _forget_drop_at_dest(self):
        table = dict(fingerprint_table.FINGERPRINTS)
        table.pop(DROP_AT_DEST)
        self.useFixture(fixtures.MockPatchObject(
            fingerprint_table, 'FINGERPRINTS', table))

    def test_never_fixed_upstream_on_installed_nova(self):
        check = live_migration_rollback.SPEC.check()
        if check.outcome == decision.FIXED_UPSTREAM:
            # Only a build of a stable series of patches/ (tools/
            # verify-patches) carries the fix.
            self.assertIn('drop_live_migration_claim_at_dest',
                          vars(_tracker_class()))
        else:
            self.assertIn(check.outcome, (decision.MATCH, decision.UNKNOWN))

    def test_unknown_code_is_left_out_with_a_warning(self):
        if not self._applies_here():
            self.skipTest('not verified on the installed Nova')
        before = self._evaluate()
        self.assertIn(NAME, before.mixins)
        self._forget_drop_at_dest()
        for choice in ('fail', 'warn'):
            report = self._evaluate(on_unknown_code=choice)
            # Nothing else changes: the state, the other mixins.
            self.assertEqual(before.state, report.state)
            self.assertEqual([m for m in before.mixins if m != NAME],
                             report.mixins)
            self.assertEqual([], report.problems)
            self.assertEqual([], report.missing)
            # NOTE: other family mixins may be left out on the installed
            # Nova already; only this one is added.
            self.assertEqual(sorted(before.not_applied + [NAME]),
                             sorted(report.not_applied))
            mine = _own_warnings(report, before)
            self.assertTrue(mine)
            for warning in mine:
                self.assertIn('%s not applied' % NAME, warning)
            self.assertIn('drop_move_claim_at_destination', mine[0])
            self.assertFalse(issubclass(
                report.manager,
                live_migration_rollback.LiveMigrationRollbackMixin))
            self.assertEqual('open', report.to_dict()['bugs']['1894095'])

    def test_unverified_nova_leaves_it_out_alone(self):
        if self._applies_here():
            self.skipTest('verified on the installed Nova')
        if live_migration_rollback.SPEC.fixed_upstream():
            self.skipTest('the installed Nova carries the fix')
        report = self._evaluate()
        self.assertNotIn(NAME, report.mixins)
        self.assertIn(NAME, report.not_applied)
        self.assertEqual([], report.problems)
        self.assertTrue(any('%s not applied' % NAME in w
                            for w in report.warnings))

    def test_overriding_manager_leaves_it_out(self):
        if not self._applies_here():
            self.skipTest('not verified on the installed Nova')
        from nova.compute import manager
        from nova import service

        class Vendor(manager.ComputeManager):
            def drop_move_claim_at_destination(self, *args, **kwargs):
                pass

        module = sys.modules[__name__]
        module.Vendor = Vendor
        self.addCleanup(delattr, module, 'Vendor')
        before = self._evaluate()
        self.useFixture(fixtures.MockPatchObject(
            service, 'SERVICE_MANAGERS',
            dict(service.SERVICE_MANAGERS,
                 **{'nova-compute': __name__ + '.Vendor'})))
        report = self._evaluate()
        self.assertEqual(before.state, report.state)
        self.assertEqual([m for m in before.mixins if m != NAME],
                         report.mixins)
        self.assertEqual(['%s not applied: Vendor overrides '
                          'drop_move_claim_at_destination' % NAME],
                         _own_warnings(report, before))

    def test_alone(self):
        if not self._applies_here():
            self.skipTest('not verified on the installed Nova')
        report = self._evaluate([NAME])
        self.assertEqual([NAME], report.mixins)
        self.assertTrue(issubclass(
            report.manager,
            live_migration_rollback.LiveMigrationRollbackMixin))
        tracker = guard_helpers.composed_tracker(report.manager)
        self.assertTrue(issubclass(
            tracker, live_migration_rollback.LiveMigrationRollbackTracker))
