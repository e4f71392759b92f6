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

"""Keep counting a reverting instance on the source until it is back.

Runs on the source host, on every Nova this package knows, including
releases that carry upstream's fix for bug 1879878: upstream left this
window open everywhere.

On revert the destination sets the migration ``reverted``, drops its
claim and only then casts ``finish_revert_resize`` to the source, which
moves ``instance.host`` back when that call runs. In between, the source's
``update_available_resource`` counts the instance nowhere: it is not on the
source by ``instance.host``, and a ``reverted`` migration is not "in
progress". The source's usage drops by the whole instance until its next
periodic task, and with dedicated CPUs a new instance can be pinned to the
reverting instance's pCPUs meanwhile.

The fix lives in the source's resource tracker only. Nothing is written,
no status is added, no RPC changes: the destination, whatever it runs,
sees nothing new.

When the look-up runs, and why that is enough
---------------------------------------------

Upstream's periodic body reads the node's instances (by ``instance.host``)
and, later, its in-progress migrations. Two events of other hosts can land
at any moment of it: the *flip* (the destination sets the migration
``reverted``) and the *return* (the source's ``finish_revert_resize``
saves ``instance.host`` back; it clears the task state and the migration
context in a second save, later). The flip always comes first.

The look-up runs *after* both of upstream's reads, right after the
in-progress migrations were paired with the instances, and it trusts only
what those two reads saw:

* flip after the migration read: upstream counts the migration as the
  outgoing one it still was; the look-up sees it among the in-progress
  migrations and adds nothing;
* return before the instance read: upstream counts the instance; the
  look-up sees it among the node's instances and adds nothing;
* flip before the migration read and return after the instance read:
  upstream counts nothing. The look-up finds the ``reverted`` migration
  (it reads after the flip) and the instance as it is now: still on the
  destination and ``resize_reverting``, it is counted as the outgoing
  migration it was a moment earlier (old flavor, old NUMA topology and
  pinning); already back on this node (one save or both), it is counted
  as upstream's next periodic task will count it, as an instance of the
  node.

So whatever step of the periodic task the flip and the return land at,
the instance is counted exactly once.

The look-up runs through the conductor in a real nova-compute, so it uses
only filters that survive RPC serialization (no ``changes-since``
datetime): the most recently updated ``reverted`` migrations from this
host, at most :data:`RECENT_REVERTS`. The instances are fetched only for
those that neither upstream read saw, and once only for a revert whose
instance has since moved on to another host or been deleted: such a
migration is remembered as settled, so that a host with a history of
reverts does not fetch those instances on every run. Drivers that cannot
resize (Ironic) skip the look-up.

Upstream functions (``mixins.REFS['source_window']``)
-----------------------------------------------------

Replaces:

* ``ResourceTracker._update_available_resource``

Relies on:

* ``ResourceTracker._pair_instances_to_migrations``
* ``ResourceTracker._update_usage_from_migrations``
* ``ResourceTracker._update_usage_from_migration``
* ``ResourceTracker._update_usage_from_instance``
* ``ComputeManager.revert_resize``
* ``ComputeManager.finish_revert_resize``
* ``MigrationList.get_by_filters``
* ``InstanceList.get_by_filters``
"""

import collections

from nova.compute import resource_tracker
from nova.compute import task_states
from nova import objects
from nova.virt import driver as virt_driver
from oslo_log import log as logging

from nova_revert_lock import locking
from nova_revert_lock.mixins import base

LOG = logging.getLogger(__name__)

#: How many of the host's most recently updated ``reverted`` migrations
#: the look-up reads. The migration it must find was set ``reverted``
#: during the running periodic task, so it is among the newest; the bound
#: keeps the query small on a host with years of history.
RECENT_REVERTS = 20

#: What the periodic task needs of an instance, as upstream's instance
#: list loads it.
_INSTANCE_ATTRS = ['system_metadata', 'numa_topology', 'flavor',
                   'migration_context', 'resources']

#: Migration types whose revert runs through finish_revert_resize.
_RESIZE_TYPES = ('resize', 'migration')


def _upstream(name):
    """An installed tracker function, without its lock if it has one."""
    func = resource_tracker.ResourceTracker.__dict__[name]
    while hasattr(func, '__wrapped__'):
        func = func.__wrapped__
    return func


