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

"""Where the periodic task's time goes, per fix, in one Nova environment.

::

    python -m tools.bench.profile_periodic [--nodes 50] [--instances 4]
        [--runs 10] [--reverts 0] [--top 25]

Runs in the environment of the Nova under test (a tox functional env).
Starts Nova's in-process services twice in one process, plain and with
the extension, each with the loaded multi-node host of
:mod:`tools.bench.periodic`, and profiles ``update_available_resource``
(``cProfile``) over ``--runs`` runs each, plain and extension taking
turns. It prints, per mode, the time spent in each of this package's
modules (inclusive: what upstream's code called from them is counted in
the module that called it only when it is not upstream's own periodic
body), the calls this package makes through Nova's objects, and the
functions whose own time differs most between the modes.

It is a diagnosis, not a measurement: the profiler slows Python code
down by a factor that differs per function. The ratios come from
``python -m tools.bench`` (:doc:`benchmarks`).
"""

import argparse
import collections
import cProfile
import pstats
import sys


def _case(extension, spec, runs, result):
    import unittest

    from nova.tests.functional import integrated_helpers

    from nova_revert_lock.tests.functional import base
    from tools.bench import periodic

    class ProfileCase(base.ExtensionFixtureMixin, base.RaceMixin,
                      integrated_helpers.ProviderUsageBaseTestCase):

        def runTest(self):
            bench = periodic.PeriodicBench(self, collections.Counter())
            bench.setup([spec])
            profile = cProfile.Profile()
            for _i in range(runs):
                profile.enable()
                row = bench.run(spec['name'])
                profile.disable()
                if row['wrong_nodes']:
                    raise AssertionError('books wrong after a run: %s' % row)
            result.append(profile)

    ProfileCase.extension = extension
    outcome = unittest.TextTestRunner(stream=sys.stderr, verbosity=0).run(
        ProfileCase())
    if not outcome.wasSuccessful():
        raise SystemExit('the profiled case failed')


def _ours(filename):
    return '/nova_revert_lock/' in filename and '/tests/' not in filename


def _module(filename):
    return filename.split('/nova_revert_lock/', 1)[1]


def summarize(stats):
    """module of ours -> (calls, own seconds, inclusive seconds)."""
    by_module = collections.defaultdict(lambda: [0, 0.0, 0.0])
    for (filename, _line, _name), row in stats.stats.items():
        calls, _prim, own, inclusive, _callers = row
        if _ours(filename):
            entry = by_module[_module(filename)]
            entry[0] += calls
            entry[1] += own
            entry[2] = max(entry[2], inclusive)
    return by_module


def our_calls_into_nova(stats):
    """(our function, Nova function) -> calls, for Nova's objects and db."""
    found = collections.Counter()
    for (filename, line, name), row in stats.stats.items():
        if '/nova/' not in filename or '/nova_revert_lock/' in filename:
            continue
        if not ('/objects/' in filename or '/db/' in filename or
                '/conductor/' in filename):
            continue
        for caller, crow in row[4].items():
            if _ours(caller[0]):
                found[('%s:%s' % (_module(caller[0]), caller[2]),
                       '%s' % name)] += crow[0]
    return found


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('--nodes', type=int, default=50)
    parser.add_argument('--instances', type=int, default=4,
                        help='instances per node')
    parser.add_argument('--reverts', type=int, default=0,
                        help='reverts in flight, one per node')
    parser.add_argument('--runs', type=int, default=10)
    parser.add_argument('--top', type=int, default=25)
    args = parser.parse_args(argv)
    spec = {'name': 'profiled', 'nodes': args.nodes,
            'instances': args.instances, 'reverts': args.reverts,
            'label': 'profiled'}
    profiles = {}
    for mode, extension in (('plain', False), ('extension', True)):
        found = []
        _case(extension, spec, args.runs, found)
        profiles[mode] = pstats.Stats(found[0])
    print('%d nodes x %d instances, %d reverts in flight, %d profiled runs '
          'per mode' % (args.nodes, args.instances, args.reverts, args.runs))
    for mode, stats in sorted(profiles.items()):
        print('\n%s: %.3f s in all (profiled)' % (mode, stats.total_tt))
    ext = profiles['extension']
    print('\nthis package, extension mode (per module: calls, own s, '
          'largest inclusive s of one function)')
    for module, (calls, own, inclusive) in sorted(
            summarize(ext).items(), key=lambda kv: -kv[1][1]):
        print('  %-45s %8d %9.4f %9.4f' % (module, calls, own, inclusive))
    print('\ncalls from this package into Nova objects/db/conductor')
    for (ours, nova), calls in sorted(our_calls_into_nova(ext).items()):
        print('  %-60s %-35s %6d' % (ours, nova, calls))
    print('\nown time, extension minus plain (largest first)')
    plain_own = collections.Counter()
    for key, row in profiles['plain'].stats.items():
        plain_own[key] = row[2]
    diffs = []
    for key, row in ext.stats.items():
        diffs.append((row[2] - plain_own.get(key, 0.0), row[0], key))
    for diff, calls, (filename, line, name) in sorted(diffs,
                                                      reverse=True)[:args.top]:
        print('  %+8.4f s %8d  %s:%d(%s)' % (
            diff, calls, filename.split('site-packages/')[-1], line, name))
    return 0


if __name__ == '__main__':
    sys.exit(main())
