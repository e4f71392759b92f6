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

"""The unshelve_claim family mixin (bug 2025480) and the guard.

Runs the guard against the installed Nova, and the mixin's states and
stats against Nova's own ``vm_states``, ``task_states`` and ``Stats``.
"""

import fixtures
from oslotest import base as test_base

from nova_revert_lock import fixes
from nova_revert_lock.guard import decision
from nova_revert_lock.guard import fingerprint_table
from nova_revert_lock.guard import releases
from nova_revert_lock.mixins import unshelve_claim
from nova_revert_lock.tests.unit import guard_helpers

NAME = 'unshelve_claim'
USAGE = ('nova.compute.resource_tracker:'
         'ResourceTracker._update_usage_from_instances')


def installed_has_fix():
    """From the version: the releases upstream's fix f1dc4ec39b is in."""
    version = releases.installed_nova_version()
    key = tuple(int(p) for p in version.split('.')[:3])
    return (key >= (29, 0, 0) or
            (26, 2, 2) <= key < (27, 0, 0) or
            (27, 3, 0) <= key < (28, 0, 0) or
            (28, 1, 0) <= key < (29, 0, 0))


class DeclarationsTest(test_base.BaseTestCase):

    def test_family_and_shipped(self):
        self.assertEqual(fixes.FAMILY, fixes.FIXES[NAME].kind)
        self.assertTrue(fixes.is_extra(NAME))
        self.assertNotEqual(fixes.BEYOND_UPSTREAM, fixes.FIXES[NAME].kind)
        self.assertIn(NAME, list(fixes.NAMES))
        self.assertEqual(('unshelve_claim',), fixes.BUGS['2025480'])
        spec = unshelve_claim.SPEC
        self.assertTrue(spec.extra)
        self.assertFalse(spec.beyond_upstream)
        self.assertEqual(sorted(fixes.FIXES[NAME].verified),
                         sorted(spec.implementations))
        # A tracker-side fix: the manager's code stays upstream's.
        self.assertIsNone(spec.implementation('ussuri').manager)

    def test_takes_no_lock(self):
        # Its callers (the periodic task, the claim, update_usage) hold
        # COMPUTE_RESOURCE_SEMAPHORE, which is not reentrant.
        tracker = unshelve_claim.UnshelveClaimTracker
        for name, value in vars(tracker).items():
            self.assertFalse(getattr(value, '_nrl_under_semaphore', False),
                             name)

    def test_fix_recognised_where_upstream_has_it(self):
        self.assertTrue(fixes.FIXES[NAME].fixed_when)
        fixed = fingerprint_table.FIXED[NAME]
        for release in ('26.2.2', '27.3.0', '28.1.0', '29.0.0', '31.3.1',
                        '34.0.0'):
            self.assertIn(release, fixed)
        for release in ('20.6.1', '21.1.0', '21.1.2', '22.4.0', '26.2.1',
                        '27.2.0', '28.0.1'):
            self.assertNotIn(release, fixed)

    def test_support_matrix_outcomes(self):
        expected = {
            '20.6.1': decision.MATCH, '21.1.0': decision.MATCH,
            '21.1.2': decision.MATCH, '22.4.0': decision.MATCH,
            '23.1.0': decision.MATCH, '23.2.0': decision.MATCH,
            '24.0.0': decision.MATCH, '24.1.0': decision.MATCH,
            '26.2.2': decision.FIXED_UPSTREAM,
            '27.5.1': decision.FIXED_UPSTREAM,
            '31.3.1': decision.FIXED_UPSTREAM,
            # 25.3.0's code: 24.2.0 to 26.2.1
            '24.2.1': decision.MATCH, '25.0.0': decision.MATCH,
            '26.2.1': decision.MATCH,
            # known, affected, no implementation verified on its code
            '20.0.0': decision.UNKNOWN, '23.0.0': decision.UNKNOWN,
            '27.0.0': decision.UNKNOWN, '28.0.1': decision.UNKNOWN,
        }
        found = {label: decision.check_release(NAME, label).outcome
                 for label in expected}
        self.assertEqual(expected, found)
        for label, series in (('20.6.1', 'train'), ('21.1.2', 'ussuri'),
                              ('22.4.0', 'victoria'), ('23.2.0', 'wallaby'),
                              ('24.1.0', 'xena'), ('26.2.1', 'yoga')):
            self.assertEqual(series,
                             decision.check_release(NAME, label).series)


