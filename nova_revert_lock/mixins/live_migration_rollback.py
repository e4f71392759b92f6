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

"""Do not count a rolled back live migration's dropped claim again.

Nova bug 1894095, a sibling of bug 1879878, unfixed upstream (its
reproducer, 99850a0481, still carries its FIXMEs). Runs on the
destination host.

When a NUMA-aware live migration fails, the source's
``_rollback_live_migration`` calls ``drop_move_claim_at_destination``
(Train even before ``rollback_live_migration_at_destination``) and only
afterwards sets the migration's final status. A destination periodic
``update_available_resource`` in between still lists the migration in
progress and counts the dropped claim again.

The same drop also comes too late on the other rollback path: when the
destination's ``pre_live_migration`` fails, the source's
``_cleanup_pre_live_migration`` sets the migration ``error`` first and
rolls back afterwards. A destination periodic task in between no longer
lists the migration and rebuilds the node without its claim; upstream's
drop, given the flavor, then takes the claim away a second time: negative
usage, ``CPUUnpinningInvalid`` raised back to the source, whose rollback
stops half way and leaves the server in ``MIGRATING`` (every release,
master included).

The claim's fix writes nothing. In the critical section that drops the
claim:

- if the tracker no longer tracks the instance's migration, its claim is
  not counted any more (the periodic task that stopped listing the
  migration rebuilt the node without it): there is nothing left to drop,
  and the drop is skipped;
- otherwise the claim is dropped as upstream drops it, and the tracker
  remembers the live migration the instance's migration context names,
  leaving it uncounted until it is no longer listed.

The source's half (Ussuri on): the destination's
``rollback_live_migration_at_destination`` runs the driver's rollback
with the migration context applied to the instance (the destination's
NUMA topology, PCI devices and resources, for the driver to clean up
what it claimed there). When the libvirt driver cleans up a block
migration's instance directory it saves the instance, applied context
and all: the destination's pinning becomes the instance's. Upstream
puts the object's own values back afterwards and never saves them, so
the source's tracker books the destination's CPUs while the guest runs
on its own, and a new pinned guest can be given the guest's CPUs. Seen
on libvirt computes after 12 of 30 failed block migrations that claimed
other CPUs at the destination (whether the driver's save carries the
context depends on the order the rollback's steps reach the database).
The fix saves the instance's own values back right after upstream's
method returns (or raises).

That save must come before the source ends its rollback. The source
*casts* ``rollback_live_migration_at_destination``, then *calls*
``drop_move_claim_at_destination``, then clears the task state: nothing
upstream waits for the destination's clean-up, which on libvirt computes
destroys the incoming guest and deletes its files after the driver's
save (seconds, for a migration aborted while it ran). The server was
back ACTIVE with the destination's pinning in its record for that long,
and the source's periodic task booked those CPUs. So the destination's
``drop_move_claim_at_destination`` first waits for a rollback of the
same instance in progress on the host, save back included (the cast
arrives first: the source sends it first, to the same queue). Upstream
already means the drop to come after the clean-up ("to ensure the
specific resources claimed on destination are released safely"); this
makes it so. The wait is bounded by half the RPC time-out, so that the
source's call never times out on it; past that the claim is dropped
anyway, with a WARNING, and the fix is degraded on the node
(:func:`nova_revert_lock.sections.degraded`: the status endpoint serves
it, ``status`` and ``damage`` name it) until a later rollback there ends
within the wait.

Limits: a restart in the window counts the migration again, as plain
Nova does. Without the drop call (a source or destination too old for
NUMA live migration) there is no migration context either, and nothing
of the destination's to save. A drop that reaches the destination
before the clean-up has started (a source that calls it first, as
Train's failure path does) does not wait; the save back then comes once
the clean-up ends, after the source has cleared the task state, and
the source's periodic task may read the destination's pinning until
then.
"""

import collections
import threading
import time

from nova.compute import manager as nova_manager
from nova import exception
from oslo_config import cfg
from oslo_log import log as logging
from oslo_utils import excutils

from nova_revert_lock import locking
from nova_revert_lock.mixins import base
from nova_revert_lock import sections

LOG = logging.getLogger(__name__)

LIVE_MIGRATION = 'live-migration'

#: the fix's name in the degraded records, and what it waits for
FIX = 'live_migration_rollback'
WAIT = 'wait for the rollback of a live migration'


