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

"""What a host's report says of each bug of the family."""

import testtools

from nova_revert_lock.audit import endpoint
from nova_revert_lock.audit import rows
from nova_revert_lock.guard import decision
from nova_revert_lock import report as nrl_report

CORE = ('confirm', 'revert', 'cross_cell_confirm', 'cross_cell_revert')


def _report(state, applied, outcomes):
    checks = [decision.MixinCheck(name, outcome, [])
              for name, outcome in outcomes.items()]
    return nrl_report.ActivationReport(state, '21.1.0', mixins=applied,
                                       checks=checks)


class ReportBugsTest(testtools.TestCase):

    def test_patched_affected_host(self):
        outcomes = dict((n, decision.MATCH) for n in CORE)
        outcomes['resize_source_flavor'] = decision.MATCH
        outcomes['incoming_migration_context'] = decision.MATCH
        outcomes['evacuate_under_lock'] = decision.MATCH
        outcomes['live_migration_rollback'] = decision.MATCH
        outcomes['live_migration_abort_queued'] = decision.MATCH
        outcomes['unshelve_claim'] = decision.MATCH
        report = _report(nrl_report.PATCHED, list(outcomes), outcomes)
        self.assertEqual({'1879878': 'patched', '1944759': 'patched',
                          '1953359': 'patched', '1896463': 'patched',
                          '1894095': 'patched', '1949808': 'patched',
                          '2025480': 'patched'},
                         dict(report.to_dict()['bugs']))

    def test_fixed_upstream_and_open_sibling(self):
        # 22.0.0: 1879878 fixed upstream, 1944759 (and 1896463) affected
        # but its code unknown to this package: the host is open to it,
        # and says why.
        outcomes = dict((n, decision.FIXED_UPSTREAM) for n in CORE)
        outcomes['resize_source_flavor'] = decision.UNKNOWN
        report = _report(nrl_report.ALREADY_FIXED, [], outcomes)
        bugs = report.bugs
        self.assertEqual(nrl_report.BUG_FIXED_UPSTREAM, bugs['1879878'][0])
        self.assertEqual(nrl_report.BUG_OPEN, bugs['1944759'][0])
        self.assertIn('resize_source_flavor not applied (unknown)',
                      bugs['1944759'][1])

    def test_train_cross_cell_not_applicable(self):
        outcomes = {'confirm': decision.MATCH, 'revert': decision.MATCH,
                    'cross_cell_confirm': decision.NOT_APPLICABLE,
                    'cross_cell_revert': decision.NOT_APPLICABLE}
        report = _report(nrl_report.PATCHED, ['confirm', 'revert'],
                         outcomes)
        self.assertEqual(nrl_report.BUG_PATCHED, report.bugs['1879878'][0])
        # Not configured: nothing says the host is safe from it.
        self.assertEqual((nrl_report.BUG_OPEN,
                          'resize_source_flavor not checked'),
                         report.bugs['1944759'])

    def test_configured_out_fix_is_open(self):
        outcomes = {'confirm': decision.MATCH}
        report = _report(nrl_report.INCOMPLETE, ['confirm'], outcomes)
        status, why = report.bugs['1879878']
        self.assertEqual(nrl_report.BUG_OPEN, status)
        self.assertIn('revert not checked', why)

    def test_disabled_is_open(self):
        report = nrl_report.ActivationReport(nrl_report.DISABLED, '21.1.0')
        self.assertEqual(
            {'1879878': (nrl_report.BUG_OPEN, 'disabled'),
             '1944759': (nrl_report.BUG_OPEN, 'disabled'),
             '1953359': (nrl_report.BUG_OPEN, 'disabled'),
             '1896463': (nrl_report.BUG_OPEN, 'disabled'),
             '1894095': (nrl_report.BUG_OPEN, 'disabled'),
             '1949808': (nrl_report.BUG_OPEN, 'disabled'),
             '2025480': (nrl_report.BUG_OPEN, 'disabled')},
            dict(report.bugs))

    def test_status_endpoint_and_rows_carry_bugs(self):
        outcomes = dict((n, decision.FIXED_UPSTREAM) for n in CORE)
        outcomes['resize_source_flavor'] = decision.UNKNOWN
        outcomes['incoming_migration_context'] = decision.FIXED_UPSTREAM
        outcomes['evacuate_under_lock'] = decision.UNKNOWN
        # No release fixes bug 1894095; its mixin applies.
        outcomes['live_migration_rollback'] = decision.MATCH
        # 24.1.1 and later carry upstream's fix for bug 1949808.
        outcomes['live_migration_abort_queued'] = decision.FIXED_UPSTREAM
        outcomes['unshelve_claim'] = decision.FIXED_UPSTREAM

        class Manager(object):
            host = 'host1'
            _nrl_report = _report(nrl_report.ALREADY_FIXED,
                                  ['live_migration_rollback'], outcomes)

        status = endpoint.status_of(Manager())
        self.assertEqual({'1879878': 'fixed-upstream', '1944759': 'open',
                          '1953359': 'fixed-upstream', '1896463': 'open',
                          '1894095': 'patched',
                          '1949808': 'fixed-upstream',
                          '2025480': 'fixed-upstream'},
                         status['bugs'])
        row = rows.row_from_status(_Target(), status)
        self.assertEqual(['1896463', '1944759'], rows.open_bugs(row))
        # the hold percentiles reach the row (status --all --format json)
        self.assertEqual(status['lock_hold_ms_by_kind'],
                         row['lock_hold_ms_by_kind'])
        self.assertEqual([], rows.open_bugs(rows.new_row('host2')))


class _Target(object):
    host = 'host1'
    cell = None
