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

"""A fix degraded in a real nova-compute, seen from outside, then healed.

    python degraded.py --state-dir DIR --out FILE

Runs inside the cloud's virtualenv against computes running the
extension with the fault hook (``tools/cloud degraded`` restarts them
so). On the first compute it arms the ``look-up`` point
(:mod:`fault_hook`, action ``fail``): every read of its ``reverted``
migrations through the conductor then fails as it does when the
conductor's database is down, and nothing else of the compute's does.
It restarts that compute, whose first periodic task per node makes the
read (a node's history of reverts is read once per process), and then:

1. waits until ``nova-revert-lock status --all`` shows the host's
   ``source_window`` degraded (the row's ``degraded`` periods, the
   summary's count of degraded hosts);
2. runs ``nova-revert-lock damage``: it must name a ``degraded-fix``
   finding on the host with its repair;
3. disarms the point: the next periodic task makes the read again (a
   failed first read is retried) and it works;
4. waits until ``status --all`` shows the host no longer degraded and
   counts the ended period, and ``damage`` no longer names it.

Then the same for ``live_migration_rollback``'s wait, on the second
compute as a live migration's destination: a server on the third is
block-migrated to it and aborted while the migration runs, with the
destination's ``driver-rollback`` point armed (action ``pause``): the
destination's clean-up outlasts the fix's wait (half of
``rpc_response_timeout``, 30 s here), so its ``drop_move_claim_at_
destination`` drops the claim when the wait ends, and the fix is
degraded on the node. The runner checks that the source still ended the
rollback (the migration ``cancelled``, the server ``ACTIVE`` on the
source, no task state), that ``status --all`` and ``damage`` show the
period, lets the clean-up go on, and aborts a second live migration of
the same server, which rolls back within the wait: the period ends.

Every step is timed; the record goes to FILE.
"""

import argparse
import json
import os
import subprocess
import sys
import time

TOP = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))
#: how long the host gets to show (or clear) the degraded period: a
#: compute's start and a periodic task or two (update_resources_interval
#: is 1 s in this cloud, the tracker's lock shared with the moves)
WAIT_S = 180
FIX = 'source_window'
#: the second: the destination's wait for a live migration's rollback
ROLLBACK_FIX = 'live_migration_rollback'


class Failed(Exception):
    pass


