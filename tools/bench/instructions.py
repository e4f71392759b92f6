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

"""The periodic task's cost in instructions executed, on any Nova.

::

    python -m tools.bench.instructions [--runs 2] [--instances 200]
        [--nodes 50] [--node-instances 4] [--reverts 5] [--no-plain]
        [--cache-sim] [--format json]

Runs in the environment of the Nova under test, as
:mod:`.periodic_pair` does, and needs valgrind. On a machine shared with
other work, or a virtual one, the periodic task's wall-clock and CPU times
move by 3-10% between processes and between rounds with no change of code
(:doc:`benchmarks`), which is more than the cost it is meant to judge.
The number of instructions the CPU executes for the task does not: this
tool counts them with valgrind's callgrind.

It starts Nova's in-process services under callgrind, with the collection
off, twice: once with the extension (``extension``), once without
(``plain``, unless ``--no-plain``), with the same hash seed. Each process
gives itself the scenario hosts of :mod:`.periodic`, runs each
scenario's periodic task once per tracker class untimed, then ``--runs``
times per class, the order alternating, and collects the instructions
only inside the task itself (callgrind toggles collection around
``math.fsum``, which nothing in Nova's periodic task calls, and writes one
profile per run). The extension's process runs the composed tracker
class (``composed``) and Nova's own class in its place on the same
object (``nova``), as the benchmarks' ``@nova-rt`` turns do. The
report client's association refresh, which comes every 300 s of wall
clock, is refreshed only on each node's first run (a run under callgrind
takes minutes).

It prints per scenario the median instructions of each, and the ratios
composed/nova (one process: the extension's own code), composed/plain and
nova/plain (two processes: the second is the control, what two processes
of the same code differ by). A run whose books are wrong after it
invalidates the measurement (exit 1). With ``--cache-sim`` callgrind also
simulates the caches and the first- and last-level misses are printed:
slower, and a model of a cache, not this machine's.

Under callgrind the task runs some 50 times slower than natively; the
default scenarios take about 15 minutes per process. The profiles are
kept in ``--results-dir`` for ``callgrind_annotate``.
"""

import argparse
import collections
import json
import math
import os
import shutil
import subprocess
import sys
import time

from tools.bench import periodic
from tools.bench import report

#: The C function callgrind collects in: math.fsum, which nothing in Nova,
#: oslo or their libraries calls during the periodic task; the timed call
#: runs inside it, in a generator it consumes (see _counted).
MARKER = 'math_fsum'
#: Lines of the child's stdout that are ours (Nova logs there too).
PREFIX = 'NRL-INSTRUCTIONS '
TRACKERS = {'extension': ('composed', 'nova'), 'plain': ('plain',)}


def _counted(function, *args):
    """Call ``function(*args)`` inside the marker function."""
    def once():
        function(*args)
        yield 0.0
    math.fsum(once())


def _instrument():
    """Turn callgrind's instrumentation on in this process.

    The process starts with it off (``--instr-atstart=no``): Nova's
    services and the scenario hosts are set up some ten times faster.
    callgrind reads its commands while the program runs, not while it
    waits in a system call, hence the busy wait.
    """
    control = subprocess.Popen(
        ['callgrind_control', '--instr=on', str(os.getpid())],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        universal_newlines=True)
    deadline = time.time() + 300
    while control.poll() is None:
        sum(range(1000))
        if time.time() > deadline:
            control.kill()
            raise RuntimeError('callgrind_control did not answer')
    output = control.stdout.read()
    if control.returncode or 'OK' not in output:
        raise RuntimeError('callgrind_control --instr=on failed (exit '
                           '%s): %s' % (control.returncode, output.strip()))


