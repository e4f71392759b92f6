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

Nova bug 2025480. Runs on the host that unshelves a ``SHELVED_OFFLOADED``
server.

Affected Nova's ``_unshelve_instance`` sets task_state ``spawning``,
claims the server's resources (``instance_claim``: vCPUs, RAM, disk, NUMA
pinning, PCI devices) and calls ``driver.spawn()`` while the server is
still in vm_state ``SHELVED_OFFLOADED``; it becomes ``ACTIVE`` only after
the spawn. The resource tracker treats every ``SHELVED_OFFLOADED`` server
as one whose resources may be freed (``vm_states.ALLOW_RESOURCE_REMOVAL``):
a periodic ``update_available_resource`` during the spawn does not count
it (``_update_usage_from_instances``), and an update of a tracked one
(``_update_usage_from_instance``) untracks it and takes its usage away.
The host loses the claim of a server that ends up running there until its
next periodic task, and meanwhile the scheduler and the claims of other
servers may be given the same resources (with dedicated CPUs: the same
pCPUs). Placement keeps the allocation, so the two disagree.

The fix, as upstream's (f1dc4ec39b, Nova 26.2.2, 27.3.0, 28.1.0,
29.0.0): a ``SHELVED_OFFLOADED`` server in task_state ``spawning`` is not
removable (upstream's ``vm_states.allow_resource_removal``): the periodic
task counts it like any other server of the host, an update keeps it
tracked, and the node's stats (``num_instances``, ``running_vms``, the
per-state counters) keep counting it too. A server shelved and offloaded
(task_state None, or ``shelving_offloading``) is removable as before.

The critical sections are upstream's: the periodic task, the claim and
the usage update already hold ``COMPUTE_RESOURCE_SEMAPHORE`` when they
call these functions, so nothing here takes it (it is not reentrant).
Nothing is written and no RPC changes: only what the tracker counts.

How it composes: ``_update_usage_from_instances`` is extended, not
replaced: it calls the next class's (Nova's, or another mixin's that
prepares the instances first) and then counts the servers being unshelved
that it left out, so cooperative overrides of it before or after this one
in the tracker's bases still run. ``_update_usage_from_instance`` defers
to the next class but for the one case upstream changed (a tracked server
being unshelved), where it does what upstream's fixed code does. The
node's ``Stats`` object is given a subclass that counts such a server,
as upstream's ``Stats.update_stats_for_instance`` does; the stats do not
enter the usage (vCPU, RAM, disk, NUMA, PCI), only ``running_vms`` and
the ``stats`` the scheduler's ``NumInstancesFilter`` and ``IoOpsFilter``
read.

What it replaces and relies on: ``fixes.FIXES['unshelve_claim']``.
"""

from nova.compute import stats as compute_stats
from nova.compute import task_states
from nova.compute import vm_states
from nova import objects

from nova_revert_lock.mixins import base


def allow_resource_removal(vm_state, task_state=None):
    """True if a server in these states may have its resources freed.

    Upstream's ``vm_states.allow_resource_removal`` (the fix for bug
    2025480): deleted servers, and shelved and offloaded ones unless they
    are being unshelved (spawning) on this host.
    """
    return (vm_state == vm_states.DELETED or
            (vm_state == vm_states.SHELVED_OFFLOADED and
             task_state != task_states.SPAWNING))


def being_unshelved(instance):
    """True for a server that affected Nova wrongly treats as removable."""
    return (instance['vm_state'] == vm_states.SHELVED_OFFLOADED and
            instance['task_state'] == task_states.SPAWNING)


class UnshelveStats(compute_stats.Stats):
    """The node's stats, counting a server being unshelved.

    The tracker makes its nodes' stats of this class
    (:meth:`UnshelveClaimTracker._nrl_adopt`).
    """

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
    """Tracker side: do not untrack a server being unshelved.

    Every method here is called by the tracker's own code with
    ``COMPUTE_RESOURCE_SEMAPHORE`` held; none takes it.
    """

    def _nrl_adopt(self):
        """Make the nodes' stats :class:`UnshelveStats` from now on.

        Called once, as the composed manager gives the tracker its class
        (:class:`~nova_revert_lock.composition.TrackerSwap`). The tracker's
        constructor made ``self.stats`` a ``defaultdict`` of Nova's
        ``Stats``, which gets a node's entry on the node's first periodic
        task: none exists yet. A factory of a class of someone else's is
        left as it is.
        """
        stats = getattr(self, 'stats', None)
        if getattr(stats, 'default_factory', None) is compute_stats.Stats:
            stats.default_factory = UnshelveStats

    def _update_usage_from_instances(self, context, instances, nodename):
        """Count the servers being unshelved too (see the module doc).

        The next class's version resets the node's usage and counts the
        servers it does not consider removable; the servers being
        unshelved it left out are counted here, after it, as new ones.
        Usage adds up, so the order does not matter.
        """
        instance_by_uuid = super(
            UnshelveClaimTracker, self)._update_usage_from_instances(
                context, instances, nodename)
        for instance in instances:
            if (being_unshelved(instance) and
                    instance.uuid not in self.tracked_instances):
                self._update_usage_from_instance(context, instance,
                                                 nodename)
        return instance_by_uuid

    def _update_usage_from_instance(self, context, instance, nodename,
                                    is_removed=False):
        """Upstream's, except that a server being unshelved stays tracked.

        For a new server being unshelved (the claim, or the periodic task
        above) the next class's version already does what upstream's fix
        does; with the node's stats counting it, nothing else differs.
        """
        stats = self.stats[nodename]
        if (is_removed or not being_unshelved(instance) or
                instance['uuid'] not in self.tracked_instances):
            return super(
                UnshelveClaimTracker, self)._update_usage_from_instance(
                    context, instance, nodename, is_removed=is_removed)
        # NOTE: a tracked server being unshelved. Affected Nova untracks
        # it and takes its usage away; upstream's fix keeps it and, as
        # for any tracked server whose state changes, updates only the
        # stats and the node's workload and PCI pools.
        cn = self.compute_nodes[nodename]
        stats.update_stats_for_instance(instance, False)
        cn.stats = stats
        cn.current_workload = stats.calculate_workload()
        if self.pci_tracker:
            cn.pci_device_pools = self.pci_tracker.stats.to_device_pools_obj()
        else:
            cn.pci_device_pools = objects.PciDevicePoolList()


# NOTE: one implementation for every series it was verified on: the
# functions it replaces are the same code from 20.0.0 to 28.0.x.
SPEC = base.MixinSpec('unshelve_claim', base.Implementation(
    tracker=UnshelveClaimTracker))
