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

"""Bug 1894095: a live migration rollback raced by the destination's periodic.

Nova's libvirt functional framework (fake libvirt, real driver, NUMA and
pinning code), two hosts of 4 dedicated pCPUs each, as upstream's
reproducer (99850a0481) sets them up:

1. server A (2 pinned vCPUs) boots on host0, server B on host1: both are
   pinned to pCPUs 0,1 of their host;
2. A is live migrated to host1, which claims pCPUs 2,3 for it; the
   migration itself fails (the driver calls the rollback, as libvirt's
   job monitor does on a failed job), and the source rolls back;
3. the moment the destination has dropped its claim
   (``drop_move_claim_at_destination`` returned to the source), before
   the source sets the migration's final status, both hosts' periodic
   tasks run: the window.

On plain Nova host1's periodic task counts the in-progress migration
again: host1 reads pCPUs 0-3 pinned while it holds only B. With the
mixin host1 reads 0,1, and the migration record is the source's alone:
the destination writes no migration, on any path (the source's status
while the rollback runs, a source whose call to the destination timed
out, a destination whose database calls fail).

What the source's periodic task reads in the window is recorded too:
plain Nova's destination saved the instance with the destination's
pinning in its clean-up (Ussuri on); with the mixin the record is the
instance's own again as the destination's rollback returns (see the
module doc of :mod:`nova_revert_lock.mixins.live_migration_rollback`).

The other rollback path: the destination's ``pre_live_migration``
fails. The source sets the migration ``error`` before it rolls back, so
a destination periodic task before the drop already rebuilds the node
without the claim; plain Nova's drop then unpins the claimed pCPUs a
second time, ``CPUUnpinningInvalid`` reaches the source and the server
is left in ``MIGRATING``. With the mixin the drop finds nothing left to
drop and the server is ACTIVE on its source again.
"""

from nova.tests import functional  # noqa: F401 (eventlet first)

import eventlet
import fixtures
import oslo_messaging

from nova.conductor import manager as conductor_manager
from nova import exception
from nova import objects

from nova_revert_lock import activation
from nova_revert_lock import fixes
from nova_revert_lock import locking
from nova_revert_lock.mixins import base as mixin_base
from nova_revert_lock.mixins import live_migration_rollback
from nova_revert_lock import sections
from nova_revert_lock.tests.functional import base
from nova_revert_lock.tests.functional import hooks
from nova_revert_lock.tests.functional import test_source_window_flip
from nova_revert_lock.tests.functional import test_source_window_pinning

SOURCE = test_source_window_pinning.SOURCE
DEST = test_source_window_pinning.DEST

#: Statuses the periodic task of every release counts as not in progress.
NOT_IN_PROGRESS = ('confirmed', 'reverted', 'error', 'failed', 'completed',
                   'cancelled', 'done')


def nova_has_fix():
    """True if the installed Nova carries the fix (the patch series').

    No release does: only a Nova built with this project's patch series
    (patches/train, ussuri, ussuri-21.2.4), which the guard recognises.
    """
    return live_migration_rollback.SPEC.fixed_upstream()


def dropped_claims(rt, nodename):
    """Migration ids whose dropped claim ``rt`` remembers on the node."""
    if nova_has_fix():
        return sorted(migration_id for migration_id, node in
                      rt.dropped_live_migration_claims.items()
                      if node == nodename)
    dropped = getattr(rt, '_nrl_dropped', None) or {}
    return sorted(dropped.get(nodename, {}))


def dest_cleanup_saves_applied_context():
    """True if the destination's clean-up runs with the context applied.

    Ussuri and later run the driver's rollback at the destination inside
    ``instance.mutated_migration_context()`` (Train does not): the
    libvirt driver's save there writes the destination's NUMA topology
    into the instance record.
    """
    from nova.compute import manager
    # NOTE: 34.0.0 moves the work into a helper
    return any(
        mixin_base.calls('nova.compute.manager:ComputeManager.' + name,
                         'mutated_migration_context')
        for name in ('rollback_live_migration_at_destination',
                     '_do_rollback_live_migration_at_destination')
        if hasattr(manager.ComputeManager, name))


