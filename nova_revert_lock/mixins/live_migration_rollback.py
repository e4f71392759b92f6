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

Nova bug 1894095, a sibling of bug 1879878, unfixed upstream (its
reproducer, 99850a0481, still carries its FIXMEs). Runs on the
destination host.

When a NUMA-aware live migration fails, the source's
``_rollback_live_migration`` calls ``drop_move_claim_at_destination``
(Train even before ``rollback_live_migration_at_destination``) and only
afterwards sets the migration's final status. A destination periodic
``update_available_resource`` in between still lists the migration in
progress and counts the dropped claim again.

The same drop also comes too late on the other rollback path: when the
destination's ``pre_live_migration`` fails, the source's
``_cleanup_pre_live_migration`` sets the migration ``error`` first and
rolls back afterwards. A destination periodic task in between no longer
lists the migration and rebuilds the node without its claim; upstream's
drop, given the flavor, then takes the claim away a second time: negative
usage, ``CPUUnpinningInvalid`` raised back to the source, whose rollback
stops half way and leaves the server in ``MIGRATING`` (every release,
master included).

The claim's fix writes nothing. In the critical section that drops the
claim:

- if the tracker no longer tracks the instance's migration, its claim is
  not counted any more (the periodic task that stopped listing the
  migration rebuilt the node without it): there is nothing left to drop,
  and the drop is skipped;
- otherwise the claim is dropped as upstream drops it, and the tracker
  remembers the live migration the instance's migration context names,
  leaving it uncounted until it is no longer listed.

The source's half (Ussuri on): the destination's
``rollback_live_migration_at_destination`` runs the driver's rollback
with the migration context applied to the instance (the destination's
NUMA topology, PCI devices and resources, for the driver to clean up
what it claimed there). When the libvirt driver cleans up a block
migration's instance directory it saves the instance, applied context
and all: the destination's pinning becomes the instance's. Upstream
puts the object's own values back afterwards and never saves them, so
the source's tracker books the destination's CPUs while the guest runs
on its own, and a new pinned guest can be given the guest's CPUs. Seen
on libvirt computes after 12 of 30 failed block migrations that claimed
other CPUs at the destination (whether the driver's save carries the
context depends on the order the rollback's steps reach the database).
The fix saves the instance's own values back right after upstream's
method returns (or raises).

Limits: a restart in the window counts the migration again, as plain
Nova does. Between the driver's save and the save back (one conductor
call) a source periodic task may read the destination's pinning for one
run; the next one reads the instance's own.
"""

from nova.compute import manager as nova_manager
from nova import exception
from oslo_log import log as logging
from oslo_utils import excutils

from nova_revert_lock import locking
from nova_revert_lock.mixins import base
from nova_revert_lock import sections

LOG = logging.getLogger(__name__)

LIVE_MIGRATION = 'live-migration'


class LiveMigrationRollbackTracker(object):
    """Tracker side: a claim dropped on rollback stays dropped."""

    #: nodename -> {migration id: instance uuid} of the dropped claims
    _nrl_dropped = None

    @locking.under_compute_resource_semaphore
    def drop_move_claim_at_live_migration_dest(self, context, instance,
                                               nodename):
        """Drop the claim of a rolled back live migration on its dest."""
        with sections.counted('live_migration_rollback'):
            if instance.uuid not in self.tracked_migrations:
                # NOTE: on the destination the claim is counted only
                # through the tracked migration (the instance's host is
                # the source's), and every periodic task rebuilds that
                # set from the migrations still in progress. Untracked,
                # the claim is already gone from the books: upstream's
                # drop, given the flavor, would take it away again.
                LOG.info('Not dropping the live migration claim on node '
                         '%s: the migration is no longer tracked there, '
                         'its usage was already dropped (the rollback '
                         'came after the migration left its in-progress '
                         'status)', nodename, instance=instance)
                return
            # NOTE: positional flavor: instance_type up to Ussuri.
            self._drop_move_claim(context, instance, nodename,
                                  instance.flavor)
            # NOTE: the drop has read the migration context; never load it
            # here: a failed load would make the done drop look failed.
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
        """Forget the dropped claims no longer listed; pass the list on."""
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


#: the fields Instance.mutated_migration_context sets from the context
CONTEXT_FIELDS = frozenset(('numa_topology', 'pci_requests', 'pci_devices',
                            'resources'))


class LiveMigrationRollbackMixin(object):
    """Manager side: ``drop_move_claim_at_destination`` under the lock.

    And the instance's own resources saved back after the rollback.
    """

    def rollback_live_migration_at_destination(self, context, instance,
                                               *args, **kwargs):
        """Upstream's; then save back what the driver saved applied."""
        try:
            result = super(LiveMigrationRollbackMixin,
                           self).rollback_live_migration_at_destination(
                               context, instance, *args, **kwargs)
        except Exception:
            with excutils.save_and_reraise_exception():
                self._nrl_save_own_resources(instance)
        self._nrl_save_own_resources(instance)
        return result

    def _nrl_save_own_resources(self, instance):
        """Save the instance's own values the context had replaced.

        Upstream's mutated_migration_context sets them back on the
        object on its way out, unsaved: they are the changed fields.
        Where the driver saved nothing under the applied context this
        writes what the database already holds.
        """
        changed = sorted(CONTEXT_FIELDS & instance.obj_what_changed())
        if not changed:
            return
        LOG.debug('Saving the instance\'s own %s after the live migration '
                  'rollback (the driver may have saved the destination\'s)',
                  ', '.join(changed), instance=instance)
        try:
            instance.save()
        except exception.InstanceNotFound:
            LOG.debug('The instance is gone: nothing to save back',
                      instance=instance)

    @nova_manager.wrap_exception()
    @nova_manager.wrap_instance_fault
    def drop_move_claim_at_destination(self, context, instance):
        """Upstream's; the tracker remembers the claim as it drops it."""
        nodename = self._get_nodename(instance)
        LOG.debug('Dropping live migration resource claim on destination '
                  'node %s', nodename, instance=instance)
        self.rt.drop_move_claim_at_live_migration_dest(
            context, instance, nodename)


# NOTE: one implementation: only the flavor parameter's name differs.
SPEC = base.MixinSpec('live_migration_rollback', base.Implementation(
    manager=LiveMigrationRollbackMixin, tracker=LiveMigrationRollbackTracker))
