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

"""Race harness on Nova's own in-process functional framework.

Everything here runs the ``nova`` installed in the test environment: its
API, conductor, scheduler, placement fixture and two (or more) computes on
the fake virt driver, with sqlite databases. Only these helpers are ours;
they use nothing but the functional API client and service objects that
every supported release has (Train's helpers differ from Ussuri's, so we
do not use theirs).

The race is provoked where the bug lives: ``Migration.save`` is wrapped
so that, the moment a migration is persisted as ``confirmed`` or
``reverted``, the compute that owns that step runs its
``update_available_resource`` periodic task in another greenthread, and
the saving greenthread waits (up to :attr:`RaceMixin.race_wait`) for that
periodic to finish. On affected Nova the periodic runs inside the window;
with the fix it blocks on ``COMPUTE_RESOURCE_SEMAPHORE`` until the claim
is dropped.

What the periodic saw is recorded: when the raced periodic starts
rebuilding the books, it notes each raced operation that has set its final
status but not yet dropped its claim (no usage decrement yet on that
host): that is the window itself.
"""

import datetime
import os
import time

import eventlet
import fixtures
from oslo_config import cfg
from oslo_utils import timeutils

import nova
from nova import context as nova_context
from nova import objects
from nova.tests.functional.api import client

from nova_revert_lock import activation
from nova_revert_lock import conf as nrl_conf
from nova_revert_lock.guard import decision
from nova_revert_lock.mixins import revert as revert_mixin
from nova_revert_lock.mixins import source_window
from nova_revert_lock import report as nrl_report
from nova_revert_lock.tests.functional import hooks

CONF = cfg.CONF

FINAL_STATUSES = ('confirmed', 'reverted')
IMAGE = '155d900f-4e14-4e4c-a73d-069cbf4541e6'


def api_paste_config():
    """Nova's api-paste.ini as the wheel installs it (DESIGN fact 3)."""
    candidates = [
        os.path.join(os.path.dirname(nova.__file__), os.pardir, os.pardir,
                     os.pardir, os.pardir, 'etc', 'nova', 'api-paste.ini'),
        os.path.join(os.path.dirname(nova.__file__), os.pardir, 'etc',
                     'nova', 'api-paste.ini'),
    ]
    import sys
    candidates.append(os.path.join(sys.prefix, 'etc', 'nova',
                                   'api-paste.ini'))
    for path in candidates:
        if os.path.exists(path):
            return os.path.abspath(path)
    raise RuntimeError('api-paste.ini not found near %s' % nova.__file__)


def lists_error_migrations():
    """True if the periodic task lists 'error' migrations (Victoria on)."""
    return hasattr(objects.MigrationList, 'get_in_progress_and_error')


def nova_is_affected():
    """True if the installed Nova lacks the fix (so a canary must fail)."""
    report = activation.build()
    return report.state == nrl_report.PATCHED


#: Set to 1 to run every test on plain Nova: see ExtensionFixtureMixin.
NO_ACTIVATE_ENV = 'NRL_NO_ACTIVATE'


def activation_disabled():
    """True if NRL_NO_ACTIVATE asks for plain Nova in every test."""
    return os.environ.get(NO_ACTIVATE_ENV, '').strip().lower() in (
        '1', 'true', 'yes')


