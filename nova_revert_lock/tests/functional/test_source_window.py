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

"""The source-side window of a revert, probed by the source's periodic task.

A server is resized host1 -> host2 (1 -> 2 vCPUs) and reverted. While the
revert runs, the source's ``update_available_resource`` is run at each
point of the window, and the source's vCPU usage it leaves is recorded:

``cast``
    on the destination, as it casts ``finish_revert_resize`` to the source
    (migration ``reverted``, destination claim dropped)
``source-entry``
    as the source's ``finish_revert_resize`` starts
``revert-start``
    at its ``resize.revert.start`` notification
``before-host-save``
    just before the source saves ``instance.host`` back
``after-host-save``
    just after that save (the instance is back: counted once, not twice)

On plain Nova (every release, including those with upstream's fix for bug
1879878) the first four read 0: the instance is counted on neither host.
With the extension each reads 1. ``SourceWindowCanary`` shows the window
on plain Nova, so that the tests with the extension prove something.
"""

import time

import eventlet
from nova.compute import resource_tracker
from nova.conductor import manager as conductor_manager
from nova import context as nova_context
from nova import exception as nova_exception
from nova import service
from nova.tests.functional import integrated_helpers
from oslo_db import exception as db_exception
import oslo_messaging as messaging

from nova_revert_lock.audit import endpoint
from nova_revert_lock.guard import assess
from nova_revert_lock.mixins import source_window
from nova_revert_lock import report as nrl_report
from nova_revert_lock import sections
from nova_revert_lock.tests.functional import base
from nova_revert_lock.tests.functional import hooks
from nova_revert_lock.tests.functional import test_source_window_flip

PLAIN_MANAGER = 'nova.compute.manager.ComputeManager'
WINDOW = ('cast', 'source-entry', 'revert-start', 'before-host-save')
LANDED = 'after-host-save'


# What a Nova that closes the window itself runs of these tests (defined in
# base, as the flip and pinning tests this module imports use them too).
window_fixed_upstream = base.window_fixed_upstream
_OnFixedNovaMixin = base.OnFixedWindowNovaMixin


