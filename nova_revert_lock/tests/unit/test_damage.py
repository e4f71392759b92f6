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

"""The damage report's plumbing: symptoms, order of repairs, sources that
fail, the exit codes. Its findings on real damage are in
``tests/functional/test_damage_report.py`` and the cloud's runs."""

import io
import json
import subprocess
from unittest import mock

import fixtures
import testtools

from nova_revert_lock.audit import damage
from nova_revert_lock.cmd import manage

AUDIT_OUT = (
    'Allocations were set against consumer UUID c0 but no existing '
    'instances or active migrations are related. \n'
    'Allocations for consumer UUID c0 on Resource Provider rp1 can be '
    'deleted: {\'VCPU\': 2, \'MEMORY_MB\': 512}\n'
    'Processed 1 allocation.\n')


class SymptomTest(testtools.TestCase):

    def fault(self, message, details=''):
        return mock.Mock(message=message, details=details)

    def test_family_symptoms(self):
        self.assertEqual('CPUUnpinningInvalid', damage.symptom(self.fault(
            'CPU set to unpin [1, 2] must be a subset of pinned CPU set '
            '[]')))
        self.assertEqual('CPUPinningInvalid', damage.symptom(self.fault(
            'CPU set to pin [0] must be a subset of free CPU set [3]')))
        self.assertEqual('negative usage', damage.symptom(self.fault(
            'Failed', 'ValueError: memory_mb_used is Negative')))

    def test_other_faults_are_not_ours(self):
        self.assertIsNone(damage.symptom(self.fault('No valid host')))
        self.assertIsNone(damage.symptom(None))


class ReportTest(testtools.TestCase):

    def test_repairs_in_order_once_each(self):
        report = damage.Report()
        report.add(damage.ORPHANED_ALLOCATION, 'x', ['audit --delete'])
        report.add(damage.SHARED_PCPU, 'y', ['migrate s', 'confirm s'])
        report.add(damage.PERIODIC_FAILING, 'z', ['restart h'])
        report.add(damage.SHARED_PCPU, 'y', ['migrate s', 'confirm s'])
        self.assertEqual([damage.STATUS_FIRST, 'migrate s', 'confirm s',
                          'restart h', 'audit --delete'],
                         report.repair_steps())
        self.assertEqual([damage.SHARED_PCPU, damage.SHARED_PCPU,
                          damage.PERIODIC_FAILING,
                          damage.ORPHANED_ALLOCATION],
                         [f['kind'] for f in report.as_dict()['findings']])

    def test_clean_report_has_no_steps(self):
        self.assertEqual([], damage.Report().repair_steps())

    def test_failing_periodic_from_the_endpoints(self):
        report = damage.Report()
        damage.check_periodic(report, [
            {'host': 'h1', 'cell': 'c', 'reachable': True,
             'periodic_by_node': {
                'n1': {'outcome': 'failed', 'failed_in_a_row': 3,
                       'at': 'T', 'error': 'CPUPinningInvalid: CPU set',
                       'last_ok_at': None},
                'n2': {'outcome': 'ok'}}},
            {'host': 'plain', 'cell': 'c', 'reachable': True},
            {'host': 'down', 'cell': 'c', 'reachable': False,
             'error': 'no answer within 5s'}])
        (item,) = report.findings
        self.assertEqual(('h1', 'n1', '1879878'),
                         (item['host'], item['node'], item['bug']))
        self.assertIn('3 run(s) in a row failed', item['detail'])
        self.assertIn('1 of 3 host(s)', report.checked[0])
        self.assertEqual([{'what': 'status endpoint of down',
                           'error': 'no answer within 5s'}],
                         report.unreadable)

    def test_degraded_fix_from_the_endpoints(self):
        report = damage.Report()
        period = {'fix': 'source_window', 'node': 'n1', 'count': 4,
                  'what': 'look up reverted migrations', 'since': 'S',
                  'last_at': 'L', 'reason': 'MessagingTimeout: no reply'}
        damage.check_periodic(report, [
            {'host': 'h1', 'cell': 'c', 'reachable': True,
             'periodic_by_node': {'n1': {'outcome': 'ok'}},
             'degraded': [period]},
            {'host': 'h2', 'cell': 'c', 'reachable': True,
             'periodic_by_node': {}, 'degraded': []}])
        (item,) = report.findings
        self.assertEqual((damage.DEGRADED_FIX, 'h1', 'n1', None),
                         (item['kind'], item['host'], item['node'],
                          item['bug']))
        self.assertIn('source_window cannot look up reverted migrations: 4 '
                      'failed read(s) since S', item['detail'])
        self.assertIn('MessagingTimeout', item['detail'])
        self.assertIn('nova-revert-lock status --host h1', item['repair'][1])

    def test_rollback_outlasting_the_wait(self):
        report = damage.Report()
        period = {'fix': 'live_migration_rollback', 'node': 'n2',
                  'count': 2, 'since': 'S', 'last_at': 'L',
                  'what': 'wait for the rollback of a live migration',
                  'reason': 'RollbackOutlastedWait: the rollback of '
                            'instance u1 still ran after 30 s'}
        damage.check_periodic(report, [
            {'host': 'h2', 'cell': 'c', 'reachable': True,
             'periodic_by_node': {'n2': {'outcome': 'ok'}},
             'degraded': [period]}])
        (item,) = report.findings
        self.assertEqual((damage.DEGRADED_FIX, 'h2', 'n2', '1894095'),
                         (item['kind'], item['host'], item['node'],
                          item['bug']))
        self.assertIn('could not wait for the rollback of a live migration: '
                      '2 rollback(s) outlasted it since S', item['detail'])
        self.assertIn('instance u1', item['detail'])
        self.assertIn('rpc_response_timeout', item['repair'][0])
        self.assertIn('nova-revert-lock status --host h2', item['repair'][2])
        self.assertEqual(damage.ROLLBACK_WAIT_FIX, period['fix'])


