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

"""What the extension adds to the periodic task, counted, not timed.

::

    python -m tools.bench.count_periodic [--instances 200] [--nodes 50]
        [--node-instances 4] [--reverts 0] [--runs 3] [--top 15]

Runs in the environment of the Nova under test (a tox functional env).
Starts Nova's in-process services once, with the extension, and the
scenario hosts of :mod:`tools.bench.periodic`, then runs
``update_available_resource`` on each host with the composed tracker
and with Nova's own tracker class in its place (as ``@nova-rt`` does),
taking turns, and counts per run the Python and C functions the
periodic task's greenthread called (a profile hook counting calls, no
timer), the calls of other greenthreads apart, the greenthread switches
and the garbage collections. It prints, per scenario, the median of each
count per class, what the composed class adds, and the functions whose
calls differ most.

Counts do not depend on the machine's load, where times do: a check of
what the extension's code costs that runs on a busy machine. Calls are
not equally expensive, so the added share of calls is an estimate of
the added time, not a measurement. The other greenthreads (the fake
messaging driver's pollers, run when the periodic task yields) and the
greenthread switches take more the longer a run takes, whichever class
runs it: a difference there is noise.
"""

import argparse
import collections
import gc
import statistics
import sys


def _short(filename):
    for marker in ('site-packages/', '/nova_revert_lock/'):
        if marker in filename:
            prefix = 'nova_revert_lock/' if marker[0] == '/' else ''
            return prefix + filename.split(marker, 1)[1]
    return filename


def _count(run):
    """Run ``run()`` with the counters on: (counts, calls by function)."""
    import greenlet

    counts = collections.Counter()
    functions = collections.Counter()
    current = greenlet.getcurrent
    periodic = current()

    def profile(frame, event, _arg):
        if current() is not periodic:
            # NOTE: other greenthreads, run when the periodic task yields:
            # they take more calls the longer the run, whichever class.
            if event == 'call':
                counts['other greenthreads: python calls'] += 1
            return
        if event == 'call':
            counts['python calls'] += 1
            code = frame.f_code
            functions[(code.co_filename, code.co_name)] += 1
        elif event == 'c_call':
            counts['C calls'] += 1

    def switches(_event, _args):
        counts['greenthread switches'] += 1

    def collections_(phase, info):
        if phase == 'start':
            counts['gc gen%d' % info['generation']] += 1

    previous = greenlet.settrace(switches)
    gc.callbacks.append(collections_)
    sys.setprofile(profile)
    try:
        row = run()
    finally:
        sys.setprofile(None)
        gc.callbacks.remove(collections_)
        greenlet.settrace(previous)
    if row['wrong_nodes']:
        raise AssertionError('books wrong after a run: %s' % row)
    counts['database calls'] = row['db_calls']
    return counts, functions


def _case(specs, runs, result):
    import unittest

    from nova.tests.functional import integrated_helpers

    from nova_revert_lock.tests.functional import base
    from tools.bench import periodic

    class CountCase(base.ExtensionFixtureMixin, base.RaceMixin,
                    integrated_helpers.ProviderUsageBaseTestCase):

        extension = True

        def runTest(self):
            from tools.bench import cycle_driver
            # the harness's database counting (and yields), as timed
            bench = cycle_driver.Bench(self, 'extension', 0.002, 0, False)
            bench.periodic = periodic.PeriodicBench(self, bench.calls)
            bench.periodic.setup(specs)
            for spec in specs:
                rows = result.setdefault(spec['name'], {
                    'label': spec['label'], 'composed': [], 'nova': []})
                for _i in range(runs):
                    for nova in (False, True):
                        rows['nova' if nova else 'composed'].append(
                            _count(lambda: bench.periodic.run(
                                spec['name'], nova)))

    outcome = unittest.TextTestRunner(stream=sys.stderr, verbosity=0).run(
        CountCase())
    if not outcome.wasSuccessful():
        raise SystemExit('the counting case failed')


def report(result, top):
    lines = []
    for row in result.values():
        lines.append(row['label'])
        kinds = sorted(set(k for counts, _f in row['composed'] + row['nova']
                           for k in counts))
        lines.append('  %-22s %12s %12s %10s %8s' % (
            'median per run', 'composed', "Nova's", 'added', '%'))
        for kind in kinds:
            composed = statistics.median(c[kind] for c, _f in row['composed'])
            nova = statistics.median(c[kind] for c, _f in row['nova'])
            lines.append('  %-22s %12g %12g %+10g %8s' % (
                kind, composed, nova, composed - nova,
                '%+.2f' % (100.0 * (composed - nova) / nova) if nova
                else '-'))
        composed = row['composed'][-1][1]
        nova = row['nova'][-1][1]
        diffs = sorted(((composed[k] - nova[k], k)
                        for k in set(composed) | set(nova)),
                       key=lambda d: (-abs(d[0]), d[1]))
        lines.append("  calls by function, the last run of each (composed "
                     "minus Nova's)")
        for diff, (filename, name) in diffs[:top]:
            if diff:
                lines.append('    %+7d %8d  %s:%s' % (
                    diff, composed[(filename, name)], _short(filename),
                    name))
    return lines


def main(argv=None):
    from tools.bench import periodic

    parser = argparse.ArgumentParser(
        prog='python -m tools.bench.count_periodic',
        description=__doc__.split('\n\n')[0])
    parser.add_argument('--instances', type=int, default=200)
    parser.add_argument('--nodes', type=int, default=50)
    parser.add_argument('--node-instances', type=int, default=4)
    parser.add_argument('--reverts', type=int, default=0)
    parser.add_argument('--runs', type=int, default=3)
    parser.add_argument('--top', type=int, default=15)
    args = parser.parse_args(argv)
    result = collections.OrderedDict()
    _case(periodic.scenarios(args.instances, args.nodes,
                             args.node_instances, args.reverts),
          args.runs, result)
    print('\n'.join(report(result, args.top)))
    return 0


if __name__ == '__main__':
    sys.exit(main())
