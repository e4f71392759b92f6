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

"""Bugs 1949808 / 1960412: aborting a live migration still queued.

Two computes on the fake driver, ``max_concurrent_live_migrations = 1``,
as upstream's functional tests of the fix (219520d9ce) set them up:

1. server A and server B (on a Neutron port) boot on host1;
2. A's live migration to host2 starts, and the driver's
   ``live_migration`` holds it (an event the test sends; a clean-up
   sends it too, so that a failed test never leaves it held);
3. B's live migration to host2 is queued behind it: the conductor has
   moved B's allocation to the migration consumer and bound B's port to
   host2 (INACTIVE);
4. B's migration is aborted (``DELETE /servers/B/migrations/<id>``),
   then A's is let go.

With the mixin B is ACTIVE on host1 again, its migration ``cancelled``,
the migration consumer holds nothing and host2 no binding of B's port.
The canary runs the same on plain Nova: B stays in ``migrating``, its
migration keeps the source's allocation and B the destination's, and
the binding stays. (Train's Neutron fixture makes
``setup_networks_on_host`` a no-op: there the tests check that the
tear-down of host2 was asked for, and the binding only from Ussuri on.)

Why it does not hang: the held migration waits on a green event, never
on a lock of the real thread; the source's executor with one worker only
queues B (``submit`` does not block), and the API's live migration and
abort are casts, so no RPC call waits on the held worker. What hung was
the teardown: a held migration let go while the services stop calls the
destination (``post_live_migration_at_destination``) and waits for a
reply no stopped service sends. The clean-up lets it go without
finishing it. Every wait has a deadline, and the whole test a timeout.
"""

from nova.tests import functional  # noqa: F401 (eventlet first)

import datetime
import time

import eventlet
from eventlet import event as eventlet_event
import fixtures
from nova import context as nova_context
from nova import objects
from nova.tests.functional import integrated_helpers

from nova_revert_lock.audit import damage
from nova_revert_lock.mixins import live_migration_abort_queued
from nova_revert_lock.tests.functional import base
from nova_revert_lock.tests.functional import hooks

SPEC = live_migration_abort_queued.SPEC
SOURCE = 'host1'
DEST = 'host2'
#: seconds any one wait may take; the whole test has TEST_TIMEOUT
WAIT = 30
TEST_TIMEOUT = 240


def nova_has_fix():
    """True if the installed Nova cleans up an aborted queued migration."""
    return SPEC.fixed_upstream()


def _neutron_api_path():
    """The Neutron API class of the installed Nova (moved in Ussuri)."""
    try:
        from nova.network import neutron  # noqa: F401
        return 'nova.network.neutron.API'
    except ImportError:
        return 'nova.network.neutronv2.api.API'


