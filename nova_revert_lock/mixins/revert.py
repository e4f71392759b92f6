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

"""Revert a resize or cold migration under the compute resource lock.

Runs on the destination host. Affected Nova sets the migration
``reverted`` and reverts the migration context before it drops the
new-flavor claim: a periodic ``update_available_resource`` in between no
longer counts the migration, and the drop removes its usage again.

The fix, as upstream's ``drop_move_claim_at_dest``: the status change, the
claim drop and the context revert form one critical section, in
upstream's order (the instance record last), so that a failure inside it
never persists an instance whose NUMA topology is not its host's.
"""

from nova.compute import manager as nova_manager
from nova.compute import task_states
from nova.compute import utils as compute_utils
from nova import objects
from oslo_utils import excutils

from nova_revert_lock import locking
from nova_revert_lock.mixins import base
from nova_revert_lock import sections


class DestClaimDropTracker(object):
    """Tracker side: drop the destination claim as one critical section."""

    @locking.under_compute_resource_semaphore
    def drop_move_claim_at_dest(self, context, instance, migration):
        with sections.counted('revert'):
            # NOTE: not spawned on the source yet, but "reverted" is what
            # stops the periodic task counting the migration here.
            migration.status = 'reverted'
            migration.save()
            # NOTE: upstream's order (and patches/*), see the module doc: a
            # failed drop leaves the record saying what the host holds.
            self._drop_move_claim(
                context, instance, migration.dest_node, instance.new_flavor,
                prefix='new_')
            # _drop_move_claim reads the migration context: revert it last.
            instance.revert_migration_context()
            try:
                instance.save(
                    expected_task_state=[task_states.RESIZE_REVERTING])
            except Exception:
                with excutils.save_and_reraise_exception():
                    # NOTE: the caller's error handler saves the instance
                    # (ERROR) with every pending change; upstream thus
                    # persists the source's pinning here. Put back ours.
                    instance.apply_migration_context()


class RevertUnderLockMixin(base.NetworkMigration):
    """Manager side: ``revert_resize`` calling the locked helper."""

    @nova_manager.wrap_exception()
    @nova_manager.reverts_task_state
    @nova_manager.wrap_instance_event(prefix='compute')
    @nova_manager.errors_out_migration
    @nova_manager.wrap_instance_fault
    def revert_resize(self, context, instance, migration, request_spec=None):
        """Upstream's, with ``drop_move_claim_at_dest`` as one section."""
        # A revert is a resize back to the old size: send a usage event.
        compute_utils.notify_usage_exists(self.notifier, context, instance,
                                          self.host, current_period=True)

        with self._error_out_instance_on_exception(context, instance):
            self.network_api.setup_networks_on_host(context, instance,
                                                    teardown=True)
            self.network_api.migrate_instance_start(
                context, instance, self._nrl_network_migration(migration))

            network_info = self.network_api.get_instance_nw_info(context,
                                                                 instance)
            bdms = objects.BlockDeviceMappingList.get_by_instance_uuid(
                context, instance.uuid)
            block_device_info = self._get_instance_block_device_info(
                context, instance, bdms=bdms)

            destroy_disks = not self._is_instance_storage_shared(
                context, instance, host=migration.source_compute)
            self.driver.destroy(context, instance, network_info,
                                block_device_info, destroy_disks)

            self._terminate_volume_connections(context, instance, bdms)

            self.rt.drop_move_claim_at_dest(context, instance, migration)

            self.compute_rpcapi.finish_revert_resize(
                context, instance, migration, migration.source_compute,
                request_spec)


class TrainRevertUnderLockMixin(base.TrainNetworkMigration,
                                RevertUnderLockMixin):
    """Train's network API takes a primitive of the migration."""


SPEC = base.MixinSpec('revert', {
    'train': base.Implementation(
        manager=TrainRevertUnderLockMixin, tracker=DestClaimDropTracker),
    'ussuri': base.Implementation(
        manager=RevertUnderLockMixin, tracker=DestClaimDropTracker),
})
