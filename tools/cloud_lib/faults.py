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

"""Faults in the middle of a move, then judged recovered and repaired.

    python faults.py --state-dir DIR --mode MODE --out FILE [--repeat N]

Runs inside the cloud's virtualenv, against the computes as they run
(``tools/cloud faults`` switches them to each mode first). Each run
starts on a cloud at rest that holds nothing it should not: what an
earlier run or test left (an allocation of no server, books off what
the servers hold) is recorded as carried in, repaired, and never judged
as the run's. Each scenario
(``SCENARIOS``) moves a server between two computes, arms a point
(:mod:`fault_hook`) on one of them and, when the move reaches it:

* kills that compute (SIGKILL) and starts it again in the same mode;
* or holds it there while RabbitMQ or MariaDB is stopped (``tools/cloud
  infra``), lets it go on into the outage, starts the service again;
* or holds it there while the move's other compute is cut off from the
  broker (``tools/cloud partition``: its packets dropped) past the RPC
  time-out, lets it go on, heals the partition.

Once the services are back and the periodic tasks have run, it judges
what the fault left:

* the books: every compute's usage (os-hypervisors) and placement's
  against what the servers at rest hold, and any negative reading;
* placement: an allocation still held by a migration that is over
  (leaked), none held by a server that exists (missing);
* the migration: in a final status or not (stuck);
* the server: ERROR, or a state nothing will clear (stuck).

Then it repairs with the operator's documented commands (the server's
state reset, ``nova-manage placement audit --delete``, a dead
migration's allocations deleted) and judges again; the server moves
again (a judged resize and confirm); a server booted on each host the
fault touched reaches ACTIVE (its claim takes the tracker's lock: a lock
left held would stop it). It cleans up and writes one object per
scenario run to FILE.
"""

import argparse
import json
import os
import re
import subprocess
import sys
import time

from cloud_lib import bootstrap
from cloud_lib.kill_points import KILL_POINTS
from cloud_lib.kill_points import random_kills
from cloud_lib import pinning
from cloud_lib import rest
from cloud_lib import soak as soak_mod
from nova_revert_lock.audit.damage import MOVE_TASK_STATES

#: name, the action, the host the point is armed on, what arms it, and
#: what is done while that host waits at the point: a service stopped
#: (``rabbitmq``, ``mariadb``), the move's other host cut off from the
#: broker (``partition``), or None: the armed host is killed there
SCENARIOS = (
    ('confirm-source-after-status', 'confirm', 'source',
     {'point': 'status-saved', 'status': 'confirmed'}, None),
    ('revert-dest-after-status', 'revert', 'dest',
     {'point': 'status-saved', 'status': 'reverted'}, None),
    ('revert-source-at-finish', 'revert', 'source',
     {'point': 'finish-revert'}, None),
    ('revert-broker-restart', 'revert', 'dest',
     {'point': 'status-saved', 'status': 'reverted', 'action': 'pause'},
     'rabbitmq'),
    ('confirm-broker-restart', 'confirm', 'source',
     {'point': 'status-saved', 'status': 'confirmed', 'action': 'pause'},
     'rabbitmq'),
    ('confirm-db-restart', 'confirm', 'source',
     {'point': 'status-saving', 'status': 'confirmed', 'action': 'pause'},
     'mariadb'),
    # NOTE: the destination of an aborted live migration killed as it
    # takes the source's drop_move_claim_at_destination call off the
    # queue (acknowledged: the restarted process never sees it).
    ('live-rollback-dest-killed', 'live-abort', 'dest',
     {'point': 'dispatch', 'method': 'drop_move_claim_at_destination'},
     None),
    # NOTE: the source of an aborted live migration holds at its call of
    # drop_move_claim_at_destination while the destination is cut off,
    # then sends it: the call times out (and the retry of the rollback
    # Nova makes then sends it again) before the destination is back.
    ('live-rollback-dest-cut-off', 'live-abort', 'source',
     {'point': 'rpc-call', 'method': 'drop_move_claim_at_destination',
      'action': 'pause'}, 'partition'),
)
#: how long the broker or the database stays down
OUTAGE_S = 20
#: oslo.messaging's rpc_response_timeout (the cloud keeps the default)
RPC_TIMEOUT_S = 60
#: how long a compute stays cut off: past the RPC time-out
CUT_S = RPC_TIMEOUT_S + 20
#: how long a live migration takes to show as running
LIVE_START_S = 60
#: how long its rollback takes to reach a point (the source's retry of
#: the rollback comes after an RPC time-out)
LIVE_FIRE_S = 2 * RPC_TIMEOUT_S + 30

