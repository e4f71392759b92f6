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

"""The damage report on damage a real race made, and after its repair.

The race is the source window's, with dedicated CPUs, on Nova's libvirt
framework (``test_source_window_pinning``): on plain Nova it leaves two
servers pinned to the same pCPUs and the source's periodic task failing.
The report reads the cell database as the command does; the repair it
prints (migrate one of the two away, confirm) is then run through the API,
and the report must come back clean. With the extension the same race
leaves nothing to report.
"""

import datetime
import time
from unittest import mock

import eventlet

from nova import exception

from nova_revert_lock.audit import damage
from nova_revert_lock.tests.functional import test_source_window
from nova_revert_lock.tests.functional import test_source_window_pinning

SOURCE = test_source_window_pinning.SOURCE
DEST = test_source_window_pinning.DEST


class _DamageBase(test_source_window_pinning._PinningWindowBase):

    def report(self):
        report = damage.Report()
        damage.check_cell(report, 'cell1', self.ctxt,
                          datetime.datetime.now(datetime.timezone.utc),
                          migration_age=3600)
        return report

    def kinds(self, report):
        return sorted(item['kind'] for item in report.findings)


class DamageReportCanary(_DamageBase):
    """Plain Nova: the race's damage is found, and the repair clears it."""

    extension = False

    def setUp(self):
        if test_source_window.window_fixed_upstream():
            self.skipTest('the installed Nova closes the source window')
        super(DamageReportCanary, self).setUp()

    def test_shared_pcpus_found_then_repaired(self):
        self.assertEqual([], self.report().findings)
        pcpus_a, pcpus_b = self._pinned_server_in_window()
        self.assertEqual(pcpus_a, pcpus_b)
        self.assertRaises(exception.CPUPinningInvalid,
                          self._periodic, SOURCE)

        report = self.report()
        self.assertEqual([damage.SHARED_PCPU], self.kinds(report))
        (shared,) = report.findings
        self.assertEqual((SOURCE, '1879878'),
                         (shared['host'], shared['bug']))
        self.assertIn(str(sorted(pcpus_a)), shared['detail'])
        server = shared['server']
        self.assertEqual(
            [damage.STATUS_FIRST,
             'openstack server migrate --wait %s' % server,
             'openstack server resize confirm %s' % server],
            report.repair_steps())

        # The repair, as the report says it.
        with mock.patch('nova.virt.libvirt.driver.LibvirtDriver.'
                        'migrate_disk_and_power_off', return_value='{}'):
            self.api.post_server_action(server, {'migrate': None})
            self._wait(server, 'VERIFY_RESIZE')
        self.api.post_server_action(server, {'confirmResize': None})
        self._wait(server, 'ACTIVE')
        self._periodic(SOURCE)
        self._periodic(DEST)
        self.assertEqual([], self.report().findings)


class DamageReportTest(_DamageBase):
    """The extension: the same race leaves nothing to report."""

    def test_no_damage_after_the_race(self):
        pcpus_a, pcpus_b = self._pinned_server_in_window()
        self.assertEqual(set(), pcpus_a & pcpus_b)
        self._periodic(SOURCE)
        self._periodic(DEST)
        report = self.report()
        self.assertEqual([], report.findings)
        self.assertEqual([], report.repair_steps())

    def test_unconfirmed_resize_once_old(self):
        server = self._boot('nrl-a', self.flavor_a, SOURCE)
        with mock.patch('nova.virt.libvirt.driver.LibvirtDriver.'
                        'migrate_disk_and_power_off', return_value='{}'):
            self.api.post_server_action(
                server['id'], {'resize': {'flavorRef': self.flavor_b}})
            self._wait(server['id'], 'VERIFY_RESIZE')
        # A resize left unconfirmed counts only once it is old.
        self.assertEqual([], self.report().findings)
        report = damage.Report()
        later = (datetime.datetime.now(datetime.timezone.utc) +
                 datetime.timedelta(hours=2))
        damage.check_cell(report, 'cell1', self.ctxt, later, 3600)
        (stale,) = report.findings
        self.assertEqual((damage.STALE_MIGRATION, server['id']),
                         (stale['kind'], stale['server']))
        self.assertIn('resize confirm %s' % server['id'],
                      stale['repair'][0])

    def test_server_stuck_in_a_move_once_old(self):
        """A server stuck in a move's task state is named, with its reset.

        No move of it is under way: a rollback that raised, or a compute
        killed mid-move, left the task state set.
        """
        from nova import objects

        server = self._boot('nrl-a', self.flavor_a, SOURCE)
        instance = objects.Instance.get_by_uuid(self.ctxt, server['id'])
        instance.task_state = 'migrating'
        instance.save()
        later = (datetime.datetime.now(datetime.timezone.utc) +
                 datetime.timedelta(hours=2))
        # Not before it is old: a move may be about to start.
        self.assertEqual([], self.report().findings)
        report = damage.Report()
        damage.check_cell(report, 'cell1', self.ctxt, later, 3600)
        (stuck,) = report.findings
        self.assertEqual(
            (damage.STUCK_SERVER, server['id'], SOURCE, None),
            (stuck['kind'], stuck['server'], stuck['host'], stuck['bug']))
        self.assertIn('active/migrating', stuck['detail'])
        self.assertIn('no move under way', stuck['detail'])
        self.assertEqual(
            [damage.STATUS_FIRST],
            report.repair_steps()[:1])
        self.assertTrue(report.repair_steps()[1].startswith(
            'openstack server set --state active %s' % server['id']))

        # The repair, as the report says it (the API's reset-state).
        self.api.post_server_action(server['id'],
                                    {'os-resetState': {'state': 'active'}})
        report = damage.Report()
        damage.check_cell(report, 'cell1', self.ctxt, later, 3600)
        self.assertEqual([], report.findings)