class ExtensionFixtureMixin(object):
    """Point Nova at its api-paste.ini and activate (or not) the extension.

    Must come before Nova's test case in the bases. ``extension`` decides:
    True activates before any service starts, False leaves Nova plain.

    With ``NRL_NO_ACTIVATE=1`` in the environment nothing is activated
    even where ``extension`` is True: the tests run on the installed Nova
    as it is, e.g. one built with the patch series (patches/), and must
    pass there on their own. ``activation_report`` then says what
    activation would have done (:func:`activation.evaluate`), so the tests
    can still check the verdict.
    """

    extension = True
    #: mixins to activate (None: the [revert_lock] default, all shipped)
    mixins = None

    def setUp(self):
        CONF.set_override('api_paste_config', api_paste_config(),
                          group='wsgi')
        self.addCleanup(CONF.clear_override, 'api_paste_config',
                        group='wsgi')
        self.activation_report = None
        if self.extension and self.mixins is not None:
            nrl_conf.register_opts(CONF)
            CONF.set_override('mixins', self.mixins, group='revert_lock')
            self.addCleanup(CONF.clear_override, 'mixins',
                            group='revert_lock')
        if self.extension and activation_disabled():
            self.activation_report = activation.build()
        elif self.extension:
            self.activation_report = activation.activate()
            self.addCleanup(activation.deactivate)
        super(ExtensionFixtureMixin, self).setUp()

    def stub_out(self, old, new):
        """Nova's ``stub_out``, reaching the composed manager too.

        Nova's own tests make a step fail by stubbing its method on Nova's
        ``ComputeManager`` (``test_resize_instance_fails_allocation_cleanup``
        stubs ``_resize_instance``). Where a mixin replaces that method,
        the composed manager's own would hide the stub: stub it there too,
        so that the test fails the step it means to fail.
        """
        super(ExtensionFixtureMixin, self).stub_out(old, new)
        prefix = 'nova.compute.manager.ComputeManager.'
        composed = getattr(getattr(self, 'activation_report', None),
                           'manager', None)
        if composed is None or not old.startswith(prefix):
            return
        name = old[len(prefix):]
        if getattr(composed, name, None) is not new:
            self.useFixture(fixtures.MockPatchObject(composed, name, new))


def pinned_pcpus(rt):
    """The pCPUs a single-node tracker's books (in memory) hold pinned."""
    (node,) = list(rt.compute_nodes.values())
    topology = objects.NUMATopology.obj_from_db_obj(node.numa_topology)
    pinned = set()
    for cell in topology.cells:
        pinned |= set(cell.pinned_cpus)
    return pinned


def wait_for_server(test, api, server_id, status, timeout=20):
    """Poll the API until the server has ``status`` and no task state.

    Works with the functional API client of every supported release;
    fails ``test`` on ERROR (unless waited for) or after ``timeout`` s.
    """
    deadline = time.time() + timeout
    while True:
        server = api.get_server(server_id)
        if (server['status'] == status and
                server.get('OS-EXT-STS:task_state') is None):
            return server
        if server['status'] == 'ERROR' and status != 'ERROR':
            test.fail('server went to ERROR: %s' % server.get('fault'))
        if time.time() > deadline:
            test.fail('server %s is %s/%s, not %s' % (
                server_id, server['status'],
                server.get('OS-EXT-STS:task_state'), status))
        eventlet.sleep(0.05)


#: what a greenthread carries for the harness: ``nrl_periodic`` (it is a
#: raced periodic task) and the marks the tests set beside it
MARK_PREFIX = 'nrl_'


def carry_marks_into_pools(test):
    """Let the harness's greenthread marks follow Nova's own pools.

    The harness tells the raced periodic task from everything else by a
    mark on its greenthread. From 34.0.0 (2026.2) the compute manager runs
    each node's update in a thread pool (``thread_pool_factory.spawn_on``),
    a greenthread of its own under eventlet, which would carry no mark:
    the periodic would look like any other code, and a race test would see
    no window whatever happens. Each task spawned there takes the marks of
    the greenthread that spawned it, and drops them when it is done (the
    pool reuses its greenthreads). Nova without the pools: nothing to do.
    """
    try:
        from nova import thread_pool_factory
    except ImportError:
        return
    spawn_on = thread_pool_factory.spawn_on

    def spawn_on_with_marks(executor_type, func, *args, **kwargs):
        marks = dict((k, v) for k, v in vars(eventlet.getcurrent()).items()
                     if k.startswith(MARK_PREFIX))
        if not marks:
            return spawn_on(executor_type, func, *args, **kwargs)

        def marked(*a, **kw):
            current = eventlet.getcurrent()
            saved = dict((k, v) for k, v in vars(current).items()
                         if k.startswith(MARK_PREFIX))
            vars(current).update(marks)
            try:
                return func(*a, **kw)
            finally:
                for k in [k for k in vars(current)
                          if k.startswith(MARK_PREFIX)]:
                    delattr(current, k)
                vars(current).update(saved)

        return spawn_on(executor_type, marked, *args, **kwargs)

    test.stub_out('nova.thread_pool_factory.spawn_on', spawn_on_with_marks)


