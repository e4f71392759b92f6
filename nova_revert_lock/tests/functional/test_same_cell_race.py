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

"""Same-cell confirm and revert, raced by the periodic task.

``ConfirmRevertRaceTest`` runs with the extension activated (on a Nova
that already carries the fix, activation stands aside and upstream's fix
must pass the same tests). ``ConfirmRevertRaceCanary`` runs the very same
scenarios on plain Nova and asserts that the bug shows: if it did not, the
race tests above would prove nothing.
"""

from nova.tests.functional import integrated_helpers

from nova_revert_lock import report as nrl_report
from nova_revert_lock.tests.functional import base


class _Scenarios(object):
    """Resize host1 -> host2 from 1 to 2 vCPUs, then race the end."""

    def _resized_server(self):
        server = self._boot(self.flavor_small, host='host1')
        server = self.resize(server, self.flavor_large)
        self.assertEqual('host2', self._host_of(server))
        self.assertEqual((1, 2), (self.vcpus_used('host1'),
                                  self.vcpus_used('host2')))
        return server

    def _raced_confirm(self):
        server = self._resized_server()
        self.race_enabled = True
        self.confirm(server)
        self.race_enabled = False
        migration = self._migration(server['id'])
        self.assertEqual([('host1', migration.id, 'confirmed')],
                         [(r['host'], r['id'], r['status'])
                          for r in self.raced])
        return server

    def _raced_revert(self):
        server = self._resized_server()
        self.race_enabled = True
        server = self.revert(server)
        self.race_enabled = False
        migration = self._migration(server['id'])
        self.assertEqual([('host2', migration.id, 'reverted')],
                         [(r['host'], r['id'], r['status'])
                          for r in self.raced])
        self.assertEqual('host1', self._host_of(server))
        return server

    def _assert_healed(self, source_vcpus, dest_vcpus):
        """A fresh periodic on each host gives the true usage."""
        for host in self.hosts:
            self.run_periodic(host)
        self.assertEqual((source_vcpus, dest_vcpus),
                         (self.vcpus_used('host1'),
                          self.vcpus_used('host2')))


class ConfirmRevertRaceTest(base.ExtensionFixtureMixin, base.RaceMixin,
                            _Scenarios,
                            integrated_helpers.ProviderUsageBaseTestCase):
    """The fix: the periodic never runs inside the window."""

    def setUp(self):
        super(ConfirmRevertRaceTest, self).setUp()
        self.assertIn(str(self.activation_report.state),
                      (nrl_report.PATCHED, nrl_report.ALREADY_FIXED),
                      self.activation_report.problems)

    def test_confirm_raced_by_periodic(self):
        self._raced_confirm()
        self.assertEqual([], self.window_seen)
        # The source gave the instance up: nothing left, nothing negative.
        self.assertEqual(0, self.vcpus_used('host1'))
        self.assertEqual(2, self.vcpus_used('host2'))
        self._assert_healed(0, 2)

    def test_revert_raced_by_periodic(self):
        self._raced_revert()
        self.assertEqual([], self.window_seen)
        # When the destination casts back to the source its claim is gone.
        self.assertEqual({'host2': 0}, self.usage_at_cast)
        self.assertEqual(1, self.vcpus_used('host1'))
        self._assert_healed(1, 0)

    def test_confirm_then_revert_cycles(self):
        server = self._boot(self.flavor_small, host='host1')
        for i in range(2):
            server = self.resize(server, self.flavor_large)
            self.race_enabled = True
            server = self.revert(server)
            server = self.resize(server, self.flavor_large)
            server = self.confirm(server)
            self.race_enabled = False
            server = self.resize(server, self.flavor_small)
            server = self.confirm(server)
        self.assertEqual([], self.window_seen)
        usage = {h: self.vcpus_used(h) for h in self.hosts}
        self.assertEqual(1, sum(usage.values()), usage)
        self.assertTrue(all(v >= 0 for v in usage.values()), usage)


class ConfirmRevertRaceCanary(base.CanaryMixin, base.ExtensionFixtureMixin,
                              base.RaceMixin, _Scenarios,
                              integrated_helpers.ProviderUsageBaseTestCase):
    """Plain Nova: the same scenarios must show the bug."""

    def test_confirm_race_shows_on_plain_nova(self):
        self._raced_confirm()
        self.assertEqual(1, len(self.window_seen), self.window_seen)
        # The periodic stopped counting the outgoing migration, then the
        # claim drop removed its usage a second time.
        self.assertEqual(-1, self.vcpus_used('host1'))
        self._assert_healed(0, 2)

    def test_revert_race_shows_on_plain_nova(self):
        self._raced_revert()
        self.assertEqual(1, len(self.window_seen), self.window_seen)
        # The periodic counted the instance on the destination, then the
        # claim drop found no tracked migration and dropped nothing.
        self.assertEqual({'host2': 2}, self.usage_at_cast)
        self._assert_healed(1, 0)
