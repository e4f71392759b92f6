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

"""The family's rows: each sibling fix's operation, raced, in every mode.

One job: run, in one mode process, cycles of the operation one family
mixin changes, each raced as that mixin's functional test races it, and
time them. A cycle is one run of the scenario of the mixin's functional
test (its own services, started afresh: the scenarios stop hosts, pin
CPUs and leave servers in ERROR, so no cycle may inherit another's
books), with the mode's Nova as it is (``plain``, ``upstream``) or with
the extension activated. The scenario drivers are the tests' own: this
module only picks them, starts the clock at the API request, stops it at
the compute's last step, times the tracker's lock (:mod:`.locktrace`) and
reads the books the scenario leaves.

Started by the driver as::

    python -m tools.bench.family MODE

and spoken to in JSON lines, as :mod:`.harness` is: ``ready``, then
``run`` (a bug number and a count of cycles) and ``quit``.

:data:`BUGS` is the Nova-free part: what each row runs, which lock
sections the mixin changes, what upstream did about the bug on Ussuri,
and what a wrong cycle looks like. The driver and :mod:`.report` import
it; the rest imports Nova and runs in the mode processes only.
"""

import collections
import sys
import time

from tools.bench import locktrace

#: The periodic task's section, as the lock tracer names it.
PERIODIC = '_update_available_resource'
#: The Nova release carrying upstream's fix for 1896463 on Ussuri.
EVACUATE_FIX_NOVA = '21.2.0'

_NO_FIX_ON_USSURI = 'no upstream fix on Ussuri: %s'


#: Where the mixin changes the periodic task itself: its cost on loaded
#: hosts is measured by the periodic task's scenarios, whose extension
#: mode runs every default mixin, this one included.
_PERIODIC_SCENARIOS = ('changes the periodic task: its cost on loaded hosts '
                       'is periodic_ms (the periodic task\'s scenarios, '
                       'every default mixin active, no move in flight)')


def _bug(number, mixin, operation, scenario, module, test, action, end,
         sections, upstream=None, absent=None, proves='', periodic=None,
         stalls=()):
    return collections.OrderedDict([
        ('bug', number), ('mixin', mixin), ('operation', operation),
        ('scenario', scenario), ('module', module), ('test', test),
        ('action', action), ('end', end), ('sections', sections),
        ('upstream', upstream), ('absent', absent), ('proves', proves),
        ('periodic', periodic), ('stalls', stalls)])


