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
``reverted``, reverts the migration context and only then drops the
new-flavor claim: a periodic ``update_available_resource`` in between no
longer counts the incoming migration, and the drop then removes its usage
a second time.

The fix, as upstream's ``drop_move_claim_at_dest``: the status change, the
new-flavor claim drop and the migration-context revert form one critical
section under ``COMPUTE_RESOURCE_SEMAPHORE``, in upstream's order (the
instance record last), so that a failure inside it never persists an
instance whose NUMA topology and pinning are not its host's.

What it replaces and relies on: ``fixes.FIXES['revert']``.
"""

from nova.compute import manager as nova_manager
from nova.compute import task_states
from nova.compute import utils as compute_utils
from nova import objects
from nova.objects import base as obj_base
from oslo_utils import excutils

from nova_revert_lock import locking
from nova_revert_lock.mixins import base
from nova_revert_lock import sections


class DestClaimDropTracker(object):
    """Tracker side: drop the destination claim as one critical section."""

    @locking.under_compute_resource_semaphore
    def drop_move_claim_at_dest(self, context, instance, migration):
        """Drop a move claim after reverting a resize or cold migration.

        :param context: security context
        :param instance: the Instance being reverted, task state
            ``resize_reverting``, ``new_flavor`` and ``migration_context``
            still set
        :param migration: its Migration record; set to ``reverted`` here
        """
        with sections.counted('revert'):
            # NOTE: the instance still has to be spawned again on the
            # source, but "reverted" is what tells the periodic task to
            # stop counting the migration on this host.
            migration.status = 'reverted'
            migration.save()
            # NOTE: upstream's order (and patches/*): drop the claim, then
            # revert and save the instance. If the drop fails, the record
            # still says what the host holds (the destination's pinning
            # and flavor). If the save fails, the record is put back (see
            # below) and the usage is gone from the books until the next
            # periodic task, which counts the unchanged record again. The
            # other order can persist an instance on this host with the
            # source's NUMA topology and pinning when the drop fails after
            # the save: every later periodic task would then count the
            # source's pCPU ids here.
            self._drop_move_claim(
                context, instance, migration.dest_node, instance.new_flavor,
                prefix='new_')
            # _drop_move_claim reads the new resources from the migration
            # context, so it is reverted last.
            instance.revert_migration_context()
            try:
                instance.save(
                    expected_task_state=[task_states.RESIZE_REVERTING])
            except Exception:
                with excutils.save_and_reraise_exception():
                    # NOTE: the caller's error handler saves the instance
                    # (vm_state ERROR) with every pending change: without
                    # this it would persist the source's NUMA topology and
                    # pinning on this host, which upstream does. Put back
                    # what this host holds; the next periodic task counts
                    # it again.
                    instance.apply_migration_context()


class RevertUnderLockMixin(object):
    """Manager side: ``revert_resize`` calling the locked helper."""

    @nova_manager.wrap_exception()
    @nova_manager.reverts_task_state
    @nova_manager.wrap_instance_event(prefix='compute')
    @nova_manager.errors_out_migration
    @nova_manager.wrap_instance_fault
    def revert_resize(self, context, instance, migration, request_spec=None):
        """Destroy the new instance on the destination host.

        Same steps, notifications and states as upstream's, except that the
        status change, migration-context revert and claim drop run as one
        critical section (``drop_move_claim_at_dest``).
        """
        # A revert is a resize back to the old size: send a usage event.
        compute_utils.notify_usage_exists(self.notifier, context, instance,
                                          self.host, current_period=True)

        with self._error_out_instance_on_exception(context, instance):
            # Tear down networks on the destination host.
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

            # Status change, migration-context revert and new-flavor claim
            # drop, as one critical section.
            self.rt.drop_move_claim_at_dest(context, instance, migration)

            # Cast back to the source host to finish the revert there.
            self.compute_rpcapi.finish_revert_resize(
                context, instance, migration, migration.source_compute,
                request_spec)

    def _nrl_network_migration(self, migration):
        """The migration as this release's network API expects it."""
        return migration


class TrainRevertUnderLockMixin(RevertUnderLockMixin):
    """Train passes the network API a primitive of the migration."""

    def _nrl_network_migration(self, migration):
        return obj_base.obj_to_primitive(migration)


SPEC = base.MixinSpec('revert', {
    'train': base.Implementation(
        manager=TrainRevertUnderLockMixin, tracker=DestClaimDropTracker),
    'ussuri': base.Implementation(
        manager=RevertUnderLockMixin, tracker=DestClaimDropTracker),
})
