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

"""Every compute busy at once: concurrent resizes, confirms and reverts.

    python load.py --mode MODE --out FILE [--per-host N] [--rounds R]

Runs inside the cloud's virtualenv, against the computes as they run
(``tools/cloud load`` switches them to each mode first). It boots N
servers on every compute, then, round after round, resizes all of them
at once (the scheduler picks each destination, so every compute is a
source and a destination in the same round) and, as each one reaches
VERIFY_RESIZE, confirms it or reverts it (half of each, alternating
from round to round), with the periodic task at 1 s on every compute.

While the moves run, a watcher reads os-hypervisors without pause and
keeps every negative reading. Once a round's servers are all at rest it
judges: each compute's usage (os-hypervisors) and placement's equal what
the servers on it hold (given the usual settle time); no allocation is
left for a migration that is over, none is missing for a server; no
server in ERROR; every migration in a final status. One object per
round goes to FILE.
"""

import argparse
import json
import sys
import threading
import time

from cloud_lib import bootstrap
from cloud_lib import rest
from cloud_lib import soak as soak_mod

FINAL = ('confirmed', 'reverted', 'error', 'failed', 'done', 'completed',
         'cancelled')


class Load(object):

    def __init__(self, per_host):
        self.c = rest.Clients(rest.env_clouds_yaml())
        images = self.c.image.get('/v2/images', params={
            'name': bootstrap.IMAGE_NAME}).json()['images']
        self.image = images[0]['id']
        self.soak = soak_mod.Soak(self.c, self.image)
        self.per_host = per_host
        self.sids = []

    def _worker_soak(self):
        # NOTE: a client per thread: one session is not shared by
        # threads that poll at once.
        return soak_mod.Soak(rest.Clients(rest.env_clouds_yaml()),
                             self.image)

    def boot(self):
        hosts = sorted(self.soak.providers())
        for i in range(self.per_host):
            for h in hosts:
                self.sids.append(self.soak.boot('nrl-load-%s-%d' % (h, i), h))
        for sid in self.sids:
            self.soak.wait(sid, 'ACTIVE')

    def move(self, sid, kind, out):
        """Resize ``sid`` to the other flavor, then confirm or revert."""
        soak = self._worker_soak()
        rec = {'server': sid, 'kind': kind}
        started = time.monotonic()
        try:
            s = soak.server(sid)
            rec['source'] = s['OS-EXT-SRV-ATTR:host']
            old = s['flavor']['original_name']
            new = 'nrl-1' if old == soak.flavors['nrl-2']['name'] else 'nrl-2'
            soak.act(sid, {'resize': {'flavorRef': new}})
            s = soak.wait(sid, 'VERIFY_RESIZE')
            rec['dest'] = s['OS-EXT-SRV-ATTR:host']
            soak.act(sid, {('confirmResize' if kind == 'confirm'
                            else 'revertResize'): None})
            soak.wait(sid, 'ACTIVE')
        except soak_mod.CycleError as e:
            rec['error'] = str(e)
        rec['seconds'] = round(time.monotonic() - started, 1)
        out.append(rec)

    def round(self, n):
        moves = []
        negative = []
        stop = threading.Event()

        def watch():
            soak = self._worker_soak()
            while not stop.is_set():
                hyp = soak.hypervisors()
                negative.extend({'host': h, 'reading': list(v)}
                                for h, v in hyp.items() if min(v) < 0)
                time.sleep(0.2)

        watcher = threading.Thread(target=watch)
        watcher.start()
        started = time.monotonic()
        threads = [threading.Thread(target=self.move, args=(
            sid, 'confirm' if (i + n) % 2 == 0 else 'revert', moves))
            for i, sid in enumerate(self.sids)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        seconds = round(time.monotonic() - started, 1)
        rec = self.judge()
        stop.set()
        watcher.join()
        rec.update({'round': n, 'moves': len(moves), 'seconds': seconds,
                    'move_errors': [m for m in moves if m.get('error')],
                    'negative': negative[:10],
                    'negative_readings': len(negative),
                    'hosts_used': sorted({m.get('dest') for m in moves
                                          if m.get('dest')})})
        return rec

    def judge(self):
        expected = self.soak.at_rest()
        rec = {'at_rest': expected is not None}
        if expected is None:
            rec['books_wrong'] = True
        else:
            ok, took, _h0, _p0, hyp, plc = self.soak.settle(expected)
            rec['books_wrong'] = not ok
            rec['settled_s'] = took and round(took, 1)
            if not ok:
                rec['books'] = {'expected': expected,
                                'hypervisors': hyp, 'placement': plc}
        leaked, stuck, missing, in_error = [], [], [], []
        for sid in self.sids:
            s = self.soak.server(sid)
            if s['status'] == 'ERROR':
                in_error.append({'server': sid, 'fault': (
                    s.get('fault') or {}).get('message')})
            if not self.soak.allocations(sid):
                missing.append(sid)
            for m in self.c.compute.get(
                    '/os-migrations', params={'instance_uuid': sid},
                    microversion='2.59').json()['migrations']:
                if m['status'] not in FINAL:
                    stuck.append(m['uuid'])
                elif self.soak.allocations(m['uuid']):
                    leaked.append(m['uuid'])
        rec.update({'leaked': leaked, 'stuck_migrations': stuck,
                    'missing': missing, 'in_error': in_error})
        return rec

    def clean(self):
        self.soak.delete(self.sids, timeout=120)


#: what a round must not leave with the extension (``tools/cloud load``
#: fails on any of them, reported per round as ``problems``)
MUST_NOT = ('books_wrong', 'negative_readings', 'leaked', 'stuck_migrations',
            'missing', 'in_error', 'move_errors')


def bad(rec):
    """What a round left of ``MUST_NOT``."""
    return [k for k in MUST_NOT if rec.get(k)]


def main(argv=None):
    parser = argparse.ArgumentParser()
    parser.add_argument('--mode', required=True,
                        choices=('wrapper', 'plain'))
    parser.add_argument('--out', required=True)
    parser.add_argument('--per-host', type=int, default=3)
    parser.add_argument('--rounds', type=int, default=5)
    args = parser.parse_args(argv)
    load = Load(args.per_host)
    busy = [s['id'] for s in load.soak.servers()
            if s['status'] != 'ACTIVE' or s.get('OS-EXT-STS:task_state')]
    if busy:
        sys.exit('load: servers not at rest: %s' % ', '.join(busy))
    records = []
    try:
        load.boot()
        for n in range(args.rounds):
            rec = load.round(n)
            rec['mode'] = args.mode
            rec['problems'] = bad(rec)
            records.append(rec)
            sys.stdout.write(
                'load %-7s round %d: %d moves in %.0fs onto %s: %s\n' % (
                    args.mode, n, rec['moves'], rec['seconds'],
                    ','.join(rec['hosts_used']),
                    ', '.join(bad(rec)) or 'books right, nothing left'))
            sys.stdout.flush()
    except soak_mod.CycleError as e:
        records.append({'mode': args.mode, 'not_run': str(e)})
    finally:
        load.clean()
        with open(args.out, 'w') as f:
            json.dump(records, f, indent=2, sort_keys=True)
    return 0


if __name__ == '__main__':
    sys.exit(main())
