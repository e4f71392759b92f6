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

"""Revert a cross-cell resize under the compute resource lock.

The conductor's ``RevertResizeTask`` calls the destination (target cell),
hard-deletes the target cell's records, then calls the source. Affected
Nova (21.0.0 - 21.1.0), on the destination, reverts and saves the
migration context before it drops the new-flavor claim, never marking the
migration ``reverted``: a periodic ``update_available_resource`` in
between counts the old resources, and the drop then removes the new ones
(with pinned CPUs: ``CPUUnpinningInvalid``, the revert fails).

The fix, as upstream's (21.1.1): on the destination, the tracker's
``drop_move_claim_at_dest``; on the source, the stashed flavors and
``old_vm_state``, which the tracker reads while the migration is in
progress, are kept until the revert there ends, success or not.
"""

from nova.compute import manager as nova_manager
from nova.compute import task_states
from nova.compute import vm_states
from nova import exception
from nova import utils
from oslo_log import log as logging
from oslo_utils import excutils

from nova_revert_lock.mixins import base
from nova_revert_lock.mixins import revert

LOG = logging.getLogger(__name__)


class CrossCellRevertUnderLockMixin(object):
    """Manager side of the cross-cell revert, on both hosts."""

    def _revert_snapshot_based_resize_at_dest(
            self, ctxt, instance, migration):
        """Clean the destination (target cell) up on a cross-cell revert."""
        network_info = self.network_api.get_instance_nw_info(ctxt, instance)
        bdms = instance.get_bdms()
        block_device_info = self._get_instance_block_device_info(
            ctxt, instance, bdms=bdms)
        LOG.debug('Destroying guest from destination hypervisor including '
                  'disks.', instance=instance)
        self.driver.destroy(
            ctxt, instance, network_info, block_device_info=block_device_info)

        # NOTE: activate the source's port bindings before deleting ours,
        # or the ports end up unbound. migrate_instance_start activates
        # those of migration.dest_compute, hence the temporary swap.
        with utils.temporary_mutation(
                migration, dest_compute=migration.source_compute):
            LOG.debug('Activating port bindings for source host %s.',
                      migration.source_compute, instance=instance)
            self.network_api.migrate_instance_start(
                ctxt, instance, migration)

        LOG.debug('Deleting port bindings for target host %s.',
                  self.host, instance=instance)
        try:
            self.network_api.cleanup_instance_network_on_host(
                ctxt, instance, self.host)
        except exception.PortBindingDeletionFailed as e:
            # NOTE: the guest is gone; a stale binding must not stop us.
            LOG.error('Failed to delete port bindings from target host. '
                      'Error: %s', e, instance=instance)

        LOG.debug('Deleting volume attachments for target host.',
                  instance=instance)
        self._delete_volume_attachments(ctxt, bdms)

        self.rt.drop_move_claim_at_dest(ctxt, instance, migration)

    @nova_manager.wrap_exception()
    @nova_manager.reverts_task_state
    @nova_manager.wrap_instance_event(prefix='compute')
    @nova_manager.errors_out_migration
    @nova_manager.wrap_instance_fault
    def finish_revert_snapshot_based_resize_at_source(
            self, ctxt, instance, migration):
        """Upstream's, clearing the stashed flavors last, success or not."""

        @utils.synchronized(instance.uuid)
        def do_revert():
            LOG.info('Reverting resize on source host.', instance=instance)
            with self._error_out_instance_on_exception(ctxt, instance):
                self._finish_revert_snapshot_based_resize_at_source(
                    ctxt, instance, migration)

        try:
            do_revert()
        finally:
            base.delete_stashed_flavor_info(instance)

        try:
            self._update_scheduler_instance_info(ctxt, instance)
        except Exception as e:
            LOG.warning('finish_revert_snapshot_based_resize_at_source failed '
                        'during post-processing. Error: %s', e,
                        instance=instance)

    def _finish_revert_snapshot_based_resize_at_source(
            self, ctxt, instance, migration):
        # NOTE: read, not popped: it is cleared with the flavors, last.
        old_vm_state = instance.system_metadata.get(
            'old_vm_state', vm_states.ACTIVE)

        # NOTE: unlike 21.1.0's, keeps the stashed flavors.
        self._set_instance_info(instance, instance.old_flavor)
        instance.host = migration.source_compute
        instance.node = migration.source_node
        instance.save(expected_task_state=[task_states.RESIZE_REVERTING])

        try:
            self._revert_allocation(ctxt, instance, migration)
        except exception.AllocationMoveFailed:
            # NOTE: go on; the operator can mend the allocations later.
            LOG.error('Reverting allocation in placement for migration '
                      '%(migration_uuid)s failed. You may need to manually '
                      'remove the allocations for the migration consumer '
                      'against the source node resource provider '
                      '%(source_provider)s and the allocations for the '
                      'instance consumer against the destination node '
                      'resource provider %(dest_provider)s and then run the '
                      '"nova-manage placement heal_allocations" command.',
                      {'instance_uuid': instance.uuid,
                       'migration_uuid': migration.uuid,
                       'source_provider': migration.source_node,
                       'dest_provider': migration.dest_node},
                      instance=instance)

        bdms = instance.get_bdms()
        LOG.debug('Updating volume attachments for target host %s.',
                  self.host, instance=instance)
        self._update_volume_attachments(ctxt, instance, bdms)

        LOG.debug('Updating port bindings for source host %s.',
                  self.host, instance=instance)
        self._finish_revert_resize_network_migrate_finish(
            ctxt, instance, migration, provider_mappings=None)
        network_info = self.network_api.get_instance_nw_info(ctxt, instance)

        # NOTE: the prep step destroyed the guest but kept its disks, so
        # the driver's finish_revert_migration, not spawn, brings it back.
        block_device_info = self._get_instance_block_device_info(
            ctxt, instance, bdms=bdms)
        power_on = old_vm_state == vm_states.ACTIVE
        driver_error = None
        try:
            self.driver.finish_revert_migration(
                ctxt, instance, network_info, migration,
                block_device_info=block_device_info, power_on=power_on)
        except Exception as e:
            driver_error = e
            with excutils.save_and_reraise_exception(logger=LOG):
                LOG.error('An error occurred during finish_revert_migration. '
                          'The instance may need to be hard rebooted. Error: '
                          '%s', driver_error, instance=instance)
        else:
            instance.drop_migration_context()
            vm_state = vm_states.ACTIVE if power_on else vm_states.STOPPED
            self._update_instance_after_spawn(
                ctxt, instance, vm_state=vm_state)
            instance.save(expected_task_state=[task_states.RESIZE_REVERTING])
        finally:
            # NOTE: the instance is back on this host whatever the driver
            # did, so its volumes must not stay in a pending state.
            LOG.debug('Completing volume attachments for instance on source '
                      'host.', instance=instance)
            with excutils.save_and_reraise_exception(
                    reraise=driver_error is not None, logger=LOG):
                self._complete_volume_attachments(ctxt, bdms)

        migration.status = 'reverted'
        migration.save()


SPEC = base.MixinSpec('cross_cell_revert', base.Implementation(
    manager=CrossCellRevertUnderLockMixin,
    tracker=revert.DestClaimDropTracker))