class WindowProbeMixin(object):
    """Run the source's periodic task at each point of the revert window.

    Use after :class:`~.base.RaceMixin` in the bases. ``plain_hosts`` are
    started with Nova's own manager even when the extension is active,
    which is how a deployment looks while it is rolled out host by host.
    """

    source = 'host1'
    dest = 'host2'
    plain_hosts = ()
    #: run the destination's periodic task too at each probe, after the
    #: source's, and record its vCPUs in ``dest_probes``
    probe_dest = False

    def setUp(self):
        super(WindowProbeMixin, self).setUp()
        self.probing = False
        self.probes = []
        self.dest_probes = []
        self._in_source_half = False
        self._in_probe = False
        self._install_window_probes()

    def _start_compute(self, host, *args, **kwargs):
        if not (self.extension and host in self.plain_hosts):
            return super(WindowProbeMixin, self)._start_compute(
                host, *args, **kwargs)
        key = assess.SERVICE_BINARY
        saved = service.SERVICE_MANAGERS[key]
        service.SERVICE_MANAGERS[key] = PLAIN_MANAGER
        try:
            return super(WindowProbeMixin, self)._start_compute(
                host, *args, **kwargs)
        finally:
            service.SERVICE_MANAGERS[key] = saved

    def probe(self, label):
        """Run the source's periodic task; record the vCPUs it counts."""
        hosts = (self.source, self.dest) if self.probe_dest else (
            self.source,)
        self._in_probe = True
        try:
            # NOTE: a context of its own: the probe runs in a compute's
            # greenthread while the test polls the database with
            # self.ctxt, and a context carries its open transaction.
            for host in hosts:
                self._run_probe_periodic(host)
        finally:
            self._in_probe = False
        self.probes.append((label, self.vcpus_used(self.source)))
        if self.probe_dest:
            self.dest_probes.append((label, self.vcpus_used(self.dest)))

    def _run_probe_periodic(self, host):
        self.computes[host].manager.update_available_resource(
            nova_context.get_admin_context())

    def _install_window_probes(self):
        test = self

        def cast(orig_cast, rpcapi, ctxt, instance, migration, *args,
                 **kwargs):
            if test.probing:
                test.probe('cast')
            return orig_cast(rpcapi, ctxt, instance, migration, *args,
                             **kwargs)

        def finish_revert_resize(orig_finish, manager, *args, **kwargs):
            at_source = test.probing and manager.host == test.source
            if at_source:
                test._in_source_half = True
                test.probe('source-entry')
            try:
                return orig_finish(manager, *args, **kwargs)
            finally:
                if at_source:
                    test._in_source_half = False

        def notify(orig_notify, manager, context, instance, event_suffix,
                   *args, **kwargs):
            if (test._in_source_half and manager.host == test.source and
                    event_suffix == 'resize.revert.start'):
                test.probe('revert-start')
            return orig_notify(manager, context, instance, event_suffix,
                               *args, **kwargs)

        def save(orig_save, instance, *args, **kwargs):
            moving_back = (
                test._in_source_half and not test._in_probe and
                'host' in instance.obj_what_changed() and
                instance.host == test.source)
            if moving_back:
                test.probe('before-host-save')
            result = orig_save(instance, *args, **kwargs)
            if moving_back:
                test.probe(LANDED)
            return result

        hooks.wrap(self, 'nova.compute.rpcapi.ComputeAPI.finish_revert_resize',
                   cast)
        hooks.wrap(self, 'nova.compute.manager.ComputeManager.'
                   'finish_revert_resize', finish_revert_resize)
        hooks.wrap(self, 'nova.compute.manager.ComputeManager.'
                   '_notify_about_instance_usage', notify)
        hooks.wrap(self, 'nova.objects.Instance.save', save)

    def _probed_revert(self):
        """Resize host1 -> host2, revert with the probes on."""
        return self._probed_revert_of(
            self._boot(self.flavor_small, host=self.source))

    def _probed_revert_of(self, server):
        server = self.resize(server, self.flavor_large)
        self.assertEqual(self.dest, self._host_of(server))
        self.probing = True
        server = self.revert(server)
        self.probing = False
        self.assertEqual(self.source, self._host_of(server))
        self.assertEqual(list(WINDOW) + [LANDED],
                         [label for label, _vcpus in self.probes])
        return server

    def _assert_healed(self):
        for host in self.hosts:
            self.run_periodic(host)
        self.assertEqual((1, 0), (self.vcpus_used(self.source),
                                  self.vcpus_used(self.dest)))

    def _manager_classes(self):
        return dict((host, type(self.computes[host].manager).__name__)
                    for host in self.hosts)


class _WindowTestBase(base.ExtensionFixtureMixin, base.RaceMixin,
                      WindowProbeMixin,
                      integrated_helpers.ProviderUsageBaseTestCase):
    pass


