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

"""Count a reverting instance on its source, and only there, until back.

Runs on both hosts of a revert, on every Nova this package knows: upstream
left the time between the destination's claim drop and the source's
``finish_revert_resize`` open everywhere. The window, the look-up, why it
counts exactly once and what it costs: doc/source/source-window.rst. If a
read fails (:data:`READ_ERRORS`: the conductor, the broker or the
database), the node counts as upstream's does and the fix is degraded
there until a read works again (:func:`nova_revert_lock.sections.degraded`,
served by the status endpoint); any other error is a defect and is
raised.
"""

import collections
import inspect

from nova.compute import resource_tracker
from nova.compute import task_states
from nova import exception as nova_exception
from nova import objects
from nova.virt import driver as virt_driver
from oslo_db import exception as db_exception
from oslo_log import log as logging
import oslo_messaging as messaging

from nova_revert_lock import locking
from nova_revert_lock.mixins import base
from nova_revert_lock import sections

LOG = logging.getLogger(__name__)

#: How many of the host's latest ``reverted`` migrations the look-up reads:
#: the one it must find was set during the running periodic task.
RECENT_REVERTS = 20

#: What the periodic task needs of an instance, as upstream's list loads.
_INSTANCE_ATTRS = ['system_metadata', 'numa_topology', 'flavor',
                   'migration_context', 'resources']

#: What a read through the conductor (or, in-process, the database) raises
#: when it cannot be made: messaging time-outs and delivery failures, a
#: conductor's remote error (a database error there arrives as one), a
#: database error, a migration deleted since its instance was listed.
#: Anything else (Nova's other exceptions included) is a defect, raised.
READ_ERRORS = (messaging.MessagingException, db_exception.DBError,
               nova_exception.MigrationNotFound)

#: the fix's name in the degraded records, and what it reads
FIX = 'source_window'
LOOK_UP = 'look up reverted migrations'
READ_DEST = 'read the migration of a revert'

#: Migration types whose revert runs through finish_revert_resize.
_RESIZE_TYPES = ('resize', 'migration')


def _can_resize(driver):
    """False for drivers that cannot resize or cold migrate (Ironic)."""
    impl = getattr(type(driver), 'migrate_disk_and_power_off', None)
    return (impl is not None and
            impl is not virt_driver.ComputeDriver.migrate_disk_and_power_off)


def _resize_from(migration, host, nodename):
    """True for a same-cell resize out of ``nodename`` (reverts here)."""
    return (migration.source_compute == host and
            migration.source_node == nodename and
            migration.dest_node != nodename and
            migration.migration_type in _RESIZE_TYPES and
            not (migration.obj_attr_is_set('cross_cell_move') and
                 migration.cross_cell_move))


def _reverting(instance):
    """True if ``instance`` is being reverted, with its migration context."""
    return (instance.task_state == task_states.RESIZE_REVERTING and
            instance.migration_context is not None)


def _given_back(migration, host, nodename):
    """Reverted, to ``nodename`` from another node: its claim is gone."""
    return (migration.status == 'reverted' and
            migration.dest_compute == host and
            migration.dest_node == nodename and
            not (migration.source_compute == host and
                 migration.source_node == nodename))


def _read_failed(nodename, what, error):
    """A read failed: the fix is degraded on the node (WARNING once)."""
    started = sections.degraded(FIX, nodename, what, error)
    log = LOG.warning if started else LOG.debug
    log('Cannot %(what)s from node %(node)s (%(error)s: %(reason)s); '
        'counting as upstream does until it works again',
        {'what': what, 'node': nodename, 'error': type(error).__name__,
         'reason': error})


def _read_works(nodename, what):
    """A read worked: end the node's degraded period, if any (INFO)."""
    period = sections.recovered(FIX, nodename, what)
    if period is not None:
        LOG.info('Can %(what)s from node %(node)s again, after %(count)d '
                 'failed read(s) since %(since)s', dict(period))


