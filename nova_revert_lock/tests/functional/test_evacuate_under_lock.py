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

"""Evacuation: the destination's periodic task at the end of the rebuild.

Nova bug 1896463. Affected Nova (Train, Ussuri up to 21.1.2, 22.0.0)
ends an evacuation outside ``COMPUTE_RESOURCE_SEMAPHORE``: the
destination saves ``instance.host``, drops the migration context and
marks the migration ``done`` while its ``update_available_resource`` may
run. A periodic task that read the node's instances before the save and
reads its in-progress migrations after the status change counts the
instance nowhere and frees its PCI device.

The scenario follows upstream's reproducer (a server with an SR-IOV port
on the fake driver with PCI devices, evacuated from host1 to host2), with
hooks instead of sleeps: where the destination saves the instance with
its new host, at the end of the rebuild, it runs its periodic task in
another greenthread and waits until that task has read the node's
instances (or, blocked on the lock, could not); the periodic task reads
the in-progress migrations only once the migration is ``done`` (or
after :attr:`_EvacuateScenario.race_wait`). On affected Nova both reads
straddle the end of the evacuation; with the fix the periodic task runs
after it.

``EvacuateUnderLockTest`` runs with the extension (on a Nova that carries
upstream's fix the mixin stands aside and upstream's code must pass the
same test); ``EvacuateUnderLockCanary`` runs the same scenario on plain
Nova, where the bug must show.
"""

import copy
import time

import eventlet
from nova import context as nova_context
from nova import objects
from nova import test
from nova.tests import fixtures as nova_fixtures
from nova.tests.functional import fixtures as func_fixtures
from nova.tests.functional import integrated_helpers
from nova.virt import fake

from nova_revert_lock.mixins import evacuate_under_lock
from nova_revert_lock import sections
from nova_revert_lock.tests.functional import base
from nova_revert_lock.tests.functional import hooks

SPEC = evacuate_under_lock.SPEC


def nova_has_fix():
    """True if the installed Nova finishes evacuations under the lock."""
    return SPEC.fixed_upstream()


def _in_raced_periodic():
    return getattr(eventlet.getcurrent(), 'nrl_periodic', False)


