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

"""Keep tracking a server the host is unshelving.

Nova bug 2025480. Affected Nova's ``_unshelve_instance`` claims and
spawns (task_state ``spawning``) a server still ``SHELVED_OFFLOADED``,
which the resource tracker treats as removable: a periodic
``update_available_resource`` meanwhile does not count it, and an update
untracks it. The host loses the claim (pCPUs included) and may give it
away; placement keeps it.

The fix, as upstream's (f1dc4ec39b, Nova 26.2.2, 27.3.0, 28.1.0,
29.0.0): such a server is not removable; it is counted, kept tracked and
counted in the node's stats, which the scheduler's filters read. The
callers already hold ``COMPUTE_RESOURCE_SEMAPHORE`` (not reentrant).
"""

from nova.compute import stats as compute_stats
from nova.compute import task_states
from nova.compute import vm_states
from nova import objects

from nova_revert_lock.mixins import base


def allow_resource_removal(vm_state, task_state=None):
    """Upstream's fixed ``vm_states.allow_resource_removal``."""
    return (vm_state == vm_states.DELETED or
            (vm_state == vm_states.SHELVED_OFFLOADED and
             task_state != task_states.SPAWNING))


def being_unshelved(instance):
    """True for a server that affected Nova wrongly treats as removable."""
    return (instance['vm_state'] == vm_states.SHELVED_OFFLOADED and
            instance['task_state'] == task_states.SPAWNING)


class UnshelveStats(compute_stats.Stats):
    """The node's stats, counting a server being unshelved."""

    def update_stats_for_instance(self, instance, is_removed=False):
        """Upstream's, except that a server being unshelved is counted."""
        if is_removed or not being_unshelved(instance):
            return super(UnshelveStats, self).update_stats_for_instance(
                instance, is_removed=is_removed)
        # NOTE: upstream's fixed code takes its "not removed" branch for
        # this server; the affected one counts it and takes it away again.
        uuid = instance['uuid']
        if uuid in self.states:
            old = self.states[uuid]
            self._decrement('num_vm_%s' % old['vm_state'])
            self._decrement('num_task_%s' % old['task_state'])
            self._decrement('num_os_type_%s' % old['os_type'])
            self._decrement('num_proj_%s' % old['project_id'])
        else:
            self._increment('num_instances')
        vm_state, task_state, os_type, project_id = (
            self._extract_state_from_instance(instance))
        self._increment('num_vm_%s' % vm_state)
        self._increment('num_task_%s' % task_state)
        self._increment('num_os_type_%s' % os_type)
        self._increment('num_proj_%s' % project_id)
        self['io_workload'] = self.io_workload


class UnshelveClaimTracker(object):
    """Tracker side: do not untrack a server being unshelved."""

    def _nrl_adopt(self):
        """Make new nodes' stats :class:`UnshelveStats`, unless foreign."""
        stats = getattr(self, 'stats', None)
        if getattr(stats, 'default_factory', None) is compute_stats.Stats:
            stats.default_factory = UnshelveStats

    def _update_usage_from_instances(self, context, instances, nodename):
        """Count, after the next class, the servers being unshelved."""
        instance_by_uuid = super(
            UnshelveClaimTracker, self)._update_usage_from_instances(
                context, instances, nodename)
        # NOTE: once per instance on every run: the cheap test first.
        for instance in base.members(instances):
            if (instance.vm_state == vm_states.SHELVED_OFFLOADED and
                    being_unshelved(instance) and
                    instance.uuid not in self.tracked_instances):
                self._update_usage_from_instance(context, instance,
                                                 nodename)
        return instance_by_uuid

    def _update_usage_from_instance(self, context, instance, nodename,
                                    is_removed=False):
        """Upstream's, but a server being unshelved stays tracked."""
        stats = self.stats[nodename]
        if (is_removed or not being_unshelved(instance) or
                instance['uuid'] not in self.tracked_instances):
            return super(
                UnshelveClaimTracker, self)._update_usage_from_instance(
                    context, instance, nodename, is_removed=is_removed)
        # NOTE: kept tracked, as upstream's fix does for any tracked server
        # whose state changes: only the stats, workload and PCI pools.
        cn = self.compute_nodes[nodename]
        stats.update_stats_for_instance(instance, False)
        cn.stats = stats
        cn.current_workload = stats.calculate_workload()
        if self.pci_tracker:
            cn.pci_device_pools = self.pci_tracker.stats.to_device_pools_obj()
        else:
            cn.pci_device_pools = objects.PciDevicePoolList()


# NOTE: one implementation: the same code from 20.0.0 to 28.0.x.
SPEC = base.MixinSpec('unshelve_claim', base.Implementation(
    tracker=UnshelveClaimTracker))
