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

"""Confirm a resize or cold migration under the compute resource lock.

Runs on the source host. Affected Nova sets the migration ``confirmed``
(and clears ``old_flavor``) before it drops the old-flavor claim: a
periodic ``update_available_resource`` in between no longer counts the
migration, and the drop removes its usage again (``CPUUnpinningInvalid``).

The fix, as upstream's ``drop_move_claim_at_source``: the status change,
the claim drop and the context drop form one critical section; the
stashed flavors are cleared after it (by ``confirm_resize`` itself in
``train-eol``).
"""

from nova.compute import power_state
from nova.compute import task_states
from nova.compute import utils as compute_utils
from nova.compute import vm_states
from nova.objects import fields
from oslo_log import log as logging

from nova_revert_lock import locking
from nova_revert_lock.mixins import base
from nova_revert_lock import sections

LOG = logging.getLogger(__name__)


def _section_kind(migration):
    """``confirm`` or ``cross_cell_confirm``: one helper, two counters."""
    # NOTE: a record without cross_cell_move (Migration < 1.6) is same-cell.
    if (migration.obj_attr_is_set('cross_cell_move') and
            migration.cross_cell_move):
        return 'cross_cell_confirm'
    return 'confirm'


class SourceClaimDropTracker(object):
    """Tracker side: drop the source claim as one critical section."""

    @locking.under_compute_resource_semaphore
    def drop_move_claim_at_source(self, context, instance, migration):
        with sections.counted(_section_kind(migration)):
            migration.status = 'confirmed'
            migration.save()
            self._drop_move_claim(
                context, instance, migration.source_node,
                instance.old_flavor, prefix='old_')
            # NOTE: _drop_move_claim reads the migration context: drop last.
            instance.drop_migration_context()


class ConfirmUnderLockMixin(object):
    """Manager side: ``_confirm_resize`` calling the locked helper."""

    def _confirm_resize(self, context, instance, migration=None):
        """Upstream's, keeping the stashed flavors until the claim drop."""
        try:
            self._nrl_confirm_resize(context, instance, migration)
        finally:
            # NOTE: upstream clears them in confirm_resize's "finally":
            # the same point for the tracker, after the drop, failed or not.
            base.delete_stashed_flavor_info(instance)

    def _nrl_confirm_resize(self, context, instance, migration):
        self._notify_about_instance_usage(context, instance,
                                          "resize.confirm.start")
        compute_utils.notify_about_instance_action(
            context, instance, self.host,
            action=fields.NotificationAction.RESIZE_CONFIRM,
            phase=fields.NotificationPhase.START)

        self.network_api.setup_networks_on_host(
            context, instance, migration.source_compute, teardown=True)
        network_info = self.network_api.get_instance_nw_info(context,
                                                             instance)
        # The old PCI devices in the VIF profiles, for the driver to unplug.
        pci_mapping = (instance.migration_context.
                       get_pci_mapping_for_migration(True))
        network_info = self._get_updated_nw_info_with_pci_mapping(
            network_info, pci_mapping)

        self.driver.confirm_migration(context, migration, instance,
                                      network_info)

        self.rt.drop_move_claim_at_source(context, instance, migration)

        # The user may have powered the instance on or off since the
        # resize: ACTIVE unless shut down (the power sync mends the rest).
        if instance.power_state == power_state.SHUTDOWN:
            vm_state = vm_states.STOPPED
            LOG.debug("Resized/migrated instance is powered off. "
                      "Setting vm_state to '%s'.", vm_state,
                      instance=instance)
        else:
            vm_state = vm_states.ACTIVE
        instance.vm_state = vm_state
        instance.task_state = None
        instance.save(expected_task_state=[None, task_states.DELETING,
                                           task_states.SOFT_DELETING])

        self._notify_about_instance_usage(
            context, instance, "resize.confirm.end",
            network_info=network_info)
        compute_utils.notify_about_instance_action(
            context, instance, self.host,
            action=fields.NotificationAction.RESIZE_CONFIRM,
            phase=fields.NotificationPhase.END)


class KeptFlavorsConfirmUnderLockMixin(ConfirmUnderLockMixin):
    """For a ``confirm_resize`` that clears the stashed flavors itself."""

    def _confirm_resize(self, context, instance, migration=None):
        self._nrl_confirm_resize(context, instance, migration)


def _flavors_kept_by_caller():
    """True if ``confirm_resize`` clears the stashed flavors (train-eol)."""
    return base.calls('nova.compute.manager:ComputeManager.confirm_resize',
                      '_delete_stashed_flavor_info', nested=True)


SPEC = base.MixinSpec('confirm', base.Variants(_flavors_kept_by_caller, {
    False: base.Implementation(
        manager=ConfirmUnderLockMixin, tracker=SourceClaimDropTracker),
    True: base.Implementation(
        manager=KeptFlavorsConfirmUnderLockMixin,
        tracker=SourceClaimDropTracker),
}))
