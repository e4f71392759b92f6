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

"""Confirm a cross-cell resize under the compute resource lock.

Runs on the source host, in the source cell. Cross-cell (snapshot-based)
resize came with Ussuri; there the source keeps its own instance and
migration records, in its own cell database, until the conductor's
``ConfirmResizeTask`` hard-deletes them after the source is done.

Affected Nova (21.0.0 - 21.1.0) drops the old-flavor claim and the
migration context first and only then marks the source cell migration
``confirmed``. A periodic ``update_available_resource`` in between finds
the claim gone but the migration still in progress, and counts the
instance on the source again: the usage the drop has just removed comes
back.

The fix, as upstream's (21.1.1): the status change, the claim drop and
the migration-context drop form one critical section, the tracker's
``drop_move_claim_at_source``, the same one the same-cell ``confirm``
mixin uses.

What it replaces and relies on: ``fixes.FIXES['cross_cell_confirm']``.
"""

from oslo_log import log as logging

from nova_revert_lock.mixins import base
from nova_revert_lock.mixins import confirm

LOG = logging.getLogger(__name__)


class CrossCellConfirmUnderLockMixin(object):
    """Manager side: the source-cell clean-up calling the locked helper."""

    def _confirm_snapshot_based_resize_at_source(
            self, ctxt, instance, migration):
        """Clean the source host up after a cross-cell resize is confirmed.

        The guest was already destroyed by the prep step, so what is left
        are its disks, its port bindings and volume attachments for this
        host, and its usage in the resource tracker.

        :param ctxt: request context targeted at the source cell
        :param instance: the source cell Instance; the conductor has set
            ``old_flavor`` on it, which the claim drop needs
        :param migration: the source cell Migration; set to ``confirmed``
            here
        """
        network_info = self.network_api.get_instance_nw_info(ctxt, instance)
        LOG.debug('Cleaning up guest from source hypervisor including disks.',
                  instance=instance)
        # NOTE: cleanup(), not destroy(): the guest is already gone, only
        # its disks are left. No block device info and no VIF unplugging:
        # the prep step disconnected volumes and unplugged VIFs.
        self.driver.cleanup(
            ctxt, instance, network_info, block_device_info=None,
            destroy_disks=True, destroy_vifs=False)

        self._confirm_snapshot_based_resize_delete_port_bindings(
            ctxt, instance, migration)
        self._delete_volume_attachments(ctxt, instance.get_bdms())

        # Status change, old-flavor claim drop and migration-context drop,
        # as one critical section under COMPUTE_RESOURCE_SEMAPHORE: the
        # periodic task sees the migration either in progress with its
        # claim, or confirmed without it.
        self.rt.drop_move_claim_at_source(ctxt, instance, migration)


SPEC = base.MixinSpec('cross_cell_confirm', base.Implementation(
    manager=CrossCellConfirmUnderLockMixin,
    tracker=confirm.SourceClaimDropTracker))
