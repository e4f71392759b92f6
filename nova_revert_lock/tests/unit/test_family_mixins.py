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

"""The family mixins: sibling races upstream fixed later.

Bug 1944759 (``resize_source_flavor``) and bugs 1953359 / 1952915
(``incoming_migration_context``).

They stand aside where the code carries upstream's fix, like the fixes
for bug 1879878, but are admitted like the mixins beyond upstream: one
that cannot apply is left out alone with a warning, and never costs the
host the other mixins. Runs the guard against the installed Nova.
"""

import sys

import fixtures
from oslotest import base as test_base

from nova_revert_lock import fixes
from nova_revert_lock.guard import decision
from nova_revert_lock.guard import fingerprint_table
from nova_revert_lock.guard import releases
from nova_revert_lock.mixins import incoming_migration_context
from nova_revert_lock.mixins import resize_source_flavor
from nova_revert_lock import report as nrl_report
from nova_revert_lock.tests.unit import guard_helpers

NAME = 'resize_source_flavor'
RESIZE_INSTANCE = 'nova.compute.manager:ComputeManager._resize_instance'


def installed_has_fix():
    """From the version: the releases upstream's fix b841e55321 is in."""
    version = releases.installed_nova_version()
    key = tuple(int(p) for p in version.split('.')[:3])
    return (key >= (22, 4, 0) and key[0] != 21 and
            not ((23, 0, 0) <= key < (23, 2, 0)) and
            not ((24, 0, 0) <= key < (24, 1, 0)))


class DeclarationsTest(test_base.BaseTestCase):

    def test_family_and_shipped(self):
        self.assertEqual(fixes.FAMILY, fixes.FIXES[NAME].kind)
        self.assertTrue(fixes.is_extra(NAME))
        self.assertNotEqual(fixes.BEYOND_UPSTREAM, fixes.FIXES[NAME].kind)
        self.assertIn(NAME, list(fixes.NAMES))
        spec = resize_source_flavor.SPEC
        self.assertTrue(spec.extra)
        self.assertFalse(spec.beyond_upstream)
        self.assertEqual(sorted(fixes.FIXES[NAME].verified),
                         sorted(spec.implementations))

    def test_fix_recognised_where_upstream_has_it(self):
        self.assertTrue(fixes.FIXES[NAME].fixed_when)
        fixed = fingerprint_table.FIXED[NAME]
        for release in ('22.4.0', '23.2.0', '24.1.0', '25.0.0', '31.3.1'):
            self.assertIn(release, fixed)
        for release in ('20.6.1', '21.1.0', '21.1.2', '21.2.4', '22.3.0',
                        '23.1.0', '24.0.0'):
            self.assertNotIn(release, fixed)

    def test_support_matrix_outcomes(self):
        expected = {
            '20.6.1': decision.MATCH, '21.1.0': decision.MATCH,
            '21.1.2': decision.MATCH, '22.3.0': decision.MATCH,
            '23.1.0': decision.MATCH, '24.0.0': decision.MATCH,
            '22.4.0': decision.FIXED_UPSTREAM,
            '23.2.0': decision.FIXED_UPSTREAM,
            '24.1.0': decision.FIXED_UPSTREAM,
            '31.3.1': decision.FIXED_UPSTREAM,
            # known, affected, no implementation verified on it (an older
            # _resize_instance)
            '20.0.1': decision.UNKNOWN,
        }
        found = {label: decision.check_release(NAME, label).outcome
                 for label in expected}
        self.assertEqual(expected, found)
        self.assertEqual(
            'train', decision.check_release(NAME, '20.6.1').series)
        self.assertEqual(
            'ussuri', decision.check_release(NAME, '21.1.2').series)
        for label, series in (('22.0.0', 'victoria'), ('23.0.0', 'wallaby'),
                              ('24.0.0', 'xena')):
            self.assertEqual(
                series, decision.check_release(NAME, label).series)