def _read_only(migration):
    """``migration``, which upstream's periodic task can no longer save.

    The look-up adds the host's ``reverted`` migrations to the list
    upstream's usage update walks. Upstream marks a migration it does not
    expect ``error`` and saves it (a stale record); the revert owns this
    one, so whichever branch upstream takes, its status in the database
    stays what the revert set. The object lives for one periodic run.
    """
    def save(*args, **kwargs):
        LOG.debug('Not saving migration %(migration)s as %(status)s from '
                  'the periodic task: the revert that set it reverted owns '
                  'it', {'migration': migration.uuid,
                         'status': migration.status})
        migration.obj_reset_changes()

    # NOTE: an attribute of this object only, which shadows the class's
    # remotable save(); nothing else of the object changes.
    migration.save = save
    return migration


def _log_new_at_info(tracker, store, nodename, found, message, values):
    """Log each (migration, instance) at INFO once, then at DEBUG."""
    logged = tracker.__dict__.setdefault(store, {})
    before = logged.get(nodename, ())
    for migration, instance in found:
        log = LOG.debug if migration.uuid in before else LOG.info
        log(message, values(migration), instance=instance)
    logged[nodename] = set(migration.uuid for migration, _i in found)


class SourceWindowTracker(object):
    """Tracker side: count reverting instances until they are back."""

    #: (context, nodename) of the running periodic task, or None
    _nrl_node = None

    # NOTE: the memory of the node's outgoing resizes is written by RPC
    # handlers without the lock: only single dict operations, atomic on
    # eventlet and native threads. The class is swapped in after __init__.

    def _nrl_watched(self, nodename):
        """migration uuid -> instance uuid: the node's noted resizes."""
        watch = self.__dict__.setdefault('_nrl_watch', {})
        return watch.setdefault(nodename, {})

    def _nrl_note_outgoing(self, migration):
        """Called by this host's ``resize_instance``: a resize begins."""
        try:
            if _resize_from(migration, self.host, migration.source_node):
                self._nrl_watched(migration.source_node)[migration.uuid] = (
                    migration.instance_uuid)
        except Exception:
            # NOTE: never cost the resize itself; the periodic task notes
            # the migration too while it is in progress.
            LOG.debug('Cannot note migration %s', migration, exc_info=True)

    def _nrl_forget_outgoing(self, migration):
        """Called by this host's ``confirm_resize``: the resize is over."""
        try:
            self._nrl_watched(migration.source_node).pop(migration.uuid,
                                                         None)
        except Exception:
            LOG.debug('Cannot forget migration %s', migration, exc_info=True)

    @locking.under_compute_resource_semaphore
    def _update_available_resource(self, context, resources, startup=False):
        """Upstream's periodic body, under the installed tracker's lock."""
        self._nrl_node = (context, resources['hypervisor_hostname'])
        try:
            upstream = inspect.unwrap(
                resource_tracker.ResourceTracker._update_available_resource)
            return upstream(self, context, resources, startup=startup)
        finally:
            self._nrl_node = None

    def _update_usage_from_instances(self, context, instances, nodename):
        """Leave out what reverts gave back; still return every instance."""
        leaving = self._nrl_given_back(context, instances, nodename)
        if not leaving:
            # NOTE: the periodic task's every run and node: no second loop
            # over the instances, which upstream's return already has.
            return super(
                SourceWindowTracker, self)._update_usage_from_instances(
                    context, instances, nodename)
        counted = [i for i in instances if i.uuid not in leaving]
        instance_by_uuid = super(
            SourceWindowTracker, self)._update_usage_from_instances(
                context, counted, nodename)
        for instance in instances:
            instance_by_uuid.setdefault(instance.uuid, instance)
        return instance_by_uuid

    def _nrl_migration_of(self, context, instance):
        return objects.Migration.get_by_id(
            context, instance.migration_context.migration_id)

    def _nrl_given_back(self, context, instances, nodename):
        """Instance uuid -> Migration of the reverts whose claim is gone."""
        found = []
        try:
            # NOTE: once per instance on every run: the cheap test first.
            for instance in base.members(instances):
                if (instance.task_state == task_states.RESIZE_REVERTING and
                        _reverting(instance)):
                    migration = self._nrl_migration_of(context, instance)
                    if _given_back(migration, self.host, nodename):
                        found.append((migration, instance))
        except READ_ERRORS as e:
            _read_failed(nodename, READ_DEST, e)
            return {}
        _read_works(nodename, READ_DEST)
        _log_new_at_info(
            self, '_nrl_dest_logged', nodename, found,
            'Not counting the instance on node %(node)s: its revert '
            'dropped the claim here (migration %(migration)s); its '
            'source %(source)s counts it until it is back',
            lambda migration: {'node': nodename, 'migration': migration.uuid,
                               'source': migration.source_compute})
        return dict((instance.uuid, migration)
                    for migration, instance in found)

    def _pair_instances_to_migrations(self, migrations, instance_by_uuid):
        """Count what upstream's two reads missed (see the module doc).

        The usage update, allocation clean-up and PCI tracker all see what
        is added here to the same list and dict.
        """
        super(SourceWindowTracker, self)._pair_instances_to_migrations(
            migrations, instance_by_uuid)
        node, self._nrl_node = self._nrl_node, None
        if node is None or not _can_resize(self.driver):
            return
        context, nodename = node
        for migration, instance in self._nrl_find_reverting(
                context, nodename, migrations, instance_by_uuid):
            # NOTE: one copy for all its migrations: upstream's usage update
            # would load it again for an earlier failed ('error') move.
            for other in migrations:
                if other.instance_uuid == instance.uuid:
                    other.instance = instance
            migration.instance = instance
            if migration not in migrations.objects:
                migrations.objects.append(_read_only(migration))
            if self._nrl_landed(instance, nodename):
                # Back since upstream's instance read: count it as the next
                # run will (else as the outgoing migration it is or was).
                instance_by_uuid[instance.uuid] = instance
                self._update_usage_from_instance(context, instance, nodename)

    def _nrl_landed(self, instance, nodename):
        return instance.host == self.host and instance.node == nodename

    def _nrl_find_reverting(self, context, nodename, migrations,
                            instance_by_uuid):
        """(Migration, Instance) of the reverts neither read counted."""
        try:
            found = self._nrl_query(context, nodename, migrations,
                                    instance_by_uuid)
        except READ_ERRORS as e:
            # NOTE: the look-up only adds usage that upstream forgets; a
            # read that cannot be made must never cost the periodic task
            # itself, nor flood the log.
            _read_failed(nodename, LOOK_UP, e)
            return []
        _read_works(nodename, LOOK_UP)
        _log_new_at_info(
            self, '_nrl_logged', nodename, found,
            'Counting migration %(migration)s on its source node '
            '%(node)s while the revert brings the instance back from '
            '%(dest)s',
            lambda migration: {'migration': migration.uuid,
                               'node': migration.source_node,
                               'dest': migration.dest_compute})
        return found

    def _nrl_left(self, nodename, migrations, instance_by_uuid):
        """Noted resizes off the list, instance not back; None: first run."""
        first = nodename not in self.__dict__.get('_nrl_seen_nodes', ())
        watch = self._nrl_watched(nodename)
        listed = set()
        for m in migrations:
            listed.add(m.uuid)
            if _resize_from(m, self.host, nodename):
                if m.status == 'error':
                    # Listed from Victoria on; a failed move is over.
                    watch.pop(m.uuid, None)
                else:
                    watch[m.uuid] = m.instance_uuid
        left = {}
        for migration_uuid, instance_uuid in list(watch.items()):
            if migration_uuid in listed:
                continue
            if instance_uuid in instance_by_uuid:
                # Back, and counted by upstream's own read.
                watch.pop(migration_uuid, None)
            else:
                left[migration_uuid] = instance_uuid
        return None if first else left

    def _nrl_query(self, context, nodename, migrations, instance_by_uuid):
        def outgoing(m):
            return (_resize_from(m, self.host, nodename) and
                    m.instance_uuid not in instance_by_uuid)

        left = self._nrl_left(nodename, migrations, instance_by_uuid)
        # Reverting when upstream listed it: its instance may return
        # before upstream's usage update would load it.
        candidates = collections.OrderedDict(
            (m.instance_uuid, m) for m in migrations
            if m.status == 'reverting' and outgoing(m))
        if left is None or left:
            self._nrl_recent(context, nodename, migrations, left,
                             candidates, outgoing)
        # NOTE: a first run whose look-up failed is retried as a first run.
        self.__dict__.setdefault('_nrl_seen_nodes', set()).add(nodename)
        if not candidates:
            return []
        instances = objects.InstanceList.get_by_filters(
            context, {'uuid': list(candidates), 'deleted': False},
            expected_attrs=_INSTANCE_ATTRS)
        found = []
        for instance in instances:
            migration = candidates[instance.uuid]
            if self._nrl_reverting(instance, migration, nodename):
                found.append((migration, instance))
        watch = self._nrl_watched(nodename)
        if left is None:
            # The node's first run: keep watching what it counts.
            watch.update((m.uuid, m.instance_uuid) for m, _i in found)
        else:
            # The others are settled (confirmed, failed, reverted long ago,
            # instance moved on or deleted); a reverted one stays final.
            counted = set(m.uuid for m, _i in found)
            for migration_uuid in left:
                if migration_uuid not in counted:
                    watch.pop(migration_uuid, None)
        return found

    def _nrl_recent(self, context, nodename, migrations, left, candidates,
                    outgoing):
        """Add the recent reverts to look at (all of them on a first run)."""
        # Reverted before upstream's migration read. An earlier failed
        # move, listed as 'error' from Victoria on, must not hide it.
        moving = set(m.instance_uuid for m in migrations
                     if m.status != 'error')
        recent = objects.MigrationList.get_by_filters(
            context, {'source_compute': self.host, 'status': 'reverted'},
            sort_keys=['updated_at', 'id'], sort_dirs=['desc', 'desc'],
            limit=RECENT_REVERTS)
        for m in recent:
            if (outgoing(m) and m.instance_uuid not in moving and
                    (left is None or m.uuid in left)):
                candidates.setdefault(m.instance_uuid, m)

    def _nrl_reverting(self, instance, migration, nodename):
        """True if ``instance`` is (still) the one ``migration`` reverts."""
        if instance.migration_context is not None:
            # Not back yet, or back by finish_revert_resize's first save
            # only.
            return (instance.task_state == task_states.RESIZE_REVERTING and
                    instance.migration_context.migration_id == migration.id)
        # Back since the migration was read: finish_revert_resize's second
        # save dropped the migration context and set launched_at. Its last
        # save, which clears the task state, comes later (after the volume
        # attachments, a conductor call away): the task state says nothing.
        return (self._nrl_landed(instance, nodename) and
                instance.launched_at is not None and
                migration.updated_at is not None and
                instance.launched_at >= migration.updated_at)