class _RollbackBase(test_source_window_pinning._PinningWindowBase):

    def setUp(self):
        super(_RollbackBase, self).setUp()
        # NOTE: the destination's checks write a test file there (Nova 23
        # and later point it at a temporary directory themselves).
        self.flags(instances_path=self.useFixture(fixtures.TempDir()).path)
        # NOTE: both hosts share that directory; Ussuri's fake image
        # backend cannot answer the shared storage checks that follow.
        # Shared instance path, no shared block storage: the rollback
        # cleans up on the destination as upstream's tests make it.
        self.useFixture(fixtures.MonkeyPatch(
            'nova.virt.libvirt.driver.LibvirtDriver._is_shared_block_storage',
            lambda *args, **kwargs: False))
        # NOTE: Ussuri's framework does not stub os-brick: no volumes here.
        self.useFixture(fixtures.MonkeyPatch(
            'nova.virt.libvirt.driver.LibvirtDriver.get_volume_connector',
            lambda *args, **kwargs: {}))
        # NOTE: as upstream's NUMA live migration tests: make the source
        # call rollback_live_migration_at_destination, and the libvirt
        # driver clean up (and save the instance) there.
        self.useFixture(fixtures.MonkeyPatch(
            'nova.compute.manager.ComputeManager.'
            '_live_migration_cleanup_flags',
            lambda *args, **kwargs: (True, True)))

        def fail_live_migration(driver, context, instance, dest,
                                post_method, recover_method,
                                block_migration=False, migrate_data=None):
            # What the libvirt job monitor does when the job fails.
            recover_method(context, instance, dest, migrate_data)

        self.useFixture(fixtures.MonkeyPatch(
            'nova.virt.libvirt.driver.LibvirtDriver.live_migration',
            fail_live_migration))

    # -- readings ----------------------------------------------------------

    def _host_pinned(self, host):
        node = objects.ComputeNode.get_by_nodename(self.ctxt, host)
        topology = objects.NUMATopology.obj_from_db_obj(node.numa_topology)
        pinned = set()
        for cell in topology.cells:
            pinned |= set(cell.pinned_cpus)
        return pinned

    def _migration_of(self, server_id):
        migrations = objects.MigrationList.get_by_filters(
            self.ctxt, {'instance_uuid': server_id,
                        'migration_type': 'live-migration'})
        self.assertEqual(1, len(migrations))
        return migrations[0]

    # -- the scenario ------------------------------------------------------

    def _boot_both(self):
        server_a = self._boot('nrl-a', self.flavor_a, SOURCE)
        server_b = self._boot('nrl-b', self.flavor_a, DEST)
        # NOTE: the same two pCPUs on each host (0,1; Train's fake host
        # gives 0,2): what the destination claims for A is the other two.
        self.pinned = self._pcpus(server_a['id'])
        self.assertEqual(2, len(self.pinned))
        self.assertEqual(self.pinned, self._pcpus(server_b['id']))
        self.claimed = {0, 1, 2, 3} - self.pinned
        return server_a, server_b

    def _record_after_dest_rollback(self, seen):
        """The record's pinning as the destination's rollback returns.

        In ``seen['record']``, read before anything else can write it.
        The RPC server looks the method up on the manager at each call.
        """
        manager = self.computes[DEST].manager
        orig = manager.rollback_live_migration_at_destination

        def rollback(context, instance, *args, **kwargs):
            try:
                return orig(context, instance, *args, **kwargs)
            finally:
                seen['record'] = self._pcpus(instance.uuid)

        manager.rollback_live_migration_at_destination = rollback

    def _slow_dest_cleanup(self, seconds=1.0):
        """The destination's driver rollback takes ``seconds`` more.

        After its save, as the libvirt driver's clean-up of a running
        migration does (it destroys the incoming guest and deletes its
        files): the source's cast does not wait for it. And the cast is
        handled beside the call that follows it, as a real
        nova-compute's RPC server does (a green thread per message;
        this framework's server takes them one after the other): the
        destination's manager runs it in a green thread of its own, on
        a copy of what the source sent.

        The source goes on once the driver's save is done, as when the
        cast is handled first (the source sends it first, to the same
        queue) and its save lands before the destination takes the drop
        call: what is raced is the drop against the clean-up's slow
        part, never the order in which the two green threads happen to
        start (which timing alone decided, and a loaded machine turned).
        """
        saved = eventlet.event.Event()

        def reached():
            if not saved.ready():
                saved.send()

        def rollback(orig, driver, *args, **kwargs):
            try:
                return orig(driver, *args, **kwargs)
            finally:
                reached()
                eventlet.sleep(seconds)

        hooks.wrap(self, 'nova.virt.libvirt.driver.LibvirtDriver.'
                   'rollback_live_migration_at_destination', rollback)
        dest = self.computes[DEST].manager

        def cast(orig_cast, rpcapi, ctxt, instance, host, destroy_disks,
                 migrate_data):
            self.assertEqual(DEST, host)

            def run(instance, migrate_data):
                try:
                    dest.rollback_live_migration_at_destination(
                        ctxt, instance, destroy_disks, migrate_data)
                finally:
                    # NOTE: a rollback that fails before the driver must
                    # not hold the source: the test's checks fail then.
                    reached()

            eventlet.spawn(run, instance.obj_clone(),
                           migrate_data.obj_clone())
            saved.wait()

        hooks.wrap(self, 'nova.compute.rpcapi.ComputeAPI.'
                   'rollback_live_migration_at_destination', cast)

    def _live_migrate(self, server_id):
        self.api.post_server_action(
            server_id, {'os-migrateLive': {'host': DEST,
                                           'block_migration': 'auto'}})

    def _watch_rollback(self):
        """Record each rollback the source finishes.

        :returns: list of the migration statuses the source's rollback
            saved last, one per rollback finished
        """
        done = []

        def rollback(orig_rollback, manager, context, instance, dest,
                     migrate_data=None, *args, **kwargs):
            try:
                return orig_rollback(manager, context, instance, dest,
                                     migrate_data, *args, **kwargs)
            finally:
                migration = getattr(migrate_data, 'migration', None)
                done.append(migration.status if migration else None)

        hooks.wrap(self, 'nova.compute.manager.ComputeManager.'
                   '_rollback_live_migration', rollback)
        return done

    def _wait_rolled_back(self, server_id, done, timeout=60):
        """Wait until the source's rollback is over; return the migration.

        :param done: the list :meth:`_watch_rollback` returned
        """
        deadline = eventlet.timeout.Timeout(timeout)
        try:
            while not done:
                eventlet.sleep(0.05)
        except eventlet.timeout.Timeout:
            self.fail('live migration of %s never rolled back' % server_id)
        finally:
            deadline.cancel()
        return self._migration_of(server_id)

    def _rollback_raced(self):
        """Steps 1-3 of the module doc; return what the window read.

        :returns: dict with the migration status and the pinned pCPUs of
            both hosts as the periodic tasks left them in the window, and
            the final migration status
        """
        server_a, _server_b = self._boot_both()
        self.server_a_id = server_a['id']
        seen = {}

        def drop_at_dest(orig_call, rpcapi, ctxt, instance, host, *a, **kw):
            result = orig_call(rpcapi, ctxt, instance, host, *a, **kw)
            if 'dropped' not in seen:
                # NOTE: what the source clears the task state over
                seen['record_at_drop'] = self._pcpus(instance.uuid)
                seen['dropped'] = self._host_pinned(DEST)
                seen['status'] = self._migration_of(instance.uuid).status
                self._periodic(DEST)
                self._periodic(SOURCE)
                seen[DEST] = self._host_pinned(DEST)
                seen[SOURCE] = self._host_pinned(SOURCE)
            return result

        hooks.wrap(self, 'nova.compute.rpcapi.ComputeAPI.'
                   'drop_move_claim_at_destination', drop_at_dest)

        def rollback_at_dest(orig_call, rpcapi, ctxt, instance, *a, **kw):
            # Train asks the destination to clean up after the drop,
            # Ussuri and later before it.
            seen.setdefault('at_dest_cleanup',
                            self._migration_of(instance.uuid).status)
            return orig_call(rpcapi, ctxt, instance, *a, **kw)

        hooks.wrap(self, 'nova.compute.rpcapi.ComputeAPI.'
                   'rollback_live_migration_at_destination',
                   rollback_at_dest)

        done = self._watch_rollback()
        self._live_migrate(server_a['id'])
        migration = self._wait_rolled_back(server_a['id'], done)
        self.assertIn('dropped', seen, 'the destination was never asked to '
                      'drop its claim')
        seen['final'] = migration.status
        # What the source's rollback saved last, as upstream's code chose
        # it (error on Ussuri, failed from Victoria on).
        seen['source_final'] = done[0]
        server = self._wait(server_a['id'], 'ACTIVE')
        self.assertEqual(SOURCE, server['OS-EXT-SRV-ATTR:host'])
        return seen