class LiveGuardTest(test_base.BaseTestCase):

    def _evaluate(self, mixin_names=None, on_unknown_code=None):
        return guard_helpers.evaluate(mixin_names, on_unknown_code)

    def test_outcome_on_installed_nova(self):
        check = resize_source_flavor.SPEC.check()
        if installed_has_fix():
            self.assertEqual(decision.FIXED_UPSTREAM, check.outcome)
        else:
            self.assertEqual(decision.MATCH, check.outcome, check.problems)

    def _forget_resize_instance(self):
        table = dict(fingerprint_table.FINGERPRINTS)
        table.pop(RESIZE_INSTANCE)
        self.useFixture(fixtures.MockPatchObject(
            fingerprint_table, 'FINGERPRINTS', table))

    def test_unknown_code_is_left_out_with_a_warning(self):
        if installed_has_fix():
            self.skipTest('the installed Nova carries the fix for 1944759')
        before = self._evaluate()
        self.assertIn(NAME, before.mixins)
        self._forget_resize_instance()
        for choice in ('fail', 'warn'):
            report = self._evaluate(on_unknown_code=choice)
            # Nothing else changes: the state, the other mixins.
            self.assertEqual(before.state, report.state)
            self.assertEqual([m for m in before.mixins if m != NAME],
                             report.mixins)
            self.assertEqual([], report.problems)
            self.assertEqual([], report.missing)
            # (Other extras may be left out on this release already.)
            self.assertEqual(sorted(before.not_applied + [NAME]),
                             sorted(report.not_applied))
            new = [w for w in report.warnings if w not in before.warnings]
            self.assertTrue(new)
            for warning in new:
                self.assertIn('%s not applied' % NAME, warning)
            self.assertIn('_resize_instance', new[0])
            # (Where it was the only mixin to apply, nothing is composed.)
            self.assertFalse(report.manager is not None and issubclass(
                report.manager, resize_source_flavor.SourceFlavorMixin))

    def test_overriding_manager_leaves_it_out(self):
        if installed_has_fix():
            self.skipTest('the installed Nova carries the fix for 1944759')
        from nova.compute import manager
        from nova import service

        class Vendor(manager.ComputeManager):
            def _resize_instance(self, *args, **kwargs):
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
        self.assertEqual(before.warnings +
                         ['%s not applied: Vendor overrides '
                          '_resize_instance' % NAME], report.warnings)

    def test_alone_on_affected_nova(self):
        if installed_has_fix():
            self.skipTest('the installed Nova carries the fix for 1944759')
        report = self._evaluate([NAME])
        self.assertEqual([NAME], report.mixins)
        self.assertTrue(issubclass(report.manager,
                                   resize_source_flavor.SourceFlavorMixin))
        full = self._evaluate()
        if full.state == nrl_report.PATCHED:
            # The 1879878 fixes this Nova needs are missing.
            self.assertEqual(nrl_report.INCOMPLETE, report.state)
        else:
            self.assertEqual(nrl_report.ALREADY_FIXED, report.state)

    def test_stands_aside_on_fixed_nova(self):
        if not installed_has_fix():
            self.skipTest('the installed Nova lacks the fix for 1944759')
        report = self._evaluate()
        self.assertNotIn(NAME, report.mixins)
        self.assertIn(NAME, report.fixed_upstream)
        self.assertNotIn(NAME, report.not_applied)


# -- bugs 1953359 / 1952915: incoming_migration_context ----------------------

INCOMING = 'incoming_migration_context'
USAGE_FROM_INSTANCES = ('nova.compute.resource_tracker:'
                        'ResourceTracker._update_usage_from_instances')


def installed_has_incoming_fix():
    """From the version: the releases upstream's fix 32c1044d86 is in."""
    version = releases.installed_nova_version()
    key = tuple(int(p) for p in version.split('.')[:3])
    return (key >= (22, 4, 0) and
            not ((23, 0, 0) <= key < (23, 2, 0)) and
            not ((24, 0, 0) <= key < (24, 1, 0)))


class IncomingDeclarationsTest(test_base.BaseTestCase):

    def test_family_and_shipped(self):
        self.assertEqual(fixes.FAMILY, fixes.FIXES[INCOMING].kind)
        self.assertNotEqual(fixes.BEYOND_UPSTREAM, fixes.FIXES[INCOMING].kind)
        self.assertIn(INCOMING, list(fixes.NAMES))
        self.assertEqual(('incoming_migration_context',),
                         fixes.BUGS['1953359'])
        spec = incoming_migration_context.SPEC
        self.assertTrue(spec.extra)
        self.assertEqual(sorted(fixes.FIXES[INCOMING].verified),
                         sorted(spec.implementations))

    def test_after_source_window_in_the_defaults(self):
        # Both are tracker mixins; the periodic body source_window runs
        # calls this mixin's _update_usage_from_instances. A mixin that
        # replaces that method without calling super must come later.
        shipped = list(fixes.NAMES)
        self.assertLess(shipped.index('source_window'),
                        shipped.index(INCOMING))

    def test_fix_recognised_where_upstream_has_it(self):
        self.assertTrue(fixes.FIXES[INCOMING].fixed_when)
        fixed = fingerprint_table.FIXED[INCOMING]
        for release in ('ussuri-eol', '22.4.0', '23.2.0', '24.1.0',
                        '25.0.0', '31.3.1', '34.0.0'):
            self.assertIn(release, fixed)
        for release in ('20.6.1', 'train-eol', '21.1.0', '21.1.2',
                        '21.2.4', '22.3.0', '23.1.0', '24.0.0'):
            self.assertNotIn(release, fixed)

    def test_support_matrix_outcomes(self):
        expected = {
            '20.0.0': decision.MATCH, '20.6.1': decision.MATCH,
            'train-eol': decision.MATCH, '21.1.0': decision.MATCH,
            '21.1.2': decision.MATCH, '21.2.4': decision.MATCH,
            'ussuri-eol': decision.FIXED_UPSTREAM,
            '22.4.0': decision.FIXED_UPSTREAM,
            '31.3.1': decision.FIXED_UPSTREAM,
            '22.0.0': decision.MATCH, '22.3.0': decision.MATCH,
            '23.0.0': decision.MATCH, '23.1.0': decision.MATCH,
            '24.0.0': decision.MATCH,
            '23.2.0': decision.FIXED_UPSTREAM,
            '24.1.0': decision.FIXED_UPSTREAM,
        }
        found = {label: decision.check_release(INCOMING, label).outcome
                 for label in expected}
        self.assertEqual(expected, found)
        # 23.x ship 24.0.0's code: the newest series verified on it.
        for label, series in (('22.3.0', 'victoria'), ('23.1.0', 'xena'),
                              ('24.0.0', 'xena')):
            self.assertEqual(
                series, decision.check_release(INCOMING, label).series)


