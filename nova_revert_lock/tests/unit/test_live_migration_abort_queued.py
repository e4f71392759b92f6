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

"""The live_migration_abort_queued family mixin (bugs 1949808, 1960412).

Applies where ``live_migration_abort`` is the code 20.0.0 to 24.1.0
ship, stands aside where upstream's fix (219520d9ce) is in the code, and
is left out alone, with a warning, on code it does not know. Runs the
guard against the installed Nova.
"""

import textwrap

import fixtures
from oslotest import base as test_base

from nova_revert_lock import fixes
from nova_revert_lock.guard import decision
from nova_revert_lock.guard import fingerprint_table
from nova_revert_lock.guard import recognise
from nova_revert_lock.mixins import live_migration_abort_queued
from nova_revert_lock.tests.unit import guard_helpers

NAME = 'live_migration_abort_queued'
ABORT = 'nova.compute.manager:ComputeManager.live_migration_abort'

#: the shape of upstream's fixed cancelled branch (219520d9ce), and of
#: the branch before it, for the recogniser
FIXED = textwrap.dedent('''
    class ComputeManager(object):
        def live_migration_abort(self, context, instance, migration_id):
            try:
                migration, future = (
                    self._waiting_live_migrations.pop(instance.uuid))
                if future and future.cancel():
                    self._revert_allocation(context, instance, migration)
                    try:
                        self.network_api.setup_networks_on_host(
                            context, instance, host=migration.dest_compute,
                            teardown=True)
                    except Exception:
                        pass
                    instance.task_state = None
                    instance.save(expected_task_state=['migrating'])
                    self._set_migration_status(migration, 'cancelled')
            except KeyError:
                pass
    ''')
#: the shape of the fix of patches/ (train, ussuri, ussuri-21.2.4): the
#: clean-up in a helper of the cancelled branch
IN_HELPER = textwrap.dedent('''
    class ComputeManager(object):
        def _revert_queued_live_migration(self, context, instance,
                                          migration):
            self._revert_allocation(context, instance, migration)
            if utils.is_neutron():
                try:
                    self.network_api.setup_networks_on_host(
                        context, instance, host=migration.dest_compute,
                        teardown=True)
                except Exception:
                    pass
            instance.task_state = None
            instance.save(expected_task_state=['migrating'])

        def live_migration_abort(self, context, instance, migration_id):
            try:
                migration, future = (
                    self._waiting_live_migrations.pop(instance.uuid))
                if future and future.cancel():
                    self._revert_queued_live_migration(
                        context, instance, migration)
                    self._set_migration_status(migration, 'cancelled')
            except KeyError:
                pass
    ''')
OPEN = textwrap.dedent('''
    class ComputeManager(object):
        def live_migration_abort(self, context, instance, migration_id):
            try:
                migration, future = (
                    self._waiting_live_migrations.pop(instance.uuid))
                if future and future.cancel():
                    self._set_migration_status(migration, 'cancelled')
            except KeyError:
                pass
    ''')


