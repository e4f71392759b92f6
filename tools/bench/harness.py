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

"""One benchmark mode in one process, on Nova's in-process services.

Started by the driver as::

    python -m tools.bench.harness MODE

in the environment holding the Nova release the mode needs. It starts
Nova's own functional services (API, conductor, scheduler, placement
fixture, two computes on the fake driver, sqlite) through
:class:`~nova_revert_lock.tests.functional.base.RaceMixin`, says ``ready``
and then serves the driver, one JSON line each way: ``run`` a block of
cycles, hand over the ``samples``, start the loaded hosts of the periodic
task's scenarios (``periodic_setup``, see :mod:`.periodic`) and time one
``periodic`` task on one of them, ``quit``.

A cycle cold-migrates the one server to the other host, then confirms or
reverts. Throughout a block every compute is hammered by its periodic task
(one greenthread per compute calling ``update_available_resource`` in a
loop, with a tiny sleep), and every call to Nova's database API or to
placement yields to other greenthreads when it returns, as the green
sockets of a real deployment do. No hook targets the window: the periodic
tasks find it by themselves, or not.

The books (``vcpus_used`` of each host) are checked every time
``COMPUTE_RESOURCE_SEMAPHORE`` is released during the confirm or revert,
the only moments they are meant to be consistent, and once more after a
full periodic task on each host has followed it. A cycle is wrong if a
host read below zero, if the host giving the instance up still counted it
when its own claim drop released the lock (counted twice), if the host
keeping the instance lost it, or if the books were still off at the end.
A revert has one more window, left open upstream and not part of bug
1879878: between the destination's status change and the source's
``finish_revert_resize``, a periodic task counts the instance on the
destination's side or on neither; such readings are counted separately
(``handback``), not as wrong.
"""

import collections
import json
import os
import sys
import time

MODES = ('plain', 'extension', 'upstream')
KINDS = ('confirm', 'revert')

#: Lock sections timed for the lock-hold distribution, per mode: plain
#: Nova drops the claim alone under the lock; both fixes set the status,
#: drop the claim and update the instance in one section.
DROP_SECTIONS = {
    'plain': ('drop_move_claim',),
    'extension': ('drop_move_claim_at_source', 'drop_move_claim_at_dest'),
    'upstream': ('drop_move_claim_at_source', 'drop_move_claim_at_dest'),
}
#: Sections whose wait for the lock is the cost to other work on the host.
CLAIMS = ('instance_claim', 'resize_claim', 'rebuild_claim')
PROBE = '_nrl_bench_probe'
PERIODIC = '_update_available_resource'

FINAL_STATUSES = ('confirmed', 'reverted')
WAIT_TIMEOUT = 60
SETTLE_TIMEOUT = 30


def _now():
    return time.perf_counter()


class _Cycle(object):
    """What one confirm or revert did to the books."""

    def __init__(self, kind, giver, keeper, vcpus):
        self.kind = kind
        self.giver = giver      # host giving the instance up
        self.keeper = keeper    # host keeping it
        self.vcpus = vcpus
        self.checking = False
        self.status_final = False
        self.dropped = False
        self.done_at = None     # perf_counter when the operation finished
        self.synced = set()     # hosts with a full periodic after done_at
        self.problems = collections.OrderedDict()
        self.handback = 0

    def problem(self, category, text):
        self.problems.setdefault(category, text)

    def in_handback(self, host):
        """In the revert's hand-back window for ``host``?"""
        return (self.kind == 'revert' and self.status_final and
                host not in self.synced)