class SourceWindowTest(_OnFixedNovaMixin, _WindowTestBase):
    """With the extension on both hosts the source never loses count."""

    on_fixed_nova = ('test_source_counts_the_instance_through_the_window',
                     'test_revert_cycles_never_count_twice')

    def setUp(self):
        super(SourceWindowTest, self).setUp()
        report = self.activation_report
        self.assertIn(str(report.state),
                      (nrl_report.PATCHED, nrl_report.ALREADY_FIXED),
                      report.problems)
        if window_fixed_upstream():
            self.assertNotIn('source_window', report.mixins)
        else:
            self.assertIn('source_window', report.mixins)

    def test_source_counts_the_instance_through_the_window(self):
        self._probed_revert()
        self.assertEqual([(label, 1) for label in WINDOW] + [(LANDED, 1)],
                         self.probes)
        self._assert_healed()

    def test_revert_cycles_never_count_twice(self):
        server = self._boot(self.flavor_small, host=self.source)
        for _i in range(2):
            server = self.resize(server, self.flavor_large)
            self.probing = True
            server = self.revert(server)
            self.probing = False
        self.assertEqual([1] * 10, [vcpus for _l, vcpus in self.probes])
        self._assert_healed()

    def _calls_of_periodic(self, host, plain=False):
        """The object calls of one periodic run of ``host``, as RPC sends.

        :param plain: run it with Nova's own tracker class instead
        """
        indirection = test_source_window_flip.SerializingIndirection(
            conductor_manager.ConductorManager())
        rt = self.tracker(host)
        composed = type(rt)
        if plain:
            rt.__class__ = resource_tracker.ResourceTracker
        try:
            with indirection.installed():
                self.run_periodic(host)
        finally:
            rt.__class__ = composed
        # NOTE: the service group's heartbeat (Service.save) runs on its
        # own timer and may land in either run.
        return [call for call in indirection.calls if call != 'Service.save']

    def _wait_for(self, condition, timeout=10):
        deadline = time.time() + timeout
        while not condition():
            if time.time() > deadline:
                self.fail('timed out')
            eventlet.sleep(0.05)

    def _assert_no_call_of_its_own(self, state):
        for host in self.hosts:
            # The first run after a move saves the node's new usage; a
            # plain one does it here, so that the two compared runs find
            # the same books. Plain runs leave the mixin's memory alone.
            self._calls_of_periodic(host, plain=True)
            plain = self._calls_of_periodic(host, plain=True)
            ours = self._calls_of_periodic(host)
            self.assertEqual((state, host, plain), (state, host, ours))

    def test_idle_periodic_makes_no_call_of_its_own(self):
        # The look-up runs under the lock every claim waits for: with no
        # revert that can be in its window, a run makes exactly the object
        # calls upstream's makes, through the conductor.
        server = self._boot(self.flavor_small, host=self.source)
        self._assert_no_call_of_its_own('booted')
        server = self.resize(server, self.flavor_large)
        self._assert_no_call_of_its_own('resized, not confirmed')
        migration = self._migration(server['id'])
        self.assertIn(migration.uuid,
                      self.tracker(self.source)._nrl_watched(self.source))
        server = self.confirm(server)
        # confirm_resize tells the tracker once upstream's handler is done,
        # a moment after the status the API waits for.
        self._wait_for(lambda: migration.uuid not in self.tracker(
            self.source)._nrl_watched(self.source))
        self._assert_no_call_of_its_own('confirmed')
        server = self.resize(server, self.flavor_small)
        server = self.revert(server)
        self.assertEqual(self.dest, self._host_of(server))
        # The first run after the revert, the instance back: no look-up.
        self._assert_no_call_of_its_own('reverted')
        self.assertEqual({}, self.tracker(self.dest)._nrl_watched(self.dest))
        self.assertEqual({},
                         self.tracker(self.source)._nrl_watched(self.source))

    def _history_after_restart(self, fail_first=False):
        """A revert from the source recorded before this process started.

        Its instance has moved on to the destination since. The source's
        tracker forgets what it remembered, as a nova-compute starting now
        has nothing in memory.

        :param fail_first: the first look-up of reverts raises
        :returns: (server, fetched instance uuid lists, look-ups made)
        """
        moved = self._boot(self.flavor_small, host=self.dest)
        self.record_migration(moved['id'], 'reverted', self.source,
                              self.dest)
        rt = self.tracker(self.source)
        rt.__dict__.pop('_nrl_watch', None)
        rt.__dict__.pop('_nrl_seen_nodes', None)
        fetched, looked_up = [], []
        failures = ([messaging.MessagingTimeout('conductor gone')]
                    if fail_first else [])

        def instances(orig, context, filters, *args, **kwargs):
            if 'uuid' in filters:
                fetched.append(list(filters['uuid']))
            return orig(context, filters, *args, **kwargs)

        def migrations(orig, context, filters, *args, **kwargs):
            if filters.get('status') == 'reverted':
                looked_up.append(filters)
                if failures:
                    raise failures.pop()
            return orig(context, filters, *args, **kwargs)

        hooks.wrap(self, 'nova.objects.InstanceList.get_by_filters',
                   instances)
        hooks.wrap(self, 'nova.objects.MigrationList.get_by_filters',
                   migrations)
        return moved, fetched, looked_up

    def test_history_is_read_once_per_process(self):
        # The node's first periodic run looks at the reverts from before
        # the process started, once; a revert whose instance has moved on
        # since is never fetched again.
        moved, fetched, looked_up = self._history_after_restart()
        for _i in range(3):
            self.run_periodic(self.source)
        self.assertEqual([[moved['id']]], fetched)
        self.assertEqual(1, len(looked_up))
        self.assertEqual(0, self.vcpus_used(self.source))
        self.admin_api.delete_server(moved['id'])
        self._wait_gone(moved['id'])
        # A revert that is not settled is still looked at on every run.
        self._probed_revert()
        self.assertEqual([(label, 1) for label in WINDOW] + [(LANDED, 1)],
                         self.probes)
        self._assert_healed()

    def test_failed_first_look_up_is_retried(self):
        # The node's first look-up fails: the next run looks again, as a
        # first run, and the one after does not.
        moved, fetched, looked_up = self._history_after_restart(
            fail_first=True)
        self.run_periodic(self.source)
        self.assertEqual([], fetched)
        self.run_periodic(self.source)
        self.assertEqual([[moved['id']]], fetched)
        self.run_periodic(self.source)
        self.assertEqual([[moved['id']]], fetched)
        self.assertEqual(2, len(looked_up))

    def test_resize_noted_while_the_source_was_down(self):
        # The source restarted after its resize_instance: the periodic
        # task notes the resize from the in-progress list, and the window
        # of its revert stays closed.
        server = self._boot(self.flavor_small, host=self.source)
        server = self.resize(server, self.flavor_large)
        rt = self.tracker(self.source)
        rt.__dict__.pop('_nrl_watch', None)
        self.run_periodic(self.source)
        self.assertEqual([server['id']],
                         list(rt._nrl_watched(self.source).values()))
        self.probing = True
        server = self.revert(server)
        self.probing = False
        self.assertEqual([(label, 1) for label in WINDOW] + [(LANDED, 1)],
                         self.probes)
        self._assert_healed()

    def test_an_earlier_failed_move_does_not_hide_the_revert(self):
        # A move of the same instance that failed earlier left its
        # migration in 'error'. Victoria and later list error migrations
        # with the in-progress ones (get_in_progress_and_error); upstream
        # counts nothing by such a migration, so it must not keep the
        # look-up from counting the revert.
        if not base.lists_error_migrations():
            self.skipTest('this Nova does not list error migrations with '
                          'the in-progress ones')
        server = self._boot(self.flavor_small, host=self.source)
        self.record_migration(server['id'], 'error', self.source,
                              self.dest)
        self._probed_revert_of(server)
        self.assertEqual([(label, 1) for label in WINDOW] + [(LANDED, 1)],
                         self.probes)
        self._assert_healed()

    def test_failed_look_up_counts_as_upstream(self):
        def broken(*args, **kwargs):
            raise db_exception.DBConnectionError('database gone')

        self.stub_out('nova_revert_lock.mixins.source_window.'
                      'SourceWindowTracker._nrl_query', broken)
        self._probed_revert()
        # The periodic task itself still runs; only the window is open.
        self.assertEqual([(label, 0) for label in WINDOW] + [(LANDED, 1)],
                         self.probes)
        self._assert_healed()

    def _degraded(self):
        return [(p['fix'], p['node'], p['what'])
                for p in sections.snapshot()['degraded']]

    def test_failed_look_up_is_served_as_degraded_until_it_works(self):
        failures = [messaging.MessagingTimeout('no reply')] * 2
        orig = source_window.SourceWindowTracker._nrl_query

        def flaky(tracker, *args, **kwargs):
            if failures:
                raise failures.pop()
            return orig(tracker, *args, **kwargs)

        self.stub_out('nova_revert_lock.mixins.source_window.'
                      'SourceWindowTracker._nrl_query', flaky)
        sections.COUNTERS.reset()
        self.run_periodic(self.source)
        self.run_periodic(self.source)
        self.assertEqual([('source_window', self.source,
                           source_window.LOOK_UP)], self._degraded())
        (period,) = sections.snapshot()['degraded']
        self.assertEqual(2, period['count'])
        self.assertIn('MessagingTimeout', period['reason'])
        status = endpoint.status_of(self.computes[self.source].manager)
        self.assertEqual([period], status['degraded'])
        self.run_periodic(self.source)
        self.assertEqual([], self._degraded())
        self.assertEqual({'source_window': 1},
                         sections.snapshot()['degraded_ended'])
        output = self.stdlog.logger.output
        self.assertEqual(1, output.count('Cannot look up reverted'))
        self.assertIn('Can look up reverted migrations from node %s again, '
                      'after 2 failed read(s)' % self.source, output)

    def test_a_defect_in_the_look_up_is_raised(self):
        # Only reads that cannot be made are absorbed; a programming error
        # fails the node's periodic task (Nova logs it), never silently.
        def defect(*args, **kwargs):
            raise AttributeError('no such field')

        self.stub_out('nova_revert_lock.mixins.source_window.'
                      'SourceWindowTracker._nrl_query', defect)
        sections.COUNTERS.reset()
        self.run_periodic(self.source)
        self.assertEqual([], self._degraded())
        entry = sections.snapshot()['periodic_by_node'].get(self.source)
        if entry is not None:
            self.assertEqual('failed', entry['outcome'])
            self.assertIn('AttributeError', entry['error'])
        self.assertIn('no such field', self.stdlog.logger.output)