class CanaryMixin(object):
    """A canary: plain Nova, and the bug must show.

    Put it first in the bases of a test case that runs a race scenario
    without the extension and asserts that the bug shows; on a Nova that
    already carries the fix there is no bug to show and it skips.
    """

    extension = False

    def setUp(self):
        if not nova_is_affected():
            self.skipTest('the installed Nova carries the fix: no bug to '
                          'show')
        super(CanaryMixin, self).setUp()


class RaceMixin(object):
    """Helpers to run and race resizes; use with ProviderUsageBaseTestCase.

    ``self.computes`` maps host name to compute service.
    """

    compute_driver = 'fake.MediumFakeDriver'
    hosts = ('host1', 'host2')
    #: seconds the saving greenthread waits for the raced periodic
    race_wait = 0.5

    def setUp(self):
        super(RaceMixin, self).setUp()
        self.ctxt = nova_context.get_admin_context()
        # NOTE: a test case may have started its computes already (Nova's
        # multi-cell tests start one per cell); keep those.
        self.computes = dict(getattr(self, 'computes', None) or {})
        for host in self.hosts:
            if host not in self.computes:
                self.computes[host] = self._start_compute(host)
        self.flavor_small = self._make_flavor('nrl.small', vcpus=1,
                                              ram=512)
        self.flavor_large = self._make_flavor('nrl.large', vcpus=2,
                                              ram=1024)
        self.race_enabled = False
        self.raced = []            # dicts: host, id, status, dropped
        self.window_seen = []      # (host, migration id, status)
        self.usage_at_cast = {}    # host -> vCPUs when revert casts back
        self.periodics = []
        self._install_race_hooks()
        carry_marks_into_pools(self)

    # -- API helpers, identical on every supported release -------------

    def _make_flavor(self, name, vcpus, ram):
        body = {'flavor': {'name': name, 'vcpus': vcpus, 'ram': ram,
                           'disk': 1}}
        return self.admin_api.api_post('/flavors', body).body['flavor']['id']

    def _boot(self, flavor_id, host=None):
        server = {'name': 'nrl-server', 'imageRef': IMAGE,
                  'flavorRef': flavor_id, 'networks': 'none'}
        if host:
            server['availability_zone'] = 'nova:%s' % host
        created = self.admin_api.post_server({'server': server})
        return self._wait_status(created['id'], 'ACTIVE')

    def _wait_status(self, server_id, status, timeout=20):
        return wait_for_server(self, self.admin_api, server_id, status,
                               timeout)

    def _wait_gone(self, server_id, timeout=20):
        deadline = time.time() + timeout
        while True:
            try:
                self.admin_api.get_server(server_id)
            except client.OpenStackApiNotFoundException:
                return
            if time.time() > deadline:
                self.fail('server %s was not deleted' % server_id)
            eventlet.sleep(0.05)

    def _migration(self, server_id):
        migrations = objects.MigrationList.get_by_filters(
            self.ctxt, {'instance_uuid': server_id})
        return sorted(migrations, key=lambda m: m.id)[-1]

    def _wait_migration(self, server_id, status, timeout=20):
        deadline = time.time() + timeout
        while True:
            migration = self._migration(server_id)
            if migration.status == status:
                return migration
            if time.time() > deadline:
                self.fail('migration is %s, not %s' % (migration.status,
                                                       status))
            eventlet.sleep(0.05)

    def _host_of(self, server):
        return server['OS-EXT-SRV-ATTR:host']

    def record_migration(self, server_id, status, source='host1',
                         dest='host2'):
        """A resize record of ``server_id``, as a past move left it.

        Dated an hour back: the periodic task keeps the most recently
        updated migration of an instance, and a conductor's answer dates
        them to the second, so a record made a moment before the move
        under test could tie with it.
        """
        flavor = objects.Flavor.get_by_flavor_id(self.ctxt,
                                                 self.flavor_small)
        then = timeutils.utcnow() - datetime.timedelta(hours=1)
        migration = objects.Migration(
            context=self.ctxt, instance_uuid=server_id,
            source_compute=source, source_node=source,
            dest_compute=dest, dest_node=dest,
            migration_type='resize', status=status,
            old_instance_type_id=flavor.id,
            new_instance_type_id=flavor.id,
            created_at=then, updated_at=then)
        if 'dest_compute_id' in objects.Migration.fields:
            # 2023.2 and later want the node's id with its name.
            migration.dest_compute_id = (
                objects.ComputeNode.get_by_host_and_nodename(
                    self.ctxt, dest, dest).id)
        migration.create()
        return migration

    def resize(self, server, flavor_id):
        self.admin_api.post_server_action(
            server['id'], {'resize': {'flavorRef': flavor_id}})
        return self._wait_status(server['id'], 'VERIFY_RESIZE')

    def confirm(self, server):
        self.admin_api.post_server_action(server['id'],
                                          {'confirmResize': None})
        self._wait_migration(server['id'], 'confirmed')
        server = self._wait_status(server['id'], 'ACTIVE')
        self.wait_periodics()
        return server

    def revert(self, server):
        self.admin_api.post_server_action(server['id'],
                                          {'revertResize': None})
        self._wait_migration(server['id'], 'reverted')
        server = self._wait_status(server['id'], 'ACTIVE')
        self.wait_periodics()
        return server

    # -- books -----------------------------------------------------------

    def tracker(self, host):
        return self.computes[host].manager.rt

    def vcpus_used(self, host):
        """The tracker's in-memory vCPU usage of the host's one node."""
        (node,) = self.tracker(host).compute_nodes.values()
        return node.vcpus_used

    def run_periodic(self, host):
        # NOTE: a context of its own: oslo.db keeps the transaction on the
        # context, and a periodic in another greenthread sharing the test's
        # context makes the test's next query fail mid-transaction.
        self.computes[host].manager.update_available_resource(
            nova_context.get_admin_context())

    def wait_periodics(self):
        for gt in self.periodics:
            gt.wait()
        self.periodics = []

    # -- the race ----------------------------------------------------------

    def raced_host(self, migration):
        """Host whose periodic is raced when ``migration`` turns final."""
        if migration.status == 'confirmed':
            return migration.source_compute
        return migration.dest_compute

    def claim_dropped(self, host):
        """The raced operation on ``host`` took usage away."""
        for race in self.raced:
            if race['host'] == host:
                race['dropped'] = True

    def window_open(self, race):
        """True if a periodic starting now is inside ``race``'s window.

        Same-cell: the final status is set (the race starts there) but the
        claim is not dropped yet.
        """
        return not race['dropped']

    def _install_race_hooks(self):
        test = self

        def in_raced_periodic():
            return getattr(eventlet.getcurrent(), 'nrl_periodic', False)

        def save(orig_save, migration, *args, **kwargs):
            status_changed = 'status' in migration.obj_what_changed()
            orig_save(migration, *args, **kwargs)
            if (test.race_enabled and status_changed and
                    migration.status in FINAL_STATUSES and
                    not in_raced_periodic()):
                test._race(migration)

        def update_usage(orig_usage, rt, usage, nodename, sign=1):
            # A usage decrement outside the periodic is the claim drop of
            # the operation being raced.
            if sign < 0 and not in_raced_periodic():
                test.claim_dropped(rt.host)
            return orig_usage(rt, usage, nodename, sign=sign)

        def update_usage_from_instances(orig_instances, rt, context,
                                        instances, nodename):
            # The periodic starts rebuilding the books, under the tracker's
            # lock: is the raced operation half done?
            if in_raced_periodic():
                for race in test.raced:
                    if race['host'] == rt.host and test.window_open(race):
                        test.window_seen.append(
                            (race['host'], race['id'], race['status']))
            return orig_instances(rt, context, instances, nodename)

        def finish_revert_resize(orig_cast, rpcapi, ctxt, instance,
                                 migration, *a, **kw):
            # The destination is done: its books must be right now.
            test.usage_at_cast[migration.dest_compute] = test.vcpus_used(
                migration.dest_compute)
            return orig_cast(rpcapi, ctxt, instance, migration, *a, **kw)

        hooks.wrap(self, 'nova.objects.Migration.save', save)
        hooks.wrap(self, 'nova.compute.resource_tracker.ResourceTracker.'
                   '_update_usage', update_usage)
        hooks.wrap(self, 'nova.compute.resource_tracker.ResourceTracker.'
                   '_update_usage_from_instances',
                   update_usage_from_instances)
        hooks.wrap(self, 'nova.compute.rpcapi.ComputeAPI.finish_revert_resize',
                   finish_revert_resize)

    def _race(self, migration):
        host = self.raced_host(migration)
        if host not in self.computes:
            return
        self.raced.append({'host': host, 'id': migration.id,
                           'status': migration.status, 'dropped': False})

        def periodic():
            eventlet.getcurrent().nrl_periodic = True
            self.run_periodic(host)

        gt = eventlet.spawn(periodic)
        self.periodics.append(gt)
        deadline = time.time() + self.race_wait
        while not gt.dead and time.time() < deadline:
            eventlet.sleep(0.01)