class LockTracer(object):
    """Time every acquisition of one lock, and tell who took it.

    Wraps ``oslo_concurrency.lockutils.lock``, which the wrapper of
    ``lockutils.synchronized`` calls for each call of a synchronized
    function; that wrapper's frame names the function and its arguments,
    whose first is the resource tracker for the tracker's methods.
    """

    def __init__(self, name, on_release):
        from oslo_concurrency import lockutils
        self.name = name
        self.on_release = on_release
        self.errors = []
        self.orig = lockutils.lock
        self.wrapper_code = lockutils.synchronized(
            'nova-revert-lock-bench')(lambda: None).__code__

    def lock(self, name, *args, **kwargs):
        cm = self.orig(name, *args, **kwargs)
        if name != self.name:
            return cm
        caller = sys._getframe(1)
        func = rt = None
        if caller.f_code is self.wrapper_code:
            local = caller.f_locals
            func = local.get('f')
            call_args = local.get('args') or ()
            rt = call_args[0] if call_args else None
        fname = getattr(func, '__name__', '?')
        return self._traced(cm, fname, rt)

    def released(self, *args):
        # NOTE: runs inside Nova's code path: a failing check must not
        # change what Nova does, only be reported.
        try:
            self.on_release(*args)
        except Exception as e:  # noqa: BLE001
            self.errors.append('%s: %s' % (type(e).__name__, e))

    def _traced(self, cm, fname, rt):
        tracer = self

        class _Traced(object):
            def __enter__(self):
                self.attempt = _now()
                value = cm.__enter__()
                self.acquired = _now()
                return value

            def __exit__(self, *exc):
                released = _now()
                try:
                    return cm.__exit__(*exc)
                finally:
                    tracer.released(fname, rt, self.attempt,
                                    self.acquired, released)
        return _Traced()