class UpstreamBranchesMixin(object):
    """Upstream's usage update forced down each of its branches in the window.

    The look-up adds the revert's ``reverted`` migration to the list
    upstream's ``_update_usage_from_migrations`` walks. Whatever upstream
    does with it, the migration's status is the revert's: it is never
    saved with another one by a periodic task.
    """

    #: 'stale': upstream finds the instance's migration context naming
    #: another migration and marks this one ``error``; 'flavor': the usage
    #: update cannot find the flavor and skips it; 'fails': the usage
    #: update raises and the node's periodic task fails
    branch = None
    #: what upstream logs when it takes the branch
    BRANCH_LOGS = {
        'stale': 'marking migration as error',
        'flavor': 'Flavor could not be found, skipping migration',
        'fails': 'usage update failed in the window',
    }

    def setUp(self):
        super(UpstreamBranchesMixin, self).setUp()
        self.saved_in_probe = []
        test = self

        def save(orig, migration, *args, **kwargs):
            if test._in_probe:
                test.saved_in_probe.append((migration.uuid,
                                            migration.status))
            return orig(migration, *args, **kwargs)

        def usage_from_migrations(orig, rt, context, migrations, nodename):
            if test._in_probe and test.branch == 'stale' and (
                    rt.host == test.source):
                for m in migrations:
                    if m.status == 'reverted':
                        m.instance.migration_context.migration_id = -m.id
            return orig(rt, context, migrations, nodename)

        def usage_from_migration(orig, rt, context, instance, migration,
                                 nodename):
            if test._in_probe and migration.status == 'reverted' and (
                    rt.host == test.source):
                if test.branch == 'flavor':
                    raise nova_exception.FlavorNotFound(
                        flavor_id=instance.flavor.flavorid)
                if test.branch == 'fails':
                    raise nova_exception.NovaException(
                        test.BRANCH_LOGS['fails'])
            return orig(rt, context, instance, migration, nodename)

        rt = 'nova.compute.resource_tracker.ResourceTracker.'
        hooks.wrap(self, 'nova.objects.Migration.save', save)
        hooks.wrap(self, rt + '_update_usage_from_migrations',
                   usage_from_migrations)
        hooks.wrap(self, rt + '_update_usage_from_migration',
                   usage_from_migration)

    def _revert_down_the_branch(self):
        """The probed revert; returns (migration uuid, its final status)."""
        server = self._boot(self.flavor_small, host=self.source)
        self._probed_revert_of(server)
        migration = self._migration(server['id'])
        self.assertIn(self.BRANCH_LOGS[self.branch],
                      self.stdlog.logger.output,
                      'upstream did not take the %s branch' % self.branch)
        server = self.api.get_server(server['id'])
        self.assertEqual('ACTIVE', server['status'])
        return migration.uuid, migration.status