class LiveMigrationRollbackTest(_RollbackBase):
    """With the mixin the destination's periodic leaves the claim dropped.

    On a Nova built with the patch series the mixin stands aside and the
    series' fix must pass the same tests.
    """

    mixins = ['live_migration_rollback']

    def setUp(self):
        if base.activation_disabled() and not nova_has_fix():
            self.skipTest('plain Nova without the fix for bug 1894095')
        super(LiveMigrationRollbackTest, self).setUp()
        report = self.activation_report
        if nova_has_fix():
            self.assertIn('live_migration_rollback', report.fixed_upstream)
        else:
            self.assertIn('live_migration_rollback', report.mixins)

    def test_dest_periodic_in_window_counts_no_claim(self):
        seen = self._rollback_raced()
        self.assertEqual(self.pinned, seen['dropped'])
        self.assertEqual(self.pinned, seen[DEST])
        # The record is the source's: still in progress while the source
        # rolls back (whichever order its release calls the destination
        # in), then the status the source chose.
        self.assertNotIn(seen['status'], NOT_IN_PROGRESS)
        self.assertNotIn(seen['at_dest_cleanup'], NOT_IN_PROGRESS)
        self.assertIn(seen['final'], NOT_IN_PROGRESS)
        self.assertEqual(seen['source_final'], seen['final'])
        self._periodic(DEST)
        self._periodic(SOURCE)
        self.assertEqual(self.pinned, self._host_pinned(DEST))
        self.assertEqual(self.pinned, self._host_pinned(SOURCE))
        # Forgotten once the periodic task no longer lists the migration.
        rt = self.computes[DEST].manager.rt
        self.assertEqual([], dropped_claims(rt, DEST))

    def test_rollback_leaves_the_instance_its_own_pinning(self):
        """The source half: the record keeps the source's pCPUs."""
        seen = {}
        self._record_after_dest_rollback(seen)
        window = self._rollback_raced()
        self.assertEqual(self.pinned, seen['record'])
        self.assertEqual(self.pinned, window[SOURCE])
        self.assertEqual(self.pinned, self._pcpus(self.server_a_id))

    def test_the_source_ends_after_the_destinations_rollback(self):
        """A slow clean-up at the destination: the record is right.

        The source clears the task state once its drop call returns;
        the drop waits for the destination's rollback, save back
        included.
        """
        if not dest_cleanup_saves_applied_context():
            self.skipTest('Train: the clean-up runs without the context')
        self._slow_dest_cleanup()
        seen = self._rollback_raced()
        self.assertEqual(self.pinned, seen['record_at_drop'])
        self.assertEqual(self.pinned, self._pcpus(self.server_a_id))

    def test_a_rollback_outlasting_the_wait_degrades_the_fix(self):
        """Past the wait the claim is dropped anyway, and that is told.

        The fix is degraded on the destination's node (served by the
        status endpoint, named by ``status`` and ``damage``); the rollback
        still saves the instance's own pinning back when it ends.
        """
        if not dest_cleanup_saves_applied_context():
            self.skipTest('Train: the clean-up runs without the context')
        dest = self.computes[DEST].manager
        if not isinstance(dest,
                          live_migration_rollback.LiveMigrationRollbackMixin):
            self.skipTest('the mixin stands aside on this Nova')
        sections.COUNTERS.reset()
        self.useFixture(fixtures.MockPatchObject(
            live_migration_rollback, '_wait_timeout', return_value=0.2))
        self._slow_dest_cleanup(seconds=1.5)
        self._rollback_raced()
        (period,) = [p for p in sections.snapshot()['degraded']
                     if p['fix'] == live_migration_rollback.FIX]
        self.assertEqual(1, period['count'])
        self.assertIn(period['node'], dest.driver.get_available_nodes())
        self.assertEqual(live_migration_rollback.WAIT, period['what'])
        self.assertIn('RollbackOutlastedWait: the rollback of instance %s'
                      % self.server_a_id, period['reason'])
        # the rollback ends after the drop: the record is right again
        deadline = eventlet.timeout.Timeout(30)
        try:
            while self._pcpus(self.server_a_id) != self.pinned:
                eventlet.sleep(0.1)
        except eventlet.timeout.Timeout:
            self.fail('the rollback never saved the instance\'s own '
                      'pinning back')
        finally:
            deadline.cancel()

    def test_through_the_conductor(self):
        """The destination makes no database call of its own.

        A real nova-compute reaches the database through the conductor;
        here every object call made while the destination drops its claim
        is serialized as RPC would and run by a conductor manager.
        Upstream's destination neither reads nor writes the migration
        there, and neither does the mixin.
        """
        indirection = test_source_window_flip.SerializingIndirection(
            conductor_manager.ConductorManager())

        def through_conductor(orig_call, *args, **kwargs):
            with indirection.installed():
                return orig_call(*args, **kwargs)

        hooks.wrap(self, 'nova.compute.rpcapi.ComputeAPI.'
                   'drop_move_claim_at_destination', through_conductor)
        seen = self._rollback_raced()
        self.assertNotIn('Migration.get_by_id', indirection.calls)
        self.assertNotIn('Migration.save', indirection.calls)
        self.assertNotIn(seen['status'], NOT_IN_PROGRESS)
        self.assertEqual(self.pinned, seen[DEST])
        self.assertEqual(seen['source_final'], seen['final'])

    def test_failing_database_never_stops_the_drop(self):
        """A database call failing in the drop costs the drop nothing.

        Upstream's drop reads nothing: the mixin must not add a call
        whose failure leaves the claim in place. Every migration look-up
        fails while the destination drops its claim.
        """
        def failing(*args, **kwargs):
            raise oslo_messaging.MessagingTimeout('conductor gone')

        def drop_with_failing_lookups(orig_call, *args, **kwargs):
            with fixtures.MonkeyPatch(
                    'nova.objects.Migration.get_by_id', failing):
                return orig_call(*args, **kwargs)

        hooks.wrap(self, 'nova.compute.rpcapi.ComputeAPI.'
                   'drop_move_claim_at_destination',
                   drop_with_failing_lookups)
        seen = self._rollback_raced()
        self.assertEqual(self.pinned, seen['dropped'])
        self.assertEqual(self.pinned, seen[DEST])
        self.assertEqual(seen['source_final'], seen['final'])

    def test_source_timeout_status_is_kept(self):
        """A source whose call timed out keeps its ``error``.

        The destination's drop waits for the tracker's lock (held here,
        as a long periodic task would hold it) past the source's RPC
        time-out; the source then sets the migration ``error``, which is
        what ``_cleanup_incomplete_migrations`` later looks for. When the
        destination gets the lock it drops the claim and writes nothing.
        """
        server_a, _server_b = self._boot_both()
        # NOTE: in this framework every compute shares the one lock: it is
        # taken only once the source asks, the destination's claim made.
        lock = locking.tracker_lock(fixes.LOCK_REFS)
        release = eventlet.event.Event()
        holding = eventlet.event.Event()
        holders = []
        dest_calls = []

        def hold():
            holding.send()
            release.wait()

        def timed_out(orig_call, rpcapi, ctxt, instance, host, *a, **kw):
            holders.append(eventlet.spawn(lock.synchronized()(hold)))
            holding.wait()
            dest_calls.append(eventlet.spawn(
                orig_call, rpcapi, ctxt, instance, host, *a, **kw))
            eventlet.sleep(0.2)   # the destination now waits for the lock

            def release_once_error():
                while self._migration_of(instance.uuid).status != 'error':
                    eventlet.sleep(0.05)
                release.send()

            eventlet.spawn(release_once_error)
            raise oslo_messaging.MessagingTimeout('no reply in time')

        hooks.wrap(self, 'nova.compute.rpcapi.ComputeAPI.'
                   'drop_move_claim_at_destination', timed_out)
        self._live_migrate(server_a['id'])
        deadline = eventlet.timeout.Timeout(60)
        try:
            while not (dest_calls and release.ready()):
                eventlet.sleep(0.05)
            holders[0].wait()
            dest_calls[0].wait()
        finally:
            deadline.cancel()
        self.assertEqual('error', self._migration_of(server_a['id']).status)
        self.assertEqual(self.pinned, self._host_pinned(DEST))
        self._periodic(DEST)
        self.assertEqual(self.pinned, self._host_pinned(DEST))
        self.assertEqual('error', self._migration_of(server_a['id']).status)

    def test_periodic_waits_for_the_drop(self):
        """The drop and what the tracker remembers are one critical section.

        The destination's periodic task is started the moment the drop
        begins; the dropping greenthread then yields. The periodic waits
        for the lock, runs after the drop, and finds the claim dropped.
        """
        server_a, _server_b = self._boot_both()
        order = []
        periodics = []
        # NOTE: the composed tracker class is made at activation, not
        # importable by name: its unlocked drop is wrapped in place.
        tracker_cls = type(self.computes[DEST].manager.rt)
        orig_drop = tracker_cls._drop_move_claim

        def drop(rt, *args, **kwargs):
            if rt.host == DEST and not periodics:
                periodics.append(eventlet.spawn(self._raced_periodic,
                                                order))
                eventlet.sleep(0.5)
            result = orig_drop(rt, *args, **kwargs)
            if rt.host == DEST:
                order.append('drop')
            return result

        if '_drop_move_claim' in vars(tracker_cls):
            self.addCleanup(setattr, tracker_cls, '_drop_move_claim',
                            vars(tracker_cls)['_drop_move_claim'])
        else:
            self.addCleanup(delattr, tracker_cls, '_drop_move_claim')
        tracker_cls._drop_move_claim = drop
        done = self._watch_rollback()
        self._live_migrate(server_a['id'])
        self._wait_rolled_back(server_a['id'], done)
        self.assertEqual(1, len(periodics))
        periodics[0].wait()
        self.assertEqual(['drop', 'periodic'], order)
        self.assertEqual(self.pinned, self._host_pinned(DEST))
        self._periodic(DEST)
        self.assertEqual(self.pinned, self._host_pinned(DEST))

    def _raced_periodic(self, order):
        self._periodic(DEST)
        order.append('periodic')


