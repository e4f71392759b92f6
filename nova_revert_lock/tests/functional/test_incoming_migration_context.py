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

"""Resize: the destination's periodic task before ``finish_resize``.

Nova bugs 1953359 and 1952915, on Nova's libvirt functional framework
(fake libvirt, real driver, NUMA and pinning code) with two hosts of 4
dedicated pCPUs each:

1. server A (2 pinned vCPUs) boots on host0 and is pinned to pCPUs P;
2. server B (2 pinned vCPUs) boots on host1 and is pinned to the same
   pCPU numbers P there;
3. A is resized to host1, whose resize claim pins it to the other two
   pCPUs (Q) in the migration context;
4. the source's ``resize_instance`` points A at host1 and casts
   ``finish_resize``; at the start of host1's ``finish_resize``, before
   it applies the migration context, host1 runs its periodic task (as
   upstream's reproducer does);
5. the resize finishes, and is reverted.

On affected plain Nova the periodic task in step 4 counts A, now one of
host1's instances, with the source's pinning P, which B holds on host1:
it fails with ``CPUPinningInvalid``, half way through, and the revert
then fails to unpin Q (``CPUUnpinningInvalid``) and puts A in ERROR.
With the mixin the periodic task counts A with Q: host1 reads P | Q
pinned, and the revert brings A back to host0 with P.

``IncomingMigrationContextTest`` runs with the default mixins (on a Nova
that carries upstream's fix the mixin stands aside and upstream's code
must pass the same test); ``IncomingMigrationContextCanary`` runs the same
scenario on plain Nova, where the bug must show.
"""

from unittest import mock

from nova.conductor import manager as conductor_manager
from nova import exception
from nova import objects
from nova.tests.functional.api import client

from nova_revert_lock.guard import decision
from nova_revert_lock.mixins import base as mixin_base
from nova_revert_lock.mixins import incoming_migration_context
from nova_revert_lock.mixins import source_window
from nova_revert_lock.tests.functional import base
from nova_revert_lock.tests.functional import hooks
from nova_revert_lock.tests.functional import test_source_window_flip
from nova_revert_lock.tests.functional import test_source_window_pinning

SPEC = incoming_migration_context.SPEC
NAME = 'incoming_migration_context'
SOURCE = test_source_window_pinning.SOURCE
DEST = test_source_window_pinning.DEST


def nova_has_fix():
    """True if the installed periodic task applies incoming contexts."""
    return SPEC.fixed_upstream()


def periodic_listing():
    """The MigrationList query the installed periodic task reads.

    Victoria and later list the ``error`` migrations too.
    """
    if mixin_base.calls('nova.compute.resource_tracker:'
                        'ResourceTracker._update_available_resource',
                        'get_in_progress_and_error'):
        return 'get_in_progress_and_error'
    return 'get_in_progress_by_host_and_node'


class _IncomingWindowBase(test_source_window_pinning._PinningWindowBase):

    def setUp(self):
        super(_IncomingWindowBase, self).setUp()
        # The periodic task in the window sends its object calls through
        # RPC serialization, as a real nova-compute does (DESIGN fact 9).
        self.indirection = test_source_window_flip.SerializingIndirection(
            conductor_manager.ConductorManager())

    def _periodic_through_conductor(self, host):
        with self.indirection.installed():
            self._periodic(host)

    def _pinned_on_host(self, host):
        return base.pinned_pcpus(self._tracker(host))

    def _resize_with_dest_periodic_in_window(self):
        """Steps 1-4 of the module docstring.

        :returns: dict: the pCPUs of A before and after the resize, of B,
            the exception the destination's periodic task raised (None
            if none) and the pCPUs host1 held as pinned right after it
        """
        server_a = self._boot('nrl-a', self.flavor_a, SOURCE)
        server_b = self._boot('nrl-b', self.flavor_a, DEST)
        seen = {'a': self._pcpus(server_a['id']),
                'b': self._pcpus(server_b['id'])}
        # Same pCPU numbers on both hosts: A's source pinning cannot fit
        # next to B on host1.
        self.assertEqual(seen['a'], seen['b'])
        self.assertEqual(2, len(seen['a']))

        def finish_resize(orig_finish, manager, *args, **kwargs):
            if manager.host == DEST and 'periodic_error' not in seen:
                # A is host1's instance now; its context is not applied.
                instance = objects.Instance.get_by_uuid(
                    self.ctxt, server_a['id'],
                    expected_attrs=['numa_topology', 'migration_context'])
                seen['host_in_window'] = instance.host
                try:
                    self._periodic_through_conductor(DEST)
                    seen['periodic_error'] = None
                except exception.CPUPinningInvalid as e:
                    seen['periodic_error'] = e
                seen['dest_pinned_in_window'] = self._pinned_on_host(DEST)
            return orig_finish(manager, *args, **kwargs)

        hooks.wrap(self, 'nova.compute.manager.ComputeManager.finish_resize',
                   finish_resize)
        with mock.patch('nova.virt.libvirt.driver.LibvirtDriver.'
                        'migrate_disk_and_power_off', return_value='{}'):
            self.api.post_server_action(
                server_a['id'], {'resize': {'flavorRef': self.flavor_b}})
            server_a = self._wait(server_a['id'], 'VERIFY_RESIZE')
        self.assertEqual(DEST, server_a['OS-EXT-SRV-ATTR:host'])
        self.assertEqual(DEST, seen['host_in_window'])
        seen['a_resized'] = self._pcpus(server_a['id'])
        seen['server_a'] = server_a
        return seen


