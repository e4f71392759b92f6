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

"""The family mixin for bug 1896463 (``evacuate_under_lock``).

Runs the guard against the installed Nova, like test_family_mixins.
"""

import fixtures
from oslotest import base as test_base

from nova_revert_lock import fixes
from nova_revert_lock.guard import decision
from nova_revert_lock.guard import fingerprint_table
from nova_revert_lock.guard import fingerprints
from nova_revert_lock.guard import releases
from nova_revert_lock import locking
from nova_revert_lock.mixins import base
from nova_revert_lock.mixins import evacuate_under_lock
from nova_revert_lock.tests.unit import guard_helpers

NAME = 'evacuate_under_lock'
REBUILD = 'nova.compute.manager:ComputeManager.rebuild_instance'


def installed_has_fix():
    """From the version: the releases upstream's fix 7675964af8 is in.

    21.2.0, 22.1.0, 23.0.0 and later; Train has it in no release.
    """
    version = releases.installed_nova_version()
    key = tuple(int(p) for p in version.split('.')[:3])
    return key >= (21, 2, 0) and not ((22, 0, 0) <= key < (22, 1, 0))


class DeclarationsTest(test_base.BaseTestCase):

    def test_family_and_shipped(self):
        self.assertEqual(fixes.FAMILY, fixes.FIXES[NAME].kind)
        self.assertTrue(fixes.is_extra(NAME))
        self.assertNotEqual(fixes.BEYOND_UPSTREAM, fixes.FIXES[NAME].kind)
        self.assertIn(NAME, list(fixes.NAMES))
        self.assertEqual((NAME,), fixes.BUGS['1896463'])
        spec = evacuate_under_lock.SPEC
        self.assertTrue(spec.extra)
        self.assertEqual(sorted(fixes.FIXES[NAME].verified),
                         sorted(spec.implementations))

    def test_tracker_method_cannot_shadow_upstream(self):
        tracker = evacuate_under_lock.EvacuationTracker
        self.assertNotIn('finish_evacuation', vars(tracker))
        self.assertTrue(tracker._nrl_finish_evacuation._nrl_under_semaphore)

    def test_fix_recognised_where_upstream_has_it(self):
        self.assertTrue(fixes.FIXES[NAME].fixed_when)
        fixed = fingerprint_table.FIXED[NAME]
        for release in ('train-eol', '21.2.0', '21.2.4', '22.1.0', '23.0.0',
                        '31.3.1', '34.0.0'):
            self.assertIn(release, fixed)
        for release in ('20.0.0', '20.6.1', '21.0.0', '21.1.0', '21.1.2',
                        '22.0.0', '22.0.1'):
            self.assertNotIn(release, fixed)

    def test_support_matrix_outcomes(self):
        expected = {
            '20.0.0': decision.MATCH, '20.6.1': decision.MATCH,
            '21.0.0': decision.MATCH, '21.1.0': decision.MATCH,
            '21.1.2': decision.MATCH,
            'train-eol': decision.FIXED_UPSTREAM,
            '21.2.0': decision.FIXED_UPSTREAM,
            '22.1.0': decision.FIXED_UPSTREAM,
            '22.4.0': decision.FIXED_UPSTREAM,
            '31.3.1': decision.FIXED_UPSTREAM,
            # affected, no implementation verified on its code
            '22.0.0': decision.UNKNOWN,
        }
        found = {label: decision.check_release(NAME, label).outcome
                 for label in expected}
        self.assertEqual(expected, found)
        self.assertEqual(
            'train', decision.check_release(NAME, '20.6.1').series)
        self.assertEqual(
            'ussuri', decision.check_release(NAME, '21.1.2').series)


class ClosureWrapperTest(test_base.BaseTestCase):
    """oslo.messaging's expected_exceptions keeps no ``__wrapped__``."""

    def test_rebuild_instance_is_looked_through(self):
        from nova.compute import manager
        live = manager.ComputeManager.rebuild_instance
        inner = fingerprints.unwrap(live)
        self.assertEqual('rebuild_instance', inner.__name__)
        self.assertIn('def rebuild_instance',
                      fingerprints.live_source(live))

    def test_calls_sees_through_it(self):
        # Unpatched or fixed, the live rebuild_instance calls
        # _set_migration_status, which its wrapper does not.
        self.assertTrue(base.calls(REBUILD, '_set_migration_status'))
        self.assertFalse(base.calls(REBUILD, 'nrl-no-such-name'))


class LiveGuardTest(test_base.BaseTestCase):

    def _evaluate(self, mixin_names=None, on_unknown_code=None):
        return guard_helpers.evaluate(mixin_names, on_unknown_code)

    def test_outcome_on_installed_nova(self):
        check = evacuate_under_lock.SPEC.check()
        version = releases.installed_nova_version()
        if installed_has_fix():
            self.assertEqual(decision.FIXED_UPSTREAM, check.outcome)
        elif version.startswith('22.'):
            self.assertEqual(decision.UNKNOWN, check.outcome)
        else:
            self.assertEqual(decision.MATCH, check.outcome, check.problems)

    def test_unknown_code_is_left_out_with_a_warning(self):
        if installed_has_fix():
            self.skipTest('the installed Nova carries the fix for 1896463')
        before = self._evaluate()
        self.assertIn(NAME, before.mixins)
        table = dict(fingerprint_table.FINGERPRINTS)
        table.pop(REBUILD)
        self.useFixture(fixtures.MockPatchObject(
            fingerprint_table, 'FINGERPRINTS', table))
        report = self._evaluate(on_unknown_code='fail')
        self.assertEqual(before.state, report.state)
        self.assertEqual([m for m in before.mixins if m != NAME],
                         report.mixins)
        self.assertEqual([], report.problems)
        self.assertEqual([NAME], report.not_applied)
        self.assertIn('rebuild_instance', report.warnings[0])

    def test_alone_takes_the_trackers_own_lock(self):
        if installed_has_fix():
            self.skipTest('the installed Nova carries the fix for 1896463')
        report = self._evaluate([NAME])
        self.assertEqual([NAME], report.mixins)
        self.assertTrue(issubclass(
            report.manager, evacuate_under_lock.EvacuateUnderLockMixin))
        tracker = guard_helpers.composed_tracker(report.manager)
        self.assertEqual(
            repr(locking.tracker_lock(fixes.LOCK_REFS)),
            repr(locking.lock_of(tracker._nrl_finish_evacuation)))

    def test_stands_aside_on_fixed_nova(self):
        if not installed_has_fix():
            self.skipTest('the installed Nova lacks the fix for 1896463')
        report = self._evaluate()
        self.assertNotIn(NAME, report.mixins)
        self.assertIn(NAME, report.fixed_upstream)
        self.assertNotIn(NAME, report.not_applied)