class LiveMigrationRollbackCanary(_RollbackBase):
    """Plain Nova: the destination's periodic counts the dropped claim."""

    # NOTE: no release fixes bug 1894095; only the patch series' builds
    # skip the canary.
    extension = False

    def setUp(self):
        if nova_has_fix():
            self.skipTest('the installed Nova carries the fix for bug '
                          '1894095: no bug to show')
        super(LiveMigrationRollbackCanary, self).setUp()

    def test_dest_periodic_in_window_counts_claim_again(self):
        seen = self._rollback_raced()
        self.assertEqual(self.pinned, seen['dropped'])
        self.assertNotIn(seen['status'], NOT_IN_PROGRESS)
        # B on 0,1 and the rolled back migration on 2,3 again.
        self.assertEqual(self.pinned | self.claimed, seen[DEST])
        if dest_cleanup_saves_applied_context():
            # The source half: the instance record holds the
            # destination's pinning (saved by the libvirt driver's
            # clean-up there).
            self.assertEqual(self.claimed, seen[SOURCE])
        else:
            # Train: the clean-up runs without the migration context.
            self.assertEqual(self.pinned, seen[SOURCE])
        self.assertIn(seen['final'], NOT_IN_PROGRESS)
        self.assertEqual(seen['source_final'], seen['final'])
        # The next periodic task after the final status sets it right.
        self._periodic(DEST)
        self.assertEqual(self.pinned, self._host_pinned(DEST))

    def test_rollback_saves_the_destinations_pinning(self):
        """The source half, as the destination's rollback returns."""
        if not dest_cleanup_saves_applied_context():
            self.skipTest('Train: the clean-up runs without the context')
        seen = {}
        self._record_after_dest_rollback(seen)
        self._rollback_raced()
        self.assertEqual(self.claimed, seen['record'])

    def test_slow_cleanup_leaves_the_source_the_destinations_pinning(self):
        """The source half's window: the source ends before the clean-up.

        The record holds the destination's pinning when the source's
        drop call returns and it clears the task state.
        """
        if not dest_cleanup_saves_applied_context():
            self.skipTest('Train: the clean-up runs without the context')
        self._slow_dest_cleanup()
        seen = self._rollback_raced()
        self.assertEqual(self.claimed, seen['record_at_drop'])


