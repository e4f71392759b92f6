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

"""Unshelve: the host's periodic task while the server spawns.

Nova bug 2025480. Affected Nova (before 26.2.2, 27.3.0, 28.1.0, 29.0.0)
claims an unshelved server's resources and spawns it while it is still
``SHELVED_OFFLOADED`` (task_state ``spawning``); the resource tracker
treats such a server as removable, so a periodic task during the spawn
does not count it, and an update of it untracks it: the host loses the
claim of a server that then runs there, while placement keeps its
allocation.

Here the server is booted, shelved (and offloaded, the default), then
unshelved with the host's periodic task (or a usage update, as
``ComputeManager._update_resource_tracker`` makes) run inside
``driver.spawn()``, as upstream's reproducer does. ``UnshelveClaimTest``
runs with the extension (on a Nova that carries upstream's fix the mixin
stands aside and upstream's code must pass the same test);
``UnshelveClaimCanary`` runs the same scenario on plain Nova, where the
bug must show.
"""

import time

import eventlet
from nova.compute import resource_tracker
from nova.compute import task_states
from nova.compute import vm_states
from nova import context as nova_context
from nova.tests.functional import integrated_helpers

from nova_revert_lock.mixins import unshelve_claim
from nova_revert_lock.tests.functional import base
from nova_revert_lock.tests.functional import hooks

SPEC = unshelve_claim.SPEC
HOST = 'host1'


def nova_has_fix():
    """True if the installed Nova keeps tracking a server being unshelved."""
    return SPEC.fixed_upstream()


class _UnshelveScenario(object):
    """Boot on host1 (1 vCPU), shelve and offload, unshelve."""

    hosts = (HOST,)

    def _node(self):
        (node,) = self.tracker(HOST).compute_nodes.values()
        return node

    def _books(self):
        """(tracker vCPUs, running_vms, tracked, placement vCPUs)."""
        node = self._node()
        usages = self._get_provider_usages(
            self._get_provider_uuid_by_host(HOST))
        return (node.vcpus_used, node.running_vms,
                len(self.tracker(HOST).tracked_instances),
                usages.get('VCPU', 0))

    def _saved_vcpus(self):
        """The host's vCPU usage as the tracker last saved it."""
        from nova import objects
        return objects.ComputeNode.get_by_host_and_nodename(
            self.ctxt, HOST, HOST).vcpus_used

    def _shelved_server(self):
        server = self._boot(self.flavor_small, host=HOST)
        self.assertEqual((1, 1, 1, 1), self._books())
        self.admin_api.post_server_action(server['id'], {'shelve': {}})
        self._wait_status(server['id'], 'SHELVED_OFFLOADED')
        # The offload saves the state first, then the host (None) once
        # the tracker has dropped the server.
        server = self._wait_offloaded(server['id'])
        self.assertEqual((0, 0, 0, 0), self._books())
        return server

    def _wait_offloaded(self, server_id, timeout=20):
        deadline = time.time() + timeout
        while True:
            server = self.admin_api.get_server(server_id)
            if server['OS-EXT-SRV-ATTR:host'] is None:
                return server
            if time.time() > deadline:
                self.fail('server %s still on %s' % (
                    server_id, server['OS-EXT-SRV-ATTR:host']))
            eventlet.sleep(0.05)

    def _unshelve_with(self, during_spawn):
        """Unshelve; call ``during_spawn(instance)`` inside the spawn.

        :returns: (books during the spawn, right after ``during_spawn``;
            books once the server is ACTIVE, before any later periodic)
        """
        server = self._shelved_server()
        seen = {}
        test = self

        def spawn(original, driver, context, instance, *args, **kwargs):
            if instance.vm_state == vm_states.SHELVED_OFFLOADED:
                test.assertEqual(task_states.SPAWNING, instance.task_state)
                during_spawn(instance)
                seen['books'] = test._books()
            return original(driver, context, instance, *args, **kwargs)

        hooks.wrap(self, 'nova.virt.fake.FakeDriver.spawn', spawn)
        self.admin_api.post_server_action(server['id'], {'unshelve': None})
        server = self._wait_status(server['id'], 'ACTIVE')
        self.assertEqual(HOST, self._host_of(server))
        self.assertIn('books', seen)
        return seen['books'], self._books()

    def _periodic(self, instance):
        self.run_periodic(HOST)

    def _usage_update(self, instance):
        """What ``ComputeManager._update_resource_tracker`` does."""
        self.tracker(HOST).update_usage(
            nova_context.get_admin_context(), instance, instance.node)

    def _assert_healed(self):
        self.run_periodic(HOST)
        self.assertEqual((1, 1, 1, 1), self._books())
        self.assertEqual(1, self._saved_vcpus())