#: bug number -> what its row runs. ``action`` is the server action whose
#: API request starts the clock; ``end`` the compute's last step, which
#: stops it: an instance action event (``compute_*``, recorded when the
#: decorated manager method returns, whichever class defines it) or a
#: manager method no mixin replaces. ``sections`` are the lock sections
#: the mixin changes, per mode (empty: none held the lock there).
#: ``stalls`` are the scenario's methods that hold a greenthread still to
#: order the race (the evacuation waits in its save for the periodic task
#: to read, the periodic task waits in its read for the evacuation to
#: end): their time is the harness's, not Nova's, and is taken out of
#: the holds and the operation time of the greenthread they stall.
BUGS = collections.OrderedDict((b['bug'], b) for b in [
    _bug('1944759', 'resize_source_flavor', 'resize',
         'resize host1 -> host2 (1 -> 2 vCPUs), the source\'s periodic task '
         'at the finish_resize cast, then confirm',
         'test_resize_source_flavor', 'ResizeSourceFlavorTest',
         'resize', 'compute_finish_resize',
         {'plain': (PERIODIC,), 'extension': (PERIODIC,)},
         absent=_NO_FIX_ON_USSURI % 'fixed from 22.4.0 (Victoria) on',
         proves='wrong when the source counts 0 vCPUs at the cast or reads '
                '-1 after the confirm (the double drop)'),
    _bug('1953359', 'incoming_migration_context', 'resize (pinned)',
         'pinned resize host0 -> host1 with the destination\'s periodic task '
         'before finish_resize, through the conductor (libvirt framework)',
         'test_incoming_migration_context', 'IncomingMigrationContextTest',
         'resize', 'compute_finish_resize',
         {'plain': (PERIODIC,), 'extension': (PERIODIC,)},
         absent=_NO_FIX_ON_USSURI % 'fixed from 22.4.0 (Victoria) on',
         proves='wrong when the periodic task in the window fails '
                '(CPUPinningInvalid) or pins other than the claim\'s pCPUs',
         periodic=_PERIODIC_SCENARIOS),
    _bug('1896463', 'evacuate_under_lock', 'evacuation',
         'evacuate a server with a PCI device host1 -> host2, the '
         'destination\'s periodic task at the end of the rebuild',
         'test_evacuate_under_lock', 'EvacuateUnderLockTest',
         'evacuate', 'compute_rebuild_instance',
         {'plain': (), 'extension': ('_nrl_finish_evacuation',),
          'upstream': ('finish_evacuation',)},
         upstream=EVACUATE_FIX_NOVA,
         proves='wrong when the periodic task reads the instances before '
                'the end and the migrations after it: the PCI device is '
                'freed and host2 counts 0 vCPUs',
         stalls=('_race', '_wait_for')),
    _bug('1894095', 'live_migration_rollback', 'live-migration rollback',
         'pinned live migration host0 -> host1 that fails, both periodic '
         'tasks once the destination dropped its claim (libvirt framework)',
         'test_live_migration_rollback', 'LiveMigrationRollbackTest',
         'os-migrateLive', '_rollback_live_migration',
         {'plain': ('drop_move_claim',),
          'extension': ('drop_move_claim_at_live_migration_dest',)},
         absent='no upstream fix in any release',
         proves='wrong when the destination pins the rolled back claim\'s '
                'pCPUs again in the window',
         periodic=_PERIODIC_SCENARIOS),
    _bug('1949808', 'live_migration_abort_queued',
         'live-migration abort (queued)',
         'live migrations host1 -> host2 of A (held in the driver) and B '
         '(queued behind it, max_concurrent_live_migrations 1), then B '
         'aborted',
         'test_live_migration_abort_queued', 'LiveMigrationAbortQueuedTest',
         'os-migrateLive', 'compute_live_migration_abort',
         {'plain': (), 'extension': ()},
         absent=_NO_FIX_ON_USSURI % 'fixed from 24.1.1 (Xena) on',
         proves='wrong when the aborted B stays in task state migrating or '
                'its migration keeps an allocation'),
    _bug('2025480', 'unshelve_claim', 'unshelve',
         'shelve-offload, then unshelve with the host\'s periodic task '
         'inside the spawn',
         'test_unshelve_claim', 'UnshelveClaimTest',
         'unshelve', 'compute_unshelve_instance',
         {'plain': ('instance_claim', PERIODIC),
          'extension': ('instance_claim', PERIODIC)},
         absent=_NO_FIX_ON_USSURI % 'fixed from 26.2.2 (Zed) on',
         proves='wrong when the host loses the claim of the server it '
                'unshelves (tracker 0 vCPUs, placement 1)',
         periodic=_PERIODIC_SCENARIOS),
])


def modes_of(spec, upstream=True):
    """The modes that run ``spec``'s row: upstream only where it fixed it."""
    modes = ['plain', 'extension']
    if upstream and spec['upstream']:
        modes.append('upstream')
    return modes


# -- the scenarios' books ----------------------------------------------------
# Each takes the started test case, runs the scenario of the mixin's
# functional test and returns (right, books): whether the books are what
# the fix leaves, and what they read.

def _resize_source_flavor(case):
    server = case._resize_with_periodic_at_cast()
    at_cast = case.usage_at_cast['host1']
    case.confirm(server)
    after = (case.vcpus_used('host1'), case.vcpus_used('host2'))
    return (at_cast == 1 and after == (0, 2),
            'host1 at the cast %d; after confirm (host1, host2) %s'
            % (at_cast, after))


def _incoming_migration_context(case):
    seen = case._resize_with_dest_periodic_in_window()
    error = seen['periodic_error']
    pinned = seen['dest_pinned_in_window']
    expected = seen['b'] | seen['a_resized']
    return (error is None and pinned == expected,
            'periodic %s; host1 pinned %s (claim: %s)' % (
                type(error).__name__ if error else 'ok', sorted(pinned),
                sorted(expected)))