class IncomingLiveGuardTest(LiveGuardTest):

    def test_outcome_on_installed_nova(self):
        check = incoming_migration_context.SPEC.check()
        if installed_has_incoming_fix():
            self.assertEqual(decision.FIXED_UPSTREAM, check.outcome)
        else:
            self.assertEqual(decision.MATCH, check.outcome, check.problems)

    def test_unknown_code_is_left_out_with_a_warning(self):
        if installed_has_incoming_fix():
            self.skipTest('the installed Nova carries the fix for 1953359')
        before = self._evaluate()
        self.assertIn(INCOMING, before.mixins)
        table = dict(fingerprint_table.FINGERPRINTS)
        table.pop(USAGE_FROM_INSTANCES)
        self.useFixture(fixtures.MockPatchObject(
            fingerprint_table, 'FINGERPRINTS', table))
        # Every mixin that looks at the forgotten function is left out
        # (unshelve_claim extends it too), and only those.
        sharing = set(m for m, refs in fixes.FIXES.items()
                      if USAGE_FROM_INSTANCES in refs.replaces +
                      refs.relies_on)
        self.assertIn(INCOMING, sharing)
        for choice in ('fail', 'warn'):
            report = self._evaluate(on_unknown_code=choice)
            self.assertEqual(before.state, report.state)
            self.assertEqual([m for m in before.mixins if m not in sharing],
                             report.mixins)
            self.assertEqual([], report.problems)
            self.assertEqual(
                sorted(set(before.not_applied) |
                       (sharing & set(before.mixins))),
                sorted(report.not_applied))
            ours = [w for w in report.warnings
                    if w.startswith('%s not applied' % INCOMING)]
            self.assertTrue(ours, report.warnings)
            self.assertIn('_update_usage_from_instances', ours[0])

    def test_stands_aside_on_fixed_nova(self):
        if not installed_has_incoming_fix():
            self.skipTest('the installed Nova lacks the fix for 1953359')
        report = self._evaluate()
        self.assertNotIn(INCOMING, report.mixins)
        self.assertIn(INCOMING, report.fixed_upstream)
        self.assertNotIn(INCOMING, report.not_applied)

    # The 1944759 cases do not concern this mixin.
    test_overriding_manager_leaves_it_out = None
    test_alone_on_affected_nova = None


class _Counted(object):
    """Stands in for upstream's counting and pairing."""

    def _update_usage_from_instances(self, context, instances, nodename):
        self.calls.append('count')
        self.counted = dict((i.uuid, i.numa_topology) for i in instances)
        return 'upstream'

    def _pair_instances_to_migrations(self, migrations, instance_by_uuid):
        self.calls.append('pair')
        self.paired = instance_by_uuid


