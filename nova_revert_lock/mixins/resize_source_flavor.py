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

"""Stash the old flavor on the source when it hands the instance over.

Nova bug 1944759, a sibling of bug 1879878. Affected Nova's source
``_resize_instance`` saves ``instance.host`` and ``node`` pointing at the
destination, whose ``finish_resize`` alone stashes ``old_flavor``. The
source counts the instance by ``instance.host`` and an outgoing migration
from ``old_flavor``, so a periodic task in between counts nothing: the
usage and pinning are lost until the confirm, whose claim drop takes
them away again (``CPUUnpinningInvalid``).

The fix, as upstream's (b841e55321, Nova 22.4.0): the save that moves
``instance.host`` also sets ``old_flavor``; one save writes both, so no
lock is needed. The destination stashes the same flavor again.
"""

from nova.compute import manager as nova_manager
from nova.compute import task_states
from nova import objects
from nova.objects import fields

from nova_revert_lock.mixins import base


class SourceFlavorMixin(base.NetworkMigration):
    """Manager side: ``_resize_instance`` stashing ``old_flavor``."""

    def _resize_instance(self, context, instance, image,
                         migration, instance_type, clean_shutdown,
                         request_spec):
        """Upstream's, saving ``old_flavor`` with the new host and node."""
        # NOTE: the vm_state to restore if the driver rolls back: a
        # STOPPED server must not come back ACTIVE.
        instance_state = instance.vm_state
        with self._error_out_instance_on_exception(
                context, instance, instance_state=instance_state), \
                nova_manager.errors_out_migration_ctxt(migration):
            network_info = self.network_api.get_instance_nw_info(context,
                                                                 instance)

            migration.status = 'migrating'
            migration.save()

            instance.task_state = task_states.RESIZE_MIGRATING
            instance.save(expected_task_state=task_states.RESIZE_PREP)

            bdms = objects.BlockDeviceMappingList.get_by_instance_uuid(
                context, instance.uuid)
            self._send_resize_instance_notifications(
                context, instance, bdms, network_info,
                fields.NotificationPhase.START)

            block_device_info = self._get_instance_block_device_info(
                context, instance, bdms=bdms)

            timeout, retry_interval = self._nrl_power_off_values(
                context, instance, clean_shutdown)
            disk_info = self.driver.migrate_disk_and_power_off(
                context, instance, migration.dest_host,
                instance_type, network_info,
                block_device_info,
                timeout, retry_interval)

            self._terminate_volume_connections(context, instance, bdms)

            self.network_api.migrate_instance_start(
                context, instance, self._nrl_network_migration(migration))

            migration.status = 'post-migrating'
            migration.save()

            instance.host = migration.dest_compute
            instance.node = migration.dest_node
            # NOTE: from here on the source counts it as an outgoing
            # migration, which needs old_flavor: stash it in this save.
            instance.old_flavor = instance.flavor
            instance.task_state = task_states.RESIZE_MIGRATED
            instance.save(expected_task_state=task_states.RESIZE_MIGRATING)

            self.compute_rpcapi.finish_resize(
                context, instance, migration, image, disk_info,
                migration.dest_compute, request_spec)

        self._send_resize_instance_notifications(
            context, instance, bdms, network_info,
            fields.NotificationPhase.END)
        self.instance_events.clear_events_for_instance(instance)

    def _nrl_power_off_values(self, context, instance, clean_shutdown):
        return self._get_power_off_values(context, instance, clean_shutdown)


class VictoriaSourceFlavorMixin(SourceFlavorMixin):
    """Victoria to Xena: ``_get_power_off_values`` takes no context."""

    def _nrl_power_off_values(self, context, instance, clean_shutdown):
        return self._get_power_off_values(instance, clean_shutdown)


class TrainSourceFlavorMixin(base.TrainNetworkMigration, SourceFlavorMixin):
    """Train's network API takes a primitive of the migration."""


SPEC = base.MixinSpec('resize_source_flavor', {
    'train': base.Implementation(manager=TrainSourceFlavorMixin),
    'ussuri': base.Implementation(manager=SourceFlavorMixin),
    'victoria': base.Implementation(manager=VictoriaSourceFlavorMixin),
    'wallaby': base.Implementation(manager=VictoriaSourceFlavorMixin),
    'xena': base.Implementation(manager=VictoriaSourceFlavorMixin),
})