def _child(mode, specs, runs):
    """In the process under callgrind: the runs, one line per run."""
    import unittest

    from nova.tests.functional import integrated_helpers

    from nova_revert_lock.tests.functional import base

    # NOTE: the process's own stdout, which the test fixtures' output
    # capture (OS_STDOUT_CAPTURE, set by tox) does not replace
    channel = os.fdopen(os.dup(sys.stdout.fileno()), 'w')

    def say(**message):
        channel.write(PREFIX + json.dumps(message) + '\n')
        channel.flush()

    class InstructionsCase(base.ExtensionFixtureMixin, base.RaceMixin,
                           integrated_helpers.ProviderUsageBaseTestCase):
        extension = mode == 'extension'

        def runTest(self):
            # NOTE: the report client refreshes each provider's aggregates,
            # traits and sharing providers once its association refresh
            # interval (300 s) has passed: under callgrind, where a
            # 50-node run takes minutes, that lands in every few runs,
            # whichever class runs. Refreshed once, on each node's first
            # run, as on a host that just started.
            self.flags(resource_provider_association_refresh=0,
                       group='compute')
            bench = periodic.PeriodicBench(self, collections.Counter())
            bench.setup(specs)
            report = self.activation_report
            say(activation=str(report.state) if report else None)
            trackers = TRACKERS[mode]
            for spec in specs:
                # NOTE: not counted, once per class: the first run after
                # the other class's may save the nodes again.
                for tracker in trackers:
                    bench.run(spec['name'], nova_tracker=tracker == 'nova',
                              collect=True)
            _instrument()
            for spec in specs:
                # NOTE: counted, not reported: a scenario's first run
                # after the instrumentation is on meets callgrind's
                # simulated caches without its host's data (--cache-sim).
                bench.run(spec['name'], nova_tracker=False, collect=True,
                          around=_counted)
                say(scenario=spec['name'], tracker='warm-up',
                    wrong_nodes=0)
                for i in range(runs):
                    order = trackers if i % 2 == 0 else trackers[::-1]
                    for tracker in order:
                        row = bench.run(spec['name'],
                                        nova_tracker=tracker == 'nova',
                                        collect=True, around=_counted)
                        say(scenario=spec['name'], tracker=tracker,
                            wrong_nodes=row['wrong_nodes'])

    outcome = unittest.TextTestRunner(stream=sys.stderr, verbosity=0).run(
        InstructionsCase())
    return 0 if outcome.wasSuccessful() else 1


def read_profile(path):
    """callgrind profile -> {event: total} (``events:`` / ``totals:``)."""
    events = totals = None
    with open(path) as f:
        for line in f:
            if line.startswith('events:'):
                events = line.split()[1:]
            elif line.startswith('totals:') or (
                    totals is None and line.startswith('summary:')):
                totals = [int(v) for v in line.split()[1:]]
    if events is None or totals is None:
        raise ValueError('%s is not a complete callgrind profile' % path)
    totals += [0] * (len(events) - len(totals))
    return dict(zip(events, totals))


def _dumps(results_dir, mode, pid):
    """The per-run profiles of one process, in the order written."""
    prefix = 'callgrind.%s.%d.' % (mode, pid)
    found = []
    for name in os.listdir(results_dir):
        if name.startswith(prefix) and name[len(prefix):].isdigit():
            found.append((int(name[len(prefix):]), name))
    return [os.path.join(results_dir, name) for _n, name in sorted(found)]


