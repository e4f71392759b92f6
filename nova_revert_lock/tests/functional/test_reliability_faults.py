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

"""Faults inside the new critical sections.

Every step of ``drop_move_claim_at_source`` (confirm) and
``drop_move_claim_at_dest`` (revert) is made to fail in turn. Each time:

* ``COMPUTE_RESOURCE_SEMAPHORE`` is free again: a periodic task on every
  host finishes within a bound (in one process every compute shares that
  lock, so a leaked lock would stall them all);
* the instance and the migration end as Nova itself leaves them: the same
  expected outcome is asserted with the extension and on plain Nova
  (``FaultsOnPlainNovaTest``), for the same fault at the same step;
* the next periodic gives every host the usage the database describes;
* an instance left in ERROR comes back ACTIVE with a hard reboot, with
  correct usage.

To add an operation (cross-cell, another release), add an
:class:`~.faults.Operation` and its points to ``SCENARIOS``.
"""

import os

import eventlet
from nova.tests.functional import integrated_helpers
import testscenarios

from nova_revert_lock import fixes
from nova_revert_lock import locking
from nova_revert_lock import report as nrl_report
from nova_revert_lock.tests.functional import base
from nova_revert_lock.tests.functional import faults

load_tests = testscenarios.load_tests_apply_scenarios


#: Where every failed confirm ends (plain Nova and the fix alike): the
#: instance stays on the destination, in ERROR with a fault, the migration
#: in "error"; the source's usage goes with the next periodic task, and
#: Nova removed the source allocation in placement anyway.
CONFIRM_ERROR = {
    'status': 'ERROR', 'task_state': None, 'host': 'host2', 'fault': True,
    'migration': 'error', 'vcpus': 2, 'stashed_flavors': (False, False),
    'migration_context': True,
    'usage_at_failure': {'host1': 0, 'host2': 2},
    'usage': {'host1': 0, 'host2': 2},
    'placement': {'host1': 0, 'host2': 2},
    'reboot': 'ok', 'after_reboot': {'host1': 0, 'host2': 2},
}

#: Where every failed revert ends: the instance stays on the destination
#: with the new flavor, in ERROR; the source allocation held by the
#: migration stays in placement (Nova does not remove it on a failed
#: revert, with or without the fix).
REVERT_ERROR = dict(
    CONFIRM_ERROR, stashed_flavors=(True, True),
    usage_at_failure={'host1': 1, 'host2': 2},
    placement={'host1': 1, 'host2': 2})

#: The claim was dropped before the failure: the destination's books miss
#: the instance left there in ERROR until the next periodic task.
DEST_DROPPED = {'usage_at_failure': {'host1': 1, 'host2': 0}}


def _points():
    confirm, revert = faults.CONFIRM, faults.REVERT
    return [
        # Nothing persisted: the source still counts the old flavor.
        (confirm, faults.FaultPoint(
            'migration-save-db', 'migration.save', faults.db_error,
            expected=dict(CONFIRM_ERROR,
                          usage_at_failure={'host1': 1, 'host2': 2}))),
        # "confirmed" written, the reply lost: nothing dropped yet either.
        (confirm, faults.FaultPoint(
            'migration-save-timeout', 'migration.save',
            faults.messaging_timeout, after=True,
            expected=dict(CONFIRM_ERROR,
                          usage_at_failure={'host1': 1, 'host2': 2}))),
        # Dropped in memory and in the database, placement not told.
        (confirm, faults.FaultPoint(
            'claim-drop-placement', 'placement', faults.placement_failure,
            expected=CONFIRM_ERROR)),
        (confirm, faults.FaultPoint(
            'drop-migration-context', 'drop_migration_context',
            faults.messaging_timeout, expected=CONFIRM_ERROR)),
        # Right after the section: everything in it is done.
        (confirm, faults.FaultPoint(
            'instance-save-task-state', 'instance.save',
            faults.task_state_error, inside=False,
            expected=dict(CONFIRM_ERROR, migration_context=False))),
        (revert, faults.FaultPoint(
            'migration-save-db', 'migration.save', faults.db_error,
            expected=REVERT_ERROR)),
        (revert, faults.FaultPoint(
            'migration-save-timeout', 'migration.save',
            faults.messaging_timeout, after=True, expected=REVERT_ERROR)),
        (revert, faults.FaultPoint(
            'claim-drop-placement', 'placement', faults.placement_failure,
            expected=dict(REVERT_ERROR, **DEST_DROPPED))),
        (revert, faults.FaultPoint(
            'revert-migration-context', 'revert_migration_context',
            faults.nova_error, expected=REVERT_ERROR,
            upstream=DEST_DROPPED)),
        # Nova's reverts_task_state keeps the task state on this error, so
        # the API refuses a hard reboot until the state is reset.
        (revert, faults.FaultPoint(
            'instance-save-task-state', 'instance.save',
            faults.task_state_error,
            expected=dict(REVERT_ERROR, task_state='resize_reverting',
                          reboot='reset-state'),
            upstream=DEST_DROPPED)),
    ]


