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

"""Resize: the source's periodic task at the ``finish_resize`` cast.

Nova bug 1944759. Affected Nova (Train, Ussuri, Victoria before 22.4.0)
points ``instance.host`` at the destination and casts ``finish_resize``
before anything stashed ``instance.old_flavor`` (the destination's
``finish_resize`` does). A periodic task on the source in between counts
neither the instance (it is on the destination) nor the outgoing
migration (it needs ``old_flavor``): the source loses the old flavor's
usage, and the confirm then drops it a second time.

Here the source runs its periodic task where it casts ``finish_resize``
(as upstream's reproducer does), then the resize is confirmed.
``ResizeSourceFlavorTest`` runs with the extension (on a Nova that carries
upstream's fix the mixin stands aside and upstream's code must pass the
same test); ``ResizeSourceFlavorCanary`` runs the same scenario on plain
Nova, where the bug must show.
"""

from nova.compute import rpcapi as compute_rpcapi
from nova import objects
from nova.tests.functional import integrated_helpers

from nova_revert_lock.mixins import resize_source_flavor
from nova_revert_lock.tests.functional import base
from nova_revert_lock.tests.functional import test_same_cell_race

SPEC = resize_source_flavor.SPEC


def nova_has_fix():
    """True if the installed Nova stashes old_flavor on the source."""
    return SPEC.fixed_upstream()


class _CastScenario(test_same_cell_race._Scenarios):
    """Resize host1 -> host2, 1 -> 2 vCPUs, periodic at the cast."""

    def _run_periodic_at_finish_resize_cast(self):
        """Run the source's periodic task where it casts finish_resize."""
        self.usage_at_cast = {}
        test = self
        orig_cast = compute_rpcapi.ComputeAPI.finish_resize

        def finish_resize(rpcapi, ctxt, instance, migration, *args, **kw):
            # The source's own periodic task, in the greenthread of its
            # _resize_instance: instance.host is the destination now.
            host = migration.source_compute
            test.run_periodic(host)
            test.usage_at_cast[host] = test.vcpus_used(host)
            return orig_cast(rpcapi, ctxt, instance, migration, *args, **kw)

        self.stub_out('nova.compute.rpcapi.ComputeAPI.finish_resize',
                      finish_resize)

    def _resize_with_periodic_at_cast(self):
        server = self._boot(self.flavor_small, host='host1')
        self._run_periodic_at_finish_resize_cast()
        server = self.resize(server, self.flavor_large)
        self.assertEqual('host2', self._host_of(server))
        self.assertEqual(['host1'], list(self.usage_at_cast))
        return server

    def _saved_at_cast(self):
        """What a reader of the database sees at the finish_resize cast.

        :returns: dict: the instance's host and its old flavor's vCPUs
            (None without an old flavor)
        """
        server = self._boot(self.flavor_small, host='host1')
        seen = {}
        test = self
        orig_cast = compute_rpcapi.ComputeAPI.finish_resize

        def finish_resize(rpcapi, ctxt, instance, migration, *args, **kw):
            saved = objects.Instance.get_by_uuid(
                test.ctxt, instance.uuid, expected_attrs=['flavor'])
            seen['host'] = saved.host
            seen['old_flavor'] = (saved.old_flavor.vcpus
                                  if saved.old_flavor else None)
            return orig_cast(rpcapi, ctxt, instance, migration, *args, **kw)

        self.stub_out('nova.compute.rpcapi.ComputeAPI.finish_resize',
                      finish_resize)
        self.resize(server, self.flavor_large)
        return seen


class ResizeSourceFlavorTest(base.ExtensionFixtureMixin, base.RaceMixin,
                             _CastScenario,
                             integrated_helpers.ProviderUsageBaseTestCase):
    """The fix: the source counts the outgoing migration at the cast."""

    def setUp(self):
        if base.activation_disabled() and not nova_has_fix():
            self.skipTest('plain Nova without the fix for bug 1944759 '
                          '(the patch series does not carry it)')
        super(ResizeSourceFlavorTest, self).setUp()
        report = self.activation_report
        if nova_has_fix():
            self.assertIn('resize_source_flavor', report.fixed_upstream)
        else:
            self.assertIn('resize_source_flavor', report.mixins,
                          (report.state, report.warnings, report.problems))

    def test_periodic_at_finish_resize_cast(self):
        server = self._resize_with_periodic_at_cast()
        # old_flavor was saved with the new host: the periodic counted the
        # outgoing migration with the old flavor.
        self.assertEqual({'host1': 1}, self.usage_at_cast)
        self.assertEqual((1, 2), (self.vcpus_used('host1'),
                                  self.vcpus_used('host2')))
        self.confirm(server)
        self.assertEqual((0, 2), (self.vcpus_used('host1'),
                                  self.vcpus_used('host2')))
        self._assert_healed(0, 2)

    def test_old_flavor_saved_with_host(self):
        self.assertEqual({'host': 'host2', 'old_flavor': 1},
                         self._saved_at_cast())


class ResizeSourceFlavorCanary(base.ExtensionFixtureMixin, base.RaceMixin,
                               _CastScenario,
                               integrated_helpers.ProviderUsageBaseTestCase):
    """Plain Nova: the periodic at the cast loses the instance."""

    extension = False

    def setUp(self):
        if nova_has_fix():
            self.skipTest('the installed Nova carries the fix for bug '
                          '1944759: no bug to show')
        super(ResizeSourceFlavorCanary, self).setUp()

    def test_periodic_at_finish_resize_cast_on_plain_nova(self):
        server = self._resize_with_periodic_at_cast()
        # Neither the instance nor the outgoing migration was counted.
        self.assertEqual({'host1': 0}, self.usage_at_cast)
        self.assertEqual((0, 2), (self.vcpus_used('host1'),
                                  self.vcpus_used('host2')))
        # The confirm drops the old flavor a second time.
        self.confirm(server)
        self.assertEqual((-1, 2), (self.vcpus_used('host1'),
                                   self.vcpus_used('host2')))
        self._assert_healed(0, 2)

    def test_old_flavor_not_saved_with_host_on_plain_nova(self):
        self.assertEqual({'host': 'host2', 'old_flavor': None},
                         self._saved_at_cast())