def run_mode(mode, args):
    """Start one process under callgrind; its runs with their counts."""
    valgrind = shutil.which('valgrind')
    if valgrind is None or shutil.which('callgrind_control') is None:
        raise SystemExit('valgrind is not installed (apt-get install '
                         'valgrind); tools/run-tests installs it for the '
                         'bench-instructions envs')
    for name in os.listdir(args.results_dir):
        if name.startswith('callgrind.%s.' % mode):
            os.unlink(os.path.join(args.results_dir, name))
    command = [
        valgrind, '--tool=callgrind', '--instr-atstart=no',
        '--collect-atstart=no',
        '--toggle-collect=%s' % MARKER, '--dump-after=%s' % MARKER,
        '--callgrind-out-file=%s' % os.path.join(
            args.results_dir, 'callgrind.%s.%%p' % mode)]
    if args.cache_sim:
        command.append('--cache-sim=yes')
    command += [sys.executable, '-m', 'tools.bench.instructions',
                '--child', mode, '--runs', str(args.runs),
                '--scenarios', json.dumps(args.specs)]
    env = dict(os.environ, PYTHONHASHSEED=str(args.hash_seed))
    log = os.path.join(args.results_dir, '%s.log' % mode)
    started = time.time()
    with open(log, 'w') as stderr:
        proc = subprocess.Popen(command, stdout=subprocess.PIPE,
                                stderr=stderr, env=env,
                                universal_newlines=True)
        lines = []
        for line in proc.stdout:
            if line.startswith(PREFIX):
                lines.append(json.loads(line[len(PREFIX):]))
            else:
                stderr.write(line)
        code = proc.wait()
    if code:
        raise SystemExit('the %s process failed (exit %d): see %s' % (
            mode, code, log))
    info = {}
    measured = []
    for line in lines:
        if 'scenario' in line:
            measured.append(line)
        else:
            info.update(line)
    dumps = _dumps(args.results_dir, mode, proc.pid)
    if len(dumps) != len(measured):
        raise SystemExit('the %s process made %d runs and callgrind wrote '
                         '%d profiles: the marker %s ran elsewhere too, '
                         'or not at all' % (mode, len(measured), len(dumps),
                                            MARKER))
    for row, path in zip(measured, dumps):
        row['events'] = read_profile(path)
        row['profile'] = os.path.basename(path)
    return {'runs': measured, 'wall_s': round(time.time() - started, 1),
            'activation': info.get('activation')}


def _ratio(a, b):
    return round(float(a) / b, 4) if a and b else None


def summarize(specs, modes):
    """Per scenario and tracker: median events; the ratios."""
    rows = []
    for spec in specs:
        row = collections.OrderedDict(label=spec['label'],
                                      scenario=spec['name'])
        for mode, data in modes.items():
            for tracker in TRACKERS[mode]:
                runs = [r for r in data['runs']
                        if r['scenario'] == spec['name'] and
                        r['tracker'] == tracker]
                events = sorted(set(e for r in runs for e in r['events']))
                row[tracker] = collections.OrderedDict(
                    runs=len(runs),
                    wrong_runs=sum(1 for r in runs if r['wrong_nodes']),
                    events=collections.OrderedDict(
                        (e, report.percentile([r['events'].get(e, 0)
                                               for r in runs], 50))
                        for e in events),
                    ir=[r['events'].get('Ir') for r in runs])
        ir = dict((t, row[t]['events'].get('Ir')) for t in row
                  if isinstance(row[t], dict))
        row['composed_vs_nova'] = _ratio(ir.get('composed'), ir.get('nova'))
        row['composed_vs_plain'] = _ratio(ir.get('composed'),
                                          ir.get('plain'))
        row['nova_vs_plain'] = _ratio(ir.get('nova'), ir.get('plain'))
        rows.append(row)
    return rows


def _spread(values):
    values = [v for v in values if v]
    if len(values) < 2:
        return ''
    return ' (runs within %.2f%%)' % (
        100.0 * (max(values) - min(values)) / min(values))


def table(result):
    lines = ['Instructions of the periodic task on Nova %s (Python %s), '
             'callgrind, %d runs per class; the extension: %s' % (
                 result['nova'], result['python'], result['runs'],
                 result['activation'])]
    for row in result['scenarios']:
        lines.append('  %s' % row['label'])
        for tracker in ('composed', 'nova', 'plain'):
            if tracker not in row:
                continue
            m = row[tracker]
            extra = ''.join(
                '  %s %s' % (e, '{:,}'.format(int(v)))
                for e, v in m['events'].items() if e in ('D1mr', 'DLmr'))
            lines.append('    %-9s %16s instructions%s%s%s' % (
                tracker, '{:,}'.format(int(m['events'].get('Ir', 0))),
                _spread(m['ir']), extra,
                ('  %d runs with wrong books' % m['wrong_runs'])
                if m['wrong_runs'] else ''))
        lines.append('    composed/nova (one process) %s; composed/plain '
                     '%s; control nova/plain %s' % (
                         report._fmt(row['composed_vs_nova'], '%.4f'),
                         report._fmt(row['composed_vs_plain'], '%.4f'),
                         report._fmt(row['nova_vs_plain'], '%.4f')))
    return lines