class Bench(object):
    """The cycles of one mode, run inside a started Nova test case."""

    def __init__(self, case, mode, hammer_sleep, probe_interval,
                 trigger=True):
        import eventlet
        from nova.compute import manager as nova_manager
        from nova import objects

        from nova_revert_lock import locking
        from nova_revert_lock import mixins

        self.eventlet = eventlet
        self.objects = objects
        self.case = case
        self.mode = mode
        self.hammer_sleep = hammer_sleep
        self.probe_interval = probe_interval
        self.trigger = trigger
        self.triggered = []
        self.sections = DROP_SECTIONS[mode]
        self.cycle = None
        self.kind = None
        self.running = False
        self.threads = []
        self.periodics = collections.Counter()
        self.periodic_errors = 0
        # kind -> section name -> list of ms
        self.hold = {k: collections.defaultdict(list) for k in KINDS}
        self.wait = {k: collections.defaultdict(list) for k in KINDS}
        self.expected = {}
        #: database API and placement calls, counted by the yields
        self.calls = collections.Counter()
        self.periodic = None
        self.server = None
        self.vcpus = 1
        self.probe = locking.tracker_lock(mixins.LOCK_REFS).synchronized()(
            _nrl_bench_probe)

        # NOTE: what the guard says of this Nova, read before the hooks
        # below replace some of the functions it checks: with them in
        # place it sees code it does not know.
        from nova_revert_lock import activation
        self.nova_state = str(activation.build().state)
        self.tracer = LockTracer(
            locking.tracker_lock(mixins.LOCK_REFS).name, self._released)
        case.stub_out('oslo_concurrency.lockutils.lock', self.tracer.lock)
        self._install_yields()
        self._install_hooks(nova_manager)

    # -- instrumentation ------------------------------------------------------

    def _install_yields(self):
        """Yield after each database and placement call, as green I/O does.

        NOTE: after the call, not before: the call's transaction is over
        when other greenthreads run, as with one DB connection per
        greenthread in a real deployment; sqlite's single in-memory
        connection must not see two transactions interleaved.
        """
        import inspect

        from nova.db import api as db_api
        from nova.scheduler.client import report

        sleep = self.eventlet.sleep
        calls = self.calls

        def yielding(func, kind):
            # NOTE: counted by kind and by function, so that the periodic
            # task's runs can tell which calls a mode adds.
            name = '%s.%s' % (kind, func.__name__)

            def call(*args, **kwargs):
                try:
                    return func(*args, **kwargs)
                finally:
                    calls[kind] += 1
                    calls[name] += 1
                    sleep(0)
            return call

        for name, func in vars(db_api).items():
            if (inspect.isfunction(func) and not name.startswith('_') and
                    func.__module__ == db_api.__name__):
                params = list(inspect.signature(func).parameters)
                if params and params[0] == 'context':
                    self.case.stub_out('nova.db.api.' + name,
                                       yielding(func, 'db'))
        for name in ('get', 'post', 'put', 'delete'):
            if hasattr(report.SchedulerReportClient, name):
                self.case.stub_out(
                    'nova.scheduler.client.report.SchedulerReportClient.' +
                    name, yielding(getattr(report.SchedulerReportClient,
                                           name), 'placement'))

    def _install_hooks(self, nova_manager):
        bench = self
        orig_save = self.objects.Migration.save

        def save(migration, *args, **kwargs):
            # NOTE: marked before the write: a periodic task can run as soon
            # as the write yields, and must then be judged in the window.
            cycle = bench.cycle
            if (cycle is not None and
                    'status' in migration.obj_what_changed() and
                    migration.status in FINAL_STATUSES):
                cycle.status_final = True
                if bench.trigger:
                    bench.triggered.append(bench.eventlet.spawn(
                        bench._tracker_periodic, cycle.giver))
            return orig_save(migration, *args, **kwargs)

        self.case.stub_out('nova.objects.Migration.save', save)
        for name in ('finish_resize', 'confirm_resize',
                     'finish_revert_resize'):
            orig = getattr(nova_manager.ComputeManager, name)
            self.case.stub_out('nova.compute.manager.ComputeManager.' + name,
                               self._signalling(name, orig))

    def _signalling(self, name, orig):
        bench = self

        def method(manager, *args, **kwargs):
            try:
                return orig(manager, *args, **kwargs)
            finally:
                event = bench.expected.pop(name, None)
                if event is not None:
                    event.send(_now())
        method.__name__ = name
        return method

    def _expect(self, name):
        from eventlet import event
        self.expected[name] = event.Event()
        return self.expected[name]

    def _await(self, event, what):
        with self.eventlet.Timeout(WAIT_TIMEOUT,
                                   RuntimeError('timed out: %s' % what)):
            return event.wait()

    # -- the books ------------------------------------------------------------

    def usage(self, host):
        return self.case.vcpus_used(host)

    def _released(self, fname, rt, attempt, acquired, released):
        host = getattr(rt, 'host', None)
        if self.running and self.kind:
            self.hold[self.kind][fname].append((released - acquired) * 1e3)
            self.wait[self.kind][fname].append((acquired - attempt) * 1e3)
        cycle = self.cycle
        if cycle is None or not cycle.checking:
            return
        if fname == PERIODIC and cycle.done_at is not None and (
                acquired > cycle.done_at):
            cycle.synced.add(host)
        if (fname in self.sections and host == cycle.giver and
                cycle.status_final and not cycle.dropped):
            cycle.dropped = True
            left = self.usage(cycle.giver)
            if left < 0:
                cycle.problem('negative', '%s read %d after its claim drop'
                              % (host, left))
            elif left > 0:
                cycle.problem('double', '%s still counted %d after its '
                              'claim drop' % (host, left))
        self._check(cycle)

    def _check(self, cycle):
        giver, keeper = self.usage(cycle.giver), self.usage(cycle.keeper)
        v = cycle.vcpus
        for host, used in ((cycle.giver, giver), (cycle.keeper, keeper)):
            if used < 0:
                cycle.problem('negative', '%s read %d' % (host, used))
        if keeper > v:
            cycle.problem('double', '%s (keeps it) read %d' % (
                cycle.keeper, keeper))
        elif keeper < v:
            if cycle.in_handback(cycle.keeper):
                cycle.handback += 1
            else:
                cycle.problem('lost', '%s (keeps it) read %d' % (
                    cycle.keeper, keeper))
        if cycle.dropped and giver > 0:
            if cycle.in_handback(cycle.giver):
                cycle.handback += 1
            else:
                cycle.problem('double', '%s (gave it up) read %d' % (
                    cycle.giver, giver))

    # -- load -----------------------------------------------------------------

    def _periodic(self, host):
        try:
            self.case.computes[host].manager.update_available_resource(
                self.case.ctxt)
        except Exception:  # noqa: BLE001 - count, keep hammering
            self.periodic_errors += 1
        self.periodics[host] += 1

    def _tracker_periodic(self, host):
        """The periodic task from the tracker's entry point on.

        NOTE: the manager's part first reads the compute nodes from the
        database, which yields; the tracker's part reaches the lock
        without yielding, so a periodic started at the status change asks
        for the lock before the operation can drop its claim.
        """
        rt = self.case.tracker(host)
        try:
            for nodename in list(rt.compute_nodes):
                rt.update_available_resource(self.case.ctxt, nodename)
        except Exception:  # noqa: BLE001 - count, the books tell the rest
            self.periodic_errors += 1

    def _hammer(self, host):
        while self.running:
            self._periodic(host)
            self.eventlet.sleep(self.hammer_sleep)

    def _probe(self):
        while self.running:
            self.probe()
            self.eventlet.sleep(self.probe_interval)

    def _start(self, kind):
        self.kind = kind
        self.running = True
        self.threads = [self.eventlet.spawn(self._hammer, h)
                        for h in self.case.hosts]
        if self.probe_interval:
            self.threads.append(self.eventlet.spawn(self._probe))

    def _stop(self):
        self.running = False
        for thread in self.threads + self.triggered:
            thread.wait()
        self.threads, self.triggered = [], []
        self.kind = None

    # -- cycles ---------------------------------------------------------------

    def boot(self):
        self.server = self.case._boot(self.case.flavor_small, host='host1')

    def _host(self):
        instance = self.objects.Instance.get_by_uuid(self.case.ctxt,
                                                     self.server['id'])
        return instance.host

    def run_block(self, kind, count):
        if self.server is None:
            self.boot()
        self._start(kind)
        try:
            return [self._run_cycle(kind) for _i in range(count)]
        finally:
            self._stop()

    def _run_cycle(self, kind):
        api = self.case.admin_api
        server_id = self.server['id']
        source = self._host()
        (dest,) = [h for h in self.case.hosts if h != source]
        record = {'kind': kind, 'source': source}
        started = _now()
        try:
            finished = self._expect('finish_resize')
            api.post_server_action(server_id, {'migrate': None})
            migrated = self._await(finished, 'migrate to %s' % dest)
            if self._host() != dest:
                raise RuntimeError('migrated to %s, not %s' % (
                    self._host(), dest))
            if kind == 'confirm':
                cycle = _Cycle(kind, source, dest, self.vcpus)
                done = self._expect('confirm_resize')
                action = {'confirmResize': None}
            else:
                cycle = _Cycle(kind, dest, source, self.vcpus)
                done = self._expect('finish_revert_resize')
                action = {'revertResize': None}
            self.cycle = cycle
            cycle.checking = True
            op_started = _now()
            api.post_server_action(server_id, action)
            cycle.done_at = self._await(done, kind)
            record.update(
                ms=(cycle.done_at - started) * 1e3,
                migrate_ms=(migrated - started) * 1e3,
                op_ms=(cycle.done_at - op_started) * 1e3)
            self._settle(cycle)
        except Exception as e:  # noqa: BLE001 - record, start afresh
            record.update(error='%s: %s' % (type(e).__name__, e))
            self.cycle = None
            self._recover()
            return record
        finally:
            self.cycle = None
        record.update(problems=dict(cycle.problems),
                      wrong=next(iter(cycle.problems), None),
                      handback=cycle.handback)
        return record

    def _settle(self, cycle):
        """Wait for a full periodic on each host, then check once more."""
        deadline = _now() + SETTLE_TIMEOUT
        while len(cycle.synced) < len(self.case.hosts):
            if _now() > deadline:
                raise RuntimeError('no periodic task ran after the %s'
                                   % cycle.kind)
            self.eventlet.sleep(0.005)
        cycle.checking = False
        giver, keeper = self.usage(cycle.giver), self.usage(cycle.keeper)
        if (giver, keeper) != (0, cycle.vcpus):
            cycle.problem('stuck', 'books (%s=%d, %s=%d) after a full '
                          'periodic task on each host' % (
                              cycle.giver, giver, cycle.keeper, keeper))

    def _recover(self):
        """Replace a server a failed cycle left behind."""
        from nova.tests.functional.api import client
        try:
            self.case.admin_api.post_server_action(
                self.server['id'], {'os-resetState': {'state': 'active'}})
            self.case.admin_api.delete_server(self.server['id'])
            self.case._wait_gone(self.server['id'])
        except (client.OpenStackApiException, AssertionError):
            pass
        self.server = None
        self.boot()

    # -- the periodic task's cost ---------------------------------------------

    def periodic_setup(self, specs):
        """Start the scenario hosts of :mod:`.periodic`; after the cycles."""
        from tools.bench import periodic
        self.periodic = periodic.PeriodicBench(self.case, self.calls)
        return self.periodic.setup(specs)

    def periodic_run(self, name):
        return self.periodic.run(name)

    # -- samples --------------------------------------------------------------

    def samples(self):
        from nova_revert_lock import stats

        def rounded(table):
            return {kind: {name: [round(v, 4) for v in values]
                           for name, values in per.items()}
                    for kind, per in table.items()}
        return {
            'hold': rounded(self.hold),
            'wait': rounded(self.wait),
            'stats_hold': [[kind, round(ms, 4)]
                           for kind, ms in stats.hold_samples()],
            'periodics': dict(self.periodics),
            'periodic_errors': self.periodic_errors,
            'check_errors': self.tracer.errors[:20],
        }