class _QueuedAbortScenario(object):
    """Hold A's live migration, queue B's behind it, abort B's."""

    compute_driver = 'fake.MediumFakeDriver'

    def setUp(self):
        self.useFixture(fixtures.Timeout(TEST_TIMEOUT, gentle=True))
        super(_QueuedAbortScenario, self).setUp()
        self.ctxt = nova_context.get_admin_context()
        self.flags(max_concurrent_live_migrations=1)
        self.computes = {}
        for host in (SOURCE, DEST):
            self.computes[host] = self._start_compute(host)
        self.flavor = self._make_flavor()
        self.bindings = set()
        self._track_bindings()
        self.held = []
        self.release = eventlet_event.Event()
        self._hold_live_migrations()
        # NOTE: registered after the computes started, so it runs before
        # they are stopped: a held worker must never outlive the test.
        self.addCleanup(self._let_go)

    # -- fixtures of the scenario -------------------------------------

    def _make_flavor(self):
        body = {'flavor': {'name': 'nrl.lm', 'vcpus': 1, 'ram': 512,
                           'disk': 1}}
        return self.admin_api.api_post('/flavors', body).body['flavor']['id']

    def _track_bindings(self):
        """Record the port bindings Nova creates and deletes, per host.

        Train's Neutron fixture keeps none (Ussuri's ``_port_bindings``
        does): watch the API Nova calls instead, on both. Train's fixture
        also makes ``setup_networks_on_host`` a no-op, so the tear-downs
        asked for are recorded too (``self.teardowns``: (instance, host)).
        """
        api = _neutron_api_path()
        self.teardowns = []
        # NOTE: Ussuri and later run the real tear-down against the
        # fixture, which deletes the bindings it finds.
        self.real_teardown = hasattr(self.neutron, '_port_bindings')

        def setup_networks(orig, neutron_api, context, instance, host=None,
                           teardown=False):
            if teardown:
                self.teardowns.append((instance.uuid, host))
            return orig(neutron_api, context, instance, host=host,
                        teardown=teardown)

        hooks.wrap(self, api + '.setup_networks_on_host', setup_networks)

        def bind(orig, neutron_api, context, instance, host, *a, **kw):
            result = orig(neutron_api, context, instance, host, *a, **kw)
            for port_id in result or {}:
                self.bindings.add((port_id, host))
            return result

        def unbind(orig, neutron_api, context, port_id, host):
            result = orig(neutron_api, context, port_id, host)
            self.bindings.discard((port_id, host))
            return result

        hooks.wrap(self, api + '.bind_ports_to_host', bind)
        hooks.wrap(self, api + '.delete_port_binding', unbind)

    def _hold_live_migrations(self):
        """The fake driver's live migration waits until let go."""

        def live_migration(orig, driver, context, instance, *args, **kw):
            self.held.append(instance.uuid)
            # NOTE: a green event: the worker yields while it waits, the
            # rest of the services (and the abort) keep running.
            with eventlet.timeout.Timeout(TEST_TIMEOUT, False):
                go_on = self.release.wait()
            if not go_on:
                # Let go by the clean-up, or timed out: the services are
                # stopping, and the migration's RPC calls to the
                # destination would wait for a reply forever.
                return
            return orig(driver, context, instance, *args, **kw)

        hooks.wrap(self, 'nova.virt.fake.FakeDriver.live_migration',
                   live_migration)

    def _let_go(self, go_on=False):
        """Release the held migration: finish it, or just return."""
        if not self.release.ready():
            self.release.send(go_on)

    # -- readings ----------------------------------------------------------

    def _wait(self, what, predicate, timeout=WAIT):
        deadline = time.time() + timeout
        while True:
            value = predicate()
            if value:
                return value
            if time.time() > deadline:
                self.fail('timed out waiting for %s' % what)
            eventlet.sleep(0.05)

    def _migration(self, server_id):
        migrations = objects.MigrationList.get_by_filters(
            self.ctxt, {'instance_uuid': server_id,
                        'migration_type': 'live-migration'})
        self.assertEqual(1, len(migrations))
        return migrations[0]

    def _wait_migration(self, server_id, status):
        def found():
            # NOTE: none until the conductor has created it.
            migrations = objects.MigrationList.get_by_filters(
                self.ctxt, {'instance_uuid': server_id,
                            'migration_type': 'live-migration'})
            if len(migrations) == 1 and migrations[0].status == status:
                return migrations[0]
        return self._wait('migration of %s %s' % (server_id, status), found)

    def _providers(self, *hosts):
        return sorted(self._get_provider_uuid_by_host(h) for h in hosts)

    def _held_by(self, consumer):
        """The providers of ``consumer``'s allocations in placement."""
        return sorted(self._get_allocations_by_server_uuid(consumer))

    def _server(self, server_id):
        return self.admin_api.get_server(server_id)

    def _boot(self, name, port_id=None):
        networks = [{'port': port_id}] if port_id else 'none'
        server = {'name': name, 'imageRef': base.IMAGE,
                  'flavorRef': self.flavor, 'networks': networks,
                  'availability_zone': 'nova:%s' % SOURCE}
        created = self.admin_api.post_server({'server': server})
        return base.wait_for_server(self, self.admin_api, created['id'],
                                    'ACTIVE', timeout=WAIT)

    def _live_migrate(self, server_id):
        self.admin_api.post_server_action(
            server_id, {'os-migrateLive': {'host': DEST,
                                           'block_migration': 'auto'}})

    def _abort_queued(self):
        """Steps 1-4 of the module doc; return (A, B, B's migration)."""
        port_id = self.neutron.port_1['id']
        server_a = self._boot('nrl-a')
        server_b = self._boot('nrl-b', port_id)
        self._live_migrate(server_a['id'])
        self._wait('A held in the driver', lambda: self.held)
        self.assertEqual([server_a['id']], self.held)
        self._live_migrate(server_b['id'])
        migration = self._wait_migration(server_b['id'], 'queued')
        # What the conductor did for B before the source queued it: the
        # migration consumer holds the source's resources, B the
        # destination's, and B's port is bound to the destination.
        self.assertEqual(self._providers(SOURCE),
                         self._held_by(migration.uuid))
        self.assertEqual(self._providers(DEST),
                         self._held_by(server_b['id']))
        self.assertIn((port_id, DEST), self.bindings)
        self.admin_api.api_delete('/servers/%s/migrations/%s' % (
            server_b['id'], migration.id))
        migration = self._wait_migration(server_b['id'], 'cancelled')
        return server_a, server_b, migration

    def _finish_a(self, server_a):
        self._let_go(go_on=True)
        server = base.wait_for_server(self, self.admin_api, server_a['id'],
                                      'ACTIVE', timeout=WAIT)
        self.assertEqual(DEST, server['OS-EXT-SRV-ATTR:host'])
        self.assertEqual([server_a['id']], self.held)


