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

"""Do not count a rolled back live migration's dropped claim again.

Nova bug 1894095, a sibling of bug 1879878. Runs on the destination host.
No Nova release fixes it (upstream's reproducer, 99850a0481, still
carries its FIXMEs).

When a NUMA-aware live migration fails, the source's
``_rollback_live_migration`` calls ``drop_move_claim_at_destination`` on
the destination, which drops the destination's move claim (flavor, NUMA
topology and pinned pCPUs of the migration context). Only afterwards does
the source clear the instance's task state and migration context and set
the migration's final status (``error``, ``failed`` or ``cancelled``);
Train calls the drop even before ``rollback_live_migration_at_destination``
and its clean-up. The destination's ``update_available_resource`` in
between still lists the migration as in progress, the instance as live
migrating, and counts it again as an incoming migration: the claim it just
dropped comes back, pCPUs included, and stays until the destination's
next periodic task after the source's status save. With dedicated CPUs
the destination refuses, or pins elsewhere, what it has room for
meanwhile; a drop racing the re-count can unpin twice.

The fix writes nothing upstream does not write. The destination's
tracker remembers, in memory, the live migrations whose claim it dropped,
in the critical section that drops it, under ``COMPUTE_RESOURCE_SEMAPHORE``
taken exactly as the installed tracker takes it (it is not reentrant: the
section calls the unlocked ``_drop_move_claim``). Its periodic task, which
runs under the same lock, leaves those migrations uncounted, and forgets
each once the periodic task no longer lists it (the source has set its
final status). So no periodic task can count a migration whose claim is
gone, and the migration record stays the source's alone: whatever status
the source saves, on whatever path (a rollback, an RPC time-out that ends
in ``error``, an abort), it is the one a poller, ``live-migration-abort``
and ``_cleanup_incomplete_migrations`` see.

The drop itself needs no database call of its own: the migration is the
one the instance's migration context names, which the drop reads anyway.
Only an incoming live migration to this host is ever left uncounted.

What a compute-side fix can and cannot close
--------------------------------------------

* The destination's window is closed by the destination alone: the
  source need not run this package, and its order of steps (Train's or
  Ussuri's) does not matter. A source running it with an unpatched
  destination gains nothing here.
* The memory is the destination process's: a nova-compute restarted
  between the drop and the source's final status counts the migration
  again, as plain Nova does, until that status is saved.
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

What it replaces and relies on: ``fixes.FIXES['live_migration_rollback']``.
"""

from nova.compute import manager as nova_manager
from oslo_log import log as logging

from nova_revert_lock import locking
from nova_revert_lock.mixins import base
from nova_revert_lock import sections

LOG = logging.getLogger(__name__)

LIVE_MIGRATION = 'live-migration'


class LiveMigrationRollbackTracker(object):
    """Tracker side: a claim dropped on rollback stays dropped."""

    #: nodename -> {migration id: instance uuid}: the live migrations to
    #: this node whose claim a rollback dropped, until the periodic task
    #: no longer lists them. Read and written under the tracker's lock.
    _nrl_dropped = None

    @locking.under_compute_resource_semaphore
    def drop_move_claim_at_live_migration_dest(self, context, instance,
                                               nodename):
        """Drop the claim of a rolled back live migration on its dest.

        :param context: security context
        :param instance: the Instance, migration context still set
        :param nodename: this host's node the claim was made on
        """
        with sections.counted('live_migration_rollback'):
            # NOTE: positional flavor: Train and Ussuri call the parameter
            # instance_type, later releases flavor.
            self._drop_move_claim(context, instance, nodename,
                                  instance.flavor)
            # NOTE: the drop has read the migration context (its NUMA
            # topology and resources); never load it here: a failing
            # load would cost nothing but must not look like one.
            mig_ctxt = (instance.migration_context
                        if instance.obj_attr_is_set('migration_context')
                        else None)
            if mig_ctxt is None:
                LOG.debug('No migration context: the periodic task counts '
                          'the rolled back live migration as upstream '
                          'does', instance=instance)
                return
            if self._nrl_dropped is None:
                self._nrl_dropped = {}
            self._nrl_dropped.setdefault(nodename, {})[
                mig_ctxt.migration_id] = instance.uuid

    def _update_usage_from_migrations(self, context, migrations, nodename):
        """Forget the rolled back migrations the periodic no longer lists.

        Called by upstream's periodic body under the tracker's lock, with
        the list it read; the list is passed on untouched.
        """
        dropped = (self._nrl_dropped or {}).get(nodename)
        if dropped:
            listed = set(m.id for m in migrations)
            for migration_id in [i for i in dropped if i not in listed]:
                del dropped[migration_id]
        return super(LiveMigrationRollbackTracker,
                     self)._update_usage_from_migrations(
                         context, migrations, nodename)

    def _update_usage_from_migration(self, context, instance, migration,
                                     nodename):
        """Count a migration as upstream does, unless its claim is gone."""
        if self._nrl_claim_dropped(migration, nodename):
            LOG.debug('Not counting live migration %(migration)s on node '
                      '%(node)s: its claim was dropped by the rollback, '
                      'its final status is the source\'s to set',
                      {'migration': migration.uuid, 'node': nodename},
                      instance_uuid=migration.instance_uuid)
            return
        return super(LiveMigrationRollbackTracker,
                     self)._update_usage_from_migration(
                         context, instance, migration, nodename)

    def _nrl_claim_dropped(self, migration, nodename):
        dropped = (self._nrl_dropped or {}).get(nodename)
        return bool(dropped and
                    dropped.get(migration.id) == migration.instance_uuid and
                    migration.migration_type == LIVE_MIGRATION and
                    migration.dest_compute == self.host)


class LiveMigrationRollbackMixin(object):
    """Manager side: ``drop_move_claim_at_destination`` under the lock."""

    @nova_manager.wrap_exception()
    @nova_manager.wrap_instance_fault
    def drop_move_claim_at_destination(self, context, instance):
        """Called by the source of a live migration during rollback.

        Same as upstream's, except that the tracker remembers the dropped
        claim in the critical section that drops it.
        """
        nodename = self._get_nodename(instance)
        LOG.debug('Dropping live migration resource claim on destination '
                  'node %s', nodename, instance=instance)
        self.rt.drop_move_claim_at_live_migration_dest(
            context, instance, nodename)


# NOTE: one implementation for every series it was verified on: the
# method takes the same arguments and calls the same tracker method in all
# of them (only the flavor parameter's name differs), and the periodic
# task counts each migration through the same tracker methods.
SPEC = base.MixinSpec('live_migration_rollback', base.Implementation(
    manager=LiveMigrationRollbackMixin, tracker=LiveMigrationRollbackTracker))