class _MixedFleetBase(_RollbackBase):
    """One host runs the extension (default mixins), the other plain Nova.

    :attr:`patched_host` is started with the extension active, the other
    host plain: the manager class is picked when a compute starts.
    """

    extension = False
    patched_host = None

    def setUp(self):
        if nova_has_fix():
            self.skipTest('the installed Nova carries the fix for bug '
                          '1894095 on every host: no mixed fleet')
        super(_MixedFleetBase, self).setUp()

    def _start_pinning_compute(self, hostname):
        if hostname == self.patched_host:
            report = activation.activate()
            self.assertIn('live_migration_rollback', report.mixins)
            try:
                return super(_MixedFleetBase, self)._start_pinning_compute(
                    hostname)
            finally:
                activation.deactivate()
        return super(_MixedFleetBase, self)._start_pinning_compute(hostname)

    def _assert_composed(self):
        for host, compute in self.computes.items():
            composed = isinstance(
                compute.manager,
                live_migration_rollback.LiveMigrationRollbackMixin)
            self.assertEqual(host == self.patched_host, composed, host)


class MixedFleetPatchedDestTest(_MixedFleetBase):
    """A destination with the mixin closes its window for a plain source."""

    patched_host = DEST

    def test_dest_periodic_in_window_counts_no_claim(self):
        self._assert_composed()
        seen = self._rollback_raced()
        self.assertNotIn(seen['status'], NOT_IN_PROGRESS)
        self.assertEqual(self.pinned, seen[DEST])
        self.assertEqual(seen['source_final'], seen['final'])