class IncomingMigrationContextTest(_IncomingWindowBase):
    """The fix: the destination counts A with its new pinning."""

    def setUp(self):
        if base.activation_disabled() and not nova_has_fix():
            self.skipTest('plain Nova without the fix for bug 1953359 '
                          '(the patch series does not carry it)')
        super(IncomingMigrationContextTest, self).setUp()
        report = self.activation_report
        if nova_has_fix():
            self.assertIn(NAME, report.fixed_upstream)
        else:
            self.assertIn(NAME, report.mixins,
                          (report.state, report.warnings, report.problems))

    def test_composes_with_source_window(self):
        # Both in the default [revert_lock] mixins, both tracker mixins.
        report = self.activation_report
        if nova_has_fix():
            self.skipTest('the installed Nova carries the fix for bug '
                          '1953359: the mixin stands aside')
        if source_window.SPEC.check().outcome != decision.MATCH:
            # 22.0.0-22.3.0: its periodic body is not verified there.
            self.skipTest('source_window does not apply to the installed '
                          'Nova')
        self.assertIn('source_window', report.mixins)
        rt = self._tracker(DEST)
        self.assertIsInstance(
            rt, incoming_migration_context.IncomingMigrationContextTracker)
        self.assertIsInstance(rt, source_window.SourceWindowTracker)
        # It defers the counting of the node's instances: every other
        # tracker mixin comes after it, so that their extensions of the
        # counting run when it counts.
        mro = type(rt).__mro__
        first = mro.index(
            incoming_migration_context.IncomingMigrationContextTracker)
        self.assertEqual([], [
            cls for cls in mro[:first]
            if cls.__module__.startswith('nova_revert_lock.mixins.')])
        self.assertLess(first, mro.index(source_window.SourceWindowTracker))

    def test_dest_periodic_counts_new_pinning(self):
        seen = self._resize_with_dest_periodic_in_window()
        self.assertIsNone(seen['periodic_error'])
        # Read through the conductor once, by upstream's periodic body, as
        # upstream's fix reads it: the mixin uses that list.
        self.assertEqual(1, self.indirection.calls.count(
            'MigrationList.' + periodic_listing()))
        self.assertEqual(set(), seen['a'] & seen['a_resized'])
        # B's pCPUs and A's new ones: nothing of A's source pinning.
        self.assertEqual({0, 1, 2, 3}, seen['dest_pinned_in_window'])
        self.assertEqual(seen['b'] | seen['a_resized'],
                         seen['dest_pinned_in_window'])
        # The books the periodic task left are those the claim made.
        self._periodic(DEST)
        self.assertEqual({0, 1, 2, 3}, self._pinned_on_host(DEST))

        # The revert unpins on host1 what the periodic task pinned.
        server_a = seen['server_a']
        self.api.post_server_action(server_a['id'], {'revertResize': None})
        server_a = self._wait(server_a['id'], 'ACTIVE')
        self.assertEqual(SOURCE, server_a['OS-EXT-SRV-ATTR:host'])
        self.assertEqual(seen['a'], self._pcpus(server_a['id']))
        self.assertEqual(seen['b'], self._pinned_on_host(DEST))
        self.assertEqual(seen['a'], self._pinned_on_host(SOURCE))
        self._periodic(SOURCE)
        self._periodic(DEST)
        self.assertEqual(seen['b'], self._pinned_on_host(DEST))
        self.assertEqual(seen['a'], self._pinned_on_host(SOURCE))

    def test_dest_periodic_then_confirm(self):
        seen = self._resize_with_dest_periodic_in_window()
        self.assertIsNone(seen['periodic_error'])
        server_a = seen['server_a']
        self.api.post_server_action(server_a['id'], {'confirmResize': None})
        server_a = self._wait(server_a['id'], 'ACTIVE')
        self._periodic(SOURCE)
        self._periodic(DEST)
        self.assertEqual(set(), self._pinned_on_host(SOURCE))
        self.assertEqual({0, 1, 2, 3}, self._pinned_on_host(DEST))


class IncomingMigrationContextCanary(_IncomingWindowBase):
    """Plain Nova: the periodic task counts the source's pinning."""

    extension = False

    def setUp(self):
        if nova_has_fix():
            self.skipTest('the installed Nova carries the fix for bug '
                          '1953359: no bug to show')
        super(IncomingMigrationContextCanary, self).setUp()

    def test_dest_periodic_fails_on_plain_nova(self):
        seen = self._resize_with_dest_periodic_in_window()
        # The source's pinning does not fit next to B: the periodic task
        # fails half way, and host1 holds only B's pCPUs as pinned.
        self.assertIsInstance(seen['periodic_error'],
                              exception.CPUPinningInvalid)
        self.assertEqual(seen['b'], seen['dest_pinned_in_window'])
        self.assertEqual(seen['b'], self._pinned_on_host(DEST))
        # The revert unpins A's new pCPUs on host1, which nothing pinned
        # there any more: the instance goes to ERROR.
        server_a = seen['server_a']
        self.assertRaises(
            client.OpenStackApiException, self.api.post_server_action,
            server_a['id'], {'revertResize': None})
        self.assertEqual('ERROR', self.api.get_server(server_a['id'])[
            'status'])
        self.assertIn('CPUUnpinningInvalid', self.stdlog.logger.output)