class IncomingConditionTest(test_base.BaseTestCase):
    """Upstream's condition: a listed migration to this host/node.

    The migrations are the list upstream's periodic body read (Nova's
    query: 'reverted', 'confirmed'... are not listed; from Victoria on
    'error' ones are); the functional tests run the whole periodic task
    on Nova.
    """

    HOST, NODE = 'host1', 'node1'
    TRACKER = incoming_migration_context.IncomingMigrationContextTracker

    def setUp(self):
        super(IncomingConditionTest, self).setUp()
        from nova import objects
        objects.register_all()
        self.objects = objects

        class Tracker(self.TRACKER, _Counted):
            host = self.HOST

        self.tracker = Tracker()
        self.tracker.calls = []
        self.old = self._topology(0)
        self.new = self._topology(2)
        # The mixin reads nothing itself: upstream's body read the list.
        self.listings = [
            self.useFixture(fixtures.MockPatchObject(
                objects.MigrationList, name)).mock
            for name in ('get_in_progress_by_host_and_node',
                         'get_in_progress_and_error', 'get_by_filters')
            if hasattr(objects.MigrationList, name)]

    def tearDown(self):
        for listing in self.listings:
            listing.assert_not_called()
        super(IncomingConditionTest, self).tearDown()

    def _topology(self, first):
        objects = self.objects
        return objects.InstanceNUMATopology(cells=[
            objects.InstanceNUMACell(id=0, cpuset=set([0, 1]), memory=512,
                                     cpu_pinning={0: first, 1: first + 1})])

    def _instance(self, uuid, migration_id=None):
        objects = self.objects
        instance = objects.Instance(uuid=uuid, host=self.HOST,
                                    node=self.NODE, numa_topology=self.old,
                                    migration_context=None)
        if migration_id is not None:
            instance.migration_context = objects.MigrationContext(
                instance_uuid=uuid, migration_id=migration_id,
                old_numa_topology=self.old, new_numa_topology=self.new)
        return instance

    def _migration(self, uuid, source, dest, status='post-migrating',
                   dest_node=None, source_node=None):
        return self.objects.Migration(
            id=7, uuid='0e0b5d69-3a8f-4d3c-a2a6-3d7b0e7b4b5f',
            instance_uuid=uuid, source_compute=source, dest_compute=dest,
            source_node=source_node or source.replace('host', 'node'),
            dest_node=dest_node or dest.replace('host', 'node'),
            status=status)

    def _count(self, instances, migrations):
        """Upstream's periodic body: count, read the migrations, pair."""
        self.tracker.calls = []
        by_uuid = self.tracker._update_usage_from_instances(
            'ctxt', instances, self.NODE)
        # Returned as upstream's: every instance by uuid; nothing counted.
        self.assertEqual(dict((i.uuid, i) for i in instances), by_uuid)
        self.assertEqual([], self.tracker.calls)
        self.tracker._pair_instances_to_migrations(migrations, by_uuid)
        # Counted once the migrations are read, then paired, as upstream's
        # fix does.
        self.assertEqual(['count', 'pair'], self.tracker.calls)
        self.assertIs(by_uuid, self.tracker.paired)

    U = '2b0cc1c5-1f0a-4c6c-9f55-4d6f9e0b1a11'

    def test_incoming_gets_new_topology(self):
        # 'error': from Victoria on the list holds the failed moves too,
        # and upstream's fix there (22.4.0) applies their context.
        for status in ('post-migrating', 'finished', 'reverting', 'error'):
            instance = self._instance(self.U, 7)
            self._count([instance],
                        [self._migration(self.U, 'host0', 'host1', status)])
            self.assertEqual(self.new, self.tracker.counted[self.U])

    def test_same_host_resize_gets_new_topology(self):
        instance = self._instance(self.U, 7)
        self._count([instance],
                    [self._migration(self.U, 'host1', 'host1', 'finished')])
        self.assertEqual(self.new, self.tracker.counted[self.U])

    def test_outgoing_keeps_its_topology(self):
        # Still on the source (prep_resize done), or back on it during a
        # revert: the migration's destination is the other host.
        for status in ('migrating', 'reverting'):
            instance = self._instance(self.U, 7)
            self._count([instance],
                        [self._migration(self.U, 'host1', 'host2', status)])
            self.assertEqual(self.old, self.tracker.counted[self.U])

    def test_other_node_of_this_host(self):
        instance = self._instance(self.U, 7)
        self._count([instance], [self._migration(
            self.U, 'host0', 'host1', dest_node='node2')])
        self.assertEqual(self.old, self.tracker.counted[self.U])

    def test_no_in_progress_migration(self):
        # A reverted or confirmed migration is not listed: the context
        # left on the instance is not applied.
        instance = self._instance(self.U, 7)
        self._count([instance], [])
        self.assertEqual(self.old, self.tracker.counted[self.U])

    def test_not_one_of_the_node_instances(self):
        # An incoming migration whose instance the node's list did not
        # hold (not handed over yet): nothing to apply, nothing counted.
        self._count([], [self._migration(self.U, 'host0', 'host1')])
        self.assertEqual({}, self.tracker.counted)

    def test_pairing_without_counting_first(self):
        # Only the periodic body defers: a pairing on its own is upstream's.
        self.tracker._pair_instances_to_migrations([], {})
        self.assertEqual(['pair'], self.tracker.calls)
