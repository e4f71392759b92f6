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

"""The status endpoint and its client, over oslo.messaging's fake driver."""

import json
from unittest import mock

import fixtures
from oslo_config import cfg
import oslo_messaging as messaging
import testtools

from nova_revert_lock.audit import client
from nova_revert_lock.audit import endpoint
from nova_revert_lock import composition
from nova_revert_lock import sections


class FakeReport(object):
    def __init__(self, state='patched', mixins=('confirm', 'revert'),
                 missing=()):
        self.state = state
        self.missing = list(missing)
        self.nova_version = '21.1.0'
        self.series = 'ussuri'
        self.mixins = list(mixins)
        self.activated_at = '2020-06-01T12:00:00.000000Z'


class PlainManager(object):
    """Stands for Nova's ComputeManager: a versioned default endpoint."""

    target = messaging.Target(version='5.11')

    def __init__(self, host):
        self.host = host
        self.additional_endpoints = []

    def get_console_topic(self, context):
        return 'compute'


def extension_manager(report):
    return type('RevertLockComputeManager',
                (endpoint.StatusEndpointMixin, PlainManager),
                {'_nrl_report': report})


class CountersFixture(fixtures.Fixture):
    """Start the process-wide counters from zero; restore them after."""

    def _setUp(self):
        saved = dict(vars(sections.COUNTERS))
        sections.COUNTERS.reset()
        self.addCleanup(vars(sections.COUNTERS).update, saved)


class FakeTransportMixin(object):
    """Compute RPC servers on one fake:// transport, as Nova builds them."""

    def setUp(self):
        super(FakeTransportMixin, self).setUp()
        self.useFixture(CountersFixture())
        # servers log every UnsupportedVersion they answer with
        self.useFixture(fixtures.FakeLogger())
        self.conf = cfg.ConfigOpts()
        self.conf([])
        self.transport = client.get_transport(self.conf, 'fake://')
        self.addCleanup(self.transport.cleanup)

    def serve(self, manager):
        """Start an RPC server with ``[manager] + additional_endpoints``."""
        endpoints = [manager] + list(manager.additional_endpoints)
        server = messaging.get_rpc_server(
            self.transport,
            messaging.Target(topic='compute', server=manager.host),
            endpoints, executor='threading')
        server.start()

        def stop():
            server.stop()
            server.wait()
        self.addCleanup(stop)
        return server