class SourceWindowUpstreamBranchTest(_OnFixedNovaMixin, UpstreamBranchesMixin,
                                     _WindowTestBase):
    """The revert's migration keeps its status whatever upstream does.

    On a Nova that closes the window itself (a series of patches/), its
    look-up hands upstream's usage update a reverted migration only with
    the instance whose migration context names it, so the stale branch
    cannot be taken there: the other branches run on Nova's own code.
    """

    on_fixed_nova = ('test_flavor_not_found_branch',
                     'test_failed_usage_update')

    def _assert_never_saved_otherwise(self):
        uuid, status = self._revert_down_the_branch()
        self.assertEqual('reverted', status)
        self.assertEqual([], [(u, s) for u, s in self.saved_in_probe
                              if u == uuid and s != 'reverted'])
        self._assert_healed()

    def test_stale_migration_branch(self):
        self.branch = 'stale'
        self._assert_never_saved_otherwise()

    def test_flavor_not_found_branch(self):
        self.branch = 'flavor'
        self._assert_never_saved_otherwise()

    def test_failed_usage_update(self):
        self.branch = 'fails'
        self._assert_never_saved_otherwise()


class SourceWindowUpstreamBranchCanary(_OnFixedNovaMixin,
                                       UpstreamBranchesMixin,
                                       _WindowTestBase):
    """Without the fix's read-only copy, upstream saves it as ``error``.

    Shows that the branch test above can fail: the same forced branch, the
    look-up's migration handed to upstream as it was read.
    """

    branch = 'stale'

    def revert(self, server):
        # NOTE: the probes run inside the revert: the migration this canary
        # expects upstream to save 'error' may never be seen 'reverted'.
        self.admin_api.post_server_action(server['id'],
                                          {'revertResize': None})
        server = self._wait_status(server['id'], 'ACTIVE')
        self.wait_periodics()
        return server

    def test_upstream_saves_the_added_migration_without_the_guard(self):
        self.stub_out('nova_revert_lock.mixins.source_window._read_only',
                      lambda migration: migration)
        uuid, status = self._revert_down_the_branch()
        self.assertEqual('error', status)
        self.assertIn((uuid, 'error'), self.saved_in_probe)


