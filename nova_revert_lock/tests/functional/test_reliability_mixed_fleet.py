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

"""A fleet being rolled out: the extension on some computes only.

``SERVICE_MANAGERS`` decides a compute's manager class when the service
starts, so each compute is started with the extension activated or not,
and the activation is undone before the next one starts. The same
resize is then reverted (the destination runs the critical section) and
confirmed (the source runs it), both raced by the periodic task.

Whatever the mix, both operations complete; a host that runs the
extension keeps its own books right; a host that does not behaves as
plain Nova (on an affected release: the race shows there, and only
there).

NOTE: in one process every compute takes the same in-process
``compute_resources`` lock. That does not matter here: the race hook
runs the periodic of the host that owns the step, and a plain host's
steps take no lock at all.
"""

from nova.tests.functional import integrated_helpers
import testscenarios

from nova_revert_lock import activation
from nova_revert_lock import report as nrl_report
from nova_revert_lock.tests.functional import base
from nova_revert_lock.tests.functional import faults

load_tests = testscenarios.load_tests_apply_scenarios


class MixedFleetTest(base.ExtensionFixtureMixin, base.RaceMixin,
                     faults.OutcomeMixin,
                     integrated_helpers.ProviderUsageBaseTestCase):

    # host1 is the source, host2 the destination of every resize.
    scenarios = [
        ('dest-only', {'patched_hosts': ('host2',)}),
        ('source-only', {'patched_hosts': ('host1',)}),
        ('both', {'patched_hosts': ('host1', 'host2')}),
    ]
    extension = False   # activation is per compute, below

    def setUp(self):
        self.affected = base.nova_is_affected()
        self.addCleanup(activation.deactivate)
        super(MixedFleetTest, self).setUp()

    def _start_compute(self, host, *args, **kwargs):
        if host in self.patched_hosts:
            report = activation.activate()
            self.assertIn(str(report.state),
                          (nrl_report.PATCHED, nrl_report.ALREADY_FIXED),
                          report.problems)
        try:
            return super(MixedFleetTest, self)._start_compute(
                host, *args, **kwargs)
        finally:
            activation.deactivate()

    def _fixed(self, host):
        """True if ``host`` runs a fix (ours, or upstream's)."""
        return host in self.patched_hosts or not self.affected

    def test_revert_then_confirm(self):
        for host, service in self.computes.items():
            composed = type(service.manager).__name__ == (
                'RevertLockComputeManager')
            # On a Nova with upstream's fix the composed manager holds
            # only what goes beyond it (and the status endpoint).
            self.assertEqual(host in self.patched_hosts, composed, host)
        server = self._boot(self.flavor_small, host='host1')

        # Revert: host2, the destination, runs the critical section.
        server = self.resize(server, self.flavor_large)
        self.race_enabled = True
        server = self.revert(server)
        self.race_enabled = False
        self.assertEqual('host1', self._host_of(server))
        window = [w for w in self.window_seen if w[0] == 'host2']
        if self._fixed('host2'):
            self.assertEqual([], window)
            self.assertEqual({'host2': 0}, self.usage_at_cast)
        else:
            self.assertEqual(1, len(window), self.window_seen)
            self.assertEqual({'host2': 2}, self.usage_at_cast)
        self.assert_lock_free()
        self.assertEqual({'host1': 1, 'host2': 0}, self.usage())

        # Confirm: host1, the source, runs the critical section.
        self.window_seen, self.raced = [], []
        server = self.resize(server, self.flavor_large)
        self.race_enabled = True
        server = self.confirm(server)
        self.race_enabled = False
        self.assertEqual('host2', self._host_of(server))
        window = [w for w in self.window_seen if w[0] == 'host1']
        if self._fixed('host1'):
            self.assertEqual([], window)
            self.assertEqual(0, self.vcpus_used('host1'))
        else:
            self.assertEqual(1, len(window), self.window_seen)
            self.assertEqual(-1, self.vcpus_used('host1'))
        self.assertEqual(2, self.vcpus_used('host2'))
        self.assert_lock_free()
        self.assertEqual({'host1': 0, 'host2': 2}, self.usage())
        self.assertEqual(self.truth(), self.placement_vcpus())
