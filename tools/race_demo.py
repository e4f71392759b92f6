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

"""The races, shown: plain Nova against the extension, side by side.

Runs Nova's own in-process services (API, conductor, scheduler, placement
fixture and two computes on the fake driver) from the installed ``nova``
and drives, per mode, N cycles of each race:

``confirm``, ``revert`` (bug 1879878)
    a resize confirmed or reverted, raced by the periodic task at the
    moment the migration turns ``confirmed``/``reverted``;
``resize`` (bug 1944759)
    a resize raced by the source's periodic task where the source casts
    ``finish_resize``, then confirmed;
``unshelve`` (bug 2025480)
    a shelved (offloaded) server unshelved, raced by the host's periodic
    task while the driver spawns it.

Each mode runs in a fresh process; the parent prints one table per mode::

    python -m tools.race_demo [--cycles N] [--upstream-python PY]

``--upstream-python`` adds a third table: the same cycles on the Nova
installed for that interpreter (a virtualenv of a release that carries
upstream's fixes, with this package installed, e.g. the
``functional-epoxy`` env's), plain: what upstream's own fixes do.

A confirm or revert cycle "left wrong usage" if the periodic got into the
window, or the host that gives the instance up does not read zero once
the operation is done (confirm: the source; revert: the destination when
it hands back to the source), or any host read below zero. A resize cycle
left wrong usage if the source did not count the old flavor at the cast,
or does not read zero after the confirm, or any host read below zero. An
unshelve cycle left wrong usage if the host does not count the server
once it is ACTIVE again (before any later periodic task).

Run from a checkout, never installed (see :mod:`tools.bench`); ``tox -e
demo`` and ``tools/demo`` run it.
"""

import argparse
import json
import os
import subprocess
import sys
import time

MODES = ('plain', 'extension')
#: the rows of a table: cycle kind and the bug it races
KINDS = (('confirm', '1879878'), ('revert', '1879878'),
         ('resize', '1944759'), ('unshelve', '2025480'))


def _run_mode(mode, cycles):
    """Child process: run the cycles in one mode, print one JSON line."""
    import unittest

    import eventlet
    from nova.compute import rpcapi as compute_rpcapi
    from nova.compute import vm_states
    from nova.tests.functional import integrated_helpers

    from nova_revert_lock.tests.functional import base
    from nova_revert_lock.tests.functional import hooks

    from nova_revert_lock.guard import releases

    results = {'nova_version': str(releases.installed_nova_version())}

    class Demo(base.ExtensionFixtureMixin, base.RaceMixin,
               integrated_helpers.ProviderUsageBaseTestCase):
        extension = (mode == 'extension')

        def runTest(self):
            results['activation'] = (
                str(self.activation_report.state)
                if self.activation_report else 'not activated')
            results['confirm'] = self._cycles('confirm')
            results['revert'] = self._cycles('revert')
            results['resize'] = self._resize_cycles()
            results['unshelve'] = self._unshelve_cycles()

        def _cycles(self, kind):
            wrong, lowest = 0, None
            server = self._boot(self.flavor_small)
            flavors = [self.flavor_large, self.flavor_small]
            for i in range(cycles):
                self.window_seen, self.raced = [], []
                self.usage_at_cast = {}
                source = self._host_of(server)
                server = self.resize(server, flavors[i % 2])
                dest = self._host_of(server)
                self.race_enabled = True
                if kind == 'confirm':
                    server = self.confirm(server)
                    gave_up = self.vcpus_used(source)
                else:
                    server = self.revert(server)
                    gave_up = self.usage_at_cast.get(dest)
                self.race_enabled = False
                seen = [self.vcpus_used(h) for h in self.hosts]
                if gave_up is not None:
                    seen.append(gave_up)
                low = min(seen)
                lowest = low if lowest is None else min(lowest, low)
                if self.window_seen or gave_up != 0 or low < 0:
                    wrong += 1
                # Start the next cycle from true books.
                for host in self.hosts:
                    self.run_periodic(host)
                if kind == 'revert':
                    flavors.reverse()
            self._delete(server)
            return {'cycles': cycles, 'wrong': wrong, 'lowest': lowest}

        def _resize_cycles(self):
            """Bug 1944759: the source's periodic at the finish_resize cast."""
            wrong, lowest = 0, None
            test, at_cast = self, {}
            orig_cast = compute_rpcapi.ComputeAPI.finish_resize

            def finish_resize(rpcapi, ctxt, instance, migration, *a, **kw):
                host = migration.source_compute
                test.run_periodic(host)
                at_cast[host] = test.vcpus_used(host)
                return orig_cast(rpcapi, ctxt, instance, migration, *a, **kw)

            self.stub_out('nova.compute.rpcapi.ComputeAPI.finish_resize',
                          finish_resize)
            server = self._boot(self.flavor_small)
            flavors = [(self.flavor_large, 1), (self.flavor_small, 2)]
            for i in range(cycles):
                at_cast.clear()
                source = self._host_of(server)
                flavor, old_vcpus = flavors[i % 2]
                server = self.resize(server, flavor)
                server = self.confirm(server)
                held = at_cast.get(source)
                after = self.vcpus_used(source)
                seen = [after] + [self.vcpus_used(h) for h in self.hosts]
                if held is not None:
                    seen.append(held)
                low = min(seen)
                lowest = low if lowest is None else min(lowest, low)
                if held != old_vcpus or after != 0 or low < 0:
                    wrong += 1
                for host in self.hosts:
                    self.run_periodic(host)
            self._delete(server)
            return {'cycles': cycles, 'wrong': wrong, 'lowest': lowest}

        def _unshelve_cycles(self):
            """Bug 2025480: the host's periodic task during the spawn."""
            wrong, lowest = 0, None
            test, seen = self, {}

            def spawn(original, driver, context, instance, *a, **kw):
                if instance.vm_state == vm_states.SHELVED_OFFLOADED:
                    seen['host'] = instance.host
                    test.run_periodic(instance.host)
                return original(driver, context, instance, *a, **kw)

            hooks.wrap(self, 'nova.virt.fake.FakeDriver.spawn', spawn)
            server = self._boot(self.flavor_small)
            for _i in range(cycles):
                seen.clear()
                self.admin_api.post_server_action(server['id'],
                                                  {'shelve': {}})
                self._wait_offloaded(server['id'])
                self.admin_api.post_server_action(server['id'],
                                                  {'unshelve': None})
                server = self._wait_status(server['id'], 'ACTIVE')
                host = seen.get('host')
                held = self.vcpus_used(host) if host else None
                seen_usage = [self.vcpus_used(h) for h in self.hosts]
                low = min(seen_usage + ([held] if held is not None else []))
                lowest = low if lowest is None else min(lowest, low)
                if held != 1 or low < 0:
                    wrong += 1
                for h in self.hosts:
                    self.run_periodic(h)
            self._delete(server)
            return {'cycles': cycles, 'wrong': wrong, 'lowest': lowest}

        def _wait_offloaded(self, server_id):
            self._wait_status(server_id, 'SHELVED_OFFLOADED')
            deadline = time.time() + 20
            while self.admin_api.get_server(server_id)[
                    'OS-EXT-SRV-ATTR:host'] is not None:
                if time.time() > deadline:
                    self.fail('server %s was not offloaded' % server_id)
                eventlet.sleep(0.05)

        def _delete(self, server):
            self.admin_api.delete_server(server['id'])
            self._wait_gone(server['id'])
            for host in self.hosts:
                self.run_periodic(host)

    with open(os.devnull, 'w') as devnull:
        result = unittest.TextTestRunner(stream=devnull,
                                         verbosity=0).run(Demo())
    if not result.wasSuccessful():
        for _test, trace in result.errors + result.failures:
            sys.stderr.write(trace)
        return 1
    print(json.dumps(results))
    return 0