class PlacementTest(testtools.TestCase):

    def setUp(self):
        super(PlacementTest, self).setUp()
        self.useFixture(fixtures.MockPatchObject(
            damage, 'has_placement_audit', return_value=True))
        self.run = self.useFixture(fixtures.MockPatch(
            'subprocess.run')).mock

    def test_orphans_from_nova_manage(self):
        self.run.return_value = mock.Mock(returncode=3, stdout=AUDIT_OUT)
        report = damage.Report()
        damage.check_placement(report, ['/etc/nova/nova.conf'], 60)
        command = self.run.call_args[0][0]
        self.assertEqual(['--config-file', '/etc/nova/nova.conf',
                          'placement', 'audit', '--verbose'], command[1:])
        self.assertNotIn('--delete', command)
        (item,) = report.findings
        self.assertEqual(('c0', ['nova-manage placement audit --verbose '
                                 '--delete --resource_provider rp1']),
                         (item['server'], item['repair']))

    def test_aborted_queued_live_migration(self):
        # Bug 1949808: the cancelled live migration m1 keeps the source's
        # allocation, its server s1 the destination's; both are orphans.
        self.run.return_value = mock.Mock(returncode=3, stdout=(
            'Allocations for consumer UUID m1 on Resource Provider src can '
            'be deleted: {\'VCPU\': 1}\n'
            'Allocations for consumer UUID s1 on Resource Provider dst can '
            'be deleted: {\'VCPU\': 1}\n') + AUDIT_OUT)
        report = damage.Report()
        report.cancelled_live_migrations['m1'] = ('cell1', 's1', 'host1',
                                                  'host2')
        damage.check_placement(report, None, 60)
        ours = [item for item in report.findings if item['bug']]
        self.assertEqual(
            [('m1', 's1', 'host1', '1949808')] * 2,
            [(item['migration'], item['server'], item['host'], item['bug'])
             for item in ours])
        self.assertIn('cancelled live migration m1', ours[0]['detail'])
        self.assertIn('server s1 on provider dst', ours[1]['detail'])
        steps = report.repair_steps()
        # Once each; the state before heal_allocations, which skips a
        # server in a task state; no audit --delete for them.
        self.assertEqual(1, len([s for s in steps if 'heal_allocations' in s]))
        self.assertLess(
            steps.index([s for s in steps if 'set --state active s1' in s][0]),
            steps.index([s for s in steps if 'heal_allocations' in s][0]))
        # No audit --delete of their providers; the other orphan (c0)
        # keeps its own repair.
        self.assertEqual(['nova-manage placement audit --verbose --delete '
                          '--resource_provider rp1'],
                         [step for step in steps if 'audit' in step])

    def test_audit_failing_is_not_clean(self):
        self.run.return_value = mock.Mock(returncode=1, stdout='boom')
        report = damage.Report()
        damage.check_placement(report, None, 60)
        self.assertEqual([], report.findings)
        self.assertIn('exited 1: boom', report.unreadable[0]['error'])

    def test_audit_hanging_is_not_clean(self):
        self.run.side_effect = subprocess.TimeoutExpired('nova-manage', 60)
        report = damage.Report()
        damage.check_placement(report, None, 60)
        self.assertIn('TimeoutExpired', report.unreadable[0]['error'])

    def test_release_without_the_audit(self):
        damage.has_placement_audit.return_value = False
        report = damage.Report()
        damage.check_placement(report, None, 60)
        self.run.assert_not_called()
        self.assertIn('no placement audit', report.unreadable[0]['error'])