class ResizedServerOfAnEndedMoveTest(_DamageBase):
    """``VERIFY_RESIZE`` with a migration that is over.

    What a source killed right after it saved ``confirmed`` leaves: the
    API confirms or reverts only a ``finished`` migration, so nothing
    but a state reset moves the server on.
    """

    def test_named_with_its_reset(self):
        from nova import objects

        server = self._boot('nrl-a', self.flavor_a, SOURCE)
        with mock.patch('nova.virt.libvirt.driver.LibvirtDriver.'
                        'migrate_disk_and_power_off', return_value='{}'):
            self.api.post_server_action(
                server['id'], {'resize': {'flavorRef': self.flavor_b}})
            self._wait(server['id'], 'VERIFY_RESIZE')
        (migration,) = objects.MigrationList.get_by_filters(
            self.ctxt, {'instance_uuid': server['id']})
        migration.status = 'confirmed'
        migration.save()
        # The source's restart: its first periodic task rebuilds its books.
        self._periodic(SOURCE)
        later = (datetime.datetime.now(datetime.timezone.utc) +
                 datetime.timedelta(hours=2))
        report = damage.Report()
        damage.check_cell(report, 'cell1', self.ctxt, later, 3600)
        self.assertEqual([damage.STUCK_SERVER], self.kinds(report),
                         report.findings)
        (stuck,) = report.findings
        self.assertEqual((damage.STUCK_SERVER, server['id'], DEST),
                         (stuck['kind'], stuck['server'], stuck['host']))
        self.assertIn('resized/None', stuck['detail'])
        self.assertIn('resize confirmed', stuck['detail'])
        self.assertTrue(stuck['repair'][0].startswith(
            'openstack server set --state active %s' % server['id']))

        self.api.post_server_action(server['id'],
                                    {'os-resetState': {'state': 'active'}})
        report = damage.Report()
        damage.check_cell(report, 'cell1', self.ctxt, later, 3600)
        self.assertEqual([], report.findings)


class StoppedResizeDamageTest(_DamageBase):
    """A resize whose destination never ran ``prep_resize``.

    As when the destination is killed as it takes the message off the
    queue (acknowledged first, so its restart never sees it): the
    conductor had already given the source's allocation to the
    migration and the server's own to the destination, so the server
    holds an allocation on a host it never reached. The report names
    the migration with every step that sets placement right, and after
    those steps, as printed, it is clean and placement's books agree.
    """

    @property
    def _placement(self):
        # NOTE: placement_api up to Nova 22, placement from 23 on
        return getattr(self, 'placement_api', None) or self.placement

    def _usage(self, host):
        (rp,) = self._placement.get(
            '/resource_providers?name=%s' % host,
            version='1.0').body['resource_providers']
        rp = rp['uuid']
        return self._placement.get(
            '/resource_providers/%s/usages' % rp,
            version='1.0').body['usages']

    def test_resize_stopped_before_hand_over(self):
        from nova.cmd import manage
        from nova import objects

        server = self._boot('nrl-a', self.flavor_a, SOURCE)
        held = self._usage(SOURCE)
        dest = self.computes[DEST].manager
        with mock.patch.object(dest, 'prep_resize') as prep:
            self.api.post_server_action(
                server['id'], {'resize': {'flavorRef': self.flavor_b}})
            deadline = time.time() + 20
            while not prep.called and time.time() < deadline:
                eventlet.sleep(0.1)
            self.assertTrue(prep.called)
        (migration,) = objects.MigrationList.get_by_filters(
            self.ctxt, {'instance_uuid': server['id']})
        self.assertEqual('pre-migrating', migration.status)
        later = (datetime.datetime.now(datetime.timezone.utc) +
                 datetime.timedelta(hours=2))

        def found():
            report = damage.Report()
            damage.check_cell(report, 'cell1', self.ctxt, later, 3600)
            return report

        report = found()
        (stale,) = report.findings
        self.assertEqual((damage.STALE_MIGRATION, server['id'],
                          migration.uuid),
                         (stale['kind'], stale['server'],
                          stale['migration']))
        steps = [step.split('  #')[0] for step in stale['repair']]
        self.assertEqual(
            ['openstack server set --state active %s' % server['id'],
             'openstack resource provider allocation delete %s'
             % migration.uuid,
             'openstack resource provider allocation delete %s'
             % server['id'],
             'nova-manage placement heal_allocations --instance %s'
             % server['id']], steps)

        # The reset alone (or a restart of the source, which clears
        # resize_prep) leaves the migration and both allocations.
        self.api.post_server_action(server['id'],
                                    {'os-resetState': {'state': 'active'}})
        report = found()
        (stale,) = report.findings
        self.assertEqual(steps[1:], [step.split('  #')[0]
                                     for step in stale['repair']])

        # The rest of the repair, as printed.
        self._placement.delete('/allocations/%s' % migration.uuid)
        self._placement.delete('/allocations/%s' % server['id'])
        self.assertEqual(0, manage.PlacementCommands().heal_allocations(
            instance_uuid=server['id']))
        self.assertEqual(held, self._usage(SOURCE))
        self.assertEqual(0, sum(self._usage(DEST).values()))
        self.assertEqual([], found().findings)
