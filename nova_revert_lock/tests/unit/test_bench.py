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

"""The benchmark's bookkeeping: blocks, statistics, checks, the docs.

No timing is asserted here: the benchmark reports its targets, it does
not enforce them.
"""

import os
import tempfile
import unittest

from nova_revert_lock.bench import driver
from nova_revert_lock.bench import harness
from nova_revert_lock.bench import report


def _record(kind, ms, wrong=None, handback=0, error=None):
    if error:
        return {'kind': kind, 'error': error}
    return {'kind': kind, 'ms': ms, 'op_ms': ms / 2.0, 'migrate_ms': ms / 2,
            'wrong': wrong, 'problems': {wrong: 'x'} if wrong else {},
            'handback': handback}


def _samples(hold, sections):
    return {
        'hold': {'confirm': {sections[0]: hold}, 'revert': {}},
        'wait': {'confirm': {}, 'revert': {harness.PROBE: [1.0, 3.0],
                                           'resize_claim': [2.0]}},
        'stats_hold': [['confirm', v] for v in hold],
    }


def _run():
    records = {
        'plain': [_record('confirm', 100, 'negative'),
                  _record('revert', 120, 'double', handback=2)],
        'extension': [_record('confirm', 105), _record('revert', 125,
                                                       handback=1)],
        'upstream': [_record('confirm', 100), _record('revert', 120,
                                                      handback=1)],
    }
    samples = {m: _samples([1.0, 2.0, 3.0, 4.0], harness.DROP_SECTIONS[m])
               for m in harness.MODES}
    activation = [{'total_ms': 20.0, 'total_cpu_ms': 18.0, 'import_ms': 5.0,
                   'activate_ms': 15.0, 'nova_import_ms': 2000.0,
                   'parts_ms': {'stevedore': 1.0, 'fingerprints': 12.0,
                                'lock': 0.1, 'compose': 0.1},
                   'modules_added': 14, 'modules_added_outside': [],
                   'state': 'patched'}]
    ready = {m: {'nova_version': '21.1.0', 'nova_state': 'patched'}
             for m in harness.MODES}
    return {'cycles': 1, 'records': records, 'samples': samples,
            'ready': ready, 'activation': activation,
            'settings': {'probe_interval': 0.02}, 'environment': {}}


class PercentileTest(unittest.TestCase):

    def test_interpolates(self):
        self.assertEqual(2.5, report.percentile([4, 1, 3, 2], 50))
        self.assertEqual(4, report.percentile([4, 1, 3, 2], 100))
        self.assertEqual(1, report.percentile([1], 99))
        self.assertIsNone(report.percentile([], 50))


class BlocksTest(unittest.TestCase):

    def test_kinds_alternate_and_add_up(self):
        blocks = driver._blocks(25, 10)
        self.assertEqual([('confirm', 10), ('revert', 10), ('confirm', 10),
                          ('revert', 10), ('confirm', 5), ('revert', 5)],
                         blocks)


class SummaryTest(unittest.TestCase):

    def test_keys_and_counts(self):
        result = report.summarize(_run())
        for key in ('cycles', 'wrong_cycles', 'cycle_ms',
                    'ratio_vs_upstream', 'lock_hold_ms', 'activation_ms'):
            self.assertIn(key, result)
        self.assertEqual({'plain': 2, 'extension': 0, 'upstream': 0},
                         result['wrong_cycles'])
        self.assertEqual({'plain': 1, 'extension': 1, 'upstream': 1},
                         result['handback_cycles'])
        self.assertEqual(110.0, result['cycle_ms']['upstream']['median'])
        self.assertEqual(round(115.0 / 110.0, 3),
                         result['ratio_vs_upstream'])
        self.assertEqual(2.5, result['lock_hold_ms']['plain']['median'])
        self.assertEqual(20.0, result['activation_ms']['median'])
        self.assertEqual([], driver.validity_problems(result))
        self.assertTrue(report.table(result))

    def test_failed_cycles_are_not_counted_but_invalidate(self):
        run = _run()
        run['records']['extension'].append(
            _record('confirm', 0, error='RuntimeError: timed out'))
        result = report.summarize(run)
        self.assertEqual(0, result['wrong_cycles']['extension'])
        self.assertEqual(1, result['failed_cycles']['extension'])
        self.assertTrue(driver.validity_problems(result))

    def test_quiet_plain_nova_means_no_race(self):
        run = _run()
        run['records']['plain'] = [_record('confirm', 100)]
        problems = driver.validity_problems(report.summarize(run))
        self.assertIn('the harness did not race', problems[0])


class DocsTest(unittest.TestCase):

    def test_section_replaced_in_place(self):
        result = report.summarize(_run())
        fd, path = tempfile.mkstemp(suffix='.rst')
        os.close(fd)
        self.addCleanup(os.remove, path)
        with open(path, 'w') as f:
            f.write('Title\n=====\n\n%s\nSTALE\n%s\n\nAfter\n' % (
                report.DOC_BEGIN, report.DOC_END))
        report.write_docs(path, result, 'images/x.png')
        report.write_docs(path, result, 'images/x.png')
        with open(path) as f:
            text = f.read()
        self.assertEqual(1, text.count(report.DOC_BEGIN))
        self.assertNotIn('STALE', text)
        self.assertIn('.. image:: images/x.png', text)
        self.assertTrue(text.startswith('Title\n'))
        self.assertTrue(text.rstrip().endswith('After'))