class SourceWindowSourceOnlyTest(_OnFixedNovaMixin, _WindowTestBase):
    """Only the source runs the extension: it keeps its own books right."""

    plain_hosts = ('host2',)

    def test_source_counts_the_instance_through_the_window(self):
        self.assertEqual({'host1': 'RevertLockComputeManager',
                          'host2': 'ComputeManager'},
                         self._manager_classes())
        self._probed_revert()
        self.assertEqual([(label, 1) for label in WINDOW] + [(LANDED, 1)],
                         self.probes)
        self._assert_healed()


class SourceWindowDestOnlyTest(_OnFixedNovaMixin, _WindowTestBase):
    """Only the destination runs it: the source behaves as upstream."""

    plain_hosts = ('host1',)

    def test_plain_source_as_upstream_and_nothing_breaks(self):
        self.assertEqual({'host1': 'ComputeManager',
                          'host2': 'RevertLockComputeManager'},
                         self._manager_classes())
        self._probed_revert()
        self.assertEqual([(label, 0) for label in WINDOW] + [(LANDED, 1)],
                         self.probes)
        self._assert_healed()


class SourceWindowCanary(_WindowTestBase):
    """Plain Nova: the source counts the instance nowhere in the window."""

    extension = False

    def setUp(self):
        if window_fixed_upstream():
            self.skipTest('the installed Nova closes the source window')
        super(SourceWindowCanary, self).setUp()

    def test_window_shows_on_plain_nova(self):
        self.assertEqual({'host1': 'ComputeManager',
                          'host2': 'ComputeManager'},
                         self._manager_classes())
        self._probed_revert()
        self.assertEqual([(label, 0) for label in WINDOW] + [(LANDED, 1)],
                         self.probes)
        self._assert_healed()