def _evacuate_under_lock(case):
    seen = case._raced_evacuation()
    order = [what for _who, what in seen['events']]
    right = (order == ['done', 'instances', 'migrations'] and
             seen['pci'] == (1, 1) and seen['vcpus'] == 1)
    return right, 'order %s; PCI (host1, host2) %s; host2 vCPUs %d' % (
        '/'.join(order), seen['pci'], seen['vcpus'])


def _live_migration_rollback(case):
    from nova_revert_lock.tests.functional import (
        test_live_migration_rollback as scenario)
    seen = case._rollback_raced()
    pinned = seen[scenario.DEST]
    return (pinned == case.pinned,
            'host1 pinned in the window %s (B alone: %s); migration %s' % (
                sorted(pinned), sorted(case.pinned), seen['status']))


def _live_migration_abort_queued(case):
    server_a, server_b, migration = case._abort_queued()
    server = case._server(server_b['id'])
    held = case._held_by(migration.uuid)
    case._finish_a(server_a)
    task_state = server['OS-EXT-STS:task_state']
    return (task_state is None and not held,
            'B %s/%s; its migration holds %d allocation(s)' % (
                server['status'], task_state, len(held)))


def _unshelve_claim(case):
    during, after = case._unshelve_with(case._periodic)
    return (during == after == (1, 1, 1, 1),
            '(vCPUs, VMs, tracked, placement) during %s, after %s'
            % (during, after))


BOOKS = {
    '1944759': _resize_source_flavor,
    '1953359': _incoming_migration_context,
    '1896463': _evacuate_under_lock,
    '1894095': _live_migration_rollback,
    '1949808': _live_migration_abort_queued,
    '2025480': _unshelve_claim,
}


# -- one cycle, in a mode process ---------------------------------------------

class Cycle(object):
    """The clock and the lock tracer of one cycle's test case."""

    def __init__(self, case, spec):
        self.spec = spec
        self.started = None
        self.ended = None
        self.hold = collections.defaultdict(list)
        #: (greenthread, started, ended) of each stall of the scenario's
        self.stalls = []
        self._install(case)

    def _install(self, case):
        from nova_revert_lock import fixes
        from nova_revert_lock import locking
        from nova_revert_lock.tests.functional import hooks

        cycle = self
        tracer = locktrace.LockTracer(
            locking.tracker_lock(fixes.LOCK_REFS).name, self._released)
        case.stub_out('oslo_concurrency.lockutils.lock', tracer.lock)
        self.tracer = tracer
        for name in self.spec['stalls']:
            setattr(case, name, self._stalling(getattr(case, name)))

        def action(orig, client, server_id, data, *args, **kwargs):
            if cycle.started is None and cycle.spec['action'] in data:
                cycle.started = locktrace.now()
            return orig(client, server_id, data, *args, **kwargs)

        hooks.wrap(case, 'nova.tests.functional.api.client.'
                   'TestOpenStackClient.post_server_action', action)
        end = self.spec['end']
        if end.startswith('compute_'):
            # NOTE: the event's end, not the manager method: a mixin may
            # replace the method (evacuate_under_lock replaces
            # rebuild_instance), and a stub of Nova's would bypass it.
            def reporter_exit(orig, reporter, *args):
                try:
                    return orig(reporter, *args)
                finally:
                    if reporter.event_name == end:
                        cycle._ended()

            hooks.wrap(case, 'nova.compute.utils.EventReporter.__exit__',
                       reporter_exit)
        else:
            def method(orig, *args, **kwargs):
                try:
                    return orig(*args, **kwargs)
                finally:
                    cycle._ended()

            hooks.wrap(case, 'nova.compute.manager.ComputeManager.' + end,
                       method)

    def _stalling(self, method):
        import eventlet
        cycle = self

        def stall(*args, **kwargs):
            started = locktrace.now()
            try:
                return method(*args, **kwargs)
            finally:
                cycle.stalls.append((eventlet.getcurrent(), started,
                                     locktrace.now()))
        return stall

    def _stalled(self, start, end, thread=None):
        """Seconds of stalls within [start, end] (of ``thread`` only)."""
        return sum(max(0.0, min(end, e) - max(start, s))
                   for t, s, e in self.stalls
                   if thread is None or t is thread)

    def _ended(self):
        if self.started is not None and self.ended is None:
            self.ended = locktrace.now()

    def _released(self, fname, rt, attempt, acquired, released):
        import eventlet
        # NOTE: released in the greenthread that held the lock: a stall of
        # that greenthread inside the section is the harness's time.
        held = released - acquired - self._stalled(
            acquired, released, eventlet.getcurrent())
        self.hold[fname].append(round(held * 1e3, 4))

    def record(self, right, books):
        if self.started is None or self.ended is None:
            raise RuntimeError('the clock did not run: %s %s, %s %s' % (
                self.spec['action'], self.started, self.spec['end'],
                self.ended))
        # NOTE: the stalls of ``_race`` hold the operation's own
        # greenthread; the periodic task's (``_wait_for``) do not.
        stalled = self._stalled(self.started, self.ended) if self.stalls \
            else 0.0
        op_stalled = sum(
            max(0.0, min(self.ended, e) - max(self.started, s))
            for t, s, e in self.stalls if t is not None and
            getattr(t, 'nrl_periodic', False) is False)
        return {'ms': round((self.ended - self.started - op_stalled) * 1e3,
                            3),
                'stalled_ms': round(stalled * 1e3, 3),
                'right': bool(right), 'books': books,
                'hold': dict(self.hold),
                'tracer_errors': self.tracer.errors[:5]}


