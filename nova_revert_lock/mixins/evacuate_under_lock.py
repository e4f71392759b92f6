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

"""Finish an evacuation on the destination under the tracker's lock.

Nova bug 1896463, a sibling of bug 1879878. Affected Nova's
``rebuild_instance`` applies the migration context, saves ``instance.host``
and ``node`` pointing at this host, drops the context and only then marks
the migration ``done``, all outside ``COMPUTE_RESOURCE_SEMAPHORE``. A
periodic ``update_available_resource`` reading the instances before the
save and the migrations after the status change counts the instance
nowhere, freeing its PCI devices and pinning.

The fix, as upstream's (7675964af8, Nova 21.2.0, 22.1.0, 23.0.0, and the
train-eol tip): the four steps form one critical section of the tracker,
named so as never to shadow upstream's ``finish_evacuation``.
"""

from nova.compute import claims
from nova.compute import manager as nova_manager
from nova import exception
from nova import objects
from oslo_log import log as logging
import oslo_messaging as messaging

from nova_revert_lock import locking
from nova_revert_lock.mixins import base
from nova_revert_lock import sections

LOG = logging.getLogger(__name__)


class EvacuationTracker(object):
    """Tracker side: the end of an evacuation as one critical section."""

    @locking.under_compute_resource_semaphore
    def _nrl_finish_evacuation(self, instance, node, migration):
        """Upstream's ``finish_evacuation``; the lock is not reentrant."""
        with sections.counted('evacuate_under_lock'):
            instance.apply_migration_context()
            instance.host = self.host
            instance.node = node
            instance.save()
            instance.drop_migration_context()
            # Only now that it belongs here: its migration stops counting.
            if migration:
                migration.status = 'done'
                migration.save()