class DestWindowTest(_OnFixedNovaMixin, _WindowTestBase):
    """The destination counts nothing once its revert gave the claim back.

    Its periodic task runs at each point of the window, after the
    source's: the instance is still on the destination by
    ``instance.host``, ``resize_reverting``, its migration ``reverted``.
    """

    probe_dest = True
    on_fixed_nova = ('test_destination_counts_nothing_through_the_window',)

    def _run_probe_periodic(self, host):
        if host != self.dest or self.dest_calls:
            return super(DestWindowTest, self)._run_probe_periodic(host)
        # The destination's first run in the window (as it casts) sends
        # its object calls through RPC serialization, as a real
        # nova-compute's go to the conductor.
        indirection = test_source_window_flip.SerializingIndirection(
            conductor_manager.ConductorManager())
        with indirection.installed():
            super(DestWindowTest, self)._run_probe_periodic(host)
        self.dest_calls.extend(indirection.calls)

    def setUp(self):
        self.dest_calls = []
        self.reads = []
        super(DestWindowTest, self).setUp()

        def read(orig, rt, context, instance):
            self.reads.append(rt.host)
            return orig(rt, context, instance)

        hooks.wrap(self, 'nova_revert_lock.mixins.source_window.'
                   'SourceWindowTracker._nrl_migration_of', read)

    def test_destination_counts_nothing_through_the_window(self):
        self._probed_revert()
        self.assertEqual([(label, 1) for label in WINDOW] + [(LANDED, 1)],
                         self.probes)
        self.assertEqual([(label, 0) for label in WINDOW] + [(LANDED, 0)],
                         self.dest_probes)
        if not window_fixed_upstream():
            self.assertIn('Migration.get_by_id', self.dest_calls)
            # One read of the migration per destination run in the window;
            # the source reads it too once the instance is back, reverting.
            self.assertEqual(len(WINDOW), self.reads.count(self.dest))
        self._assert_healed()

    def test_a_failed_read_counts_as_upstream(self):
        def broken(*args, **kwargs):
            raise messaging.MessagingTimeout('conductor gone')

        self.stub_out('nova_revert_lock.mixins.source_window.'
                      'SourceWindowTracker._nrl_migration_of', broken)
        self._probed_revert()
        # The periodic task itself still runs; only the window is open.
        self.assertEqual([(label, 2) for label in WINDOW] + [(LANDED, 0)],
                         self.dest_probes)
        self._assert_healed()


class DestWindowSourceOnlyTest(_OnFixedNovaMixin, _WindowTestBase):
    """A plain destination counts the instance twice over the two hosts."""

    plain_hosts = ('host2',)
    probe_dest = True

    def test_plain_destination_as_upstream(self):
        self._probed_revert()
        self.assertEqual([(label, 2) for label in WINDOW] + [(LANDED, 0)],
                         self.dest_probes)
        self._assert_healed()


class DestWindowCanary(_WindowTestBase):
    """Plain Nova: the destination counts the instance in the window.

    With the new flavor's two vCPUs (and, with dedicated CPUs, the
    source's pinning, which ``test_source_window_pinning`` shows failing
    the destination's periodic task), while its guest is gone.
    """

    extension = False
    probe_dest = True

    def setUp(self):
        if window_fixed_upstream():
            self.skipTest('the installed Nova closes the revert window')
        super(DestWindowCanary, self).setUp()

    def test_window_shows_on_plain_nova(self):
        self._probed_revert()
        self.assertEqual([(label, 0) for label in WINDOW] + [(LANDED, 1)],
                         self.probes)
        self.assertEqual([(label, 2) for label in WINDOW] + [(LANDED, 0)],
                         self.dest_probes)
        self._assert_healed()