class DeclarationsTest(test_base.BaseTestCase):

    def test_family_shipped_and_reported(self):
        self.assertEqual(fixes.FAMILY, fixes.FIXES[NAME].kind)
        self.assertTrue(fixes.is_extra(NAME))
        self.assertIn(NAME, list(fixes.NAMES))
        self.assertEqual((NAME,), fixes.BUGS['1949808'])
        spec = live_migration_abort_queued.SPEC
        self.assertTrue(spec.extra)
        self.assertEqual(sorted(fixes.FIXES[NAME].verified),
                         sorted(spec.implementations))

    def test_upstream_fix_recognised_whole(self):
        parts = fixes.FIXES[NAME].fixed_when
        fixed = recognise.Recogniser(recognise.TextSources(
            {'nova.compute.manager': FIXED}))
        self.assertTrue(fixed.fixed(parts))
        open_ = recognise.Recogniser(recognise.TextSources(
            {'nova.compute.manager': OPEN}))
        self.assertFalse(open_.fixed(parts))
        # Half of it (the allocation only) is not the fix.
        half = OPEN.replace(
            "self._set_migration_status(migration, 'cancelled')",
            "self._revert_allocation(context, instance, migration)\n"
            "                self._set_migration_status(migration, "
            "'cancelled')")
        half_fixed = recognise.Recogniser(recognise.TextSources(
            {'nova.compute.manager': half}))
        self.assertFalse(half_fixed.fixed(parts))

    def test_fix_in_a_helper_recognised(self):
        parts = fixes.FIXES[NAME].fixed_when
        in_helper = recognise.Recogniser(recognise.TextSources(
            {'nova.compute.manager': IN_HELPER}))
        self.assertTrue(in_helper.fixed(parts))

    def test_support_matrix_outcomes(self):
        expected = {
            # affected: one live_migration_abort from 20.0.0 to 24.1.0
            '20.0.0': decision.MATCH, '20.6.1': decision.MATCH,
            'train-eol': decision.MATCH, '21.1.0': decision.MATCH,
            '21.2.4': decision.MATCH, 'ussuri-eol': decision.MATCH,
            '22.4.0': decision.MATCH, 'victoria-eol': decision.MATCH,
            '23.2.2': decision.MATCH, '24.1.0': decision.MATCH,
            # upstream's fix: 24.1.1, the wallaby-eol tip, 25.0.0 on
            '24.1.1': decision.FIXED_UPSTREAM,
            'wallaby-eol': decision.FIXED_UPSTREAM,
            'xena-eol': decision.FIXED_UPSTREAM,
            '25.0.0': decision.FIXED_UPSTREAM,
            '31.3.1': decision.FIXED_UPSTREAM,
            '34.0.0': decision.FIXED_UPSTREAM,
            # the builds of patches/ (train, ussuri, ussuri-21.2.4): the
            # fix in a helper of live_migration_abort
            '20.6.1+patches': decision.FIXED_UPSTREAM,
            '21.1.0+patches': decision.FIXED_UPSTREAM,
            '21.2.4+patches': decision.FIXED_UPSTREAM,
        }
        found = {label: decision.check_release(NAME, label).outcome
                 for label in expected}
        self.assertEqual(expected, found)

    def test_table_says_where_the_fix_is(self):
        fixed = fingerprint_table.FIXED[NAME]
        for label in ('24.1.1', 'wallaby-eol', 'xena-eol', '25.0.0',
                      '20.6.1+patches', '21.1.0+patches', '21.2.4+patches'):
            self.assertIn(label, fixed)
        for label in ('24.1.0', '23.2.2', 'victoria-eol', '20.6.1'):
            self.assertNotIn(label, fixed)


def _own_warnings(report, before):
    return [w for w in report.warnings if w not in before.warnings]


class LiveGuardTest(test_base.BaseTestCase):

    def _applies_here(self):
        return (live_migration_abort_queued.SPEC.check().outcome ==
                decision.MATCH)

    def test_installed_nova(self):
        check = live_migration_abort_queued.SPEC.check()
        self.assertIn(check.outcome, (decision.MATCH,
                                      decision.FIXED_UPSTREAM,
                                      decision.UNKNOWN))
        self.assertEqual(
            check.outcome == decision.FIXED_UPSTREAM,
            live_migration_abort_queued.SPEC.fixed_upstream())

    def test_unknown_code_is_left_out_with_a_warning(self):
        if not self._applies_here():
            self.skipTest('not applied on the installed Nova')
        before = guard_helpers.evaluate()
        self.assertIn(NAME, before.mixins)
        table = dict(fingerprint_table.FINGERPRINTS)
        table.pop(ABORT)
        self.useFixture(fixtures.MockPatchObject(
            fingerprint_table, 'FINGERPRINTS', table))
        report = guard_helpers.evaluate(on_unknown_code='fail')
        self.assertEqual(before.state, report.state)
        self.assertEqual([m for m in before.mixins if m != NAME],
                         report.mixins)
        self.assertEqual([], report.problems)
        mine = _own_warnings(report, before)
        self.assertTrue(mine)
        self.assertIn('%s not applied' % NAME, mine[0])
        self.assertIn('live_migration_abort', mine[0])
        self.assertEqual('open', report.to_dict()['bugs']['1949808'])

    def test_alone(self):
        if not self._applies_here():
            self.skipTest('not applied on the installed Nova')
        report = guard_helpers.evaluate([NAME])
        self.assertEqual([NAME], report.mixins)
        self.assertTrue(issubclass(
            report.manager,
            live_migration_abort_queued.LiveMigrationAbortQueuedMixin))
