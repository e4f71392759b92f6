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

"""The status endpoint on computes started by Nova's functional framework.

Nova's ``Service`` builds each compute's RPC server from ``[manager] +
manager.additional_endpoints``; these tests look at that very server and
ask it over Nova's own (fake) transport with the client the command uses.
"""

import fixtures
from nova import conf as nova_conf
from nova import exception as nova_exception
from nova import rpc as nova_rpc
from nova.tests.functional import integrated_helpers

from nova_revert_lock.audit import client
from nova_revert_lock.audit import endpoint
from nova_revert_lock.audit import query
from nova_revert_lock.audit import rows
from nova_revert_lock.audit import targets
from nova_revert_lock import report as nrl_report
from nova_revert_lock import sections
from nova_revert_lock.tests.functional import base
from nova_revert_lock.tests.functional import test_same_cell_race

CONF = nova_conf.CONF


def served_endpoints(service):
    """The objects a compute's RPC server dispatches to.

    Nova 34.0.0 wraps each endpoint to track the calls in progress (for a
    graceful shutdown); the wrapper forwards every attribute to the
    endpoint it holds as ``_endpoint``.
    """
    return [getattr(e, '_endpoint', e)
            for e in service.rpcserver.dispatcher.endpoints]


def status_endpoints(service):
    return [e for e in served_endpoints(service)
            if isinstance(e, endpoint.StatusEndpoint)]


class StatusEndpointTest(base.ExtensionFixtureMixin, base.RaceMixin,
                         test_same_cell_race._Scenarios,
                         integrated_helpers.ProviderUsageBaseTestCase):
    """Extension active: every compute serves the endpoint."""

    def setUp(self):
        if base.activation_disabled():
            self.skipTest('NRL_NO_ACTIVATE: no compute serves the '
                          'extension\'s endpoint')
        super(StatusEndpointTest, self).setUp()
        self.report = self.activation_report
        self.assertIn(str(self.report.state),
                      (nrl_report.PATCHED, nrl_report.ALREADY_FIXED),
                      self.report.problems)
        self.api = client.StatusAPI(nova_rpc.TRANSPORT, timeout=30)

    def test_endpoint_among_the_compute_rpc_endpoints(self):
        for host, service in self.computes.items():
            (served,) = status_endpoints(service)
            self.assertIs(service.manager, served.manager)
            self.assertIsInstance(service.manager,
                                  endpoint.StatusEndpointMixin)
            # Nova's own endpoints are still served, the manager first.
            self.assertIs(service.manager, served_endpoints(service)[0])

    def test_get_status_after_a_raced_confirm(self):
        before = sections.snapshot()
        self._raced_confirm()
        self.assertEqual([], self.window_seen)
        status = self.api.get_status(self.ctxt, 'host1')
        self.assertEqual('host1', status['host'])
        self.assertEqual(str(self.report.state), status['state'])
        self.assertEqual(self.report.nova_version, status['nova_version'])
        self.assertEqual(self.report.series, status['series'])
        self.assertEqual(self.report.mixins, status['mixins'])
        self.assertEqual(self.report.activated_at, status['activated_at'])
        self.assertIsNotNone(status['activated_at'])
        self.assertEqual(endpoint.RPC_API_VERSION, status['rpc_version'])
        entered = (status['critical_sections'] -
                   before['critical_sections'])
        confirms = (status['critical_sections_by_kind'].get('confirm', 0) -
                    before['critical_sections_by_kind'].get('confirm', 0))
        self.assertEqual(before['critical_section_errors'],
                         status['critical_section_errors'])
        if self.report.state == nrl_report.PATCHED:
            self.assertIn('confirm', status['mixins'])
            # the one confirm ran in our critical section
            self.assertEqual(1, confirms)
            self.assertGreaterEqual(entered, 1)
            self.assertGreater(status['max_lock_hold_ms'], 0)
        else:
            # upstream's own fix ran: no confirm section of ours
            self.assertNotIn('confirm', status['mixins'])
            self.assertEqual(0, confirms)
        # the other compute answers too, on its own
        self.assertEqual('host2', self.api.get_status(
            self.ctxt, 'host2')['host'])

    def test_periodic_outcome_of_each_node(self):
        # Nova logs what a node's periodic task raises and goes on; the
        # endpoint says how each node's latest run ended.
        manager = self.computes['host1'].manager
        if not hasattr(manager, '_nrl_tracker_for'):
            # nothing composed on this Nova: nothing observes the task
            self.assertIsNone(self.api.get_status(
                self.ctxt, 'host1')['periodic_by_node'])
            return
        self.run_periodic('host1')
        node = self.api.get_status(self.ctxt, 'host1')['periodic_by_node'][
            'host1']
        self.assertEqual(('ok', 0, None), (
            node['outcome'], node['failed_in_a_row'], node['error']))
        runs = node['runs']
        frozen = fixtures.MockPatchObject(
            manager.driver, 'get_available_resource',
            side_effect=nova_exception.CPUPinningInvalid(requested=[1],
                                                         available=[0]))
        with frozen:
            self.run_periodic('host1')
            self.run_periodic('host1')
        status = self.api.get_status(self.ctxt, 'host1')
        node = status['periodic_by_node']['host1']
        self.assertEqual(('failed', 2, runs + 2), (
            node['outcome'], node['failed_in_a_row'], node['runs']))
        self.assertTrue(node['error'].startswith(
            'CPUPinningInvalid: CPU set to pin [1] must be a subset'),
            node['error'])
        row = rows.row_from_status(targets.Target('host1'), status)
        self.assertEqual('host1 failing x2 CPUPinningInvalid',
                         rows.periodic(row))
        self.run_periodic('host1')
        node = self.api.get_status(self.ctxt, 'host1')['periodic_by_node'][
            'host1']
        self.assertEqual(('ok', 0, None), (
            node['outcome'], node['failed_in_a_row'], node['error']))
        self.assertEqual(node['at'], node['last_ok_at'])

    def test_all_finds_every_compute_of_every_cell(self):
        # What `nova-revert-lock status --all` does after reading the
        # configuration: cell mappings from the API database, services
        # from each cell's database, then each host on its cell's
        # transport (the fixture's buses all lead to Nova's transport).
        self.useFixture(fixtures.MockPatch(
            'nova_revert_lock.audit.client.get_transport',
            return_value=nova_rpc.TRANSPORT))
        self.computes['host2'].stop()
        found, errors = targets.targets_from_cells(CONF)
        self.assertEqual([], errors)
        self.assertEqual(['host1', 'host2'], [t.host for t in found])
        self.assertEqual({'cell1'}, {t.cell for t in found})
        host1, host2 = query.query(CONF, found, timeout=2)
        self.assertTrue(rows.protected(host1), host1)
        self.assertEqual('cell1', host1['cell'])
        self.assertEqual(self.report.state, host1['state'])
        self.assertFalse(host2['reachable'])
        self.assertIn('no answer within 2s', host2['error'])


class StatusEndpointPlainNovaTest(
        base.ExtensionFixtureMixin, base.RaceMixin,
        integrated_helpers.ProviderUsageBaseTestCase):
    """Plain nova-compute: no endpoint, and the client says so."""

    extension = False

    def test_plain_compute_is_not_running_the_extension(self):
        for service in self.computes.values():
            self.assertEqual([], status_endpoints(service))
        api = client.StatusAPI(nova_rpc.TRANSPORT, timeout=30)
        self.assertRaises(client.NotRunningExtension, api.get_status,
                          self.ctxt, 'host1')
