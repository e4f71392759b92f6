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

"""Drive the confirm and revert cycles of one mode, under load.

One job: run blocks of cycles inside a started Nova test case and keep
their timings. A cycle cold-migrates the one server to the other host,
then confirms or reverts. Throughout a block every compute is hammered
by its periodic task (one greenthread per compute calling
``update_available_resource`` in a loop, with a tiny sleep), and every
call to Nova's database API or to placement yields to other greenthreads
when it returns, as the green sockets of a real deployment do. No hook
targets the window: the periodic tasks find it by themselves, or not
(but for the one periodic task started at the status change, on the host
giving the instance up, unless ``trigger`` is off).

:mod:`.locktrace` reports each section under the tracker's lock; the
cycles keep the time each held and waited for it, and hand each release
to :mod:`.books`, which judges the cycle.
"""

import collections

from tools.bench import books
from tools.bench import locktrace

MODES = ('plain', 'extension', 'upstream')
#: The periodic task's modes: the three above, and the extension on
#: upstream's fixed release (where only the fixes beyond upstream's
#: apply): its cost against that release plain.
UPSTREAM_EXT = 'upstream-ext'
PERIODIC_MODES = MODES + (UPSTREAM_EXT,)
#: Runs of an extension mode's process with Nova's own tracker class in
#: place of the composed one: the extension's code against Nova's in one
#: process (the same heap, data and interpreter).
SAME_PROCESS = collections.OrderedDict([
    ('extension', 'extension@nova-rt'),
    (UPSTREAM_EXT, 'upstream-ext@nova-rt')])
KINDS = ('confirm', 'revert')

#: Lock sections timed for the lock-hold distribution, per mode: plain
#: Nova drops the claim alone under the lock; both fixes set the status,
#: drop the claim and update the instance in one section.
DROP_SECTIONS = {
    'plain': ('drop_move_claim',),
    'extension': ('drop_move_claim_at_source', 'drop_move_claim_at_dest'),
    'upstream': ('drop_move_claim_at_source', 'drop_move_claim_at_dest'),
    UPSTREAM_EXT: ('drop_move_claim_at_source', 'drop_move_claim_at_dest'),
}
#: Sections whose wait for the lock is the cost to other work on the host.
CLAIMS = ('instance_claim', 'resize_claim', 'rebuild_claim')
PROBE = '_nrl_bench_probe'

WAIT_TIMEOUT = 60
SETTLE_TIMEOUT = 30


_now = locktrace.now


class Bench(object):
    """The cycles of one mode, run inside a started Nova test case."""

    def __init__(self, case, mode, hammer_sleep, probe_interval,
                 trigger=True):
        import eventlet
        from nova import objects

        from nova_revert_lock import fixes
        from nova_revert_lock import locking
        # NOTE: imported here, in the mode process: the driver imports
        # this module too, and importing the test package monkey patches.
        from nova_revert_lock.tests.functional import hooks

        self.eventlet = eventlet
        self.hooks = hooks
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
        self.probe = locking.tracker_lock(fixes.LOCK_REFS).synchronized()(
            _nrl_bench_probe)

        # NOTE: what the guard says of this Nova, read before the hooks
        # below replace some of the functions it checks: with them in
        # place it sees code it does not know.
        from nova_revert_lock import activation
        self.nova_state = str(activation.build().state)
        self.books = books.Books(self.usage, self.sections)
        self.tracer = locktrace.LockTracer(
            locking.tracker_lock(fixes.LOCK_REFS).name, self._released)
        case.stub_out('oslo_concurrency.lockutils.lock', self.tracer.lock)
        self._install_yields()
        self._install_hooks()

    # -- instrumentation ------------------------------------------------------

    def _install_yields(self):
        """Yield after each database and placement call, as green I/O does.

        NOTE: after the call, not before: the call's transaction is over
        when other greenthreads run, as with one DB connection per
        greenthread in a real deployment; sqlite's single in-memory
        connection must not see two transactions interleaved.
        """
        import inspect

        from nova.scheduler.client import report
        try:
            # the main database's API from 2023.1 (nova.db.api is the
            # API database's package there)
            from nova.db.main import api as db_api
        except ImportError:
            from nova.db import api as db_api

        sleep = self.eventlet.sleep
        calls = self.calls

        def yielding(kind, func):
            # NOTE: counted by kind and by function, so that the periodic
            # task's runs can tell which calls a mode adds.
            name = '%s.%s' % (kind, func.__name__)

            def call(original, *args, **kwargs):
                try:
                    return original(*args, **kwargs)
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
                    self.hooks.wrap(self.case,
                                    '%s.%s' % (db_api.__name__, name),
                                    yielding('db', func))
        for name in ('get', 'post', 'put', 'delete'):
            if hasattr(report.SchedulerReportClient, name):
                self.hooks.wrap(
                    self.case,
                    'nova.scheduler.client.report.SchedulerReportClient.' +
                    name, yielding('placement',
                                   getattr(report.SchedulerReportClient,
                                           name)))

    def _install_hooks(self):
        bench = self
        # NOTE: what the package's own counters record of each section
        # (the status endpoint's figures), kept here as a cross-check of
        # the holds the tracer measures.
        self.counted = []

        def record(orig_record, counters, kind, held_ms, failed):
            bench.counted.append((kind, held_ms))
            return orig_record(counters, kind, held_ms, failed)

        self.hooks.wrap(self.case, 'nova_revert_lock.sections._Counters.'
                        'record', record)

        def save(orig_save, migration, *args, **kwargs):
            # NOTE: marked before the write: a periodic task can run as soon
            # as the write yields, and must then be judged in the window.
            cycle = bench.cycle
            if (cycle is not None and
                    'status' in migration.obj_what_changed() and
                    migration.status in books.FINAL_STATUSES):
                cycle.status_final = True
                if bench.trigger:
                    bench.triggered.append(bench.eventlet.spawn(
                        bench._tracker_periodic, cycle.giver))
            return orig_save(migration, *args, **kwargs)

        self.hooks.wrap(self.case, 'nova.objects.Migration.save', save)
        for name in ('finish_resize', 'confirm_resize',
                     'finish_revert_resize'):
            self.hooks.wrap(self.case,
                            'nova.compute.manager.ComputeManager.' + name,
                            self._signalling(name))

    def _signalling(self, name):
        bench = self

        def method(orig, manager, *args, **kwargs):
            try:
                return orig(manager, *args, **kwargs)
            finally:
                event = bench.expected.pop(name, None)
                if event is not None:
                    event.send(_now())
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
        self.books.released(cycle, fname, host, acquired)

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
                cycle = books.Cycle(kind, source, dest, self.vcpus)
                done = self._expect('confirm_resize')
                action = {'confirmResize': None}
            else:
                cycle = books.Cycle(kind, dest, source, self.vcpus)
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
        self.books.settled(cycle)

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

    def periodic_run(self, name, nova_tracker=False, collect=False):
        return self.periodic.run(name, nova_tracker, collect)

    # -- samples --------------------------------------------------------------

    def samples(self):
        def rounded(table):
            return {kind: {name: [round(v, 4) for v in values]
                           for name, values in per.items()}
                    for kind, per in table.items()}
        return {
            'hold': rounded(self.hold),
            'wait': rounded(self.wait),
            'stats_hold': [[kind, round(ms, 4)]
                           for kind, ms in self.counted],
            'periodics': dict(self.periodics),
            'periodic_errors': self.periodic_errors,
            'check_errors': self.tracer.errors[:20],
        }


def _nrl_bench_probe():
    """Take the tracker's lock and do nothing: measures the wait."""