def case_class(spec, mode, sink):
    """The mixin's functional test case, running one cycle for ``mode``.

    Built on the bases of the mixin's own test class (its scenario, its
    services), with the extension activated in the extension mode only.
    """
    import importlib
    module = importlib.import_module(
        'nova_revert_lock.tests.functional.' + spec['module'])
    test_class = getattr(module, spec['test'])
    books = BOOKS[spec['bug']]

    def runTest(self):
        report = self.activation_report
        applied = bool(report and spec['mixin'] in report.mixins)
        cycle = Cycle(self, spec)
        right, seen = books(self)
        record = cycle.record(right, seen)
        record['applied'] = applied
        sink.append(record)

    return type('Bench' + test_class.__name__, test_class.__bases__,
                {'extension': mode == 'extension', 'runTest': runTest})


def run_cycles(spec, mode, count):
    """``count`` cycles of ``spec``'s row; a list of records."""
    import unittest
    records = []
    for _i in range(count):
        sink = []
        result = unittest.TestResult()
        case_class(spec, mode, sink)().run(result)
        problems = result.errors + result.failures
        if problems or not sink:
            trace = problems[-1][1] if problems else (
                'skipped: %s' % result.skipped[-1][1] if result.skipped
                else 'no record')
            sys.stderr.write(trace + '\n')
            records.append({'error': trace.strip().splitlines()[-1]})
        else:
            records.append(sink[0])
    return records


def fixed_upstream():
    """bug -> True where the installed Nova carries upstream's fix."""
    import importlib
    fixed = {}
    for number, spec in BUGS.items():
        module = importlib.import_module('nova_revert_lock.mixins.' +
                                         spec['mixin'])
        fixed[number] = bool(module.SPEC.fixed_upstream())
    return fixed


def main(argv=None):
    import argparse
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('mode', choices=('plain', 'extension', 'upstream'))
    args = parser.parse_args(argv)
    # NOTE: Nova's functional test package first: it monkey patches
    # eventlet before oslo or Nova's modules are imported.
    import nova.tests.functional  # noqa: F401

    from nova_revert_lock.guard import releases
    from tools.bench import harness

    channel = harness.Channel(args.mode)
    channel.send(ready=True, mode=args.mode,
                 nova_version=releases.installed_nova_version(),
                 fixed=fixed_upstream(), python=sys.version.split()[0])
    while True:
        message = channel.receive()
        if message.get('cmd') != 'run':
            channel.send(bye=True)
            return 0
        cpu, wall = time.process_time(), time.perf_counter()
        records = run_cycles(BUGS[message['bug']], args.mode,
                             message['count'])
        channel.send(records=records, cpu_s=time.process_time() - cpu,
                     wall_s=time.perf_counter() - wall)


if __name__ == '__main__':
    sys.exit(main())
