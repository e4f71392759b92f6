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

"""What the source window costs with dedicated CPUs, on Nova's libvirt driver.

Nova's libvirt functional framework (fake libvirt, real driver, NUMA and
pinning code) with two hosts of 4 dedicated pCPUs each:

1. server A (2 pinned vCPUs) boots on host0 and is resized to host1;
2. A is reverted, and the source half of the revert is held at the start
   of host0's ``finish_revert_resize``: the window is open;
3. host0's periodic task runs, then server B (2 pinned vCPUs) is booted on
   host0; placement has room for it (the migration still holds A's two
   pCPUs there), and host0 pins it to the pCPUs its books say are free;
4. the revert finishes: A is back on host0 with the pinning it had.

On plain Nova the periodic task in step 3 forgot A, so B is pinned to A's
pCPUs: both run on the same pCPUs, and host0's next periodic task fails
with ``CPUPinningInvalid``. With the extension B gets the other two.
"""

import inspect
import time
from unittest import mock

import eventlet

from nova import context as nova_context
from nova import exception
from nova import objects
from nova.tests.functional.libvirt import base as libvirt_base

try:
    from nova.tests.fixtures import libvirt as fakelibvirt
except ImportError:  # Nova < 23
    from nova.tests.unit.virt.libvirt import fakelibvirt

from nova_revert_lock import report as nrl_report
from nova_revert_lock.tests.functional import base
from nova_revert_lock.tests.functional import hooks

IMAGE = base.IMAGE
SOURCE, DEST = 'nrl-host0', 'nrl-host1'