class TestStatusEndpoint(testtools.TestCase):

    def setUp(self):
        super(TestStatusEndpoint, self).setUp()
        self.useFixture(CountersFixture())

    def test_target_is_its_own_namespace(self):
        target = endpoint.StatusEndpoint.target
        self.assertEqual(('revert_lock', '1.0'),
                         (target.namespace, target.version))
        self.assertIsNone(target.topic)
        self.assertIsNone(target.server)

    def test_mixin_appends_after_manager_init(self):
        manager = extension_manager(FakeReport())('host1')
        (served,) = manager.additional_endpoints
        self.assertIsInstance(served, endpoint.StatusEndpoint)
        self.assertIs(manager, served.manager)

    def test_get_status_reports_the_activation(self):
        manager = extension_manager(FakeReport())('host1')
        status = manager.additional_endpoints[0].get_status({})
        self.assertEqual({
            'host': 'host1',
            'rpc_version': '1.0',
            'nova_version': '21.1.0',
            'series': 'ussuri',
            'state': 'patched',
            'mixins': ['confirm', 'revert'],
            'missing': [],
            'activated_at': '2020-06-01T12:00:00.000000Z',
            'bugs': {},
            'critical_sections': 0,
            'critical_sections_by_kind': {},
            'max_lock_hold_ms': 0.0,
            'critical_section_errors': 0,
            'critical_section_errors_by_kind': {},
            'lock_hold_ms_by_kind': {},
            'degraded': [],
            'degraded_ended': {},
            # a manager without the composed tracker observes no periodic
            'periodic_by_node': None,
        }, status)
        self.assertEqual(status, json.loads(json.dumps(status)))

    def test_get_status_names_missing_fixes(self):
        report = FakeReport(state='incomplete', mixins=['confirm'],
                            missing=['revert'])
        manager = extension_manager(report)('host1')
        status = manager.additional_endpoints[0].get_status({})
        self.assertEqual('incomplete', status['state'])
        self.assertEqual(['revert'], status['missing'])

    def test_get_status_counts_critical_sections(self):
        manager = extension_manager(FakeReport())('host1')
        with sections.counted('confirm'):
            pass
        try:
            with sections.counted('revert'):
                raise ValueError('inside')
        except ValueError:
            pass
        status = manager.additional_endpoints[0].get_status({})
        self.assertEqual(2, status['critical_sections'])
        self.assertEqual({'confirm': 1, 'revert': 1},
                         status['critical_sections_by_kind'])
        self.assertEqual(1, status['critical_section_errors'])
        self.assertEqual({'revert': 1},
                         status['critical_section_errors_by_kind'])
        self.assertGreaterEqual(status['max_lock_hold_ms'], 0.0)
        self.assertEqual({'confirm', 'revert'},
                         set(status['lock_hold_ms_by_kind']))
        self.assertEqual(1, status['lock_hold_ms_by_kind']['revert']['n'])

    def test_hold_percentiles_per_kind_of_the_latest_sections(self):
        # 1..2000 ms for confirm: the percentiles are of the latest 1024
        # (977..2000), the longest is of all of them.
        for held in range(1, 2001):
            sections.COUNTERS.record('confirm', float(held), False)
        sections.COUNTERS.record('revert', 7.0, True)
        holds = sections.snapshot()['lock_hold_ms_by_kind']
        self.assertEqual({'n': 1024, 'p50': 1488.0, 'p99': 1990.0,
                          'max': 2000.0}, holds['confirm'])
        self.assertEqual({'n': 1, 'p50': 7.0, 'p99': 7.0, 'max': 7.0},
                         holds['revert'])

    def test_periodic_outcome_per_node(self):
        sections.periodic_ran('node1')
        for _ in range(3):
            sections.periodic_ran('node2', ValueError('CPU set to unpin\n'
                                                      '[1] must be a subset'))
        periodic = sections.snapshot()['periodic_by_node']
        self.assertEqual(
            {'outcome': 'ok', 'runs': 1, 'failed_in_a_row': 0, 'error': None},
            {k: periodic['node1'][k]
             for k in ('outcome', 'runs', 'failed_in_a_row', 'error')})
        self.assertEqual(periodic['node1']['at'],
                         periodic['node1']['last_ok_at'])
        node2 = periodic['node2']
        self.assertEqual(('failed', 3, 3, None, None), (
            node2['outcome'], node2['runs'], node2['failed_in_a_row'],
            node2['last_ok_at'], node2['running_since']))
        self.assertEqual('ValueError: CPU set to unpin', node2['error'])
        # A run under way says since when; one that ends well starts the
        # count again.
        sections.periodic_started('node2')
        self.assertIsNotNone(
            sections.snapshot()['periodic_by_node']['node2']['running_since'])
        self.assertEqual('failed', sections.snapshot()['periodic_by_node'][
            'node2']['outcome'])
        sections.periodic_started('node3')
        self.assertEqual(
            (None, 0), tuple(sections.snapshot()['periodic_by_node'][
                'node3'][k] for k in ('outcome', 'runs')))
        sections.periodic_ran('node2')
        node2 = sections.snapshot()['periodic_by_node']['node2']
        self.assertEqual(('ok', 4, 0, None), (
            node2['outcome'], node2['runs'], node2['failed_in_a_row'],
            node2['error']))

    def test_degraded_periods_per_fix_node_and_read(self):
        self.assertEqual([], sections.snapshot()['degraded'])
        self.assertTrue(sections.degraded('source_window', 'node1',
                                          'look up', ValueError('gone\nx')))
        self.assertFalse(sections.degraded('source_window', 'node1',
                                           'look up', KeyError('again')))
        self.assertTrue(sections.degraded('source_window', 'node2',
                                          'look up', ValueError('gone')))
        (first, second) = sections.snapshot()['degraded']
        self.assertEqual(('node1', 'look up', 2, "KeyError: 'again'"),
                         (first['node'], first['what'], first['count'],
                          first['reason']))
        self.assertIsNotNone(first['since'])
        self.assertEqual('node2', second['node'])
        # Another read of the same node ends nothing.
        self.assertIsNone(sections.recovered('source_window', 'node1',
                                             'read dest'))
        ended = sections.recovered('source_window', 'node1', 'look up')
        self.assertEqual(2, ended['count'])
        self.assertIsNone(sections.recovered('source_window', 'node1',
                                             'look up'))
        status = sections.snapshot()
        self.assertEqual(['node2'], [p['node'] for p in status['degraded']])
        self.assertEqual({'source_window': 1}, status['degraded_ended'])

    def test_observer_records_each_run_and_raises_as_before(self):
        class Tracker(object):
            def update_available_resource(self, context, nodename,
                                          startup=False):
                if nodename == 'frozen':
                    raise RuntimeError('books frozen')
                return startup

        tracker = type('Composed', (composition.PeriodicObserver, Tracker),
                       {})()
        self.assertTrue(tracker.update_available_resource(
            None, 'node1', startup=True))
        self.assertRaises(RuntimeError, tracker.update_available_resource,
                          None, 'frozen')
        tracker.update_available_resource(None, nodename='node2')
        periodic = sections.snapshot()['periodic_by_node']
        self.assertEqual({'node1': 'ok', 'frozen': 'failed', 'node2': 'ok'},
                         {n: e['outcome'] for n, e in periodic.items()})
        self.assertEqual('RuntimeError: books frozen',
                         periodic['frozen']['error'])

    def test_a_node_removed_takes_its_records_along(self):
        removed = []

        class Tracker(object):
            def update_available_resource(self, context, nodename,
                                          startup=False):
                pass

            def remove_node(self, nodename):
                removed.append(nodename)

        tracker = type('Composed', (composition.PeriodicObserver, Tracker),
                       {})()
        for node in ('node1', 'node2'):
            tracker.update_available_resource(None, node)
            sections.degraded('source_window', node, 'look up',
                              RuntimeError('gone'))
        sections.degraded('source_window', 'node1', 'read',
                          RuntimeError('gone'))
        tracker.remove_node('node1')
        self.assertEqual(['node1'], removed)
        snapshot = sections.snapshot()
        self.assertEqual(['node2'], [p['node']
                                     for p in snapshot['degraded']])
        self.assertEqual(['node2'], list(snapshot['periodic_by_node']))
        # Not a good read: no period counted as ended.
        self.assertEqual({}, dict(snapshot['degraded_ended']))

    def test_percentile_is_nearest_rank(self):
        self.assertIsNone(sections.percentile([], 50))
        self.assertEqual(3, sections.percentile([5, 1, 3, 2, 4], 50))
        self.assertEqual(5, sections.percentile([5, 1, 3, 2, 4], 99))
        self.assertEqual(1, sections.percentile([5, 1, 3, 2, 4], 1))

    def test_no_report_at_all_is_unknown(self):
        # Activation sets the report on every class it composes; a class
        # composed otherwise has none to give.
        manager = type('M', (endpoint.StatusEndpointMixin, PlainManager),
                       {})('host2')
        status = manager.additional_endpoints[0].get_status({})
        self.assertEqual(('unknown', None), (status['state'],
                                             status['nova_version']))


