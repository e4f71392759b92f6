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

    def arm(self, host):
        fired = os.path.join(self._dir(host), 'fault.fired')
        if os.path.exists(fired):
            os.unlink(fired)
        with open(os.path.join(self._dir(host), 'fault.json'), 'w') as f:
            json.dump({'point': 'look-up', 'action': 'fail'}, f)

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
    def periods(rows, host):
        for row in rows:
            if row['host'] == host:
                return [p for p in row.get('degraded') or ()
                        if p['fix'] == FIX], row.get('degraded_ended') or {}
        raise Failed('status --all has no row for %s' % host)

    def wait_status(self, host, degraded):
        deadline = time.monotonic() + WAIT_S
        while True:
            rows, summary = self.status_all()
            periods, ended = self.periods(rows, host)
            if bool(periods) == degraded:
                return periods, ended, summary
            if time.monotonic() > deadline:
                raise Failed('%s not %s within %d s (failed reads %d): %s'
                             % (host, 'degraded' if degraded else
                                'cleared', WAIT_S, self.failed_reads(host),
                                summary))
            time.sleep(2)

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
            periods, _ended, summary = self.wait_status(host, True)
            record['degraded_s'] = at()
            record['degraded'] = periods
            record['summary'] = summary
            if 'with a degraded fix' not in summary:
                raise Failed('status --all does not count the degraded '
                             'host: %s' % summary)
            findings = [f for f in self.damage()
                        if f['kind'] == 'degraded-fix' and
                        f['host'] == host]
            if not findings or not findings[0].get('repair'):
                raise Failed('damage names no degraded-fix on %s with a '
                             'repair' % host)
            record['finding'] = findings[0]
        finally:
            self.disarm(host)
        record['failed_reads'] = self.failed_reads(host)
        _periods, ended, summary = self.wait_status(host, False)
        record['cleared_s'] = at()
        record['ended'] = ended
        record['summary_after'] = summary
        if not ended.get(FIX):
            raise Failed('the ended period is not counted: %s' % ended)
        if any(f['kind'] == 'degraded-fix' and f['host'] == host
               for f in self.damage()):
            raise Failed('damage still names the degraded fix on %s' % host)
        record['damage_cleared_s'] = at()
        return record


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