def _nrl_bench_probe():
    """Take the tracker's lock and do nothing: measures the wait."""


def _case_class(mode, options, channel):
    from nova.tests.functional import integrated_helpers

    from nova_revert_lock.tests.functional import base

    class BenchCase(base.ExtensionFixtureMixin, base.RaceMixin,
                    integrated_helpers.ProviderUsageBaseTestCase):
        extension = (mode == 'extension')

        def runTest(self):
            bench = Bench(self, mode, options['hammer_sleep'],
                          options['probe_interval'], options['trigger'])
            bench.boot()
            channel.serve(self, bench)

    return BenchCase


class Channel(object):
    """JSON lines with the driver, on the process's original stdio."""

    def __init__(self, mode):
        self.mode = mode
        # NOTE: Nova's fixtures and logging may write to stdout; give them
        # stderr and keep the original stdout for the driver alone.
        self.out = os.fdopen(os.dup(1), 'w', 1)
        os.dup2(2, 1)
        self.inp = sys.stdin

    def send(self, **message):
        self.out.write(json.dumps(message) + '\n')
        self.out.flush()

    def receive(self):
        line = self.inp.readline()
        return json.loads(line) if line else {'cmd': 'quit'}

    def serve(self, case, bench):
        from nova_revert_lock.guard import releases
        report = case.activation_report
        # What the extension would do here, whether or not it is active:
        # 'patched' means this Nova is affected, 'already-fixed' fixed.
        nova_state = bench.nova_state
        self.send(ready=True, mode=self.mode,
                  nova_version=releases.installed_nova_version(),
                  nova_state=nova_state,
                  activation=str(report.state) if report else None,
                  python=sys.version.split()[0])
        while True:
            message = self.receive()
            cmd = message.get('cmd')
            if cmd == 'run':
                cpu, wall = time.process_time(), _now()
                records = bench.run_block(message['kind'],
                                          message['count'])
                self.send(records=records,
                          cpu_s=time.process_time() - cpu,
                          wall_s=_now() - wall)
            elif cmd == 'samples':
                self.send(samples=bench.samples())
            elif cmd == 'periodic_setup':
                self.send(**bench.periodic_setup(message['scenarios']))
            elif cmd == 'periodic':
                self.send(**bench.periodic_run(message['scenario']))
            else:
                self.send(bye=True)
                return


def main(argv=None):
    import argparse
    import unittest

    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('mode', choices=MODES)
    parser.add_argument('--hammer-sleep', type=float, default=0.002)
    parser.add_argument('--probe-interval', type=float, default=0.02)
    parser.add_argument('--no-trigger', dest='trigger',
                        action='store_false')
    args = parser.parse_args(argv)
    channel = Channel(args.mode)
    options = {'hammer_sleep': args.hammer_sleep,
               'probe_interval': args.probe_interval,
               'trigger': args.trigger}
    case = _case_class(args.mode, options, channel)()
    with open(os.devnull, 'w') as devnull:
        result = unittest.TextTestRunner(stream=devnull, verbosity=0).run(
            case)
    if not result.wasSuccessful():
        traces = [trace for _t, trace in result.errors + result.failures]
        for trace in traces:
            sys.stderr.write(trace)
        channel.send(failed=True, error=traces[-1].splitlines()[-1]
                     if traces else 'unknown')
        return 1
    return 0


if __name__ == '__main__':
    sys.exit(main())