class _EvacuateScenario(object):
    """Evacuate a server with a PCI device from host1 to host2."""

    #: seconds each side waits for the other before going on alone
    race_wait = 1.0

    def setUp(self):
        super(_EvacuateScenario, self).setUp()
        self.neutron = self.useFixture(nova_fixtures.NeutronFixture(self))
        self._stub_images()
        self.useFixture(func_fixtures.PlacementFixture())
        api_fixture = self.useFixture(nova_fixtures.OSAPIFixture(
            api_version='v2.1'))
        self.admin_api = api_fixture.admin_api
        self.admin_api.microversion = 'latest'

        self.start_service('conductor')
        self.start_service('scheduler')
        self.flags(compute_driver='fake.FakeDriverWithPciResources')
        self.useFixture(fake.FakeDriverWithPciResources.
                        FakeDriverWithPciResourcesConfigFixture())
        self.computes = {}
        for host in ('host1', 'host2'):
            self.computes[host] = self.start_service('compute', host=host)

        # The SR-IOV port and its network, as upstream's reproducer adds
        # them (not global in the fixture: a second network breaks
        # auto-allocation in other tests).
        port = self.neutron.sriov_port
        self.neutron._ports[port['id']] = copy.deepcopy(port)
        self.neutron._networks[
            self.neutron.network_2['id']] = self.neutron.network_2
        self.neutron._subnets[
            self.neutron.subnet_2['id']] = self.neutron.subnet_2

        self.ctxt = nova_context.get_admin_context()
        self.flavor = self.admin_api.api_post(
            '/flavors', {'flavor': {'name': 'nrl.evac', 'vcpus': 1,
                                    'ram': 512, 'disk': 1}}
        ).body['flavor']['id']
        #: (who, what) in the order it happened
        self.events = []
        self.periodics = []
        self.race_for = None

    def _stub_images(self):
        if hasattr(nova_fixtures, 'GlanceFixture'):
            # Victoria 22.1.0 and later: a fixture.
            self.useFixture(nova_fixtures.GlanceFixture(self))
            return
        from nova.tests.unit.image import fake as fake_image
        fake_image.stub_out_image_service(self)
        self.addCleanup(fake_image.FakeImageService_reset)

    # -- helpers, identical on every supported release -------------------

    def node_id(self, host):
        (node,) = objects.ComputeNodeList.get_all_by_host(self.ctxt, host)
        return node.id

    def pci_devices(self, server_id, host):
        """PCI devices allocated to the server on ``host``, in the DB."""
        devices = objects.PciDeviceList.get_by_instance_uuid(self.ctxt,
                                                             server_id)
        node_id = self.node_id(host)
        return len([d for d in devices if d.compute_node_id == node_id])

    def vcpus_used(self, host):
        (node,) = self.computes[host].manager.rt.compute_nodes.values()
        return node.vcpus_used

    def run_periodic(self, host):
        self.computes[host].manager.update_available_resource(
            nova_context.get_admin_context())

    def _boot_with_pci(self):
        created = self.admin_api.post_server({'server': {
            'name': 'nrl-evacuee', 'imageRef': base.IMAGE,
            'flavorRef': self.flavor,
            'networks': [{'port': self.neutron.sriov_port['id']}],
            'availability_zone': 'nova:host1'}})
        return base.wait_for_server(self, self.admin_api, created['id'],
                                    'ACTIVE')

    def _wait_evacuated(self, server_id, timeout=30):
        deadline = time.time() + timeout
        while True:
            server = self.admin_api.get_server(server_id)
            # NOTE: from microversion 2.95 (Nova 28.0.0) an evacuated
            # server stays stopped on the destination.
            if (server['OS-EXT-SRV-ATTR:host'] == 'host2' and
                    server['status'] in ('ACTIVE', 'SHUTOFF') and
                    server.get('OS-EXT-STS:task_state') is None):
                return server
            if server['status'] == 'ERROR':
                self.fail('server went to ERROR: %s' % server.get('fault'))
            if time.time() > deadline:
                self.fail('server not evacuated: %s on %s' % (
                    server['status'], server['OS-EXT-SRV-ATTR:host']))
            eventlet.sleep(0.05)

    # -- the race ----------------------------------------------------------

    def _install_race_hooks(self):
        test_case = self

        def instance_save(orig, instance, *args, **kwargs):
            # The destination is about to save the instance on host2, at
            # the end of the evacuation: the database still has it on
            # host1.
            if (test_case.race_for == instance.uuid and
                    'host' in instance.obj_what_changed() and
                    instance.host == 'host2' and
                    not _in_raced_periodic()):
                test_case.race_for = None
                test_case._race('host2')
            return orig(instance, *args, **kwargs)

        def get_instances(orig, context, host, nodename, *args, **kwargs):
            result = orig(context, host, nodename, *args, **kwargs)
            if _in_raced_periodic():
                test_case.events.append(('periodic', 'instances'))
            return result

        def get_migrations(orig, context, host, nodename, *args, **kwargs):
            if _in_raced_periodic():
                test_case._wait_for(('evacuation', 'done'))
                test_case.events.append(('periodic', 'migrations'))
            return orig(context, host, nodename, *args, **kwargs)

        def migration_save(orig, migration, *args, **kwargs):
            status_changed = 'status' in migration.obj_what_changed()
            orig(migration, *args, **kwargs)
            if (status_changed and migration.status == 'done' and
                    migration.migration_type == 'evacuation'):
                test_case.events.append(('evacuation', 'done'))

        hooks.wrap(self, 'nova.objects.Instance.save', instance_save)
        hooks.wrap(self, 'nova.objects.InstanceList.get_by_host_and_node',
                   get_instances)
        # Victoria and later list the in-progress and 'error' migrations.
        hooks.wrap(self, 'nova.objects.MigrationList.%s' % (
            'get_in_progress_and_error' if base.lists_error_migrations()
            else 'get_in_progress_by_host_and_node'), get_migrations)
        hooks.wrap(self, 'nova.objects.Migration.save', migration_save)

    def _wait_for(self, event):
        deadline = time.time() + self.race_wait
        while event not in self.events and time.time() < deadline:
            eventlet.sleep(0.01)

    def _race(self, host):
        """Run ``host``'s periodic task; wait until it read the instances."""
        def periodic():
            eventlet.getcurrent().nrl_periodic = True
            self.run_periodic(host)

        gt = eventlet.spawn(periodic)
        self.periodics.append(gt)
        deadline = time.time() + self.race_wait
        while (('periodic', 'instances') not in self.events and
               not gt.dead and time.time() < deadline):
            eventlet.sleep(0.01)

    def _raced_evacuation(self):
        """Evacuate host1 -> host2 with host2's periodic at the end.

        :returns: dict of what the books say once the raced periodic task
            is over: PCI devices of the server on each host (database),
            host2's vCPUs (tracker), and the order of events
        """
        server = self._boot_with_pci()
        self.assertEqual((1, 0), (self.pci_devices(server['id'], 'host1'),
                                  self.pci_devices(server['id'], 'host2')))
        self.computes['host1'].stop()
        (service,) = self.admin_api.get_services(host='host1',
                                                 binary='nova-compute')
        self.admin_api.put_service(service['id'], {'forced_down': 'true'})

        self._install_race_hooks()
        self.race_for = server['id']
        self.admin_api.post_server_action(server['id'], {'evacuate': {}})
        self._wait_evacuated(server['id'])
        for gt in self.periodics:
            gt.wait()
        self.assertEqual(1, len(self.periodics), 'the race did not run')
        return {'pci': (self.pci_devices(server['id'], 'host1'),
                        self.pci_devices(server['id'], 'host2')),
                'vcpus': self.vcpus_used('host2'),
                'events': list(self.events),
                'server': server}