class UnshelveClaimTest(base.ExtensionFixtureMixin, _UnshelveScenario,
                        base.RaceMixin,
                        integrated_helpers.ProviderUsageBaseTestCase):
    """The fix: the host keeps the claim of the server it unshelves."""

    def setUp(self):
        if base.activation_disabled() and not nova_has_fix():
            self.skipTest('plain Nova without the fix for bug 2025480 '
                          '(the patch series does not carry it)')
        super(UnshelveClaimTest, self).setUp()
        report = self.activation_report
        if nova_has_fix():
            self.assertIn('unshelve_claim', report.fixed_upstream)
        else:
            self.assertIn('unshelve_claim', report.mixins,
                          (report.state, report.warnings, report.problems))

    def test_periodic_during_unshelve_spawn(self):
        during, after = self._unshelve_with(self._periodic)
        # (vCPUs, running_vms, tracked, placement): the periodic counted
        # the server being unshelved, and saved it so.
        self.assertEqual((1, 1, 1, 1), during)
        self.assertEqual((1, 1, 1, 1), after)
        self.assertEqual(1, self._saved_vcpus())
        self._assert_healed()

    def test_usage_update_during_unshelve_spawn(self):
        during, after = self._unshelve_with(self._usage_update)
        self.assertEqual((1, 1, 1, 1), during)
        self.assertEqual((1, 1, 1, 1), after)
        self._assert_healed()


class _Cooperative(object):
    """An override of the usage update as another fix would write it.

    The fix for bug 1953359 prepares the instances in memory, then calls
    the next class's ``_update_usage_from_instances``; this one records
    what it was given and does the same.
    """

    def _update_usage_from_instances(self, context, instances, nodename):
        self.nrl_cooperative_seen.append(sorted(i.uuid for i in instances))
        return super(_Cooperative, self)._update_usage_from_instances(
            context, instances, nodename)


class UnshelveClaimCooperativeTest(
        base.ExtensionFixtureMixin, _UnshelveScenario, base.RaceMixin,
        integrated_helpers.ProviderUsageBaseTestCase):
    """Another tracker mixin overriding the usage update, before or after."""

    def setUp(self):
        if base.activation_disabled() and not nova_has_fix():
            self.skipTest('plain Nova without the fix for bug 2025480 '
                          '(the patch series does not carry it)')
        super(UnshelveClaimCooperativeTest, self).setUp()

    def _compose_cooperative(self, first):
        rt = self.tracker(HOST)
        composed = type(rt)
        if (base.activation_disabled() or
                composed is resource_tracker.ResourceTracker):
            # NRL_NO_ACTIVATE=1, on a Nova with the fix (setUp), or a Nova
            # on which every mixin stands aside (a patched build): Nova's
            # own tracker, not composed, is the class the override extends.
            mixins, stock, namespace = (), composed, {}
        else:
            mixins, stock = composed.__bases__[:-1], composed.__bases__[-1]
            namespace = dict((k, v) for k, v in vars(composed).items()
                             if k not in ('__dict__', '__weakref__'))
        if not nova_has_fix():
            self.assertIn(unshelve_claim.UnshelveClaimTracker, mixins)
        bases = ((_Cooperative,) + mixins if first else
                 mixins + (_Cooperative,)) + (stock,)
        rt.__class__ = type('Cooperative' + composed.__name__, bases,
                            namespace)
        rt.nrl_cooperative_seen = []
        return rt

    def _unshelve_composed(self, first):
        rt = self._compose_cooperative(first)
        during, after = self._unshelve_with(self._periodic)
        self.assertEqual((1, 1, 1, 1), during)
        self.assertEqual((1, 1, 1, 1), after)
        # The override ran in the raced periodic, with the server.
        self.assertEqual(1, len(rt.nrl_cooperative_seen))
        self._assert_healed()

    def test_cooperative_override_before(self):
        self._unshelve_composed(first=True)

    def test_cooperative_override_after(self):
        self._unshelve_composed(first=False)


class UnshelveClaimCanary(base.ExtensionFixtureMixin, _UnshelveScenario,
                          base.RaceMixin,
                          integrated_helpers.ProviderUsageBaseTestCase):
    """Plain Nova: the host loses the claim of the server it unshelves."""

    extension = False

    def setUp(self):
        if nova_has_fix():
            self.skipTest('the installed Nova carries the fix for bug '
                          '2025480: no bug to show')
        super(UnshelveClaimCanary, self).setUp()

    def test_periodic_during_unshelve_spawn_on_plain_nova(self):
        during, after = self._unshelve_with(self._periodic)
        # The periodic did not count the server: the tracker reads 0 vCPU
        # and no running VM, placement still 1 vCPU.
        self.assertEqual((0, 0, 0, 1), during)
        self.assertEqual((0, 0, 0, 1), after)
        self.assertEqual(0, self._saved_vcpus())
        self._assert_healed()

    def test_usage_update_during_unshelve_spawn_on_plain_nova(self):
        during, after = self._unshelve_with(self._usage_update)
        # The update untracked the server and took its usage away.
        self.assertEqual((0, 0, 0, 1), during)
        self.assertEqual((0, 0, 0, 1), after)
        self._assert_healed()