class MixedFleetPatchedSourceTest(_MixedFleetBase):
    """A source with the mixin leaves a plain destination's window open."""

    patched_host = SOURCE

    def test_dest_periodic_in_window_counts_claim_again(self):
        self._assert_composed()
        seen = self._rollback_raced()
        self.assertNotIn(seen['status'], NOT_IN_PROGRESS)
        self.assertEqual(self.pinned | self.claimed, seen[DEST])


class _PreLiveMigrationFailureBase(_RollbackBase):
    """The destination's ``pre_live_migration`` fails (see the module doc)."""

    def setUp(self):
        super(_PreLiveMigrationFailureBase, self).setUp()

        def failing_pre_live_migration(*args, **kwargs):
            # Any cause: os-brick's privsep helper, a volume, a VIF.
            raise exception.MigrationError(
                reason='pre_live_migration failed at the destination')

        self.useFixture(fixtures.MonkeyPatch(
            'nova.virt.libvirt.driver.LibvirtDriver.pre_live_migration',
            failing_pre_live_migration))

    def _pre_live_migration_fails(self, periodic_in_window=True):
        """Live migrate A; the destination's preparation fails.

        :param periodic_in_window: run the destination's periodic task
            just before the source asks it to drop its claim (the
            migration is ``error`` by then)
        :returns: dict with what the window read: the migration's status
            and the destination's pinned pCPUs before and after its
            periodic task, the drop's error (class name) if it raised,
            the final migration status and the server as the API shows it
        """
        server_a, _server_b = self._boot_both()
        seen = {}

        def drop_at_dest(orig_call, rpcapi, ctxt, instance, host, *a, **kw):
            seen['status'] = self._migration_of(instance.uuid).status
            seen['claimed'] = self._host_pinned(DEST)
            if periodic_in_window:
                self._periodic(DEST)
            seen['in_window'] = self._host_pinned(DEST)
            try:
                return orig_call(rpcapi, ctxt, instance, host, *a, **kw)
            except Exception as e:
                seen['drop_error'] = type(e).__name__
                raise

        hooks.wrap(self, 'nova.compute.rpcapi.ComputeAPI.'
                   'drop_move_claim_at_destination', drop_at_dest)
        done = self._watch_rollback()
        self._live_migrate(server_a['id'])
        migration = self._wait_rolled_back(server_a['id'], done)
        self.assertIn('status', seen, 'the destination was never asked to '
                      'drop its claim')
        seen['final'] = migration.status
        seen['server'] = self.api.get_server(server_a['id'])
        return seen