class EvacuateUnderLockTest(base.ExtensionFixtureMixin, _EvacuateScenario,
                            test.TestCase,
                            integrated_helpers.InstanceHelperMixin):
    """The fix: the periodic task runs after the end of the evacuation."""

    def setUp(self):
        if base.activation_disabled() and not nova_has_fix():
            self.skipTest('plain Nova without the fix for bug 1896463 '
                          '(the patch series does not carry it)')
        super(EvacuateUnderLockTest, self).setUp()
        report = self.activation_report
        if nova_has_fix():
            self.assertIn('evacuate_under_lock', report.fixed_upstream)
        else:
            self.assertIn('evacuate_under_lock', report.mixins,
                          (report.state, report.warnings, report.problems))

    def test_periodic_at_end_of_evacuation(self):
        before = sections.snapshot()['critical_sections_by_kind'].get(
            'evacuate_under_lock', 0)
        seen = self._raced_evacuation()
        if not nova_has_fix():
            # Counted, as the other mixins' sections are, for ``status``.
            self.assertEqual(before + 1, sections.snapshot()[
                'critical_sections_by_kind'].get('evacuate_under_lock'))
        # The periodic task waited for the lock: it read the instances
        # after the migration was done, and found the server on host2.
        self.assertEqual([('evacuation', 'done'), ('periodic', 'instances'),
                          ('periodic', 'migrations')], seen['events'])
        # The source host is down: its claim stays until it comes back.
        self.assertEqual((1, 1), seen['pci'])
        self.assertEqual(1, seen['vcpus'])
        self.run_periodic('host2')
        self.assertEqual(1, self.vcpus_used('host2'))
        self.assertEqual(1, self.pci_devices(seen['server']['id'], 'host2'))


class EvacuateUnderLockCanary(base.ExtensionFixtureMixin, _EvacuateScenario,
                              test.TestCase,
                              integrated_helpers.InstanceHelperMixin):
    """Plain Nova: the periodic task loses the evacuated instance."""

    extension = False

    def setUp(self):
        if nova_has_fix():
            self.skipTest('the installed Nova carries the fix for bug '
                          '1896463: no bug to show')
        super(EvacuateUnderLockCanary, self).setUp()

    def test_periodic_at_end_of_evacuation_on_plain_nova(self):
        seen = self._raced_evacuation()
        # The periodic task read the instances before the save and the
        # migrations after the status change.
        self.assertEqual([('periodic', 'instances'), ('evacuation', 'done'),
                          ('periodic', 'migrations')], seen['events'])
        # It counted the server nowhere: its PCI device on host2 is freed
        # (upstream's reproducer) and host2's vCPUs do not count it.
        self.assertEqual((1, 0), seen['pci'])
        self.assertEqual(0, seen['vcpus'])
        # The next periodic task counts the vCPU again; the PCI device
        # stays lost.
        self.run_periodic('host2')
        self.assertEqual(1, self.vcpus_used('host2'))
        self.assertEqual(0, self.pci_devices(seen['server']['id'], 'host2'))