class LiveMigrationAbortQueuedTest(
        base.ExtensionFixtureMixin, _QueuedAbortScenario,
        integrated_helpers.ProviderUsageBaseTestCase):
    """The fix: an aborted queued migration gives everything back."""

    def setUp(self):
        if base.activation_disabled() and not nova_has_fix():
            self.skipTest('plain Nova without the fix for bug 1949808')
        super(LiveMigrationAbortQueuedTest, self).setUp()
        report = self.activation_report
        if nova_has_fix():
            self.assertIn('live_migration_abort_queued',
                          report.fixed_upstream)
        else:
            self.assertIn('live_migration_abort_queued', report.mixins,
                          (report.state, report.warnings, report.problems))

    def test_abort_queued_live_migration(self):
        server_a, server_b, migration = self._abort_queued()
        server = base.wait_for_server(self, self.admin_api, server_b['id'],
                                      'ACTIVE', timeout=WAIT)
        self.assertEqual(SOURCE, server['OS-EXT-SRV-ATTR:host'])
        # The migration consumer holds nothing; B holds its source again,
        # and nothing on the destination.
        self.assertEqual([], self._held_by(migration.uuid))
        self.assertEqual(self._providers(SOURCE),
                         self._held_by(server_b['id']))
        self.assertIn((server_b['id'], DEST), self.teardowns)
        if self.real_teardown:
            self.assertNotIn((self.neutron.port_1['id'], DEST),
                             self.bindings)
        self._finish_a(server_a)
        # B never ran: it is still where it was, and A's migration
        # did not take it along.
        server = self._server(server_b['id'])
        self.assertEqual(('ACTIVE', None, SOURCE), (
            server['status'], server['OS-EXT-STS:task_state'],
            server['OS-EXT-SRV-ATTR:host']))
        self.assertEqual('cancelled', self._migration(server_b['id']).status)


class LiveMigrationAbortQueuedCanary(
        base.CanaryMixin, base.ExtensionFixtureMixin, _QueuedAbortScenario,
        integrated_helpers.ProviderUsageBaseTestCase):
    """Plain Nova: the aborted queued migration leaks what it held."""

    def setUp(self):
        if nova_has_fix():
            self.skipTest('the installed Nova carries the fix for bug '
                          '1949808: no leak to show')
        super(LiveMigrationAbortQueuedCanary, self).setUp()

    def test_abort_queued_live_migration_leaks(self):
        server_a, server_b, migration = self._abort_queued()
        self._finish_a(server_a)
        server = self._server(server_b['id'])
        self.assertEqual(('MIGRATING', 'migrating', SOURCE), (
            server['status'], server['OS-EXT-STS:task_state'],
            server['OS-EXT-SRV-ATTR:host']))
        # B, on the source, holds the destination's resources, and its
        # cancelled migration those of the source: twice its flavor.
        self.assertEqual(self._providers(SOURCE),
                         self._held_by(migration.uuid))
        self.assertEqual(self._providers(DEST),
                         self._held_by(server_b['id']))
        self.assertNotIn((server_b['id'], DEST), self.teardowns)
        self.assertIn((self.neutron.port_1['id'], DEST), self.bindings)
        # The damage report can name the orphans of the placement audit
        # as this bug's (nova-manage itself does not run here).
        report = damage.Report()
        damage.check_cell(report, 'cell1', self.ctxt,
                          datetime.datetime.now(datetime.timezone.utc), 3600)
        self.assertEqual(
            {migration.uuid: ('cell1', server_b['id'], SOURCE, DEST)},
            report.cancelled_live_migrations)


def _nova_suite():
    """Nova's own tests of live migration abort, with the extension.

    They abort a running migration (the branch the mixin keeps as
    upstream's): it must pass on the composed manager as on plain Nova.
    Collected where the installed release has them (Ussuri on).
    """
    try:
        from nova.tests.functional import test_servers
    except ImportError:
        return {}
    found = {}
    for name in ('LiveMigrateAbortWithPortResourceRequestTest',):
        nova_cls = getattr(test_servers, name, None)
        if nova_cls is None:
            continue

        def setUp(self, _name=name):
            super(found[_name], self).setUp()
            if not nova_has_fix():
                self.assertIn('live_migration_abort_queued',
                              self.activation_report.mixins,
                              self.activation_report.warnings)

        found[name] = type(name, (base.ExtensionFixtureMixin, nova_cls),
                           {'__module__': __name__, 'setUp': setUp})
    return found


globals().update(_nova_suite())
