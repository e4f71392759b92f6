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

Runs on the source host, whose cell keeps the instance and migration
records until the conductor's ``ConfirmResizeTask`` deletes them. Affected
Nova (21.0.0 - 21.1.0) drops the old-flavor claim and the migration
context before it marks the migration ``confirmed``: a periodic
``update_available_resource`` in between counts the instance again.

The fix, as upstream's (21.1.1): ``drop_move_claim_at_source``.
"""

from oslo_log import log as logging

from nova_revert_lock.mixins import base
from nova_revert_lock.mixins import confirm

LOG = logging.getLogger(__name__)


class CrossCellConfirmUnderLockMixin(object):
    """Manager side: the source-cell clean-up calling the locked helper."""

    def _confirm_snapshot_based_resize_at_source(
            self, ctxt, instance, migration):
        """Clean the source host up; the conductor set ``old_flavor``."""
        network_info = self.network_api.get_instance_nw_info(ctxt, instance)
        LOG.debug('Cleaning up guest from source hypervisor including disks.',
                  instance=instance)
        # NOTE: cleanup(), not destroy(): the prep step destroyed the guest,
        # disconnected the volumes and unplugged the VIFs; the disks stay.
        self.driver.cleanup(
            ctxt, instance, network_info, block_device_info=None,
            destroy_disks=True, destroy_vifs=False)

        self._confirm_snapshot_based_resize_delete_port_bindings(
            ctxt, instance, migration)
        self._delete_volume_attachments(ctxt, instance.get_bdms())

        self.rt.drop_move_claim_at_source(ctxt, instance, migration)


SPEC = base.MixinSpec('cross_cell_confirm', base.Implementation(
    manager=CrossCellConfirmUnderLockMixin,
    tracker=confirm.SourceClaimDropTracker))
