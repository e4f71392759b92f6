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

"""``tools/fleet_scale.py`` at a small size: the rows, not the clock.

30 computes in a cell's database, 27 of them served by one process on a
private RabbitMQ node, 3 silent: the measurement the benchmark page
reports at 100 to 500 hosts works, and every row it checks is right.
Timing is only recorded as a detail: the machine running the tests is
shared. The module name puts it in the ``rpc`` and ``all-ussuri`` runs
(``test_rpc_rabbitmq...``).
"""

from unittest import mock

import testtools
from testtools import content

from nova_revert_lock.tests.integration import rabbitmq
from tools import fleet_scale

SIZE = 30
DOWN = 3
TIMEOUT = 3


class FleetScaleTest(testtools.TestCase):

    def setUp(self):
        super(FleetScaleTest, self).setUp()
        rabbitmq.skip_unless_available()
        self.node = self.useFixture(rabbitmq.RabbitMQNode())

    def test_rows_right_on_a_small_fleet(self):
        result = fleet_scale.measure(self.node, SIZE, DOWN, timeout=TIMEOUT)
        self.addDetail('result', content.json_content(result))
        self.assertEqual([], result['problems'])
        self.assertIs(True, result['rows_right'])
        self.assertEqual((SIZE - DOWN, SIZE - DOWN, DOWN, DOWN),
                         (result['up'], result['up_right'], result['down'],
                          result['down_right']))
        self.assertEqual(1, result['exit_code'])
        self.assertGreater(result['peak_rss_mb'], 0)


class CheckRowsTest(testtools.TestCase):
    """The check itself tells a wrong row (no broker needed)."""

    def setUp(self):
        super(CheckRowsTest, self).setUp()
        self.names, self.silent = fleet_scale.host_names(SIZE, DOWN)
        self.expected = mock.Mock(state='patched', nova_version='21.1.0',
                                  series='ussuri', mixins=('confirm',))

    def rows(self):
        rows = []
        for name in self.names:
            if name in self.silent:
                rows.append({'host': name, 'reachable': False,
                             'error': 'no answer within 3s (...)'})
            else:
                rows.append({'host': name, 'reachable': True, 'error': None,
                             'state': 'patched', 'nova_version': '21.1.0',
                             'series': 'ussuri', 'mixins': ['confirm'],
                             'activated_at': '2026-12-02T12:00:00Z'})
        return rows

    def test_silent_hosts_spread_through_the_list(self):
        self.assertEqual(SIZE, len(set(self.names)))
        self.assertEqual(['cmp30-0005', 'cmp30-0015', 'cmp30-0025'],
                         sorted(self.silent))

    def test_right_rows(self):
        self.assertEqual(
            (SIZE - DOWN, DOWN, []),
            fleet_scale.check_rows(self.rows(), self.names, self.silent,
                                   self.expected))

    def test_wrong_rows(self):
        rows = self.rows()
        rows[0]['state'] = 'refused'
        rows[5].update(reachable=True, error=None)
        del rows[-1]
        up, down, problems = fleet_scale.check_rows(
            rows, self.names, self.silent, self.expected)
        self.assertEqual((SIZE - DOWN - 2, DOWN - 1), (up, down))
        self.assertEqual(3, len(problems), problems)
        self.assertIn("cmp30-0000: {'state': 'refused'}", problems)