class _PinningWindowBase(base.ExtensionFixtureMixin,
                         libvirt_base.ServersTestBase):

    ADMIN_API = True
    api_major_version = 'v2.1'
    ADDITIONAL_FILTERS = ['NUMATopologyFilter']

    def setUp(self):
        super(_PinningWindowBase, self).setUp()
        self.api.microversion = 'latest'
        self.ctxt = nova_context.get_admin_context()
        self.flags(cpu_dedicated_set='0-3', cpu_shared_set=None,
                   group='compute')
        self.flags(vcpu_pin_set=None)
        if not hasattr(self, 'computes'):
            self.computes = {}
        for host in (SOURCE, DEST):
            self._start_pinning_compute(host)
        self.flavor_a = self._flavor('nrl.pinned.a', 512)
        self.flavor_b = self._flavor('nrl.pinned.b', 768)

    # -- release differences of Nova's libvirt framework -------------------

    def _start_pinning_compute(self, hostname):
        """One host: a NUMA node of 4 cores, all dedicated."""
        host_info = fakelibvirt.HostInfo(cpu_nodes=1, cpu_sockets=1,
                                         cpu_cores=4, cpu_threads=1,
                                         kB_mem=15740000)
        start_compute = getattr(self, 'start_compute', None)
        if (start_compute is not None and 'hostname' in
                inspect.signature(start_compute).parameters):
            # Nova 23+: the framework starts it and keeps it by name.
            start_compute(hostname=hostname, host_info=host_info)
            return self.computes[hostname]
        connection = self._get_connection(host_info=host_info,
                                          hostname=hostname)
        with mock.patch('nova.virt.libvirt.host.Host.get_connection',
                        return_value=connection):
            compute = self.start_service('compute', host=hostname)
            compute.driver._host.get_connection = lambda: connection
        self.computes[hostname] = compute
        return compute

    # -- API helpers -----------------------------------------------------

    def _flavor(self, name, ram):
        body = {'flavor': {'name': name, 'vcpus': 2, 'ram': ram,
                           'disk': 1}}
        flavor = self.api.api_post('/flavors', body).body['flavor']
        self.api.api_post(
            '/flavors/%s/os-extra_specs' % flavor['id'],
            {'extra_specs': {'hw:cpu_policy': 'dedicated'}})
        return flavor['id']

    def _boot(self, name, flavor_id, host):
        created = self.api.post_server({'server': {
            'name': name, 'imageRef': IMAGE, 'flavorRef': flavor_id,
            'networks': 'none', 'availability_zone': 'nova:%s' % host}})
        return self._wait(created['id'], 'ACTIVE')

    def _wait(self, server_id, status, timeout=60):
        return base.wait_for_server(self, self.api, server_id, status,
                                    timeout)

    def _pcpus(self, server_id):
        instance = objects.Instance.get_by_uuid(
            self.ctxt, server_id, expected_attrs=['numa_topology'])
        pinned = set()
        for cell in instance.numa_topology.cells:
            pinned |= set(cell.cpu_pinning.values())
        return pinned

    def _tracker(self, host):
        return self.computes[host].manager.rt

    def _periodic(self, host):
        """The host's periodic task, its errors raised, not logged."""
        rt = self._tracker(host)
        (nodename,) = list(rt.compute_nodes)
        rt.update_available_resource(self.ctxt, nodename)

    # -- the scenario ----------------------------------------------------

    def _pinned_server_in_window(self):
        """Steps 1-4 of the module docstring; return both servers' pCPUs."""
        server_a = self._boot('nrl-a', self.flavor_a, SOURCE)
        pcpus_a = self._pcpus(server_a['id'])
        self.assertEqual(2, len(pcpus_a))
        with mock.patch('nova.virt.libvirt.driver.LibvirtDriver.'
                        'migrate_disk_and_power_off', return_value='{}'):
            self.api.post_server_action(
                server_a['id'], {'resize': {'flavorRef': self.flavor_b}})
            server_a = self._wait(server_a['id'], 'VERIFY_RESIZE')
        self.assertEqual(DEST, server_a['OS-EXT-SRV-ATTR:host'])
        booted = []

        def in_window():
            self._periodic(SOURCE)
            server_b = self._boot('nrl-b', self.flavor_a, SOURCE)
            booted.append(self._pcpus(server_b['id']))

        self._revert_held_at_source(server_a['id'], pcpus_a, in_window)
        return pcpus_a, booted[0]

    def _revert_held_at_source(self, server_id, pcpus, in_window):
        """Revert, hold the source's half at its start, run ``in_window``.

        Then let the revert finish and check the server is back on the
        source with ``pcpus``.
        """
        gate = eventlet.event.Event()
        held = []

        def finish_revert_resize(orig_finish, manager, *args, **kwargs):
            if manager.host == SOURCE and not gate.ready():
                held.append(True)
                gate.wait()
            return orig_finish(manager, *args, **kwargs)

        hooks.wrap(self, 'nova.compute.manager.ComputeManager.'
                   'finish_revert_resize', finish_revert_resize)
        # NOTE: RPC casts may run as calls in Nova's framework, so the
        # revert request returns only once the source half is done.
        reverting = eventlet.spawn(
            self.api.post_server_action, server_id, {'revertResize': None})
        deadline = time.time() + 60
        while not held:
            self.assertLess(time.time(), deadline, 'revert never reached '
                            'the source')
            eventlet.sleep(0.05)
        try:
            in_window()
        finally:
            gate.send()
            reverting.wait()
        server = self._wait(server_id, 'ACTIVE')
        self.assertEqual(SOURCE, server['OS-EXT-SRV-ATTR:host'])
        self.assertEqual(pcpus, self._pcpus(server_id))

    def _booked_pcpus(self, host):
        return base.pinned_pcpus(self._tracker(host))

    def _destination_in_window(self, in_window):
        """The destination's side: its periodic task in the window.

        Server X and then A (2 pinned vCPUs each) fill the source; A is
        resized to the destination, where server C then gets the pCPUs
        A does not hold: the very pCPUs A held, and will hold again, on
        the source. A is reverted and held at the start of the source's
        ``finish_revert_resize``; ``in_window`` runs then.

        :returns: (A's pCPUs on the source, C's on the destination)
        """
        self._boot('nrl-x', self.flavor_a, SOURCE)
        server_a = self._boot('nrl-a', self.flavor_a, SOURCE)
        pcpus_a = self._pcpus(server_a['id'])
        with mock.patch('nova.virt.libvirt.driver.LibvirtDriver.'
                        'migrate_disk_and_power_off', return_value='{}'):
            self.api.post_server_action(
                server_a['id'], {'resize': {'flavorRef': self.flavor_b}})
            server_a = self._wait(server_a['id'], 'VERIFY_RESIZE')
        self.assertEqual(DEST, server_a['OS-EXT-SRV-ATTR:host'])
        server_c = self._boot('nrl-c', self.flavor_a, DEST)
        pcpus_c = self._pcpus(server_c['id'])
        # The scenario needs C on A's source pCPUs (Nova pins the lowest
        # free ones on both hosts).
        self.assertEqual(pcpus_a, pcpus_c)
        self._revert_held_at_source(server_a['id'], pcpus_a, in_window)
        return pcpus_a, pcpus_c


