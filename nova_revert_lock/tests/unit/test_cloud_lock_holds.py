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

"""The cloud's lock holds: traces read per window, mode and section."""

import json
import os
import tempfile
import unittest

from tools.cloud_lib import lockholds


class LockHoldsTest(unittest.TestCase):

    def setUp(self):
        self.dir = tempfile.mkdtemp()

    def trace(self, host, *sections):
        with open(os.path.join(self.dir, host), 'a') as f:
            for t, func, hold in sections:
                f.write(json.dumps({'t': t, 'f': func, 'wait_ms': 0.1,
                                    'hold_ms': hold}) + '\n')
            f.write('{"t": 15, "f": "cut sh')  # a compute stopped mid-line

    def test_holds_per_mode_and_section_within_the_window(self):
        periodic = lockholds.PERIODIC
        self.trace('c1', (9, periodic, 500.0), (10, periodic, 10.0),
                   (11, 'drop_move_claim_at_source', 30.0),
                   (12, periodic, 20.0), (21, periodic, 900.0))
        self.trace('c2', (12, periodic, 30.0))
        self.trace('c3', (13, periodic, 8.0), (14, 'drop_move_claim', 2.0))
        computes = [{'host': 'c1', 'mode': 'wrapper'},
                    {'host': 'c2', 'mode': 'wrapper'},
                    {'host': 'c3', 'mode': 'plain'},
                    {'host': 'c4', 'mode': 'plain'}]  # no trace yet
        holds = lockholds.summarize(
            computes, lambda host: os.path.join(self.dir, host), 10, 20)
        self.assertEqual({
            'wrapper': {
                periodic: {'n': 3, 'p50': 20.0, 'p99': 30.0, 'max': 30.0},
                'drop_move_claim_at_source': {
                    'n': 1, 'p50': 30.0, 'p99': 30.0, 'max': 30.0}},
            'plain': {
                periodic: {'n': 1, 'p50': 8.0, 'p99': 8.0, 'max': 8.0},
                'drop_move_claim': {
                    'n': 1, 'p50': 2.0, 'p99': 2.0, 'max': 2.0}},
        }, holds)
        self.assertEqual(2.5, lockholds.ratio(holds))
        lines = lockholds.table(holds)
        # the periodic first in each mode
        self.assertIn(periodic, lines[1])
        self.assertIn('drop_move_claim ', lines[2])

    def test_ratio_needs_both_modes(self):
        self.assertIsNone(lockholds.ratio({'plain': {}}))

    def test_docs_section_is_replaced_between_its_markers(self):
        top = self.dir
        os.makedirs(os.path.join(top, os.path.dirname(lockholds.DOC)))
        path = os.path.join(top, lockholds.DOC)
        with open(path, 'w') as f:
            f.write('head\n\n%s (old)\n\nold figures\n\n%s\ntail\n' % (
                lockholds.BEGIN, lockholds.END))
        periodic = {'n': 5, 'p50': 1.0, 'p99': 2.0, 'max': 2.0}
        revert = {'n': 2, 'p50': 3.0, 'p99': 4.0, 'max': 4.0}
        soak = {'cycles': 10,
                'lock_holds': {'plain': {lockholds.PERIODIC: periodic}},
                'status': [{'host': 'c1',
                            'lock_hold_ms_by_kind': {'revert': revert}}]}
        text = lockholds.render({'plain': soak})
        lockholds.write_docs(top, text)
        lockholds.write_docs(top, text)
        with open(path) as f:
            page = f.read()
        self.assertTrue(page.startswith('head\n'))
        self.assertTrue(page.endswith('%s\ntail\n' % lockholds.END))
        self.assertNotIn('old figures', page)
        self.assertEqual(1, page.count('tools/cloud short --cycles 5'))
        self.assertIn('c1             revert', page)

    def test_a_page_without_markers_is_an_error(self):
        os.makedirs(os.path.join(self.dir, os.path.dirname(lockholds.DOC)))
        with open(os.path.join(self.dir, lockholds.DOC), 'w') as f:
            f.write('no markers\n')
        self.assertRaises(ValueError, lockholds.write_docs, self.dir, 'x')