class PreLiveMigrationFailureTest(_PreLiveMigrationFailureBase):
    """With the mixin the failed preparation leaves the server usable."""

    mixins = ['live_migration_rollback']

    def setUp(self):
        if base.activation_disabled() and not nova_has_fix():
            self.skipTest('plain Nova without the fix for bug 1894095')
        super(PreLiveMigrationFailureTest, self).setUp()

    def _assert_rolled_back(self, seen):
        self.assertNotIn('drop_error', seen)
        self.assertEqual('error', seen['status'])
        if base.lists_error_migrations():
            # Victoria on: the rollback's own final status after the
            # drop ('failed').
            self.assertIn(seen['final'], NOT_IN_PROGRESS)
        else:
            self.assertEqual('error', seen['final'])
        server = seen['server']
        self.assertEqual('ACTIVE', server['status'])
        self.assertIsNone(server['OS-EXT-STS:task_state'])
        self.assertEqual(SOURCE, server['OS-EXT-SRV-ATTR:host'])
        self.assertEqual(self.pinned, self._host_pinned(DEST))
        self._periodic(DEST)
        self._periodic(SOURCE)
        self.assertEqual(self.pinned, self._host_pinned(DEST))
        self.assertEqual(self.pinned, self._host_pinned(SOURCE))

    def test_dest_periodic_before_the_drop(self):
        seen = self._pre_live_migration_fails()
        self.assertEqual(self.pinned | self.claimed, seen['claimed'])
        if base.lists_error_migrations():
            # Victoria on, Nova counts the error migration while the
            # instance is live migrating: the claim stays until the drop
            # frees it, once.
            self.assertEqual(self.pinned | self.claimed, seen['in_window'])
        else:
            # The claim was counted, then the periodic task freed it.
            self.assertEqual(self.pinned, seen['in_window'])
        self._assert_rolled_back(seen)
        # Nothing to remember: no periodic task lists the migration.
        rt = self.computes[DEST].manager.rt
        self.assertEqual([], dropped_claims(rt, DEST))

    def test_no_periodic_before_the_drop(self):
        """Still tracked: the drop frees the claim, as upstream's does."""
        seen = self._pre_live_migration_fails(periodic_in_window=False)
        self.assertEqual(self.pinned | self.claimed, seen['in_window'])
        self._assert_rolled_back(seen)