class SourceWindowPinningTest(base.OnFixedWindowNovaMixin,
                              _PinningWindowBase):
    """With the extension the new server gets the free pCPUs.

    On a Nova that closes the window itself (a build with a series of
    patches/) the mixin stands aside and the same test runs on Nova's code.
    """

    on_fixed_nova = ('test_no_pcpu_double_booked',)

    def setUp(self):
        super(SourceWindowPinningTest, self).setUp()
        if base.window_fixed_upstream():
            return
        self.assertIn('source_window', self.activation_report.mixins)
        self.assertIn(str(self.activation_report.state),
                      (nrl_report.PATCHED, nrl_report.ALREADY_FIXED))

    def test_no_pcpu_double_booked(self):
        pcpus_a, pcpus_b = self._pinned_server_in_window()
        self.assertEqual(set(), pcpus_a & pcpus_b)
        self.assertEqual({0, 1, 2, 3}, pcpus_a | pcpus_b)
        # The next periodic task finds consistent books.
        self._periodic(SOURCE)
        self._periodic(DEST)


class SourceWindowPinningCanary(_PinningWindowBase):
    """Plain Nova: the new server is pinned to the reverting one's pCPUs."""

    extension = False

    def setUp(self):
        if base.window_fixed_upstream():
            self.skipTest('the installed Nova closes the source window')
        super(SourceWindowPinningCanary, self).setUp()

    def test_pcpu_double_booked_on_plain_nova(self):
        pcpus_a, pcpus_b = self._pinned_server_in_window()
        self.assertEqual(pcpus_a, pcpus_b)
        # Both servers claim the same pCPUs: the source's periodic task
        # cannot rebuild its books any more.
        self.assertRaises(exception.CPUPinningInvalid,
                          self._periodic, SOURCE)


class DestWindowPinningTest(_PinningWindowBase):
    """With the extension the destination's books hold only its guests."""

    def test_destination_periodic_in_window(self):
        booked = []

        def in_window():
            self._periodic(DEST)
            booked.append(self._booked_pcpus(DEST))

        pcpus_a, pcpus_c = self._destination_in_window(in_window)
        self.assertEqual([pcpus_c], booked)
        self._periodic(SOURCE)
        self._periodic(DEST)
        self.assertEqual(pcpus_c, self._booked_pcpus(DEST))
        self.assertEqual({0, 1, 2, 3}, self._booked_pcpus(SOURCE))


class DestWindowPinningCanary(_PinningWindowBase):
    """Plain Nova: the destination pins the source's pCPUs in the window.

    Its guest C holds them there: the destination's periodic task fails
    with ``CPUPinningInvalid`` until the source's half of the revert has
    run (upstream's NOTE(ndipanov) in ``revert_resize``).
    """

    extension = False

    def setUp(self):
        if base.window_fixed_upstream():
            self.skipTest('the installed Nova closes the revert window')
        super(DestWindowPinningCanary, self).setUp()

    def test_destination_periodic_fails_in_window(self):
        raised = []

        def in_window():
            raised.append(self.assertRaises(exception.CPUPinningInvalid,
                                            self._periodic, DEST))

        self._destination_in_window(in_window)
        self.assertEqual(1, len(raised))
        # Once A is back on the source the destination's books heal.
        self._periodic(DEST)