SCENARIOS = [('%s-%s' % (op.name, point.name),
              {'operation': op, 'point': point})
             for op, point in _points()]


class _FaultScenarios(faults.OutcomeMixin):

    operation = None
    point = None

    def setUp(self):
        self.upstream_fixed = not base.nova_is_affected()
        super(_FaultScenarios, self).setUp()
        self.injector = faults.FaultInjector(self)

    def test_fault(self):
        op, point = self.operation, self.point
        server = self._boot(self.flavor_small, host='host1')
        server = self.resize(server, self.flavor_large)
        migration = self._migration(server['id'])
        errors_before = faults.stats_errors()

        self.injector.arm(point, op, server['id'])
        self.admin_api.post_server_action(server['id'], {op.action: None})
        self.wait_action_done(server['id'], op.action)
        self.assertEqual([point.name], self.injector.fired)
        # The tracker's own books before any periodic task mends them.
        usage_at_failure = self.usage()

        # The lock is free: every host's periodic finishes, and it puts
        # the books right.
        self.assert_lock_free()
        outcome = self.snapshot(server['id'])
        outcome['usage_at_failure'] = usage_at_failure
        outcome['usage'] = self.usage()
        self.assertEqual(self.truth(), outcome['usage'])
        outcome['placement'] = self.placement_vcpus()
        if outcome['status'] == 'ERROR':
            outcome['reboot'] = self.hard_reboot(server['id'])
            self.assert_lock_free()
            outcome['after_reboot'] = self.usage()
            self.assertEqual(self.truth(), outcome['after_reboot'])
        if os.environ.get('NRL_DUMP_OUTCOMES'):
            with open(os.environ['NRL_DUMP_OUTCOMES'], 'a') as f:
                f.write('%s %s %s %r\n' % (
                    type(self).__name__, op.name, point.name, outcome))
        if point.inside and self._patched():
            # The section ran (and counted its failure) on the faulted host.
            self.assertGreater(faults.stats_errors(), errors_before)
        self.assertEqual(op.faulted_host(migration),
                         {'confirm': 'host1', 'revert': 'host2'}[op.name])
        # The revert section runs upstream's steps in upstream's order,
        # so with the extension a revert ends as it does on a Nova that
        # carries upstream's fix.
        self.assertEqual(point.expected_on(
            self.upstream_fixed or (op.name == 'revert' and
                                    self._patched())), outcome)

    def _patched(self):
        return (self.activation_report is not None and
                self.activation_report.state == nrl_report.PATCHED)


class FaultsWithExtensionTest(base.ExtensionFixtureMixin, base.RaceMixin,
                              _FaultScenarios,
                              integrated_helpers.ProviderUsageBaseTestCase):
    """The fix: a fault inside the critical section stalls nothing."""

    scenarios = SCENARIOS


class FaultsOnPlainNovaTest(base.ExtensionFixtureMixin, base.RaceMixin,
                            _FaultScenarios,
                            integrated_helpers.ProviderUsageBaseTestCase):
    """The reference: plain Nova, same fault at the same step."""

    extension = False
    scenarios = SCENARIOS


class LockCheckCanary(base.ExtensionFixtureMixin, base.RaceMixin,
                      faults.OutcomeMixin,
                      integrated_helpers.ProviderUsageBaseTestCase):
    """The lock check above would see a lock left held."""

    def test_held_lock_is_seen(self):
        lock = locking.tracker_lock(fixes.LOCK_REFS)
        holder = eventlet.spawn(lock.synchronized()(eventlet.sleep), 3)
        eventlet.sleep(0)   # let it take the lock
        self.assertEqual(sorted(self.hosts),
                         sorted(self.bounded_periodics(bound=1)))
        holder.wait()
        for gt in self.stuck_periodics:
            gt.wait()
        self.assert_lock_free()