class TestStatusAPI(FakeTransportMixin, testtools.TestCase):

    def test_get_status_round_trip(self):
        self.serve(extension_manager(FakeReport())('host1'))
        self.serve(extension_manager(FakeReport('refused', ()))('host2'))
        api = client.StatusAPI(self.transport, timeout=5)
        self.assertEqual('patched', api.get_status(None, 'host1')['state'])
        status = api.get_status(None, 'host2')
        self.assertEqual(('host2', 'refused'), (status['host'],
                                                status['state']))

    def test_context_is_sent_as_a_dict(self):
        seen = []

        class Recording(endpoint.StatusEndpoint):
            def get_status(self, context):
                seen.append(context)
                return super(Recording, self).get_status(context)

        manager = PlainManager('host1')
        manager.additional_endpoints.append(Recording(manager))
        self.serve(manager)
        client.StatusAPI(self.transport, timeout=5).get_status(None, 'host1')
        (context,) = seen
        self.assertIsInstance(context, dict)
        self.assertTrue(context['is_admin'])
        self.assertTrue(context['request_id'].startswith('req-'))

    def test_plain_compute_is_not_running_the_extension(self):
        self.serve(PlainManager('host1'))
        api = client.StatusAPI(self.transport, timeout=5)
        e = self.assertRaises(client.NotRunningExtension, api.get_status,
                              None, 'host1')
        self.assertIn('UnsupportedVersion', str(e))

    def test_does_not_collide_with_the_compute_api(self):
        # Nova's own endpoints keep answering next to ours.
        self.serve(extension_manager(FakeReport())('host1'))
        client = messaging.RPCClient(
            self.transport, messaging.Target(topic='compute',
                                             server='host1',
                                             version='5.0'), timeout=5)
        self.assertEqual('compute', client.call({}, 'get_console_topic'))

    def test_no_server_times_out(self):
        api = client.StatusAPI(self.transport, timeout=0.5)
        self.assertRaises(messaging.MessagingTimeout, api.get_status,
                          None, 'ghost')


class TestHelpers(testtools.TestCase):

    def test_out_of_namespace_errors(self):
        self.assertTrue(client.is_out_of_namespace(
            messaging.UnsupportedVersion('1.0', method='get_status')))
        self.assertTrue(client.is_out_of_namespace(
            messaging.NoSuchMethod('get_status')))
        # What a real broker hands back: the class by name only.
        self.assertTrue(client.is_out_of_namespace(
            messaging.RemoteError('UnsupportedVersion', 'no')))
        self.assertFalse(client.is_out_of_namespace(
            messaging.RemoteError('ValueError', 'boom')))
        self.assertFalse(client.is_out_of_namespace(ValueError()))

    def test_remote_error_other_than_version_is_raised(self):
        api = client.StatusAPI.__new__(client.StatusAPI)
        api.client = mock.Mock()
        api.client.prepare.return_value.call.side_effect = (
            messaging.RemoteError('KeyError', 'x'))
        self.assertRaises(messaging.RemoteError, api.get_status, {}, 'h')