class PreLiveMigrationFailureCanary(_PreLiveMigrationFailureBase):
    """Plain Nova: the drop unpins twice and the server is stuck."""

    # NOTE: no release orders this rollback otherwise; only the patch
    # series' builds skip the canary.
    extension = False

    def setUp(self):
        if nova_has_fix():
            self.skipTest('the installed Nova carries the fix for bug '
                          '1894095: no bug to show')
        if base.lists_error_migrations():
            self.skipTest('Victoria on, the periodic task counts the error '
                          'migration of a live migrating instance: its '
                          'claim is never freed before the drop')
        super(PreLiveMigrationFailureCanary, self).setUp()

    def test_dest_periodic_before_the_drop_strands_the_server(self):
        seen = self._pre_live_migration_fails()
        self.assertEqual('error', seen['status'])
        self.assertEqual(self.pinned | self.claimed, seen['claimed'])
        self.assertEqual(self.pinned, seen['in_window'])
        # The drop unpins pCPUs the periodic task already freed.
        self.assertIn('CPUUnpinningInvalid', seen.get('drop_error', ''))
        # The source's rollback stopped before putting the server back.
        server = seen['server']
        self.assertEqual('MIGRATING', server['status'])
        self.assertEqual('migrating', server['OS-EXT-STS:task_state'])
        self.assertEqual('error', seen['final'])