class Runner(object):

    def __init__(self, state_dir):
        self.state_dir = state_dir
        self.conf = os.path.join(state_dir, 'etc', 'nova.conf')
        self.cli = os.path.join(os.path.dirname(sys.executable),
                                'nova-revert-lock')

    def _dir(self, host):
        return os.path.join(self.state_dir, 'computes', host)

    def computes(self):
        top = os.path.join(self.state_dir, 'computes')
        return sorted(h for h in os.listdir(top)
                      if os.path.isdir(os.path.join(top, h)))

    def arm(self, host, spec=None):
        fired = os.path.join(self._dir(host), 'fault.fired')
        if os.path.exists(fired):
            os.unlink(fired)
        with open(os.path.join(self._dir(host), 'fault.json'), 'w') as f:
            json.dump(spec or {'point': 'look-up', 'action': 'fail'}, f)

    def fired(self, host):
        try:
            with open(os.path.join(self._dir(host), 'fault.fired')) as f:
                return json.load(f)
        except (IOError, OSError, ValueError):
            return None

    def resume(self, host):
        with open(os.path.join(self._dir(host), 'fault.resume'), 'w'):
            pass

    def disarm(self, host):
        try:
            os.unlink(os.path.join(self._dir(host), 'fault.json'))
        except OSError:
            pass

    def failed_reads(self, host):
        try:
            with open(os.path.join(self._dir(host), 'fault.fired')) as f:
                return json.load(f).get('count', 0)
        except (IOError, OSError, ValueError):
            return 0

    def restart(self, host):
        proc = subprocess.run(
            ['bash', os.path.join(TOP, 'tools', 'cloud'), '--state-dir',
             self.state_dir, 'restart-compute', host, 'wrapper'],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
            universal_newlines=True, timeout=300)
        if proc.returncode != 0:
            raise Failed('%s did not start again: %s' % (
                host, proc.stdout.strip()[-500:]))

    def status_all(self):
        """(rows, the table's summary line) of ``status --all``."""
        proc = subprocess.run(
            [self.cli, 'status', '--all', '--config-file', self.conf,
             '--timeout', '10', '--format', 'json'],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            universal_newlines=True, timeout=300)
        try:
            rows = json.loads(proc.stdout)
        except ValueError:
            raise Failed('status --all gave no rows (exit %d): %s' % (
                proc.returncode, proc.stderr[-300:]))
        table = subprocess.run(
            [self.cli, 'status', '--all', '--config-file', self.conf,
             '--timeout', '10'],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            universal_newlines=True, timeout=300)
        lines = table.stdout.strip().splitlines()
        return rows, lines[-1] if lines else ''

    def damage(self):
        proc = subprocess.run(
            [self.cli, 'damage', '--config-file', self.conf, '--timeout',
             '10', '--format', 'json'],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            universal_newlines=True, timeout=600)
        try:
            return json.loads(proc.stdout)['findings']
        except (ValueError, KeyError):
            raise Failed('damage gave no findings (exit %d): %s' % (
                proc.returncode, proc.stderr[-300:]))

    @staticmethod
    def periods(rows, host, fix=FIX):
        for row in rows:
            if row['host'] == host:
                return [p for p in row.get('degraded') or ()
                        if p['fix'] == fix], row.get('degraded_ended') or {}
        raise Failed('status --all has no row for %s' % host)

    def wait_status(self, host, degraded, fix=FIX):
        deadline = time.monotonic() + WAIT_S
        while True:
            rows, summary = self.status_all()
            periods, ended = self.periods(rows, host, fix)
            if bool(periods) == degraded:
                return periods, ended, summary
            if time.monotonic() > deadline:
                raise Failed('%s: %s not %s within %d s (fault %s): %s'
                             % (fix, host, 'degraded' if degraded else
                                'cleared', WAIT_S, self.fired(host),
                                summary))
            time.sleep(2)

    def degraded_findings(self, host, fix):
        return [f for f in self.damage()
                if f['kind'] == 'degraded-fix' and f['host'] == host and
                fix in json.dumps(f)]

    def shown(self, host, fix, record, at):
        """``status --all`` and ``damage`` show ``fix`` degraded on host."""
        periods, _ended, summary = self.wait_status(host, True, fix)
        record['degraded_s'] = at()
        record['degraded'] = periods
        record['summary'] = summary
        if 'with a degraded fix' not in summary:
            raise Failed('status --all does not count the degraded host: '
                         '%s' % summary)
        findings = self.degraded_findings(host, fix)
        if not findings or not findings[0].get('repair'):
            raise Failed('damage names no degraded %s on %s with a repair'
                         % (fix, host))
        record['finding'] = findings[0]

    def cleared(self, host, fix, record, at):
        """Neither shows it any more; the ended period is counted."""
        _periods, ended, summary = self.wait_status(host, False, fix)
        record['cleared_s'] = at()
        record['ended'] = ended
        record['summary_after'] = summary
        if not ended.get(fix):
            raise Failed('the ended %s period is not counted: %s'
                         % (fix, ended))
        if self.degraded_findings(host, fix):
            raise Failed('damage still names the degraded %s on %s'
                         % (fix, host))
        record['damage_cleared_s'] = at()

    def run(self):
        host = self.computes()[0]
        record = {'host': host}
        started = time.monotonic()

        def at():
            return round(time.monotonic() - started, 1)

        self.arm(host)
        try:
            self.restart(host)
            record['restarted_s'] = at()
            self.shown(host, FIX, record, at)
        finally:
            self.disarm(host)
        record['failed_reads'] = self.failed_reads(host)
        self.cleared(host, FIX, record, at)
        record[ROLLBACK_FIX] = self.rollback_wait()
        return record

    # -- live_migration_rollback's wait ----------------------------------

    def rollback_wait(self):
        from cloud_lib import family as family_mod
        from cloud_lib import soak as soak_mod

        hosts = self.computes()
        dest, source = hosts[1], hosts[2]
        rec = {'dest': dest, 'source': source}
        started = time.monotonic()

        def at():
            return round(time.monotonic() - started, 1)

        f = family_mod._family()
        sid = f.boot('nrl-degraded-live', source)
        try:
            f.wait(sid, 'ACTIVE')
            books, base, watch = f.record('degraded-live', sid, source)
            self.arm(dest, {'point': 'driver-rollback', 'action': 'pause'})
            try:
                rec['first'] = self.abort_live(f, sid, dest, watch)
                rec['first']['ended_s'] = at()
                # NOTE: while the destination's clean-up still hangs: the
                # claim it dropped when the wait ended is not counted
                # again, the source holds the server, no host reads below
                # what its other servers hold.
                self.judge(f, books, 'first rollback ended',
                           f.holds(base, source), watch)
                fired = self.fired(dest)
                if not fired or fired.get('point') != 'driver-rollback':
                    raise Failed('the destination\'s rollback never reached '
                                 'its driver (fault %s)' % fired)
                self.shown(dest, ROLLBACK_FIX, rec, at)
            finally:
                self.disarm(dest)
                self.resume(dest)
            rec['second'] = self.abort_live(f, sid, dest, watch)
            self.judge(f, books, 'second rollback ended',
                       f.holds(base, source), watch)
            rec['books_late'] = books['late']
            self.cleared(dest, ROLLBACK_FIX, rec, at)
        except soak_mod.CycleError as e:
            raise Failed(str(e))
        finally:
            f.delete([sid])
        return rec

    @staticmethod
    def judge(f, books, point, expected, watch):
        """Both books settle on ``expected``; none ever read below it."""
        f._judge(books, point, expected, watch)
        wrong = books['under'] or books['stable']
        if wrong:
            raise Failed('books wrong at %s: %s' % (point, json.dumps(
                {'under': books['under'][:3], 'stable': books['stable']})))

    @staticmethod
    def abort_live(f, sid, dest, watch):
        """Block-migrate ``sid`` to ``dest``, abort it while it runs.

        Returns once the source ended the rollback: the migration
        ``cancelled``, the server ``ACTIVE`` where it was, no task state.
        """
        from cloud_lib import soak as soak_mod

        host = f.server(sid)['OS-EXT-SRV-ATTR:host']
        f.c.compute.post('/servers/%s/action' % sid, json={
            'os-migrateLive': {'host': dest, 'block_migration': True}},
            microversion='2.30')
        # NOTE: the cloud's fake driver holds a live migration for up to
        # 5 s and rolls it back when it is aborted meanwhile.
        deadline = time.monotonic() + 60
        while True:
            mig = f.migration(sid)
            if mig and mig['dest_compute'] == dest and (
                    mig['status'] == 'running'):
                break
            if time.monotonic() > deadline:
                raise Failed('no running live migration to %s: %s'
                             % (dest, mig and mig['status']))
            watch()
            time.sleep(soak_mod.POLL)
        t0 = time.monotonic()
        f.c.compute.delete('/servers/%s/migrations/%s' % (sid, mig['id']))
        deadline = time.monotonic() + soak_mod.TIMEOUT
        while True:
            status = f.migration(sid)['status']
            server = f.server(sid)
            if status in ('cancelled', 'error', 'failed', 'completed') and (
                    not server.get('OS-EXT-STS:task_state')):
                break
            if time.monotonic() > deadline:
                raise Failed('the aborted live migration did not end: %s, '
                             'task state %s' % (
                                 status, server.get('OS-EXT-STS:task_state')))
            watch()
            time.sleep(soak_mod.POLL)
        out = {'migration': mig['id'], 'status': status,
               'server_status': server['status'],
               'host_after': server['OS-EXT-SRV-ATTR:host'],
               'rollback_s': round(time.monotonic() - t0, 1)}
        if (status != 'cancelled' or server['status'] != 'ACTIVE' or
                out['host_after'] != host):
            raise Failed('the abort did not roll back: %s' % out)
        return out


def main(argv=None):
    parser = argparse.ArgumentParser()
    parser.add_argument('--state-dir', required=True)
    parser.add_argument('--out', required=True)
    args = parser.parse_args(argv)
    try:
        record = Runner(args.state_dir).run()
        record['ok'] = True
    except (Failed, subprocess.TimeoutExpired) as e:
        record = {'ok': False, 'problem': str(e)}
    with open(args.out, 'w') as f:
        json.dump(record, f, indent=2, sort_keys=True)
    print(json.dumps(record, indent=2, sort_keys=True))
    return 0 if record['ok'] else 1


if __name__ == '__main__':
    sys.exit(main())
