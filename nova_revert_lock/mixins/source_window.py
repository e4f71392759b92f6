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

The fix lives in the source's resource tracker only. Before it lists the
instances of a node, the periodic task looks up the migrations from this
node that were reverted recently and whose instance is still
``resize_reverting`` with that migration's context; it then counts each of
them as the outgoing migration it was a moment earlier (old flavor, old
NUMA topology and pinning), unless the instance itself is on the node by
then. Nothing is written, no status is added, no RPC changes: the
destination, whatever it runs, sees nothing new.

Why the look-up comes first: the source half of the revert moves
``instance.host`` back *before* it clears the task state. A look-up made
before the instance list therefore either finds the instance still
reverting (counted here, or, if it landed meanwhile, by the instance list
and not here), or already finished, in which case it has landed and the
instance list, read afterwards, counts it. No order of events counts it
twice or not at all.
"""

import datetime
import inspect

from nova.compute import resource_tracker
from nova.compute import task_states
from nova import objects
from oslo_log import log as logging
from oslo_utils import timeutils

from nova_revert_lock import locking
from nova_revert_lock.mixins import base

LOG = logging.getLogger(__name__)

#: How far back the source looks for reverted migrations. A revert whose
#: source half has not moved the instance back within this time (the cast
#: was lost, or the source was down that long) is counted as upstream
#: counts it: not at all, until the instance is back or reset.
LOOKBACK = datetime.timedelta(hours=24)

#: What the periodic task needs of an instance, as upstream's instance
#: list loads it.
_INSTANCE_ATTRS = ['system_metadata', 'numa_topology', 'flavor',
                   'migration_context', 'resources']

#: Migration types whose revert runs through finish_revert_resize.
_RESIZE_TYPES = ('resize', 'migration')


def _upstream_update_available_resource():
    """The installed tracker's periodic body, without its lock."""
    return inspect.unwrap(resource_tracker.ResourceTracker.__dict__[
        '_update_available_resource'])


class SourceWindowTracker(object):
    """Tracker side: count reverting instances until they are back."""

    #: (migration, instance) pairs found by the running periodic task
    _nrl_reverting = ()

    @locking.under_compute_resource_semaphore
    def _update_available_resource(self, context, resources, startup=False):
        """Upstream's periodic body, after the look-up for reverts.

        Runs under ``COMPUTE_RESOURCE_SEMAPHORE``, taken exactly as the
        installed tracker takes it, like the method it replaces.
        """
        # NOTE: looked up before upstream's body lists the instances of the
        # node, so that an instance landing meanwhile is counted exactly
        # once (see the module docstring).
        self._nrl_reverting = self._nrl_find_reverting(
            context, resources['hypervisor_hostname'])
        try:
            return _upstream_update_available_resource()(
                self, context, resources, startup=startup)
        finally:
            self._nrl_reverting = ()

    def _pair_instances_to_migrations(self, migrations, instance_by_uuid):
        """Add the reverting migrations to the node's in-progress list.

        Upstream's periodic body calls this right after it fetched the
        in-progress migrations, and hands the same list on to the usage
        update, the allocation clean-up and the PCI tracker: each of them
        must see the migration, as it did before the destination set it
        ``reverted``.
        """
        super(SourceWindowTracker, self)._pair_instances_to_migrations(
            migrations, instance_by_uuid)
        reverting, self._nrl_reverting = self._nrl_reverting, ()
        listed = set(m.id for m in migrations)
        for migration, instance in reverting:
            if instance.uuid in instance_by_uuid or migration.id in listed:
                # On this node already: the instance list counted it.
                continue
            migration.instance = instance
            migrations.objects.append(migration)
            LOG.info('Counting migration %(migration)s on its source node '
                     '%(node)s while the revert brings the instance back '
                     'from %(dest)s', {'migration': migration.uuid,
                                       'node': migration.source_node,
                                       'dest': migration.dest_compute},
                     instance=instance)

    def _nrl_find_reverting(self, context, nodename):
        """Reverted migrations from this node whose instance is not back.

        :returns: list of (Migration, Instance); empty if the look-up
            fails, so that the periodic task runs as upstream's
        """
        try:
            return self._nrl_query_reverting(context, nodename)
        except Exception:
            # NOTE: the look-up only adds usage that upstream forgets; it
            # must never cost the periodic task itself.
            LOG.exception('Cannot look up reverting migrations from node '
                          '%s; counting as upstream does this time',
                          nodename)
            return []

    def _nrl_query_reverting(self, context, nodename):
        migrations = objects.MigrationList.get_by_filters(context, {
            'source_compute': self.host,
            'status': 'reverted',
            'changes-since': timeutils.utcnow() - LOOKBACK,
        })
        migrations = [
            m for m in migrations
            if (m.source_node == nodename and
                m.migration_type in _RESIZE_TYPES and
                not (m.obj_attr_is_set('cross_cell_move') and
                     m.cross_cell_move))]
        if not migrations:
            return []
        instances = objects.InstanceList.get_by_filters(
            context, {'uuid': [m.instance_uuid for m in migrations],
                      'deleted': False,
                      'task_state': [task_states.RESIZE_REVERTING]},
            expected_attrs=_INSTANCE_ATTRS)
        by_uuid = dict((i.uuid, i) for i in instances)
        found = []
        for migration in migrations:
            instance = by_uuid.get(migration.instance_uuid)
            if (instance is not None and
                    instance.migration_context is not None and
                    instance.migration_context.migration_id ==
                    migration.id):
                found.append((migration, instance))
        return found


class SourceWindowMixin(object):
    """Manager side: nothing to change.

    The compute manager's own code stays upstream's; the tracker subclass
    the composed manager uses does the work.
    """


def _fixed_upstream():
    # NOTE: no Nova release closes this window (2025.1 checked); a release
    # that changes the functions above is unknown code, and the guard keeps
    # this mixin out of it.
    return False


_IMPLEMENTATION = base.Implementation(
    manager=SourceWindowMixin, tracker=SourceWindowTracker)

SPEC = base.MixinSpec(
    name='source_window',
    summary='revert (source): count the instance until finish_revert_resize '
            'has brought it back (beyond upstream)',
    implementations={'train': _IMPLEMENTATION, 'ussuri': _IMPLEMENTATION,
                     '2025.1': _IMPLEMENTATION},
    fixed_upstream=_fixed_upstream,
    beyond_upstream=True)