class RollbackOutlastedWait(Exception):
    """The reason of a degraded period: a rollback ran past the wait."""

    def __init__(self, instance_uuid, waited):
        super(RollbackOutlastedWait, self).__init__(
            'the rollback of instance %s still ran after %.0f s'
            % (instance_uuid, waited))


class LiveMigrationRollbackTracker(object):
    """Tracker side: a claim dropped on rollback stays dropped."""

    #: nodename -> {migration id: instance uuid} of the dropped claims
    _nrl_dropped = None

    @locking.under_compute_resource_semaphore
    def drop_move_claim_at_live_migration_dest(self, context, instance,
                                               nodename):
        """Drop the claim of a rolled back live migration on its dest."""
        with sections.counted('live_migration_rollback'):
            if instance.uuid not in self.tracked_migrations:
                # NOTE: on the destination the claim is counted only
                # through the tracked migration (the instance's host is
                # the source's), and every periodic task rebuilds that
                # set from the migrations still in progress. Untracked,
                # the claim is already gone from the books: upstream's
                # drop, given the flavor, would take it away again.
                LOG.info('Not dropping the live migration claim on node '
                         '%s: the migration is no longer tracked there, '
                         'its usage was already dropped (the rollback '
                         'came after the migration left its in-progress '
                         'status)', nodename, instance=instance)
                return
            # NOTE: positional flavor: instance_type up to Ussuri.
            self._drop_move_claim(context, instance, nodename,
                                  instance.flavor)
            # NOTE: the drop has read the migration context; never load it
            # here: a failed load would make the done drop look failed.
            mig_ctxt = (instance.migration_context
                        if instance.obj_attr_is_set('migration_context')
                        else None)
            if mig_ctxt is None:
                LOG.debug('No migration context: the periodic task counts '
                          'the rolled back live migration as upstream '
                          'does', instance=instance)
                return
            if self._nrl_dropped is None:
                self._nrl_dropped = {}
            self._nrl_dropped.setdefault(nodename, {})[
                mig_ctxt.migration_id] = instance.uuid

    def _update_usage_from_migrations(self, context, migrations, nodename):
        """Forget the dropped claims no longer listed; pass the list on."""
        dropped = (self._nrl_dropped or {}).get(nodename)
        if dropped:
            listed = set(m.id for m in migrations)
            for migration_id in [i for i in dropped if i not in listed]:
                del dropped[migration_id]
        return super(LiveMigrationRollbackTracker,
                     self)._update_usage_from_migrations(
                         context, migrations, nodename)

    def _update_usage_from_migration(self, context, instance, migration,
                                     nodename):
        """Count a migration as upstream does, unless its claim is gone."""
        if self._nrl_claim_dropped(migration, nodename):
            LOG.debug('Not counting live migration %(migration)s on node '
                      '%(node)s: its claim was dropped by the rollback, '
                      'its final status is the source\'s to set',
                      {'migration': migration.uuid, 'node': nodename},
                      instance_uuid=migration.instance_uuid)
            return
        return super(LiveMigrationRollbackTracker,
                     self)._update_usage_from_migration(
                         context, instance, migration, nodename)

    def _nrl_claim_dropped(self, migration, nodename):
        dropped = (self._nrl_dropped or {}).get(nodename)
        return bool(dropped and
                    dropped.get(migration.id) == migration.instance_uuid and
                    migration.migration_type == LIVE_MIGRATION and
                    migration.dest_compute == self.host)


#: the fields Instance.mutated_migration_context sets from the context
CONTEXT_FIELDS = frozenset(('numa_topology', 'pci_requests', 'pci_devices',
                            'resources'))

#: the source's call waits this long (oslo.messaging's default) when
#: the option is not registered
DEFAULT_RPC_TIMEOUT = 60


class Rollbacks(object):
    """The destination's rollbacks in progress, per instance."""

    def __init__(self):
        self._cond = threading.Condition()
        self._running = collections.Counter()

    def start(self, uuid):
        with self._cond:
            self._running[uuid] += 1

    def end(self, uuid):
        with self._cond:
            self._running[uuid] -= 1
            if self._running[uuid] <= 0:
                del self._running[uuid]
            self._cond.notify_all()

    def wait(self, uuid, timeout):
        """Wait until no rollback of ``uuid`` runs, at most ``timeout`` s.

        :returns: (whether none runs, seconds waited)
        """
        start = time.monotonic()
        deadline = start + timeout
        with self._cond:
            while self._running.get(uuid):
                left = deadline - time.monotonic()
                if left <= 0:
                    return False, time.monotonic() - start
                self._cond.wait(left)
        return True, time.monotonic() - start


