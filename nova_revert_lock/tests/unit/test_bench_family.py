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

"""The benchmark's family rows: blocks, the JSON entries, checks, docs.

No timing is asserted here: the rows report what they measured, and
whether each row could have failed.
"""

import unittest
from unittest import mock

from nova_revert_lock import fixes
from nova_revert_lock.tests.unit import test_bench
from tools.bench import driver
from tools.bench import family
from tools.bench import report


def _record(ms, right=True, books='b', hold=None, error=None):
    if error:
        return {'error': error}
    return {'ms': ms, 'right': right, 'books': books, 'applied': True,
            'hold': hold or {family.PERIODIC: [2.0, 4.0]},
            'tracer_errors': []}


def _ready(version, fixed=()):
    return {'nova_version': version,
            'fixed': {bug: bug in fixed for bug in family.BUGS}}


def _family_data(bugs=('1944759', '1896463')):
    records = {}
    for bug in bugs:
        spec = family.BUGS[bug]
        records[bug] = {
            'plain': [_record(100, right=False, books='wrong'),
                      _record(120, right=False, books='wrong')],
            'extension': [_record(105, books='right', hold={
                name: [1.0, 3.0] for name in
                spec['sections']['extension'] + (family.PERIODIC,)}),
                _record(125, books='right')],
        }
        if spec['upstream']:
            records[bug]['upstream'] = [_record(100), _record(110)]
    return {'cycles': 2, 'bugs': list(bugs), 'records': records,
            'ready': {'plain': _ready('21.1.0'),
                      'extension': _ready('21.1.0'),
                      'upstream': _ready('21.2.0', ('1896463',))},
            'cpu_s': {'plain': 1.0}, 'upstream_skipped': None,
            'wall_s': 5.0}


def _run(data=None):
    return {'cycles': 0, 'records': {}, 'samples': {}, 'ready': {},
            'activation': [], 'periodic': None,
            'family': _family_data() if data is None else data,
            'settings': {}, 'environment': {'family': {'wall_s': 5.0}}}


class SpecTest(unittest.TestCase):

    def test_one_row_per_family_bug(self):
        family_bugs = [bug for bug, names in fixes.BUGS.items()
                       if set(names) <= set(fixes.of_kind(fixes.FAMILY))]
        self.assertEqual(family_bugs, list(family.BUGS))
        for bug, spec in family.BUGS.items():
            self.assertEqual((spec['mixin'],), fixes.BUGS[bug])
            self.assertIn(bug, family.BOOKS)
            # Either upstream's fixed Nova runs, or the page says why not.
            self.assertTrue(bool(spec['upstream']) != bool(spec['absent']),
                            bug)
            self.assertTrue(spec['proves'])

    def test_upstream_column_only_where_upstream_fixed_it(self):
        self.assertEqual(['plain', 'extension', 'upstream'],
                         family.modes_of(family.BUGS['1896463']))
        self.assertEqual(['plain', 'extension'],
                         family.modes_of(family.BUGS['1896463'], False))
        self.assertEqual(['plain', 'extension'],
                         family.modes_of(family.BUGS['2025480']))


class BlocksTest(unittest.TestCase):

    def test_bug_after_bug(self):
        self.assertEqual(
            [('1944759', 5), ('1944759', 2), ('2025480', 5),
             ('2025480', 2)],
            driver._family_blocks(['1944759', '2025480'], 7, 5))


class ArgsTest(unittest.TestCase):

    def test_family_alone(self):
        args = driver.parse_args(['--cycles', '0', '--periodic-runs', '0',
                                  '--family-cycles', '3', '--family',
                                  '2025480', '--no-family-upstream'])
        self.assertEqual((3, ['2025480'], False), (
            args.family_cycles, args.family, args.family_upstream))

    def test_unknown_bug(self):
        with mock.patch('sys.stderr'):
            self.assertRaises(SystemExit, driver.parse_args,
                              ['--family', '1879878'])

    def test_no_upstream_environment_without_an_upstream_row(self):
        args = driver.parse_args(['--family', '2025480'])
        with mock.patch.object(driver.venvs, 'ensure') as ensure:
            self.assertIsNone(driver._family_upstream_python(args))
        self.assertFalse(ensure.called)

    def test_upstream_environment_beside_the_other(self):
        args = driver.parse_args(['--venv-dir', '/w/.tox/bench-nova-21.1.2'])
        with mock.patch.object(driver.venvs, 'ensure',
                               return_value='/py') as ensure:
            self.assertEqual('/py', driver._family_upstream_python(args))
        ensure.assert_called_once_with('/w/.tox/bench-nova-21.2.0',
                                       family.EVACUATE_FIX_NOVA)
        self.assertEqual('/w/.tox/bench-nova-21.1.2', driver._venv_dir(
            args, driver.venvs.UPSTREAM_NOVA))