class EvacuateUnderLockMixin(object):
    """Manager side: Ussuri's ``rebuild_instance``, ending in the lock."""

    @messaging.expected_exceptions(exception.PreserveEphemeralNotSupported)
    @nova_manager.wrap_exception()
    @nova_manager.reverts_task_state
    @nova_manager.wrap_instance_event(prefix='compute')
    @nova_manager.wrap_instance_fault
    def rebuild_instance(self, context, instance, orig_image_ref, image_ref,
                         injected_files, new_pass, orig_sys_metadata,
                         bdms, recreate, on_shared_storage,
                         preserve_ephemeral, migration,
                         scheduled_node, limits, request_spec):
        """Upstream's, ending in the tracker's ``_nrl_finish_evacuation``."""
        evacuate = recreate
        context = context.elevated()

        if evacuate:
            LOG.info("Evacuating instance", instance=instance)
            rebuild_claim = self.rt.rebuild_claim
        else:
            LOG.info("Rebuilding instance", instance=instance)
            rebuild_claim = claims.NopClaim

        if image_ref:
            image_meta = objects.ImageMeta.from_image_ref(
                context, self.image_api, image_ref)
        elif evacuate:
            image_meta = instance.image_meta
        else:
            image_meta = objects.ImageMeta()

        if not scheduled_node:
            if evacuate:
                try:
                    compute_node = self._get_compute_info(context, self.host)
                    scheduled_node = compute_node.hypervisor_hostname
                except exception.ComputeHostNotFound:
                    LOG.exception('Failed to get compute_info for %s',
                                  self.host)
            else:
                scheduled_node = instance.node

        allocs = self.reportclient.get_allocations_for_consumer(
            context, instance.uuid)

        with self._nrl_error_out_on_rebuild(context, instance):
            try:
                self._nrl_rebuild_with_claim(
                    context, instance, orig_image_ref, image_meta,
                    injected_files, new_pass, orig_sys_metadata, bdms,
                    evacuate, on_shared_storage, preserve_ephemeral,
                    migration, request_spec, allocs, rebuild_claim,
                    scheduled_node, limits)
            except (exception.ComputeResourcesUnavailable,
                    exception.RescheduledException) as e:
                if isinstance(e, exception.ComputeResourcesUnavailable):
                    LOG.debug("Could not rebuild instance on this host, not "
                              "enough resources available.", instance=instance)
                else:
                    LOG.debug("Could not rebuild instance on this host, "
                              "late server group check failed.",
                              instance=instance)
                self._set_migration_status(migration, 'failed')
                # Only an evacuation claims: drop the destination's alloc.
                self.rt.delete_allocation_for_evacuated_instance(
                    context, instance, scheduled_node, node_type='destination')
                self._notify_instance_rebuild_error(context, instance, e, bdms)
                raise self._nrl_build_abort(instance, e)
            except (exception.InstanceNotFound,
                    exception.UnexpectedDeletingTaskStateError) as e:
                LOG.debug('Instance was deleted while rebuilding',
                          instance=instance)
                self._set_migration_status(migration, 'failed')
                self._notify_instance_rebuild_error(context, instance, e, bdms)
            except Exception as e:
                self._set_migration_status(migration, 'failed')
                if evacuate or scheduled_node is not None:
                    self.rt.delete_allocation_for_evacuated_instance(
                        context, instance, scheduled_node,
                        node_type='destination')
                self._notify_instance_rebuild_error(context, instance, e, bdms)
                raise
            else:
                # NOTE: the fix for bug 1896463: one critical section.
                self.rt._nrl_finish_evacuation(instance, scheduled_node,
                                               migration)

    def _nrl_error_out_on_rebuild(self, context, instance):
        """Ussuri keeps the vm_state of a failed claim."""
        return self._error_out_instance_on_exception(
            context, instance, instance_state=instance.vm_state)

    def _nrl_rebuild_with_claim(self, context, instance, orig_image_ref,
                                image_meta, injected_files, new_pass,
                                orig_sys_metadata, bdms, evacuate,
                                on_shared_storage, preserve_ephemeral,
                                migration, request_spec, allocs,
                                rebuild_claim, scheduled_node, limits):
        """Ussuri claims inside ``_do_rebuild_instance_with_claim``."""
        self._do_rebuild_instance_with_claim(
            context, instance, orig_image_ref, image_meta, injected_files,
            new_pass, orig_sys_metadata, bdms, evacuate, on_shared_storage,
            preserve_ephemeral, migration, request_spec, allocs,
            rebuild_claim, scheduled_node, limits)

    @staticmethod
    def _nrl_build_abort(instance, e):
        """Ussuri wraps it in InstanceFaultRollback: the vm_state is kept."""
        return exception.InstanceFaultRollback(
            inner_exception=exception.BuildAbortException(
                instance_uuid=instance.uuid, reason=e.format_message()))


class TrainEvacuateUnderLockMixin(EvacuateUnderLockMixin):
    """Train claims first and puts the instance in ERROR on any failure."""

    def _nrl_error_out_on_rebuild(self, context, instance):
        return self._error_out_instance_on_exception(context, instance)

    def _nrl_rebuild_with_claim(self, context, instance, orig_image_ref,
                                image_meta, injected_files, new_pass,
                                orig_sys_metadata, bdms, evacuate,
                                on_shared_storage, preserve_ephemeral,
                                migration, request_spec, allocs,
                                rebuild_claim, scheduled_node, limits):
        claim_ctxt = rebuild_claim(
            context, instance, scheduled_node, allocs,
            limits=limits, image_meta=image_meta, migration=migration)
        self._do_rebuild_instance_with_claim(
            claim_ctxt, context, instance, orig_image_ref, image_meta,
            injected_files, new_pass, orig_sys_metadata, bdms, evacuate,
            on_shared_storage, preserve_ephemeral, migration, request_spec,
            allocs)

    @staticmethod
    def _nrl_build_abort(instance, e):
        return exception.BuildAbortException(
            instance_uuid=instance.uuid, reason=e.format_message())


SPEC = base.MixinSpec('evacuate_under_lock', {
    'train': base.Implementation(
        manager=TrainEvacuateUnderLockMixin, tracker=EvacuationTracker),
    'ussuri': base.Implementation(
        manager=EvacuateUnderLockMixin, tracker=EvacuationTracker),
})