def window_fixed_upstream():
    """True if the installed Nova closes the window itself.

    No release does; a build with a series of patches/ that carries the
    window's fix (every series) does. The mixin then stands aside: the
    tests of what the hosts count run on Nova's own code, those of the
    mixin's own look-up and of a fleet mixing it with plain Nova skip, and
    so do the canaries.
    """
    check = source_window.SPEC.check()
    return check.outcome == decision.FIXED_UPSTREAM


#: the tracker's claim drop, whose fix of bug 1879878 differs between
#: upstream's (21.1.1 on) and the series of patches/ (Train, Ussuri)
_REVERT_DROP = 'nova.compute.resource_tracker:ResourceTracker.drop_move_claim'


def revert_fixed_by_series():
    """True if the installed Nova's revert fix is a series of patches/.

    The Train and Ussuri series fix bug 1879878 as the ``revert`` mixin
    does: when the destination's save of the reverted instance fails, it
    applies the migration context again before re-raising, where
    upstream's fix (21.1.1 on) lets the error handler persist the
    reverted record. Such a build is told by its claim drop, whose code
    only patched builds have.
    """
    check = revert_mixin.SPEC.check()
    if check.outcome != decision.FIXED_UPSTREAM:
        return False
    return any(f.ref == _REVERT_DROP and f.releases and
               all(r.endswith('+patches') for r in f.releases)
               for f in check.functions)


class OnFixedWindowNovaMixin(object):
    """Skip, on a Nova that closes the window, what tests the mixin itself.

    Put it first in the bases; ``on_fixed_nova`` names the tests that run
    there (what the hosts count), the others skip.
    """

    on_fixed_nova = ()

    def setUp(self):
        if (window_fixed_upstream() and
                self._testMethodName not in self.on_fixed_nova):
            self.skipTest('the installed Nova closes the window: the mixin '
                          'this tests stands aside')
        super(OnFixedWindowNovaMixin, self).setUp()