ACTIONS = {'confirm': 'confirmResize', 'revert': 'revertResize'}
RESIZE = 'resize'

LIVE = 'live-abort'
FINAL = ('confirmed', 'reverted', 'error', 'failed', 'done', 'completed',
         'cancelled')
TOP = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))
#: how long the restarted compute gets to set its books right
RECOVER_S = 30
#: the same after an outage (every service reconnects first)
RECOVER_OUTAGE_S = 120
#: how long a restarted compute may take to run its first periodic
#: task: periodic_fuzzy_delay (Nova's default, 60 s), then one run
FIRST_PERIODIC_S = 75
#: after a partition: the compute's heartbeat notices, it reconnects
#: (oslo.messaging backs off up to 30 s), and the source's second
#: rollback call may still be waiting out its time-out
RECOVER_PARTITION_S = 180


class NotRun(Exception):
    """The scenario could not be set up; said why, never passed."""


class Runner(object):

    def __init__(self, state_dir, mode):
        self.state_dir = state_dir
        self.mode = mode
        self.c = rest.Clients(rest.env_clouds_yaml())
        images = self.c.image.get('/v2/images', params={
            'name': bootstrap.IMAGE_NAME}).json()['images']
        # NOTE: on libvirt computes, the pinned CPUs' books and the guests
        self.soak = soak_mod.Soak(self.c, images[0]['id'],
                                  pins=pinning.Reader.from_env())
        self.manage = os.path.join(os.path.dirname(sys.executable),
                                   'nova-manage')

    # -- the compute -------------------------------------------------------

    def _dir(self, host):
        return os.path.join(self.state_dir, 'computes', host)

    def arm(self, host, spec):
        fired = os.path.join(self._dir(host), 'fault.fired')
        if os.path.exists(fired):
            os.unlink(fired)
        with open(os.path.join(self._dir(host), 'fault.json'), 'w') as f:
            json.dump(spec, f)

    def disarm(self, host):
        try:
            os.unlink(os.path.join(self._dir(host), 'fault.json'))
        except OSError:
            pass

    def wait_fired(self, host, timeout=90):
        path = os.path.join(self._dir(host), 'fault.fired')
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if os.path.exists(path):
                with open(path) as f:
                    return json.load(f)
            time.sleep(0.2)
        return None

    def wait_any(self, hosts, timeout=90):
        """(host, what fired) for the first of ``hosts`` that fired."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for host in hosts:
                path = os.path.join(self._dir(host), 'fault.fired')
                if os.path.exists(path):
                    with open(path) as f:
                        return host, json.load(f)
            time.sleep(0.2)
        return None, None

    @staticmethod
    def wait_dead(pid, timeout):
        """Has the process ``pid`` gone within ``timeout`` seconds?"""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                with open('/proc/%d/stat' % pid) as f:
                    # NOTE: a zombie is dead (no init reaps it here)
                    if f.read().rsplit(')', 1)[1].split()[0] == 'Z':
                        return True
            except (OSError, TypeError, IndexError):
                return True
            time.sleep(0.2)
        return False

    def restart(self, host):
        started = time.monotonic()
        proc = subprocess.run(
            ['bash', os.path.join(TOP, 'tools', 'cloud'), '--state-dir',
             self.state_dir, 'restart-compute', host, self.mode],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
            universal_newlines=True, timeout=300)
        if proc.returncode != 0:
            raise NotRun('%s did not start again: %s' % (
                host, proc.stdout.strip()[-500:]))
        return round(time.monotonic() - started, 1)

    def cloud(self, *args):
        proc = subprocess.run(
            ['bash', os.path.join(TOP, 'tools', 'cloud'), '--state-dir',
             self.state_dir] + list(args),
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
            universal_newlines=True, timeout=300)
        return proc.returncode, proc.stdout.strip()

    def hold(self, paused, start, end, seconds, what):
        """Run ``start``, let ``paused`` go on, ``end`` after ``seconds``.

        ``start`` and ``end`` are ``tools/cloud`` arguments; the paused
        host is let go whether ``start`` worked or not (it must not wait
        out PAUSE_S), and ``end`` runs whatever happened meanwhile.
        """
        started = time.monotonic()
        rc, out = self.cloud(*start)
        try:
            if rc != 0:
                raise NotRun('%s: %s' % (what, out[-500:]))
        finally:
            with open(os.path.join(self._dir(paused), 'fault.resume'),
                      'w') as f:
                f.write('go\n')
        try:
            time.sleep(seconds)
        finally:
            rc, out = self.cloud(*end)
        if rc != 0:
            raise NotRun('%s, undoing it failed: %s' % (what, out[-500:]))
        return round(time.monotonic() - started, 1)

    def outage(self, host, service):
        """Stop ``service``, let ``host`` go on into it, start it again."""
        return self.hold(host, ('infra', 'stop', service),
                         ('infra', 'start', service), OUTAGE_S,
                         '%s stopped' % service)

    def partition(self, paused, target):
        """Cut ``target`` off, let ``paused`` go on, heal after CUT_S."""
        return self.hold(paused, ('partition', 'cut', target),
                         ('partition', 'heal', target), CUT_S,
                         '%s cut off' % target)

    def live_migrate_and_abort(self, sid):
        """Start a live migration of ``sid``, abort it once running.

        :returns: the destination host
        """
        self.c.compute.post('/servers/%s/action' % sid, json={
            'os-migrateLive': {'host': None, 'block_migration': False}},
            microversion='2.53')
        # NOTE: the cloud's fake driver holds a live migration for up to
        # 5 s, as a real one copying memory would, and ends it with the
        # rollback when it is aborted meanwhile.
        deadline = time.monotonic() + LIVE_START_S
        mig = None
        while time.monotonic() < deadline:
            migs = [m for m in self.migrations(sid)
                    if m.get('migration_type') == 'live-migration']
            mig = migs[-1] if migs else None
            if mig and mig['status'] == 'running':
                break
            if mig and mig['status'] in FINAL:
                raise NotRun('the live migration ended (%s) before it '
                             'could be aborted' % mig['status'])
            time.sleep(0.2)
        else:
            raise NotRun('no running live migration: %s' % (
                mig and mig['status']))
        self.c.compute.delete('/servers/%s/migrations/%s' % (
            sid, mig['id']), microversion='2.53')
        return mig['dest_compute']

    # -- reading -----------------------------------------------------------

    def migrations(self, sid):
        return sorted(self.c.compute.get(
            '/os-migrations', params={'instance_uuid': sid},
            microversion='2.59').json()['migrations'],
            key=lambda m: m['id'])

    # -- one scenario ------------------------------------------------------

    def leftovers(self, wait_s):
        """What the cloud holds at rest that it should not, or [].

        An allocation whose consumer is not a server (a migration that
        is over, or one whose server is gone), and books (usage, then
        placement) that differ from what the servers hold, for up to
        ``wait_s`` while the periodic tasks catch up.
        """
        deadline = time.monotonic() + wait_s
        while True:
            left = []
            servers = {s['id'] for s in self.soak.servers()}
            for host, rp in sorted(self.soak.providers().items()):
                held = self.c.placement.get(
                    '/resource_providers/%s/allocations' % rp).json()[
                        'allocations']
                left += ['an allocation on %s of %s, not a server' % (
                    host, consumer) for consumer in sorted(held)
                    if consumer not in servers]
            expected = self.soak.at_rest()
            if expected is None:
                left.append('a server is in a task state')
            else:
                for books, reading in (('usage', self.soak.hypervisors()),
                                       ('placement', self.soak.placement())):
                    left += ['%s of %s is %s, its servers hold %s' % (
                        books, h, list(reading.get(h, ())), v)
                        for h, v in sorted(expected.items())
                        if tuple(reading.get(h, ())) != tuple(v)]
            if not left or time.monotonic() > deadline:
                return left
            time.sleep(1)

    def start_clean(self, record):
        """Start the run on a cloud that holds nothing it should not.

        What an earlier run (or an earlier test on the same cloud) left
        would otherwise be judged as this run's: it is recorded
        (``carried_in``) and repaired as an operator would (the
        allocations of consumers that are not servers deleted), and the
        run does not start if that does not set the books right.
        """
        # NOTE: a compute restarted by the run before runs its first
        # periodic task up to periodic_fuzzy_delay (60 s, Nova's default)
        # after its start; until then a server deleted there since (one
        # it gained by a move) stays in its usage: not a leftover yet
        left = self.leftovers(FIRST_PERIODIC_S)
        if not left:
            return
        record['carried_in'] = left
        servers = {s['id'] for s in self.soak.servers()}
        for rp in self.soak.providers().values():
            held = self.c.placement.get(
                '/resource_providers/%s/allocations' % rp).json()[
                    'allocations']
            for consumer in held:
                if consumer not in servers:
                    self.c.placement.delete('/allocations/%s' % consumer)
        left = self.leftovers(RECOVER_S)
        if left:
            raise NotRun('the cloud was not clean before the run, nor '
                         'after its repair: %s' % '; '.join(left))

    def run(self, name, action, victim_role, spec, outage, n):
        hosts = sorted(self.soak.providers())
        source = hosts[n % len(hosts)]
        record = {'scenario': name, 'mode': self.mode, 'run': n,
                  'source': source}
        try:
            self.start_clean(record)
        except NotRun as e:
            record['not_run'] = str(e)
            return record
        sid = self.soak.boot('nrl-fault-%s-%d' % (name, n), source)
        record['server'] = sid
        try:
            self.soak.wait(sid, 'ACTIVE')
            if action == LIVE and self.soak.pins is not None:
                raise NotRun('the libvirt computes of this cloud do not '
                             'live-migrate between their daemons; the '
                             'fake driver runs this scenario')
            if action == LIVE:
                # NOTE: armed before the move (only its rollback reaches
                # the points named); the destination is the scheduler's,
                # so every other host is armed and the others disarmed.
                armed = [source] if victim_role == 'source' else [
                    h for h in hosts if h != source]
                for h in armed:
                    self.arm(h, spec)
                try:
                    dest = record['dest'] = self.live_migrate_and_abort(sid)
                    victim = source if victim_role == 'source' else dest
                    fired = self.wait_fired(victim, timeout=LIVE_FIRE_S)
                finally:
                    for h in armed:
                        self.disarm(h)
            elif action == RESIZE:
                # NOTE: as for a live migration: the scheduler picks the
                # destination, so every other host is armed.
                armed = [source] if victim_role == 'source' else [
                    h for h in hosts if h != source]
                for h in armed:
                    self.arm(h, spec)
                try:
                    self.soak.act(sid, {'resize': {'flavorRef': 'nrl-2'}})
                    victim, fired = self.wait_any(armed)
                finally:
                    for h in armed:
                        self.disarm(h)
                migs = self.migrations(sid)
                dest = record['dest'] = (
                    migs[-1]['dest_compute'] if migs else None)
                if victim is None:
                    victim = armed[0]
            else:
                self.soak.act(sid, {'resize': {'flavorRef': 'nrl-2'}})
                s = self.soak.wait(sid, 'VERIFY_RESIZE')
                dest = record['dest'] = s['OS-EXT-SRV-ATTR:host']
                victim = source if victim_role == 'source' else dest
                self.arm(victim, spec)
                try:
                    self.soak.act(sid, {ACTIONS[action]: None})
                    fired = self.wait_fired(victim)
                finally:
                    self.disarm(victim)
            record['killed'] = victim
            if fired is None:
                raise NotRun('the kill point %s was never reached on %s'
                             % (spec, victim))
            record['fired'] = fired.get('what')
            if spec.get('delay') and spec.get('action', 'kill') == 'kill':
                record['delay'] = spec['delay']
                # NOTE: the restart would stop a process the delayed kill
                # missed, more gently: that is not the fault asked for
                if not self.wait_dead(fired.get('pid'),
                                      spec['delay'] + 15):
                    raise NotRun('%s was not killed %.2f s after %s' % (
                        victim, spec['delay'], fired.get('what')))
            recover = RECOVER_OUTAGE_S
            if outage == 'partition':
                other = dest if victim == source else source
                record['outage'] = 'partition of %s' % other
                record['outage_s'] = self.partition(victim, other)
                recover = RECOVER_PARTITION_S
            elif outage:
                record['outage'] = outage
                record['outage_s'] = self.outage(victim, outage)
            else:
                record['restart_s'] = self.restart(victim)
                # NOTE: after a kill in a live migration's rollback the
                # source still waits out its call to the killed host
                recover = RECOVER_PARTITION_S if action == LIVE else (
                    RECOVER_S)
            if action == RESIZE:
                self.user_step(record, sid)
            self.judge(record, sid, recover)
            self.damage_report(record, sid)
            self.repair(record, sid)
            # NOTE: the server moves again (a judged resize and confirm)
            move = self.soak.cycle(sid, 'confirm')
            record['server_usable'] = move['error'] is None
            record['usable_move'] = {k: move.get(k) for k in (
                'error', 'wrong', 'source', 'dest', 'seconds')}
            # NOTE: the lock of every host the fault touched is free
            touched = {victim, dest} if outage == 'partition' else {victim}
            record['next_move_ok'] = all(self.probe(h)
                                         for h in sorted(touched))
        except (NotRun, soak_mod.CycleError) as e:
            record['not_run'] = str(e)
        finally:
            self.clean(sid)
        return record

    def user_step(self, record, sid):
        """After a kill in a resize: what its user does next.

        A resize the restart let finish (``VERIFY_RESIZE``, the migration
        ``finished``) is confirmed, as its user would, and the confirm
        judged with the rest; a resize left in a task state is judged as
        it is.
        """
        deadline = time.monotonic() + RECOVER_S
        while True:
            s = self.soak.server(sid)
            if not s.get('OS-EXT-STS:task_state') or (
                    time.monotonic() > deadline):
                break
            time.sleep(1)
        migs = self.migrations(sid)
        if (s['status'] == 'VERIFY_RESIZE' and migs and
                migs[-1]['status'] == 'finished'):
            self.soak.act(sid, {'confirmResize': None})
            record['user_step'] = 'confirm'

    def judge(self, record, sid, recover_s, prefix=''):
        """What the fault left, once the books had ``recover_s`` to heal.

        The readings go into ``record`` (with ``prefix``: after repair).
        """
        negative = []
        expected, books = None, None
        started = time.monotonic()
        while True:
            hyp, plc = self.soak.hypervisors(), self.soak.placement()
            negative.extend({'host': h, 'reading': list(v)}
                            for h, v in hyp.items() if min(v) < 0)
            expected = self.soak.at_rest()
            placed = expected is not None and all(
                tuple(plc.get(h, ())) == tuple(v)
                for h, v in expected.items())
            right = placed and all(tuple(hyp.get(h, ())) == tuple(v)
                                   for h, v in expected.items())
            books = {'hypervisors': {h: list(v) for h, v in hyp.items()},
                     'placement': {h: list(v) for h, v in plc.items()}}
            # NOTE: placement right and usage not: a restarted compute
            # may not have run its first periodic task yet
            waited = time.monotonic() - started
            if right or waited > (max(recover_s, FIRST_PERIODIC_S)
                                  if placed else recover_s):
                break
            time.sleep(1)
        s = self.soak.server(sid)
        out = {}
        out['pins_wrong'], out['pins_shared'] = self.pins()
        out['server_state'] = [s['status'], s.get('OS-EXT-STS:task_state')]
        out['server_in_error'] = s['status'] == 'ERROR'
        if s['status'] == 'ERROR':
            out['fault'] = (s.get('fault') or {}).get('message')
        out['books_judged'] = expected is not None
        out['books_wrong'] = expected is not None and not right
        if out['books_wrong'] or expected is None:
            out['books'] = books
            out['expected'] = expected
        out['negative'] = negative[:5]
        migrations = self.migrations(sid)
        out['migrations'] = [m['status'] for m in migrations]
        out['stuck_migrations'] = [m['uuid'] for m in migrations
                                   if m['status'] not in FINAL]
        out['leaked'] = [m['uuid'] for m in migrations
                         if m['status'] in FINAL and
                         self.soak.allocations(m['uuid'])]
        out['held_by_stuck'] = [m['uuid'] for m in migrations
                                if m['status'] not in FINAL and
                                self.soak.allocations(m['uuid'])]
        out['missing'] = not self.soak.allocations(sid)
        # NOTE: VERIFY_RESIZE is a state the user leaves (confirm or
        # revert) only while the migration is `finished`; past that the
        # server is as stuck as one left in a task state.
        out['stuck_server'] = bool(s.get('OS-EXT-STS:task_state')) or (
            s['status'] == 'VERIFY_RESIZE' and
            'finished' not in out['migrations'])
        for k, v in out.items():
            record[prefix + k] = v
        return out

    def pins(self):
        """On libvirt computes: (NUMA books wrong, CPUs shared).

        The books are Nova's pinned CPUs of each compute node; they must
        equal the CPUs its guests are pinned to (given the usage books'
        settle time), and no two running guests may share one.
        """
        if self.soak.pins is None:
            return [], []
        deadline = time.monotonic() + soak_mod.SETTLE
        while True:
            try:
                books, shared = pinning.judge(self.soak.pins.reading())
            except Exception as e:  # noqa: BLE001 - judged, not raised
                books, shared = ['pinning not read: %s' % e], []
            if not books or time.monotonic() > deadline:
                return books, shared
            time.sleep(0.5)

    def repair(self, record, sid):
        """The documented operator steps, in order; then judged again.

        Only what an operator runs (reliability.rst): the server's
        state reset when it is stuck or in ERROR, placement's own audit for
        allocations of migrations that are over, the allocations of a
        migration no service will finish deleted by consumer.
        """
        steps = []
        if record['stuck_server'] or record['server_in_error']:
            self.c.compute.post('/servers/%s/action' % sid, json={
                'os-resetState': {'state': 'active'}})
            steps.append('openstack server set --state active %s' % sid)
        if record['leaked'] and self.has_audit():
            rc, out = self.audit_delete()
            # NOTE: 4: orphaned allocations found and deleted; 0: none
            record['audit_rc'] = rc
            steps.append('nova-manage placement audit --delete')
        for uuid in record['leaked'] + record['held_by_stuck']:
            if self.soak.allocations(uuid):
                self.c.placement.delete('/allocations/%s' % uuid)
                steps.append('openstack resource provider allocation '
                             'delete %s' % uuid)
        if self.misplaced(sid):
            # NOTE: a resize stopped before the source handed the record
            # over: the server's own allocation is the destination's
            self.c.placement.delete('/allocations/%s' % sid)
            steps.append('openstack resource provider allocation '
                         'delete %s' % sid)
            rc, out = self.heal(sid)
            record['heal_rc'] = rc
            steps.append('nova-manage placement heal_allocations '
                         '--instance %s' % sid)
        record['repair'] = steps
        if steps:
            self.judge(record, sid, RECOVER_S, prefix='after_repair_')

    def damage_report(self, record, sid):
        """``nova-revert-lock damage`` on what the fault left.

        Whatever the runner judged as damage, the report must name too:
        a server in ERROR with one of the family's symptoms, an
        allocation of a migration that is over, a migration stuck (older
        than a second here) while its server shows it, a dedicated CPU
        two guests share.
        """
        proc = subprocess.run(
            [os.path.join(os.path.dirname(sys.executable),
                          'nova-revert-lock'), 'damage', '--config-file',
             os.path.join(self.state_dir, 'etc', 'nova.conf'),
             '--migration-age', '1', '--timeout', '5', '--format', 'json'],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            universal_newlines=True, timeout=600)
        try:
            found = json.loads(proc.stdout)['findings']
        except (ValueError, KeyError):
            record['damage'] = {'rc': proc.returncode,
                                'error': proc.stderr[-300:]}
            record['damage_missed'] = ['the report failed']
            return
        named = {(f['kind'], f['server']) for f in found} | {
            (f['kind'], f['migration']) for f in found}
        # NOTE: a stuck migration whose server is at rest is history the
        # report leaves out (nothing ends it; it holds nothing by itself)
        status, task_state = record['server_state']
        # NOTE: and one whose server is at rest again but which still
        # holds an allocation: a resize the source's restart rolled back
        # before it handed the server over (the audit keeps both)
        expected = [('orphaned-allocation', uuid)
                    for uuid in record['leaked']] + [
            ('stale-migration', uuid)
            for uuid in record['stuck_migrations']
            if task_state or status == 'VERIFY_RESIZE' or
            uuid in record['held_by_stuck']]
        if (task_state in MOVE_TASK_STATES or status == 'VERIFY_RESIZE') and (
                not record['stuck_migrations']):
            # a move that failed half-way and left its task state set, or
            # a resized server whose move is over (neither confirmed nor
            # reverted by the API any more)
            expected.append(('server-stuck-in-move', sid))
        if record['server_in_error'] and re.search(
                'CPU(Unp|P)inningInvalid|subset of (pinned|free) CPU set',
                record.get('fault') or ''):
            expected.append(('server-in-error', sid))
        missed = ['%s %s' % e for e in expected if e not in named]
        if record.get('pins_shared') and not any(
                f['kind'] == 'shared-pcpu' for f in found):
            missed.append('shared-pcpu')
        record['damage'] = {'rc': proc.returncode, 'kinds': sorted(
            {f['kind'] for f in found})}
        record['damage_missed'] = missed

    def misplaced(self, sid):
        """Is the server's allocation off its host, or of another flavor?"""
        s = self.soak.server(sid)
        host = self.soak.providers().get(s.get('OS-EXT-SRV-ATTR:host'))
        held = self.soak.allocations(sid)
        if not held:
            return False
        if set(held) != {host}:
            return True
        res = held[host]['resources']
        return (res.get('VCPU', 0) + res.get('PCPU', 0),
                res.get('MEMORY_MB', 0)) != (s['flavor']['vcpus'],
                                             s['flavor']['ram'])

    def heal(self, sid):
        proc = subprocess.run(
            [self.manage, '--config-file', os.path.join(
                self.state_dir, 'etc', 'nova.conf'), 'placement',
             'heal_allocations', '--instance', sid, '--verbose'],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
            universal_newlines=True, timeout=300)
        return proc.returncode, proc.stdout[-300:]

    def has_audit(self):
        if not hasattr(self, '_audit'):
            rc = subprocess.call(
                [self.manage, 'placement', 'audit', '--help'],
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            self._audit = rc == 0
        return self._audit

    def audit_delete(self):
        proc = subprocess.run(
            [self.manage, '--config-file', os.path.join(
                self.state_dir, 'etc', 'nova.conf'), 'placement', 'audit',
             '--delete', '--verbose'],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
            universal_newlines=True, timeout=300)
        return proc.returncode, proc.stdout

    def probe(self, host):
        """A server booted on ``host`` reaches ACTIVE (the lock is free)."""
        pid = self.soak.boot('nrl-fault-probe', host)
        try:
            self.soak.wait(pid, 'ACTIVE')
            return True
        except soak_mod.CycleError:
            return False
        finally:
            self.clean(pid)

    def clean(self, sid):
        try:
            s = self.soak.server(sid)
            if s.get('OS-EXT-STS:task_state') or s['status'] not in (
                    'ACTIVE', 'ERROR', 'SHUTOFF', 'VERIFY_RESIZE'):
                # NOTE: the documented way out of a stuck move
                self.c.compute.post('/servers/%s/action' % sid, json={
                    'os-resetState': {'state': 'error'}})
        except Exception:  # noqa: BLE001 - best effort
            pass
        self.soak.delete([sid])


def _books(rec, prefix=''):
    if rec[prefix + 'books_wrong']:
        return 'wrong'
    return 'right' if rec[prefix + 'books_judged'] else 'not at rest'


def summary(rec):
    """One line of what a run left, and what the repair left."""
    line = ('server %s, migrations %s, books %s, leaked %d, stuck %d' % (
        '/'.join(str(x) for x in rec['server_state']),
        ','.join(rec['migrations']), _books(rec), len(rec['leaked']),
        len(rec['stuck_migrations'])))
    if rec['repair']:
        line += '; repaired in %d steps: books %s, leaked %d' % (
            len(rec['repair']), _books(rec, 'after_repair_'),
            len(rec['after_repair_leaked']) + len(
                rec['after_repair_held_by_stuck']))
    line += '; server moves again %s; next move on the host %s' % (
        'ok' if rec['server_usable'] else 'FAILED',
        'ok' if rec['next_move_ok'] else 'FAILED')
    if rec.get('carried_in'):
        line += ' (found before the run and repaired: %s)' % '; '.join(
            rec['carried_in'])
    return line


def main(argv=None):
    parser = argparse.ArgumentParser()
    parser.add_argument('--state-dir', required=True)
    parser.add_argument('--mode', required=True,
                        choices=('wrapper', 'plain'))
    parser.add_argument('--out', required=True)
    parser.add_argument('--repeat', type=int, default=2)
    parser.add_argument('--only', action='append', default=[],
                        help='run only this scenario (repeatable)')
    parser.add_argument('--random', type=int, default=0, metavar='N',
                        help='instead: N kills at random points of '
                             'resizes, confirms and reverts')
    parser.add_argument('--sweep', action='store_true',
                        help='instead: one kill at each of those points')
    parser.add_argument('--seed', type=int, default=0,
                        help='the random kills\' seed (default 0)')
    args = parser.parse_args(argv)
    runner = Runner(args.state_dir, args.mode)
    records = []
    if args.sweep:
        runs = [(n, ('kill-%s' % name, action, role, spec, None))
                for n, (name, action, role, spec) in enumerate(KILL_POINTS)
                if not args.only or 'kill-%s' % name in args.only]
    elif args.random:
        runs = [(n, sc) for n, sc in enumerate(
            random_kills(args.seed, args.random))]
    else:
        runs = [(n, sc) for n in range(args.repeat) for sc in SCENARIOS
                if not args.only or sc[0] in args.only]
    for n, (name, action, victim, spec, outage) in runs:
        rec = runner.run(name, action, victim, spec, outage, n)
        records.append(rec)
        sys.stdout.write('fault %-28s %-7s run %d%s: %s\n' % (
            name, args.mode, n, ' +%.2fs' % spec['delay']
            if spec.get('delay') else '',
            rec.get('not_run') or summary(rec)))
        sys.stdout.flush()
    with open(args.out, 'w') as f:
        json.dump(records, f, indent=2, sort_keys=True)
    return 0


if __name__ == '__main__':
    sys.exit(main())
