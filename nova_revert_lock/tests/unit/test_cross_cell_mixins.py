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

"""The cross-cell mixins' specs, composing mixins that share a tracker,
and the counters that keep same-cell and cross-cell confirms apart.
"""

from unittest import mock

import testtools

from nova_revert_lock import composition
from nova_revert_lock import fixes
from nova_revert_lock.guard import decision
from nova_revert_lock import locking
from nova_revert_lock.mixins import base
from nova_revert_lock.mixins import confirm
from nova_revert_lock.mixins import cross_cell_confirm
from nova_revert_lock.mixins import cross_cell_revert
from nova_revert_lock.mixins import revert
from nova_revert_lock import sections
from nova_revert_lock.tests.unit import guard_helpers


class NotApplicableTest(testtools.TestCase):

    def _spec(self, applies_from):
        return base.MixinSpec(
            name='cross_cell_confirm', summary='test',
            implementations={}, fixed_upstream=lambda: False,
            applies_from=applies_from)

    def test_absent_feature_stands_aside(self):
        check = self._spec(
            ('nova.compute.manager:ComputeManager.no_such_method',
             '99.0.0')).check()
        self.assertEqual(decision.NOT_APPLICABLE, check.outcome)
        self.assertEqual([], check.problems)
        self.assertEqual([], check.functions)
        self.assertIn('ComputeManager.no_such_method', check.note)
        self.assertIn('99.0.0', check.note)

    def test_absent_module_stands_aside(self):
        check = self._spec(('nova.no_such_module:Thing.method',
                            '99.0.0')).check()
        self.assertEqual(decision.NOT_APPLICABLE, check.outcome)

    def test_present_feature_is_checked(self):
        check = self._spec(
            ('nova.compute.manager:ComputeManager.revert_resize',
             '1.0.0')).check(table={})
        # No implementations and an empty table: unknown, not n/a.
        self.assertEqual(decision.UNKNOWN, check.outcome)
        self.assertNotEqual([], check.problems)


class SpecsTest(testtools.TestCase):

    def test_shipped_and_referenced(self):
        for spec in (cross_cell_confirm.SPEC, cross_cell_revert.SPEC):
            self.assertIn(spec.name, list(fixes.NAMES))
            self.assertIn(spec.name, fixes.FIXES)
            self.assertEqual(['ussuri'], list(spec.implementations))
            self.assertIsNotNone(spec.applies_from)

    def test_tracker_mixins_are_the_core_ones(self):
        self.assertIs(confirm.SourceClaimDropTracker,
                      cross_cell_confirm.SPEC.implementation(
                          'ussuri').tracker)
        self.assertIs(revert.DestClaimDropTracker,
                      cross_cell_revert.SPEC.implementation(
                          'ussuri').tracker)


class ComposeTest(testtools.TestCase):

    def test_shared_tracker_mixin_appears_once(self):
        from nova.compute import manager as nova_manager
        from nova.compute import resource_tracker
        lock = locking.tracker_lock(fixes.LOCK_REFS)
        specs = [confirm.SPEC, revert.SPEC, cross_cell_confirm.SPEC,
                 cross_cell_revert.SPEC]
        applied = [(s, decision.MixinCheck(s.name, decision.MATCH, [],
                                           series='ussuri')) for s in specs]
        manager = composition.compose(nova_manager.ComputeManager,
                                      applied, lock)
        tracker = guard_helpers.composed_tracker(manager)
        self.assertEqual(
            (composition.PeriodicObserver, confirm.SourceClaimDropTracker,
             revert.DestClaimDropTracker, resource_tracker.ResourceTracker),
            tracker.__bases__)
        # The cross-cell manager mixins come after the same-cell ones.
        self.assertEqual(
            [cross_cell_confirm.CrossCellConfirmUnderLockMixin,
             cross_cell_revert.CrossCellRevertUnderLockMixin],
            list(manager.__bases__[2:4]))
        # Both locked helpers take the tracker's own lock.
        for name in ('drop_move_claim_at_source', 'drop_move_claim_at_dest'):
            self.assertEqual(repr(lock),
                             repr(locking.lock_of(tracker.__dict__[name])))


class SectionKindTest(testtools.TestCase):
    """Same-cell and cross-cell confirms are counted apart."""

    def setUp(self):
        super(SectionKindTest, self).setUp()
        sections.COUNTERS.reset()
        self.addCleanup(sections.COUNTERS.reset)

    def _confirm(self, cross_cell):
        from nova import objects
        objects.register_all()
        migration = objects.Migration(
            status='confirming', source_node='node1',
            cross_cell_move=cross_cell)
        tracker = mock.Mock(spec=['_drop_move_claim'])
        instance = mock.Mock()
        with mock.patch.object(migration, 'save'):
            confirm.SourceClaimDropTracker.drop_move_claim_at_source(
                tracker, mock.sentinel.context, instance, migration)
        self.assertEqual('confirmed', migration.status)
        tracker._drop_move_claim.assert_called_once_with(
            mock.sentinel.context, instance, 'node1', instance.old_flavor,
            prefix='old_')
        return sections.snapshot()['critical_sections_by_kind']

    def test_same_cell_confirm(self):
        self.assertEqual({'confirm': 1}, self._confirm(False))

    def test_cross_cell_confirm(self):
        self.assertEqual({'cross_cell_confirm': 1}, self._confirm(True))

    def test_record_without_the_field(self):
        from nova import objects
        objects.register_all()
        migration = objects.Migration(status='confirming')
        self.assertEqual('confirm', confirm._section_kind(migration))