class SummaryTest(unittest.TestCase):

    def test_entry_per_bug_with_the_modes_figures(self):
        result = report.summarize(_run())
        self.assertEqual(['1944759', '1896463'], list(result['family']))
        row = result['family']['1896463']
        self.assertEqual(['plain', 'extension', 'upstream'],
                         list(row['modes']))
        self.assertEqual({'nova': family.EVACUATE_FIX_NOVA},
                         row['upstream'])
        ext = row['modes']['extension']
        self.assertEqual(115.0, ext['op_ms']['median'])
        self.assertEqual(['_nrl_finish_evacuation'], ext['sections'])
        self.assertEqual(2.0, ext['hold_ms']['median'])
        self.assertEqual(2, ext['hold_ms']['n'])
        self.assertEqual(0, row['modes']['plain']['hold_ms']['n'])
        self.assertEqual(2, row['modes']['plain']['wrong'])
        self.assertEqual([['wrong', 2]], row['modes']['plain']['books'])
        self.assertEqual(round(115.0 / 105.0, 3),
                         row['op_ratio_extension_vs_upstream'])
        self.assertEqual([], row['problems'])
        self.assertEqual([], driver.validity_problems(result))

    def test_absent_upstream_says_why(self):
        result = report.summarize(_run())
        row = result['family']['1944759']
        self.assertNotIn('upstream', row['modes'])
        self.assertIn('22.4.0', row['upstream']['absent'])
        self.assertIsNone(row['op_ratio_extension_vs_upstream'])

    def test_skipped_upstream_says_why(self):
        data = _family_data(('1896463',))
        del data['records']['1896463']['upstream']
        data['upstream_skipped'] = 'not measured (--no-family-upstream)'
        row = report.summarize(_run(data))['family']['1896463']
        self.assertEqual({'absent': 'not measured (--no-family-upstream)'},
                         row['upstream'])

    def test_a_row_that_cannot_fail_is_invalid(self):
        data = _family_data(('2025480',))
        data['records']['2025480']['plain'] = [_record(100)]
        problems = driver.validity_problems(report.summarize(_run(data)))
        self.assertEqual(1, len(problems))
        self.assertIn('2025480', problems[0])
        self.assertIn('did not race', problems[0])

    def test_wrong_or_failed_extension_and_fixed_plain_invalidate(self):
        data = _family_data(('1896463',))
        rows = data['records']['1896463']
        rows['extension'][0]['right'] = False
        rows['extension'].append(_record(0, error='AssertionError: x'))
        data['ready']['plain'] = _ready('21.2.0', ('1896463',))
        data['ready']['upstream'] = _ready('21.1.0')
        problems = report.summarize(_run(data))['family']['1896463'][
            'problems']
        self.assertEqual(4, len(problems), problems)
        self.assertIn('failed to complete', problems[0])
        self.assertIn('carries the fix', problems[1])
        self.assertIn('wrong books in 1', problems[2])
        self.assertIn('lacks the fix', problems[3])

    def test_no_family_run(self):
        result = report.summarize(_run(data={}))
        self.assertEqual({}, result['family'])


class DocsTest(unittest.TestCase):

    def test_family_section_alone(self):
        result = report.summarize(_run())
        path = test_bench.two_sections_page(self, report.FAMILY_DOC_BEGIN,
                                            report.FAMILY_DOC_END)
        report.write_docs(path, result, 'images/x.png')
        report.write_docs(path, result, 'images/x.png')
        with open(path) as f:
            text = f.read()
        self.assertIn('\nRACE\n', text)
        self.assertNotIn('STALE', text)
        self.assertEqual(1, text.count(report.FAMILY_DOC_BEGIN))
        self.assertIn('1896463 evacuate_under_lock: evacuation', text)
        self.assertIn('absent: no upstream fix on Ussuri', text)
        self.assertNotIn('Targets', text)
        self.assertTrue(text.rstrip().endswith('After'))
        for line in text.splitlines():
            if not line.startswith(('.. BENCH', '   ')):
                self.assertLessEqual(len(line), 79, line)