class CommandTest(testtools.TestCase):

    def setUp(self):
        super(CommandTest, self).setUp()
        self.stdout = self.useFixture(fixtures.MonkeyPatch(
            'sys.stdout', io.StringIO())).new_value
        self.stderr = self.useFixture(fixtures.MonkeyPatch(
            'sys.stderr', io.StringIO())).new_value
        self.useFixture(fixtures.FakeLogger())
        self.report = damage.Report()
        self.collect = self.useFixture(fixtures.MockPatchObject(
            damage, 'collect', return_value=self.report)).mock

    def main(self, *args):
        return manage.main(['damage'] + list(args))

    def test_clean(self):
        self.assertEqual(0, self.main('--config-file', 'x.conf'))
        self.collect.assert_called_once_with(
            ['x.conf'], timeout=10.0, migration_age=3600.0)
        self.assertIn('0 finding(s)', self.stdout.getvalue())

    def test_damage_found(self):
        self.report.add(damage.SHARED_PCPU, 'cpus', ['migrate s'],
                        host='h', server='s', bug='1879878')
        self.assertEqual(1, self.main('--format', 'json'))
        result = json.loads(self.stdout.getvalue())
        self.assertEqual([damage.STATUS_FIRST, 'migrate s'],
                         result['repair'])
        self.assertEqual('h', result['findings'][0]['host'])

    def test_incomplete(self):
        self.report.cannot_read('cell c1 database', OSError('refused'))
        self.assertEqual(3, self.main())
        self.assertIn('NOT CHECKED cell c1 database: OSError: refused',
                      self.stdout.getvalue())

    def test_usage_error(self):
        self.collect.side_effect = damage.audit_targets.UsageError('no db')
        self.assertEqual(2, self.main())
        self.assertIn('damage: no db', self.stderr.getvalue())


class CollectTest(testtools.TestCase):
    """A cell that cannot be read is said so; the rest still comes."""

    def patch(self, target, **kwargs):
        patcher = mock.patch.multiple(target, **kwargs)
        self.addCleanup(patcher.stop)
        return patcher.start()

    def test_unreachable_cell(self):
        from nova import context as nova_context
        from nova import objects

        def cell(name, cell0=False):
            found = mock.Mock(transport_url='rabbit://%s' % name,
                              uuid=name)
            found.name = name
            found.is_cell0.return_value = cell0
            return found

        def check_cell(report, name, ctxt, now, migration_age):
            if name == 'bad':
                raise OSError('Can\'t connect to MySQL server')
            return [mock.Mock(host='cmp1')]

        self.patch(damage.audit_targets, load_nova_config=mock.DEFAULT)
        cells = mock.Mock()
        cells.get_all.return_value = [cell('cell0', True), cell('bad'),
                                      cell('good')]
        self.useFixture(fixtures.MockPatchObject(
            objects, 'CellMappingList', cells, create=True))
        self.patch(nova_context, target_cell=mock.MagicMock())
        self.patch(damage, check_cell=mock.Mock(side_effect=check_cell),
                   check_placement=mock.DEFAULT)
        query = self.patch(damage.query, query=mock.DEFAULT)['query']
        query.return_value = []
        report = damage.collect(['nova.conf'])
        self.assertEqual([{'what': 'cell bad',
                           'error': 'cell database unreachable: OSError: '
                                    'Can\'t connect to MySQL server'}],
                         report.unreadable)
        (targets,) = [c[0][1] for c in query.call_args_list]
        self.assertEqual([('cmp1', 'good', 'rabbit://good')],
                         [(t.host, t.cell, t.url) for t in targets])


class StaleMigrationTest(testtools.TestCase):
    """A stuck move counts while its server still shows it."""

    def setUp(self):
        super(StaleMigrationTest, self).setUp()
        import datetime
        self.now = datetime.datetime(2026, 1, 1, 12,
                                     tzinfo=datetime.timezone.utc)
        self.migration = mock.Mock(
            uuid='m1', status='confirming', migration_type='resize',
            source_compute='h1', instance_uuid='s1', created_at=None,
            updated_at=datetime.datetime(2026, 1, 1, 10))

    def stale(self, vm_state, task_state):
        server = mock.Mock(uuid='s1', vm_state=vm_state,
                           task_state=task_state)
        report = damage.Report()
        if damage._moving(server):
            damage._stale(report, 'c', self.now, 3600, self.migration,
                          server)
        return report.findings

    def test_server_still_moving(self):
        (item,) = self.stale('resized', None)
        self.assertEqual(('s1', 'm1'), (item['server'], item['migration']))
        self.assertIn('for 7200 s', item['detail'])
        self.assertIn('allocation delete m1', item['repair'][1])

    def test_server_at_rest_is_history(self):
        self.assertEqual([], self.stale('active', None))

    def test_young_move(self):
        server = mock.Mock(uuid='s1', vm_state='active',
                           task_state='resize_finish')
        report = damage.Report()
        damage._stale(report, 'c', self.now, 3 * 3600, self.migration,
                      server)
        self.assertEqual([], report.findings)
