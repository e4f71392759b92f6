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

Nova bug 1944759, a sibling of bug 1879878. Runs on the source host.

Affected Nova's ``_resize_instance`` saves ``instance.host`` and
``instance.node`` pointing at the destination and casts ``finish_resize``
there; only the destination's ``finish_resize`` stashes
``instance.old_flavor``. The source's ``update_available_resource``
counts the instance by ``instance.host`` (no longer this host) and an
outgoing migration from ``instance.old_flavor`` (not set yet), so a
periodic task in between counts nothing for it: the source loses the
old flavor's usage (and NUMA pinning) until the confirm, whose claim drop
then takes it away a second time (negative usage,
``CPUUnpinningInvalid``), or until the next periodic task after a revert.

The fix, as upstream's (b841e55321, Nova 22.4.0): the source sets
``instance.old_flavor`` to the current flavor in the very save that
moves ``instance.host`` to the destination, so that no reader ever sees
the one without the other. No lock is needed: the periodic task reads
the instance from the database, and one save writes both. The
destination's ``finish_resize`` stashes the same flavor again, so a
destination on any release sees nothing new.

What it replaces and relies on: ``fixes.FIXES['resize_source_flavor']``.
"""

from nova.compute import manager as nova_manager
from nova.compute import task_states
from nova import objects
from nova.objects import base as obj_base
from nova.objects import fields

from nova_revert_lock.mixins import base


class SourceFlavorMixin(object):
    """Manager side: ``_resize_instance`` stashing ``old_flavor``."""

    def _resize_instance(self, context, instance, image,
                         migration, instance_type, clean_shutdown,
                         request_spec):
        """Power off and hand the instance over to the destination.

        Same steps, notifications and states as upstream's, except that
        ``instance.old_flavor`` is saved together with the new
        ``instance.host`` and ``node``.
        """
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

            self._nrl_migrate_instance_start(context, instance, migration)

            migration.status = 'post-migrating'
            migration.save()

            instance.host = migration.dest_compute
            instance.node = migration.dest_node
            # NOTE: from here on the source's periodic task counts this
            # instance as an outgoing migration, which it can only do with
            # old_flavor set: stash it in the same save as the new host.
            instance.old_flavor = instance.flavor
            instance.task_state = task_states.RESIZE_MIGRATED
            instance.save(expected_task_state=task_states.RESIZE_MIGRATING)

            # Let the destination finish the resize or migration.
            self.compute_rpcapi.finish_resize(
                context, instance, migration, image, disk_info,
                migration.dest_compute, request_spec)

        self._send_resize_instance_notifications(
            context, instance, bdms, network_info,
            fields.NotificationPhase.END)
        self.instance_events.clear_events_for_instance(instance)

    def _nrl_migrate_instance_start(self, context, instance, migration):
        self.network_api.migrate_instance_start(context, instance,
                                                migration)

    def _nrl_power_off_values(self, context, instance, clean_shutdown):
        return self._get_power_off_values(context, instance, clean_shutdown)


class VictoriaSourceFlavorMixin(SourceFlavorMixin):
    """Victoria to Xena: ``_get_power_off_values`` takes no context.

    (Xena 24.0.0 names the flavor argument ``flavor``; its
    ``resize_instance`` passes it by position, as every release does.)
    """

    def _nrl_power_off_values(self, context, instance, clean_shutdown):
        return self._get_power_off_values(instance, clean_shutdown)


class TrainSourceFlavorMixin(SourceFlavorMixin):
    """Train's network API takes the migration as a primitive."""

    def _nrl_migrate_instance_start(self, context, instance, migration):
        self.network_api.migrate_instance_start(
            context, instance, obj_base.obj_to_primitive(migration))


SPEC = base.MixinSpec('resize_source_flavor', {
    'train': base.Implementation(manager=TrainSourceFlavorMixin),
    'ussuri': base.Implementation(manager=SourceFlavorMixin),
    'victoria': base.Implementation(manager=VictoriaSourceFlavorMixin),
    'wallaby': base.Implementation(manager=VictoriaSourceFlavorMixin),
    'xena': base.Implementation(manager=VictoriaSourceFlavorMixin),
})