class StatesTest(test_base.BaseTestCase):
    """The states upstream's fix keeps tracking, with Nova's own names."""

    def test_allow_resource_removal(self):
        from nova.compute import task_states
        from nova.compute import vm_states
        allow = unshelve_claim.allow_resource_removal
        self.assertTrue(allow(vm_states.DELETED))
        self.assertTrue(allow(vm_states.SHELVED_OFFLOADED))
        self.assertTrue(allow(vm_states.SHELVED_OFFLOADED,
                              task_states.SHELVING_OFFLOADING))
        self.assertFalse(allow(vm_states.SHELVED_OFFLOADED,
                               task_states.SPAWNING))
        self.assertFalse(allow(vm_states.ACTIVE, task_states.SPAWNING))
        self.assertFalse(allow(vm_states.SHELVED))
        # Where upstream has it, it is the same answer.
        upstream = getattr(vm_states, 'allow_resource_removal', None)
        if upstream is not None:
            for vm_state in (vm_states.DELETED, vm_states.SHELVED_OFFLOADED,
                             vm_states.ACTIVE, vm_states.SHELVED):
                for task_state in (None, task_states.SPAWNING,
                                   task_states.SHELVING_OFFLOADING):
                    self.assertEqual(upstream(vm_state, task_state),
                                     allow(vm_state, task_state))

    def _instance(self, vm_state, task_state):
        return {'uuid': 'u1', 'vm_state': vm_state,
                'task_state': task_state, 'os_type': 'linux',
                'project_id': 'p1'}

    def test_stats_count_a_server_being_unshelved(self):
        from nova.compute import stats as compute_stats
        from nova.compute import task_states
        from nova.compute import vm_states
        stats = compute_stats.Stats()
        stats.__class__ = unshelve_claim.UnshelveStats
        stats.update_stats_for_instance(
            self._instance(vm_states.SHELVED_OFFLOADED, task_states.SPAWNING))
        self.assertEqual(1, stats.num_instances)
        self.assertEqual(1, stats.num_instances_for_project('p1'))
        self.assertEqual(1, stats['num_vm_%s' % vm_states.SHELVED_OFFLOADED])
        self.assertEqual(1, stats['num_task_%s' % task_states.SPAWNING])
        # Then ACTIVE: the same one server.
        stats.update_stats_for_instance(
            self._instance(vm_states.ACTIVE, None))
        self.assertEqual(1, stats.num_instances)
        self.assertEqual(0, stats['num_vm_%s' % vm_states.SHELVED_OFFLOADED])
        self.assertEqual(1, stats['num_vm_%s' % vm_states.ACTIVE])
        # Offloaded again: removed, as upstream removes it.
        stats.update_stats_for_instance(
            self._instance(vm_states.SHELVED_OFFLOADED, None))
        self.assertEqual(0, stats.num_instances)
        self.assertNotIn('u1', stats.states)

    def test_plain_stats_drop_it_where_affected(self):
        # The canary of the stats: affected Nova does not count it.
        from nova.compute import stats as compute_stats
        from nova.compute import task_states
        from nova.compute import vm_states
        if installed_has_fix():
            self.skipTest('the installed Nova carries the fix for 2025480')
        stats = compute_stats.Stats()
        stats.update_stats_for_instance(
            self._instance(vm_states.SHELVED_OFFLOADED, task_states.SPAWNING))
        self.assertEqual(0, stats.num_instances)


class LiveGuardTest(test_base.BaseTestCase):

    def _evaluate(self, mixin_names=None, on_unknown_code=None):
        return guard_helpers.evaluate(mixin_names, on_unknown_code)

    def test_outcome_on_installed_nova(self):
        check = unshelve_claim.SPEC.check()
        if installed_has_fix():
            self.assertEqual(decision.FIXED_UPSTREAM, check.outcome)
        else:
            self.assertEqual(decision.MATCH, check.outcome, check.problems)

    def test_unknown_code_is_left_out_with_a_warning(self):
        if installed_has_fix():
            self.skipTest('the installed Nova carries the fix for 2025480')
        before = self._evaluate()
        self.assertIn(NAME, before.mixins)
        table = dict(fingerprint_table.FINGERPRINTS)
        table.pop(USAGE)
        self.useFixture(fixtures.MockPatchObject(
            fingerprint_table, 'FINGERPRINTS', table))
        # Every mixin that looks at the forgotten function is left out
        # (incoming_migration_context extends it too), and only those.
        sharing = set(m for m, refs in fixes.FIXES.items()
                      if USAGE in refs.replaces + refs.relies_on)
        self.assertIn(NAME, sharing)
        for choice in ('fail', 'warn'):
            report = self._evaluate(on_unknown_code=choice)
            # Nothing else changes: the state, the other mixins.
            self.assertEqual(before.state, report.state)
            self.assertEqual([m for m in before.mixins if m not in sharing],
                             report.mixins)
            self.assertEqual([], report.problems)
            self.assertEqual(
                sorted(set(before.not_applied) |
                       (sharing & set(before.mixins))),
                sorted(report.not_applied))
            ours = [w for w in report.warnings
                    if w.startswith('%s not applied' % NAME)]
            self.assertTrue(ours, report.warnings)
            self.assertIn('_update_usage_from_instances', ours[0])
            self.assertFalse(issubclass(
                guard_helpers.composed_tracker(report.manager),
                unshelve_claim.UnshelveClaimTracker))

    def test_alone_on_affected_nova(self):
        if installed_has_fix():
            self.skipTest('the installed Nova carries the fix for 2025480')
        report = self._evaluate([NAME])
        self.assertEqual([NAME], report.mixins)
        tracker = guard_helpers.composed_tracker(report.manager)
        self.assertTrue(issubclass(tracker,
                                   unshelve_claim.UnshelveClaimTracker))

    def test_stands_aside_on_fixed_nova(self):
        if not installed_has_fix():
            self.skipTest('the installed Nova lacks the fix for 2025480')
        report = self._evaluate()
        self.assertNotIn(NAME, report.mixins)
        self.assertIn(NAME, report.fixed_upstream)
        self.assertNotIn(NAME, report.not_applied)