#: the title of each table
TITLES = {'plain': 'Plain Nova %s',
          'extension': 'With nova-revert-lock, Nova %s',
          'upstream': 'Upstream Nova %s, plain (its own fixes)'}


def _table(mode, data):
    lines = ['', TITLES[mode] % data.get('nova_version', '') + (
        ' (activation: %s)' % data['activation']
        if mode == 'extension' else ''),
        '  %-9s %-8s %7s %26s %13s' % ('operation', 'bug', 'cycles',
                                       'cycles left wrong usage',
                                       'lowest usage'),
    ]
    for kind, bug in KINDS:
        row = data[kind]
        lines.append('  %-9s %-8s %7d %26d %13s' % (
            kind, bug, row['cycles'], row['wrong'], row['lowest']))
    return '\n'.join(lines)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('--cycles', type=int,
                        default=int(os.environ.get('NRL_DEMO_CYCLES', 5)),
                        help='cycles of each race per mode '
                             '(default 5)')
    parser.add_argument('--upstream-python', metavar='PY',
                        help='also run the cycles, plain, with this '
                             'interpreter: one whose environment has a '
                             'Nova with upstream\'s fixes and this package')
    parser.add_argument('--run', choices=MODES, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.cycles < 1:
        parser.error('--cycles must be at least 1')
    if args.run:
        return _run_mode(args.run, args.cycles)

    from nova_revert_lock.guard import releases
    version = releases.installed_nova_version()
    print('nova-revert-lock demo: Nova %s, %d cycles of each race per '
          'mode (confirm, revert: bug 1879878; resize: bug 1944759; '
          'unshelve: bug 2025480)' % (version, args.cycles))
    status = 0
    runs = [(mode, sys.executable, mode) for mode in MODES]
    if args.upstream_python:
        runs.append(('upstream', args.upstream_python, 'plain'))
    for mode, python, run in runs:
        start = time.time()
        try:
            proc = subprocess.run(
                [python, '-m', 'tools.race_demo', '--run', run,
                 '--cycles', str(args.cycles)],
                stdout=subprocess.PIPE, universal_newlines=True)
        except OSError as e:
            print('%s mode: cannot run %s: %s' % (mode, python, e))
            status = 1
            continue
        if proc.returncode:
            print('%s mode failed (exit %d)' % (mode, proc.returncode))
            status = 1
            continue
        data = json.loads(proc.stdout.strip().splitlines()[-1])
        print(_table(mode, data))
        print('  (%.0f s)' % (time.time() - start))
    return status


if __name__ == '__main__':
    sys.exit(main())