#: makes each manager's Rollbacks once
_CREATE = threading.Lock()


def _wait_timeout():
    """Half the time the source's call to the destination waits."""
    try:
        timeout = cfg.CONF.rpc_response_timeout
    except cfg.NoSuchOptError:
        timeout = DEFAULT_RPC_TIMEOUT
    return timeout / 2.0


class LiveMigrationRollbackMixin(object):
    """Manager side: ``drop_move_claim_at_destination`` under the lock.

    And the instance's own resources saved back after the rollback.
    """

    #: the rollbacks in progress on this host (Rollbacks)
    _nrl_rollbacks = None

    def _nrl_rollbacks_running(self):
        with _CREATE:
            if self._nrl_rollbacks is None:
                self._nrl_rollbacks = Rollbacks()
            return self._nrl_rollbacks

    def rollback_live_migration_at_destination(self, context, instance,
                                               *args, **kwargs):
        """Upstream's; then save back what the driver saved applied.

        The drop of the claim (:meth:`drop_move_claim_at_destination`)
        waits for it to end.
        """
        # NOTE: before anything can yield: the drop call the source
        # sends after this cast must find it
        rollbacks = self._nrl_rollbacks_running()
        rollbacks.start(instance.uuid)
        try:
            try:
                result = super(LiveMigrationRollbackMixin,
                               self).rollback_live_migration_at_destination(
                                   context, instance, *args, **kwargs)
            except Exception:
                with excutils.save_and_reraise_exception():
                    self._nrl_save_own_resources(instance)
            self._nrl_save_own_resources(instance)
        finally:
            rollbacks.end(instance.uuid)
        return result

    def _nrl_save_own_resources(self, instance):
        """Save the instance's own values the context had replaced.

        Upstream's mutated_migration_context sets them back on the
        object on its way out, unsaved: they are the changed fields.
        Where the driver saved nothing under the applied context this
        writes what the database already holds.
        """
        changed = sorted(CONTEXT_FIELDS & instance.obj_what_changed())
        if not changed:
            return
        LOG.debug('Saving the instance\'s own %s after the live migration '
                  'rollback (the driver may have saved the destination\'s)',
                  ', '.join(changed), instance=instance)
        try:
            instance.save()
        except exception.InstanceNotFound:
            LOG.debug('The instance is gone: nothing to save back',
                      instance=instance)

    @nova_manager.wrap_exception()
    @nova_manager.wrap_instance_fault
    def drop_move_claim_at_destination(self, context, instance):
        """Upstream's; the tracker remembers the claim as it drops it.

        After the destination's rollback of the instance, if one runs:
        the source clears the task state when this returns.
        """
        timeout = _wait_timeout()
        done, waited = self._nrl_rollbacks_running().wait(instance.uuid,
                                                          timeout)
        nodename = self._get_nodename(instance)
        if not done:
            # NOTE: every time at WARNING: each is another migration.
            sections.degraded(FIX, nodename, WAIT, RollbackOutlastedWait(
                instance.uuid, waited))
            LOG.warning('The live migration rollback on this host still '
                        'runs after %.0f s: dropping its claim meanwhile '
                        '(the source may book the destination\'s '
                        'resources until the rollback saves the '
                        'instance\'s own back)', waited, instance=instance)
        else:
            if waited >= 0.01:
                LOG.debug('Waited %.2f s for the live migration rollback '
                          'on this host before dropping its claim', waited,
                          instance=instance)
            period = sections.recovered(FIX, nodename, WAIT)
            if period is not None:
                LOG.info('Live migration rollbacks on node %(node)s end '
                         'within the wait again, after %(count)d that did '
                         'not since %(since)s', dict(period),
                         instance=instance)
        LOG.debug('Dropping live migration resource claim on destination '
                  'node %s', nodename, instance=instance)
        self.rt.drop_move_claim_at_live_migration_dest(
            context, instance, nodename)


# NOTE: one implementation: only the flavor parameter's name differs.
SPEC = base.MixinSpec('live_migration_rollback', base.Implementation(
    manager=LiveMigrationRollbackMixin, tracker=LiveMigrationRollbackTracker))