def _can_resize(driver):
    """False for drivers that cannot resize or cold migrate (Ironic)."""
    impl = getattr(type(driver), 'migrate_disk_and_power_off', None)
    return (impl is not None and
            impl is not virt_driver.ComputeDriver.migrate_disk_and_power_off)


class SourceWindowTracker(object):
    """Tracker side: count reverting instances until they are back."""

    #: (context, nodename) of the running periodic task, or None
    _nrl_node = None
    #: nodename -> uuids of the migrations logged at INFO already
    _nrl_logged = None
    #: nodename -> ids of reverted migrations that can never need counting
    _nrl_settled = None
    #: True while the look-up fails (logged once, then at DEBUG)
    _nrl_failing = False

    @locking.under_compute_resource_semaphore
    def _update_available_resource(self, context, resources, startup=False):
        """Upstream's periodic body, with the look-up after its reads.

        Runs under ``COMPUTE_RESOURCE_SEMAPHORE``, taken exactly as the
        installed tracker takes it, like the method it replaces.
        """
        self._nrl_node = (context, resources['hypervisor_hostname'])
        try:
            return _upstream('_update_available_resource')(
                self, context, resources, startup=startup)
        finally:
            self._nrl_node = None

    def _pair_instances_to_migrations(self, migrations, instance_by_uuid):
        """Count what upstream's two reads missed (see the module doc).

        Upstream's periodic body calls this right after it read the
        in-progress migrations, and hands the same list and dict on to
        the usage update, the allocation clean-up and the PCI tracker:
        each of them sees what is added here.
        """
        super(SourceWindowTracker, self)._pair_instances_to_migrations(
            migrations, instance_by_uuid)
        node, self._nrl_node = self._nrl_node, None
        if node is None or not _can_resize(self.driver):
            return
        context, nodename = node
        for migration, instance in self._nrl_find_reverting(
                context, nodename, migrations, instance_by_uuid):
            # NOTE: upstream's usage update takes an instance from the
            # first listed migration of it. For an earlier failed move (an
            # 'error' migration, listed from Victoria on) it would load the
            # instance again, after the look-up read it: one copy for all.
            for other in migrations:
                if other.instance_uuid == instance.uuid:
                    other.instance = instance
            migration.instance = instance
            if migration not in migrations.objects:
                migrations.objects.append(migration)
            if self._nrl_landed(instance, nodename):
                # Back on this node after upstream listed the node's
                # instances: count it as the next periodic task will. The
                # usage update then sees it tracked and adds nothing.
                instance_by_uuid[instance.uuid] = instance
                self._update_usage_from_instance(context, instance, nodename)
            # else: upstream's usage update counts it as the outgoing
            # migration it is (or was, before the destination's flip),
            # from this copy of the instance, read before its return.

    def _nrl_landed(self, instance, nodename):
        return instance.host == self.host and instance.node == nodename

    def _nrl_find_reverting(self, context, nodename, migrations,
                            instance_by_uuid):
        """Reverts from this node whose instance neither read counted.

        :returns: list of (Migration, Instance); empty if the look-up
            fails, so that the periodic task runs as upstream's
        """
        try:
            found = self._nrl_query(context, nodename, migrations,
                                    instance_by_uuid)
        except Exception as e:
            # NOTE: the look-up only adds usage that upstream forgets; it
            # must never cost the periodic task itself, nor flood the log.
            log = LOG.debug if self._nrl_failing else LOG.warning
            log('Cannot look up reverted migrations from node %(node)s '
                '(%(error)s: %(reason)s); counting as upstream does until '
                'it works again', {'node': nodename,
                                   'error': type(e).__name__, 'reason': e})
            self._nrl_failing = True
            return []
        if self._nrl_failing:
            LOG.info('The look-up of reverted migrations from node %s '
                     'works again', nodename)
            self._nrl_failing = False
        self._nrl_log(nodename, found)
        return found

    def _nrl_query(self, context, nodename, migrations, instance_by_uuid):
        def outgoing(m):
            return (m.source_compute == self.host and
                    m.source_node == nodename and
                    m.dest_node != nodename and
                    m.migration_type in _RESIZE_TYPES and
                    not (m.obj_attr_is_set('cross_cell_move') and
                         m.cross_cell_move) and
                    m.instance_uuid not in instance_by_uuid)

        # Reverting when upstream listed it: its instance may return
        # before upstream's usage update would load it.
        candidates = collections.OrderedDict(
            (m.instance_uuid, m) for m in migrations
            if m.status == 'reverting' and outgoing(m))
        # Reverted before upstream listed the in-progress migrations. From
        # Victoria on the list also holds the host's 'error' migrations
        # (get_in_progress_and_error), by which upstream counts nothing:
        # an earlier failed move must not hide the revert.
        moving = set(m.instance_uuid for m in migrations
                     if m.status != 'error')
        recent = objects.MigrationList.get_by_filters(
            context, {'source_compute': self.host, 'status': 'reverted'},
            sort_keys=['updated_at', 'id'], sort_dirs=['desc', 'desc'],
            limit=RECENT_REVERTS)
        if self._nrl_settled is None:
            self._nrl_settled = {}
        # NOTE: only ids still among the recent ones are kept, so the set
        # holds RECENT_REVERTS ids per node at most.
        settled = self._nrl_settled[nodename] = (
            self._nrl_settled.get(nodename, set()) &
            set(m.id for m in recent))
        for m in recent:
            if (outgoing(m) and m.instance_uuid not in moving and
                    m.id not in settled):
                candidates.setdefault(m.instance_uuid, m)
        if not candidates:
            return []
        instances = objects.InstanceList.get_by_filters(
            context, {'uuid': list(candidates), 'deleted': False},
            expected_attrs=_INSTANCE_ATTRS)
        found = []
        for instance in instances:
            migration = candidates.pop(instance.uuid)
            if self._nrl_reverting(instance, migration, nodename):
                found.append((migration, instance))
            elif (migration.status == 'reverted' and
                  instance.task_state != task_states.RESIZE_REVERTING and
                  not self._nrl_landed(instance, nodename)):
                # The revert is over and the instance is not here: it has
                # moved on since (or the revert failed). A reverted
                # migration is final; nothing can make it count again.
                settled.add(migration.id)
        # Left: instances deleted since their revert.
        settled.update(m.id for m in candidates.values()
                       if m.status == 'reverted')
        return found

    def _nrl_reverting(self, instance, migration, nodename):
        """True if ``instance`` is (still) the one ``migration`` reverts."""
        context_id = (instance.migration_context.migration_id
                      if instance.migration_context is not None else None)
        if instance.task_state == task_states.RESIZE_REVERTING:
            # Not back yet, or back by its first save only.
            return context_id == migration.id
        # Both saves done: back, with its migration context dropped, after
        # the migration was read (launched_at is set by the second save).
        return (context_id is None and self._nrl_landed(instance, nodename)
                and instance.launched_at is not None and
                migration.updated_at is not None and
                instance.launched_at >= migration.updated_at)

    def _nrl_log(self, nodename, found):
        """INFO once per migration, DEBUG on later periodic runs."""
        if self._nrl_logged is None:
            self._nrl_logged = {}
        logged = self._nrl_logged.setdefault(nodename, set())
        current = set()
        for migration, instance in found:
            current.add(migration.uuid)
            log = LOG.debug if migration.uuid in logged else LOG.info
            log('Counting migration %(migration)s on its source node '
                '%(node)s while the revert brings the instance back from '
                '%(dest)s', {'migration': migration.uuid,
                             'node': migration.source_node,
                             'dest': migration.dest_compute},
                instance=instance)
        self._nrl_logged[nodename] = current


class SourceWindowMixin(object):
    """Manager side: nothing to change.

    The compute manager's own code stays upstream's; the tracker subclass
    the composed manager uses does the work.
    """


_IMPLEMENTATION = base.Implementation(
    manager=SourceWindowMixin, tracker=SourceWindowTracker)

SPEC = base.MixinSpec(
    name='source_window',
    summary='revert (source): count the instance until finish_revert_resize '
            'has brought it back (beyond upstream)',
    # NOTE: one implementation for every series whose code was read
    # (mixins.VERIFIED): the periodic body reads the node's instances, then
    # its migrations, then pairs them, in all of them, and the revert flips
    # the migration, drops the destination claim and casts to the source
    # in that order.
    implementations={'train': _IMPLEMENTATION, 'ussuri': _IMPLEMENTATION,
                     'victoria': _IMPLEMENTATION, 'yoga': _IMPLEMENTATION,
                     'zed': _IMPLEMENTATION, '2023.1': _IMPLEMENTATION,
                     '2025.1': _IMPLEMENTATION, '2026.2': _IMPLEMENTATION})
