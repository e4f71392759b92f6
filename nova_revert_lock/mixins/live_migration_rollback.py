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

"""End a rolled back live migration where its destination claim is dropped.

Nova bug 1894095, a sibling of bug 1879878. Runs on the destination host.
No Nova release fixes it (upstream's reproducer, 99850a0481, still
carries its FIXMEs).

When a NUMA-aware live migration fails, the source's
``_rollback_live_migration`` asks the destination to clean up, then calls
``drop_move_claim_at_destination`` there, which drops the destination's
move claim (flavor, NUMA topology and pinned pCPUs of the migration
context). Only afterwards does the source clear the instance's task state
and migration context and set the migration's final status (``error``
or ``failed``). The destination's ``update_available_resource`` in
between still lists the migration as in progress, the instance as live
migrating, and counts it again as an incoming migration: the claim it
just dropped comes back, pCPUs included, and stays until the
destination's next periodic task after the source's status save. With
dedicated CPUs the destination refuses, or pins elsewhere, what it has
room for meanwhile; a drop racing the re-count can unpin twice.

The fix, under the same lock discipline as upstream's fix for bug
1879878: the destination sets the migration ``failed`` and drops the
claim as one critical section, under ``COMPUTE_RESOURCE_SEMAPHORE`` taken
exactly as the installed tracker takes it (it is not reentrant: the
section calls the unlocked ``_drop_move_claim``). ``failed`` is what
upstream itself sets once a rollback has cleaned up (the default of
``_rollback_live_migration`` from Victoria on) and no release lists it
as in progress, so no periodic task can see the migration in progress
without its claim. The source's later status save still writes the
status it chooses (``error``, ``failed``, ``cancelled``): the final
record is upstream's. Only a migration the destination can identify is
changed: the one the instance's migration context names, a live
migration to this host, not already in a final state; otherwise the drop
runs alone, under the lock, as upstream's.

What a compute-side fix can and cannot close
--------------------------------------------

* The destination's window is closed by the destination alone: the
  source need not run this package. A source running it with an
  unpatched destination gains nothing here; the source cannot close the
  window by setting the status before the call either, because the
  destination would then be left with a window of the other kind
  (not in progress, claim still held), which makes its drop take the
  usage away twice, as in bug 1879878.
* The source half of the bug (Ussuri and later) is not closed. The
  destination's ``rollback_live_migration_at_destination`` runs the
  driver's clean-up with the migration context applied to the instance,
  and the libvirt driver saves the instance there: until the source's
  rollback saves it again, the instance record holds the destination's
  NUMA topology and pinning, and a source periodic task in between
  counts the destination's pCPU ids on the source until its next run.
  Closing it means replacing ``rollback_live_migration_at_destination``
  (a larger method, different in every series) to keep the applied
  context out of the driver's save; this mixin does not.
* Live migrations that are not NUMA-aware (no ``drop_move_claim_at_
  destination`` call; e.g. a source or conductor pinned to RPC below 5.3)
  hold no destination claim through the migration context and are not
  touched.

Upstream functions (``mixins.REFS['live_migration_rollback']``)
---------------------------------------------------------------

Replaces:

* ``ComputeManager.drop_move_claim_at_destination``

Relies on:

* ``ComputeManager._rollback_live_migration``
* ``ResourceTracker.drop_move_claim``
* ``ResourceTracker._update_usage_from_migrations``
* ``ResourceTracker._update_usage_from_migration``
"""

from nova.compute import manager as nova_manager
from nova import exception
from nova import objects
from oslo_log import log as logging

from nova_revert_lock import locking
from nova_revert_lock.mixins import base
from nova_revert_lock import stats

LOG = logging.getLogger(__name__)

#: The status the destination sets: rolled back and cleaned up.
ROLLED_BACK = 'failed'

#: Statuses no release's periodic task counts as in progress for a live
#: migration, or that another step set on purpose: left as they are.
#: ('error' is listed from Victoria on, but it is final for the rollback.)
FINAL_STATUSES = frozenset(['confirmed', 'reverted', 'error', 'failed',
                            'completed', 'cancelled', 'done'])


class LiveMigrationRollbackTracker(object):
    """Tracker side: status and claim drop as one critical section."""

    @locking.under_compute_resource_semaphore
    def drop_move_claim_at_live_migration_dest(self, context, instance,
                                               nodename, migration=None):
        """Drop the claim of a rolled back live migration on its dest.

        :param context: security context
        :param instance: the Instance, migration context still set
        :param nodename: this host's node the claim was made on
        :param migration: its Migration record, set ``failed`` here, or
            None to drop the claim alone
        """
        with stats.critical_section('live_migration_rollback'):
            if migration is not None:
                migration.status = ROLLED_BACK
                migration.save()
            # NOTE: positional flavor: Train and Ussuri call the parameter
            # instance_type, later releases flavor.
            self._drop_move_claim(context, instance, nodename,
                                  instance.flavor)


class LiveMigrationRollbackMixin(object):
    """Manager side: ``drop_move_claim_at_destination`` under the lock."""

    @nova_manager.wrap_exception()
    @nova_manager.wrap_instance_fault
    def drop_move_claim_at_destination(self, context, instance):
        """Called by the source of a live migration during rollback.

        Same as upstream's, except that the migration is set ``failed``
        in the critical section that drops the claim.
        """
        nodename = self._get_nodename(instance)
        migration = self._nrl_rolled_back_migration(context, instance)
        LOG.debug('Dropping live migration resource claim on destination '
                  'node %s', nodename, instance=instance)
        self.rt.drop_move_claim_at_live_migration_dest(
            context, instance, nodename, migration)

    def _nrl_rolled_back_migration(self, context, instance):
        """The live migration to this host being rolled back, or None."""
        mig_ctxt = instance.migration_context
        if mig_ctxt is None:
            return None
        try:
            migration = objects.Migration.get_by_id(
                context, mig_ctxt.migration_id)
        except exception.MigrationNotFound:
            return None
        if (migration.migration_type != 'live-migration' or
                migration.instance_uuid != instance.uuid or
                migration.dest_compute != self.host or
                migration.status in FINAL_STATUSES):
            return None
        return migration


_IMPLEMENTATION = base.Implementation(
    manager=LiveMigrationRollbackMixin, tracker=LiveMigrationRollbackTracker)

SPEC = base.MixinSpec(
    name='live_migration_rollback',
    summary='live migration rollback (destination): migration failed and '
            'claim drop under COMPUTE_RESOURCE_SEMAPHORE (bug 1894095)',
    # NOTE: one implementation for every series in mixins.VERIFIED: the
    # method takes the same arguments and calls the same tracker method
    # in all of them (only the flavor parameter's name differs).
    implementations={'train': _IMPLEMENTATION, 'ussuri': _IMPLEMENTATION,
                     'victoria': _IMPLEMENTATION,
                     'wallaby': _IMPLEMENTATION, 'xena': _IMPLEMENTATION,
                     '2025.1': _IMPLEMENTATION})