def _argument(args, kwargs, name, position):
    """An RPC handler's argument, by name (as RPC passes it) or position."""
    if name in kwargs:
        return kwargs[name]
    return args[position] if len(args) > position else None


class SourceWindowMixin(object):
    """Manager side: tell a composed tracker when a resize begins or ends."""

    def resize_instance(self, context, *args, **kwargs):
        # (instance, image, migration, ...) in every release
        migration = _argument(args, kwargs, 'migration', 2)
        note = getattr(self.rt, '_nrl_note_outgoing', None)
        if migration is not None and note is not None:
            note(migration)
        return super(SourceWindowMixin, self).resize_instance(
            context, *args, **kwargs)

    def confirm_resize(self, context, *args, **kwargs):
        # (instance, migration) in every release
        try:
            return super(SourceWindowMixin, self).confirm_resize(
                context, *args, **kwargs)
        finally:
            migration = _argument(args, kwargs, 'migration', 1)
            forget = getattr(self.rt, '_nrl_forget_outgoing', None)
            if migration is not None and forget is not None:
                forget(migration)


# NOTE: one implementation: every series reads, pairs and reverts alike.
SPEC = base.MixinSpec('source_window', base.Implementation(
    manager=SourceWindowMixin, tracker=SourceWindowTracker))