def against(result, other):
    """Per scenario: this run's composed class / ``other`` run's plain.

    ``other`` is the result of a run in another Nova's environment (the
    upstream fix's 21.1.2 against the extension on 21.1.0): the
    instruction counts of two releases compare where wall-clock times of
    two processes cannot.
    """
    # NOTE: by label, which carries the sizes: a host of other sizes
    # has no ratio
    theirs = dict((row['label'], row) for row in other['scenarios'])
    rows = []
    for row in result['scenarios']:
        base = theirs.get(row['label'], {}).get('plain')
        ours = row.get('composed')
        rows.append(collections.OrderedDict(
            label=row['label'], nova=other['nova'],
            ratio=_ratio(ours and ours['events'].get('Ir'),
                         base and base['events'].get('Ir'))))
    return rows


def _nova_version():
    from nova import version
    return version.version_string()


def main(argv=None):
    parser = argparse.ArgumentParser(
        prog='python -m tools.bench.instructions',
        description=__doc__.split('\n\n')[0])
    parser.add_argument('--runs', type=int, default=2,
                        help='measured runs per scenario and tracker class')
    parser.add_argument('--instances', type=int, default=200)
    parser.add_argument('--nodes', type=int, default=50)
    parser.add_argument('--node-instances', type=int, default=4)
    parser.add_argument('--reverts', type=int, default=5)
    parser.add_argument('--no-plain', dest='plain', action='store_false',
                        help='only the extension\'s process (composed and '
                             'nova classes), no plain process')
    parser.add_argument('--cache-sim', action='store_true',
                        help='simulate the caches too (slower)')
    parser.add_argument('--hash-seed', type=int, default=0,
                        help='PYTHONHASHSEED of both processes')
    parser.add_argument('--against', metavar='JSON',
                        help='instructions.json of a run on another Nova '
                             '(upstream\'s fix): print the extension here '
                             'against plain there, per scenario')
    parser.add_argument('--results-dir', default='results/instructions')
    parser.add_argument('--format', choices=('table', 'json'),
                        default='table')
    parser.add_argument('--child', choices=sorted(TRACKERS),
                        help=argparse.SUPPRESS)
    parser.add_argument('--scenarios', help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.runs < 1:
        parser.error('--runs must be at least 1')
    if args.child:
        return _child(args.child, json.loads(args.scenarios), args.runs)
    args.specs = periodic.scenarios(args.instances, args.nodes,
                                    args.node_instances, args.reverts)
    other = None
    if args.against:
        try:
            with open(args.against) as f:
                other = json.load(f)
        except (IOError, ValueError) as e:
            parser.error('--against %s: %s' % (args.against, e))
        if not (isinstance(other, dict) and 'nova' in other and
                'scenarios' in other):
            parser.error('--against %s: not an instructions.json of this '
                         'tool' % args.against)
    os.makedirs(args.results_dir, exist_ok=True)
    started = time.time()
    modes = collections.OrderedDict()
    for mode in ('extension', 'plain') if args.plain else ('extension',):
        modes[mode] = run_mode(mode, args)
    result = collections.OrderedDict(
        nova=_nova_version(), python='%d.%d.%d' % sys.version_info[:3],
        activation=modes['extension']['activation'], runs=args.runs,
        hash_seed=args.hash_seed, cache_sim=args.cache_sim,
        scenarios=summarize(args.specs, modes),
        process_wall_s=dict((m, d['wall_s']) for m, d in modes.items()),
        wall_s=round(time.time() - started, 1))
    if other is not None:
        result['against'] = against(result, other)
    with open(os.path.join(args.results_dir, 'instructions.json'),
              'w') as f:
        json.dump(result, f, indent=2)
    if args.format == 'json':
        print(json.dumps(result, indent=2))
    else:
        print('\n'.join(table(result)))
        for row in result.get('against', ()):
            print('  %s: composed here / plain on Nova %s: %s' % (
                row['label'], row['nova'], report._fmt(row['ratio'],
                                                       '%.4f')))
    wrong = sum(row[t]['wrong_runs'] for row in result['scenarios']
                for t in ('composed', 'nova', 'plain') if t in row)
    return 1 if wrong else 0


if __name__ == '__main__':
    sys.exit(main())
