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

import collections
import os
import tempfile
import unittest
from unittest import mock

from tools.bench import cycle_driver
from tools.bench import driver
from tools.bench import instructions
from tools.bench import periodic
from tools.bench import periodic_pair
from tools.bench import report


def _record(kind, ms, wrong=None, handback=0, error=None):
    if error:
        return {'kind': kind, 'error': error}
    return {'kind': kind, 'ms': ms, 'op_ms': ms / 2.0, 'migrate_ms': ms / 2,
            'wrong': wrong, 'problems': {wrong: 'x'} if wrong else {},
            'handback': handback}


def _samples(hold, sections):
    return {
        'hold': {'confirm': {sections[0]: hold}, 'revert': {}},
        'wait': {'confirm': {}, 'revert': {cycle_driver.PROBE: [1.0, 3.0],
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
    samples = {m: _samples([1.0, 2.0, 3.0, 4.0], cycle_driver.DROP_SECTIONS[m])
               for m in cycle_driver.MODES}
    activation = [{'total_ms': 20.0, 'total_cpu_ms': 18.0, 'import_ms': 5.0,
                   'activate_ms': 15.0, 'nova_import_ms': 2000.0,
                   'parts_ms': {'stevedore': 1.0, 'fingerprints': 12.0,
                                'lock': 0.1, 'compose': 0.1},
                   'modules_added': 14, 'modules_added_outside': [],
                   'state': 'patched'}]
    ready = {m: {'nova_version': '21.1.0', 'nova_state': 'patched'}
             for m in cycle_driver.MODES}
    return {'cycles': 1, 'records': records, 'samples': samples,
            'ready': ready, 'activation': activation,
            'settings': {'probe_interval': 0.02}, 'environment': {}}


def _periodic_run(ms, cpu_ms=None, db=5, wrong=0, extra=None):
    calls = {'db.instance_get_all_by_host_and_node': 1}
    calls.update(extra or {})
    return {'ms': ms, 'cpu_ms': ms / 2.0 if cpu_ms is None else cpu_ms,
            'db_calls': db, 'placement_calls': 1, 'calls': calls,
            'wrong_nodes': wrong}


def _periodic_data():
    specs = periodic.scenarios(200, 50, 4, 10)
    samples = {}
    for spec in specs:
        samples[spec['name']] = {
            'plain': [_periodic_run(v) for v in (100, 110, 120)],
            'extension': [_periodic_run(v, db=6, extra={
                'db.migration_get_all_by_filters': 1})
                for v in (104, 112, 300)],
            'upstream': [_periodic_run(v) for v in (98, 100, 102)],
        }
    return {'runs': 3, 'scenarios': specs, 'samples': samples,
            'setup_s': {m: 1.0 for m in cycle_driver.MODES}, 'wall_s': 9.0,
            'load': '1.0, 1.0, 1.0'}


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


class PeriodicOrderTest(unittest.TestCase):

    def test_one_mode_at_a_time_rotating(self):
        order = driver._periodic_order(['a', 'b'], 3, cycle_driver.MODES)
        self.assertEqual(3 * 2 * len(cycle_driver.MODES), len(order))
        # every scenario and mode the same number of times
        for name in ('a', 'b'):
            for mode in cycle_driver.MODES:
                self.assertEqual(3, order.count((name, mode)))
        self.assertEqual(['a', 'a', 'a', 'b', 'b', 'b'],
                         [scenario for scenario, _m in order[:6]])

    def _turns(self, order, modes, name):
        n = len(modes)
        return [[mode for _s, mode in order[i:i + n]]
                for i in range(0, len(order), n) if order[i][0] == name]

    def test_each_scenario_balanced(self):
        # NOTE: as many scenarios as modes, as periodic_pair runs: the
        # order must still change from run to run for every scenario.
        modes = ('plain', 'extension', 'extension@nova-rt')
        names = ['one', 'many', 'reverts']
        order = driver._periodic_order(names, 2 * len(modes), modes)
        for name in names:
            turns = self._turns(order, modes, name)
            for position in range(len(modes)):
                self.assertEqual(
                    {mode: 2 for mode in modes},
                    collections.Counter(t[position] for t in turns))
            just_after = collections.Counter(
                (t[i], t[i + 1]) for t in turns for i in range(len(t) - 1))
            for (first, then), count in just_after.items():
                self.assertEqual(count, just_after[(then, first)])

    def test_every_run_one_order_for_all_scenarios(self):
        modes = cycle_driver.PERIODIC_MODES
        order = driver._periodic_order(['a', 'b'], 4, modes)
        self.assertEqual(self._turns(order, modes, 'a'),
                         self._turns(order, modes, 'b'))
        firsts = [t[0] for t in self._turns(order, modes, 'a')]
        self.assertEqual([modes[0], modes[-1], modes[1], modes[-2]], firsts)


class PeriodicScenariosTest(unittest.TestCase):

    def test_sizes_and_labels(self):
        specs = periodic.scenarios(200, 50, 4, 5)
        self.assertEqual(['one-node', 'many-nodes', 'many-nodes-reverts'],
                         [s['name'] for s in specs])
        self.assertEqual((1, 200, 0), (specs[0]['nodes'],
                                       specs[0]['instances'],
                                       specs[0]['reverts']))
        self.assertEqual((50, 4), (specs[1]['nodes'], specs[1]['instances']))
        # The reverts in flight are on the multi-node host, one per node.
        self.assertEqual((50, 4, 5), (specs[2]['nodes'],
                                      specs[2]['instances'],
                                      specs[2]['reverts']))
        self.assertEqual('50 nodes x 4 instances', specs[1]['label'])
        self.assertEqual('50 nodes x 4 instances, 5 reverts in flight',
                         specs[2]['label'])

    def test_at_most_one_revert_per_node(self):
        self.assertEqual(3, periodic.scenarios(10, 3, 1, 8)[2]['reverts'])

    def test_no_reverts_no_third_scenario(self):
        self.assertEqual(2, len(periodic.scenarios(10, 2, 1, 0)))


class PeriodicSummaryTest(unittest.TestCase):

    def _result(self, cycles=1):
        run = _run()
        run['periodic'] = _periodic_data()
        if not cycles:
            run['cycles'] = 0
            run['records'] = {m: [] for m in cycle_driver.MODES}
            run['samples'] = {}
            run['activation'] = []
        return report.summarize(run)

    def test_median_p95_and_ratio_per_scenario(self):
        result = self._result()
        wall = result['periodic_ms']['one-node']
        self.assertEqual(112.0, wall['extension']['median'])
        self.assertEqual(100.0, wall['upstream']['median'])
        self.assertEqual(3, wall['plain']['n'])
        self.assertEqual(round(report.percentile([104, 112, 300], 95), 2),
                         wall['extension']['p95'])
        self.assertEqual({'one-node': 1.12, 'many-nodes': 1.12,
                          'many-nodes-reverts': 1.12},
                         result['periodic_ratio_vs_upstream'])
        self.assertEqual(1.12, result['periodic_cpu_ratio_vs_upstream'][
            'many-nodes'])
        calls = result['periodic_calls']['many-nodes']
        self.assertEqual(6, calls['extension']['db'])
        self.assertEqual(1, calls['extension']['by_call'][
            'db.migration_get_all_by_filters'])
        self.assertNotIn('db.migration_get_all_by_filters',
                         calls['upstream']['by_call'])
        self.assertEqual(['one-node', 'many-nodes', 'many-nodes-reverts'],
                         [s['name'] for s in result['periodic_scenarios']])
        self.assertEqual(3, result['periodic_settings']['runs'])

    def test_targets_per_scenario(self):
        result = self._result()
        targets = [t for t in result['targets']
                   if t['part'] == report.PERIODIC]
        # Per scenario its ratio, and with no move in flight its calls
        # (equal to upstream's) and a tighter ratio.
        self.assertEqual(5, len(targets))
        self.assertFalse(any(t['met'] for t in targets))
        self.assertEqual(['<= 1.02', 'equal', '<= 1.02', 'equal', '<= 1.05'],
                         [t['target'] for t in targets])
        self.assertIn('50 nodes x 4 instances', targets[2]['name'])
        self.assertEqual('6 vs 5', targets[1]['value'])
        self.assertEqual([], driver.validity_problems(result))

    def test_extension_on_upstream_release(self):
        run = _run()
        run['periodic'] = _periodic_data()
        for per_mode in run['periodic']['samples'].values():
            per_mode[cycle_driver.UPSTREAM_EXT] = [
                _periodic_run(v) for v in (99, 101, 400)]
        run['ready'][cycle_driver.UPSTREAM_EXT] = {
            'nova_version': '21.1.2', 'nova_state': 'already-fixed'}
        result = report.summarize(run)
        self.assertEqual(1.01, result[
            'periodic_ratio_upstream_ext_vs_upstream']['many-nodes'])
        targets = [t for t in result['targets']
                   if 'upstream\'s release' in t['name']]
        self.assertEqual(3, len(targets))
        self.assertTrue(all(t['met'] for t in targets))
        table = '\n'.join(report.table(result, (report.PERIODIC,)))
        self.assertRegex(table, r'upstream-ext +21\.1\.2')
        self.assertIn('median ratio upstream-ext/upstream: 1.010', table)
        run['periodic']['samples']['one-node'][cycle_driver.UPSTREAM_EXT][
            0]['wrong_nodes'] = 1
        problems = driver.validity_problems(report.summarize(run))
        self.assertEqual(1, len(problems))
        self.assertIn('upstream-ext', problems[0])

    def test_same_process_ratio(self):
        run = _run()
        run['periodic'] = _periodic_data()
        for per_mode in run['periodic']['samples'].values():
            per_mode['extension@nova-rt'] = [
                _periodic_run(v) for v in (110, 111, 112)]
        result = report.summarize(run)
        self.assertEqual({'extension': 1.009}, result[
            'periodic_ratio_same_process']['many-nodes'])
        targets = [t for t in result['targets']
                   if 'same process' in t['name']]
        self.assertEqual(3, len(targets))
        self.assertTrue(all(t['met'] for t in targets))
        table = '\n'.join(report.table(result, (report.PERIODIC,)))
        self.assertIn('median ratio extension/extension@nova-rt (one '
                      'process): 1.009', table)
        self.assertRegex(table, r'extension@nova-rt +21\.1\.0')

    def test_wrong_books_invalidate(self):
        run = _run()
        run['periodic'] = _periodic_data()
        run['periodic']['samples']['many-nodes']['extension'][0][
            'wrong_nodes'] = 3
        result = report.summarize(run)
        self.assertEqual(1, result['periodic_wrong_runs']['many-nodes'][
            'extension'])
        problems = driver.validity_problems(result)
        self.assertEqual(1, len(problems))
        self.assertIn('many-nodes', problems[0])

    def test_table_parts(self):
        result = self._result()
        both = '\n'.join(report.table(result))
        self.assertIn('Race exposure', both)
        self.assertIn('50 nodes x 4 instances', both)
        race = '\n'.join(report.table(result, (report.RACE,)))
        self.assertNotIn('50 nodes x 4 instances', race)
        self.assertNotIn('periodic task, extension', race)
        alone = '\n'.join(report.table(result, (report.PERIODIC,)))
        self.assertNotIn('Race exposure', alone)
        self.assertIn('median periodic task, extension / upstream', alone)

    def test_periodic_alone(self):
        result = self._result(cycles=0)
        self.assertEqual([report.PERIODIC] * 5,
                         [t['part'] for t in result['targets']])
        self.assertEqual([], driver.validity_problems(result))
        self.assertNotIn('Race exposure', '\n'.join(report.table(result)))

    def test_rounds_of_fresh_processes(self):
        first, second, third = (_periodic_data(), _periodic_data(),
                                _periodic_data())
        # the second round's pair of processes: extension 10% slower
        for per_mode in second['samples'].values():
            per_mode['extension'] = [_periodic_run(v)
                                     for v in (110, 110, 110)]
            per_mode['extension@nova-rt'] = [_periodic_run(v)
                                             for v in (100, 100, 100)]
        run = _run()
        run['periodic'] = {
            'rounds': [first, second, third], 'runs': 3,
            'scenarios': first['scenarios'], 'wall_s': 30.0,
            'load': '1.0, 1.0, 1.0'}
        result = report.summarize(run)
        # each ratio is the median of the rounds' own ratios ...
        self.assertEqual([1.12, 1.1, 1.12], result['periodic_round_ratios'][
            'periodic_ratio_vs_upstream']['one-node'])
        self.assertEqual(1.12, result['periodic_ratio_vs_upstream'][
            'one-node'])
        self.assertEqual([1.1, 1.1, 1.1], result['periodic_round_ratios'][
            'periodic_ratio_plain_vs_upstream']['many-nodes'])
        self.assertEqual({'extension': [None, 1.1, None]},
                         result['periodic_round_ratios'][
                             'periodic_ratio_same_process']['many-nodes'])
        self.assertEqual({'extension': 1.1}, result[
            'periodic_ratio_same_process']['many-nodes'])
        # ... the distributions pool every round's runs
        self.assertEqual(9, result['periodic_ms']['one-node']['plain']['n'])
        self.assertEqual(3, result['periodic_settings']['rounds'])
        table = '\n'.join(report.table(result, (report.PERIODIC,)))
        self.assertIn('in each of 3 rounds of fresh processes', table)
        self.assertIn('median ratio extension/upstream: 1.120 [1.120 1.100 '
                      '1.120]', table)
        self.assertIn('median ratio plain/upstream (no extension in either):'
                      ' 1.100 [1.100 1.100 1.100]', table)
        self.assertIn('periodic runs took 30.0 s in 3 rounds', table)
        self.assertNotIn('garbage collector runs before', table)
        run['periodic']['collect'] = True
        for one in run['periodic']['rounds']:
            for run_ in one['samples']['one-node']['plain']:
                run_['gc_ms'] = 7.0
        result = report.summarize(run)
        self.assertEqual(7.0, result['periodic_gc_ms']['one-node']['plain'][
            'median'])
        table = '\n'.join(report.table(result, (report.PERIODIC,)))
        self.assertIn('the garbage collector runs before each run, '
                      'untimed', table)
        self.assertRegex(table, r'plain +21\.1\.0 .* 7\.0 ms ')
        run['periodic']['rounds'][1]['samples']['one-node']['extension'][0][
            'wrong_nodes'] = 1
        self.assertEqual(1, len(driver.validity_problems(
            report.summarize(run))))

    def test_no_periodic_runs(self):
        result = report.summarize(_run())
        self.assertEqual({}, result['periodic_ms'])
        self.assertEqual({}, result['periodic_ratio_vs_upstream'])
        self.assertNotIn('Periodic task', '\n'.join(report.table(result)))


class DriverArgsTest(unittest.TestCase):

    def test_periodic_alone_allowed(self):
        args = driver.parse_args(['--cycles', '0', '--periodic-runs', '5'])
        self.assertEqual((0, 5), (args.cycles, args.periodic_runs))

    def test_periodic_rounds(self):
        self.assertEqual(5, driver.parse_args([]).periodic_rounds)
        self.assertTrue(driver.parse_args([]).periodic_collect)
        self.assertFalse(driver.parse_args(
            ['--no-periodic-collect']).periodic_collect)
        with mock.patch('sys.stderr'):
            self.assertRaises(SystemExit, driver.parse_args,
                              ['--periodic-rounds', '0'])

    def test_each_round_in_fresh_processes(self):
        started, closed = [], []

        class Proc(object):
            def __init__(self, mode, python, options, log_path):
                started.append((mode, os.path.basename(log_path)))
                self.mode = mode

            def receive(self, timeout):
                return {'nova_version': '21.1.0', 'nova_state':
                        driver.EXPECTED_STATE[self.mode],
                        'activation': 'patched' if self.mode == 'extension'
                        else 'already-fixed'}

            def close(self):
                closed.append(self.mode)

        args = driver.parse_args(['--cycles', '0', '--periodic-rounds', '2',
                                  '--periodic-runs', '3'])
        with mock.patch.object(driver, 'ModeProcess', Proc), \
                mock.patch.object(driver, '_log'), \
                mock.patch.object(driver, '_run_periodic',
                                  return_value={'samples': {}}) as timed:
            data = driver._run_periodic_rounds(
                args, dict((m, 'python') for m in cycle_driver.PERIODIC_MODES))
        modes = len(cycle_driver.PERIODIC_MODES)
        self.assertEqual(2 * modes, len(started))
        self.assertEqual(2 * modes, len(closed))
        self.assertIn(('extension', 'periodic-2-extension.log'), started)
        self.assertEqual(2, timed.call_count)
        # the collector runs before each run unless told not to
        self.assertEqual(True, timed.call_args[0][3])
        self.assertEqual(2, len(data['rounds']))
        self.assertEqual(3, data['runs'])
        self.assertEqual(set(cycle_driver.PERIODIC_MODES), set(data['ready']))

    def test_nothing_to_measure(self):
        with mock.patch('sys.stderr'):
            self.assertRaises(SystemExit, driver.parse_args,
                              ['--cycles', '0', '--periodic-runs', '0',
                               '--family-cycles', '0'])

    def test_command_leaves_local_paths_out(self):
        with mock.patch.dict(os.environ, {'TOX_ENV_NAME': 'bench'}):
            self.assertEqual(
                'python -m tools.bench --cycles 0 (tox -e bench)',
                driver._command(['--venv-dir', '/x/y', '--cycles', '0',
                                 '--results-dir=/r']))


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


def doc_page(case, text):
    """A page holding ``text``, removed when ``case`` ends; its path."""
    fd, path = tempfile.mkstemp(suffix='.rst')
    os.close(fd)
    case.addCleanup(os.remove, path)
    with open(path, 'w') as f:
        f.write(text)
    return path


def two_sections_page(case, begin, end):
    """A page with the race results' markers and another part's."""
    return doc_page(case, 'Title\n=====\n\n%s\nRACE\n%s\n\n%s\nSTALE\n%s\n'
                          '\nAfter\n' % (report.DOC_BEGIN, report.DOC_END,
                                         begin, end))


class DocsTest(unittest.TestCase):

    def test_section_replaced_in_place(self):
        result = report.summarize(_run())
        path = doc_page(self, 'Title\n=====\n\n%s\nSTALE\n%s\n\nAfter\n' % (
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

    def _doc(self):
        return two_sections_page(self, report.PERIODIC_DOC_BEGIN,
                                 report.PERIODIC_DOC_END)

    def test_periodic_alone_keeps_the_race_section(self):
        run = _run()
        run.update(cycles=0, records={m: [] for m in cycle_driver.MODES},
                   samples={}, activation=[], periodic=_periodic_data())
        result = report.summarize(run)
        path = self._doc()
        report.write_docs(path, result, 'images/x.png')
        with open(path) as f:
            text = f.read()
        self.assertIn('\nRACE\n', text)
        self.assertNotIn('STALE', text)
        self.assertEqual(1, text.count(report.PERIODIC_DOC_BEGIN))
        self.assertIn('50 nodes x 4 instances, 10 reverts in flight',
                      text)
        self.assertNotIn('.. image::', text)
        self.assertTrue(text.rstrip().endswith('After'))
        for line in text.splitlines():
            if not line.startswith(('.. BENCH', '   ')):
                self.assertLessEqual(len(line), 79, line)

    def test_race_alone_keeps_the_periodic_section(self):
        result = report.summarize(_run())
        path = self._doc()
        report.write_docs(path, result, 'images/x.png')
        with open(path) as f:
            text = f.read()
        self.assertIn('\nSTALE\n', text)
        self.assertNotIn('\nRACE\n', text)
        self.assertIn('.. image:: images/x.png', text)


class PeriodicPairTest(unittest.TestCase):

    def _data(self, ext_ms):
        specs = periodic.scenarios(200, 50, 4, 5)
        samples = dict((spec['name'], {
            'plain': [_periodic_run(v) for v in (100, 100, 104)],
            'extension': [_periodic_run(v) for v in ext_ms],
            'extension@nova-rt': [_periodic_run(v)
                                  for v in (100, 100, 104)]})
            for spec in specs)
        return {'runs': 3, 'scenarios': specs, 'samples': samples,
                'load': '1.0, 1.0, 1.0'}

    def test_ratio_and_targets_per_scenario(self):
        ready = {'plain': {'nova_version': '31.3.1', 'python': '3.11.7'},
                 'extension': {'activation': 'already-fixed'}}
        result = periodic_pair.summarize(self._data((101, 102, 500)), ready)
        self.assertEqual('31.3.1', result['nova'])
        self.assertEqual([1.02, 1.02, 1.02],
                         [row['ratio'] for row in result['scenarios']])
        self.assertEqual([True, True, True],
                         [row['met'] for row in result['scenarios']])
        self.assertEqual([1.02, 1.02, 1.05],
                         [row['target'] for row in result['scenarios']])
        result = periodic_pair.summarize(self._data((103, 104, 105)), ready)
        self.assertEqual([False, False, True],
                         [row['met'] for row in result['scenarios']])
        text = '\n'.join(periodic_pair.table(result))
        self.assertIn('Periodic task on Nova 31.3.1', text)
        self.assertIn('median ratio extension/plain (two processes): 1.040',
                      text)
        self.assertIn('median ratio extension/extension@nova-rt (one '
                      'process): 1.040', text)

    def test_medians_across_fresh_pairs(self):
        ready = {'plain': {'nova_version': '31.3.1', 'python': '3.11.7'},
                 'extension': {'activation': 'already-fixed'}}
        results = [periodic_pair.summarize(self._data(ms), ready)
                   for ms in ((101, 102, 500), (103, 104, 105),
                              (100, 100, 100))]
        rows = periodic_pair.across_pairs(results)
        self.assertEqual([3, 3, 3], [row['pairs'] for row in rows])
        self.assertEqual([1.02, 1.04, 1.0], rows[0]['ratios'])
        self.assertEqual(1.02, rows[0]['ratio'])
        self.assertEqual(1.02, rows[0]['same_process_ratio'])


PROFILE = """# callgrind format
version: 1
creator: callgrind-3.19.0
cmd: python -m tools.bench.instructions --child extension
events: Ir
summary: %d
fn=(1) math_fsum
0 3
totals: %d
"""


class InstructionsTest(unittest.TestCase):

    def _write(self, directory, name, ir):
        with open(os.path.join(directory, name), 'w') as f:
            f.write(PROFILE % (ir, ir))

    def test_profiles_read_in_the_order_callgrind_wrote_them(self):
        with tempfile.TemporaryDirectory() as d:
            # the file at exit (no suffix), ten runs, another process's
            self._write(d, 'callgrind.extension.42', 0)
            for n in range(1, 11):
                self._write(d, 'callgrind.extension.42.%d' % n, n)
            self._write(d, 'callgrind.extension.43.1', 99)
            self._write(d, 'callgrind.plain.42.1', 98)
            dumps = instructions._dumps(d, 'extension', 42)
            self.assertEqual(['callgrind.extension.42.%d' % n
                              for n in range(1, 11)],
                             [os.path.basename(p) for p in dumps])
            self.assertEqual({'Ir': 7},
                             instructions.read_profile(dumps[6]))

    def test_a_truncated_profile_is_refused(self):
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, 'callgrind.plain.1.1')
            with open(path, 'w') as f:
                f.write('events: Ir\n')
            self.assertRaises(ValueError, instructions.read_profile, path)

    def test_cache_events_are_read_by_name(self):
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, 'callgrind.plain.1.1')
            with open(path, 'w') as f:
                f.write('events: Ir Dr Dw D1mr\ntotals: 10 4 3\n')
            self.assertEqual({'Ir': 10, 'Dr': 4, 'Dw': 3, 'D1mr': 0},
                             instructions.read_profile(path))

    def test_the_run_happens_inside_the_marker(self):
        calls = []
        with mock.patch.object(instructions.math, 'fsum',
                               side_effect=lambda it: sum(it)) as fsum:
            instructions._counted(calls.append, 'ctxt')
        self.assertEqual(['ctxt'], calls)
        fsum.assert_called_once()
        self.assertRaises(ZeroDivisionError, instructions._counted,
                          lambda: 1 / 0)

    def _run(self, scenario, tracker, ir, wrong=0):
        return {'scenario': scenario, 'tracker': tracker,
                'wrong_nodes': wrong, 'events': {'Ir': ir}}

    def test_ratios_per_scenario(self):
        specs = periodic.scenarios(200, 50, 4, 0)
        modes = collections.OrderedDict([
            ('extension', {'runs': [
                # counted with the simulated caches cold: not reported
                self._run('one-node', 'warm-up', 5000),
                self._run('one-node', 'composed', 1002),
                self._run('one-node', 'nova', 1000),
                self._run('one-node', 'nova', 1000),
                self._run('one-node', 'composed', 1004),
                self._run('many-nodes', 'composed', 2000, wrong=1),
                self._run('many-nodes', 'nova', 2000)]}),
            ('plain', {'runs': [
                self._run('one-node', 'plain', 1001),
                self._run('one-node', 'plain', 1001),
                self._run('many-nodes', 'plain', 1990)]})])
        rows = instructions.summarize(specs, modes)
        self.assertEqual(1.003, rows[0]['composed_vs_nova'])
        self.assertEqual(1.002, rows[0]['composed_vs_plain'])
        self.assertEqual(0.999, rows[0]['nova_vs_plain'])
        self.assertEqual(1, rows[1]['composed']['wrong_runs'])
        text = '\n'.join(instructions.table(collections.OrderedDict(
            nova='31.3.1', python='3.11.7', runs=2,
            activation='already-fixed', scenarios=rows)))
        self.assertIn('1,003 instructions (runs within 0.20%)', text)
        self.assertIn('composed/nova (one process) 1.0030', text)
        self.assertIn('1 runs with wrong books', text)

    def test_against_another_releases_plain(self):
        specs = periodic.scenarios(200, 50, 4, 0)[:1]
        ours = {'nova': '21.1.0', 'scenarios': instructions.summarize(
            specs, {'extension': {'runs': [
                self._run('one-node', 'composed', 1020),
                self._run('one-node', 'nova', 1000)]}})}
        theirs = {'nova': '21.1.2', 'scenarios': instructions.summarize(
            specs, {'plain': {'runs': [
                self._run('one-node', 'plain', 1000)]}})}
        rows = instructions.against(ours, theirs)
        self.assertEqual([('1 node x 200 instances', '21.1.2', 1.02)],
                         [(r['label'], r['nova'], r['ratio'])
                          for r in rows])
        theirs['scenarios'][0]['label'] = '1 node x 50 instances'
        self.assertIsNone(instructions.against(ours, theirs)[0]['ratio'])

    def test_without_the_plain_process(self):
        specs = periodic.scenarios(200, 50, 4, 0)[:1]
        rows = instructions.summarize(specs, {'extension': {'runs': [
            self._run('one-node', 'composed', 1010),
            self._run('one-node', 'nova', 1000)]}})
        self.assertEqual(1.01, rows[0]['composed_vs_nova'])
        self.assertIsNone(rows[0]['composed_vs_plain'])
        self.assertNotIn('plain', rows[0])


class BusyNoteTest(unittest.TestCase):

    def test_only_when_busier_than_the_cpus(self):
        self.assertIsNone(report.busy_note('1.9, 3.0, 3.5', 2))
        self.assertIn('load average 4.5 on 2 CPUs',
                      report.busy_note('4.5, 5.0, 4.3', 2))
        self.assertIsNone(report.busy_note('?', 2))
        self.assertIsNone(report.busy_note(None, 2))
