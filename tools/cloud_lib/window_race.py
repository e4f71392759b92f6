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

"""A boot on a revert's source while the source window is open.

Runs inside the cloud's virtualenv, on libvirt computes::

    python window_race.py --attempts N --out result.json [--keep]

The soak moves one server at a time, so nothing lands on a host while
its books are wrong. Operators boot while others revert. Between the
destination's half of a revert (migration ``reverted``, its claim
dropped) and the source's ``finish_revert_resize`` saving
``instance.host`` back, the source's periodic task counts the reverting
server nowhere and hands its pinned CPU back to the free list; a boot
claimed on the source until the next run counts it again gets that CPU,
and the reverted guest comes back on it too (``source_window``). From
then on the source's periodic task fails on every run with
``CPUPinningInvalid``.

Each attempt resizes a pinned server away from an empty host and
reverts it, watching the hosts' usage as Nova reports it; the moment the
source reads without the reverting server (the window met by a
periodic run), a second pinned server is booted onto the source. The
attempt hits if two running guests on the source share a CPU. Every
attempt's timing is natural; nothing of Nova is stubbed. With
``--keep`` the first hit is left as it is, for the damage report.
"""

import argparse
import json
import sys
import time

from cloud_lib import bootstrap
from cloud_lib import pinning
from cloud_lib import rest
from cloud_lib import soak as soak_mod

#: seconds for the source's periodic task to run after both guests run
SETTLE = 5.0


class WindowRace(soak_mod.Soak):

    def revert_and_boot(self, sid, src, name, boot_at=None):
        """Resize ``sid`` away from ``src``, revert it, boot in the window.

        :param boot_at: seconds after the revert request to boot anyway,
            if no reading has shown the window by then (the same load for
            a host whose window is closed)
        :returns: the attempt's record; ``booted`` is the second server's
            id, or None if no boot was sent
        """
        before = self.server(sid)
        old = before['flavor']['original_name']
        new_id = ('nrl-2' if old == self.flavors['nrl-1']['name']
                  else 'nrl-1')
        record = {'server': sid, 'source': src, 'booted': None,
                  'window_reads': 0, 'error': None}
        started = time.monotonic()
        try:
            self.act(sid, {'resize': {'flavorRef': new_id}})
            s = self.wait(sid, 'VERIFY_RESIZE')
            record['dest'] = s['OS-EXT-SRV-ATTR:host']
            base = self.base(sid)
            self.act(sid, {'revertResize': None})
            reverted = time.monotonic()

            def boot(in_window):
                record['booted'] = self.boot(name, src)
                record['boot_after_revert_s'] = round(
                    time.monotonic() - reverted, 2)
                record['boot_in_window'] = in_window

            deadline = reverted + soak_mod.TIMEOUT
            while time.monotonic() < deadline:
                hyp = self.hypervisors()
                window = tuple(hyp[src]) == tuple(base[src])
                record['window_reads'] += window
                late = (boot_at is not None and
                        time.monotonic() - reverted >= boot_at)
                if record['booted'] is None and (window or late):
                    boot(window)
                s = self.server(sid)
                if s['status'] in ('ACTIVE', 'ERROR') and not s.get(
                        'OS-EXT-STS:task_state'):
                    break
            if record['booted'] is None and boot_at is not None:
                # NOTE: the revert was quicker than ``boot_at``: the boot
                # still goes out, so that every attempt boots once
                boot(False)
            self.wait(sid, 'ACTIVE')
            if record['booted']:
                self.wait(record['booted'], 'ACTIVE')
        except soak_mod.CycleError as e:
            record['error'] = str(e)
        record['seconds'] = round(time.monotonic() - started, 2)
        return record


def main(argv=None):
    parser = argparse.ArgumentParser()
    parser.add_argument('--attempts', type=int, default=10)
    parser.add_argument('--out', required=True)
    parser.add_argument('--label', default='')
    parser.add_argument('--keep', action='store_true',
                        help='stop at the first hit and leave both servers')
    parser.add_argument('--boot-at', default='',
                        help='comma-separated seconds after each revert '
                        'request (taken in turn) to boot on the source if '
                        'no reading showed the window by then; without '
                        'it, boot only in the window')
    args = parser.parse_args(argv)
    clients = rest.Clients(rest.env_clouds_yaml())
    pins = pinning.Reader.from_env()
    if pins is None:
        sys.exit('window_race: the computes do not run libvirt (cloud up '
                 '--hypervisor libvirt): the fake driver pins nothing')
    images = clients.image.get('/v2/images', params={
        'name': bootstrap.IMAGE_NAME}).json()['images']
    race = WindowRace(clients, images[0]['id'], pins=pins)
    servers = race.servers()
    taken = {s.get('OS-EXT-SRV-ATTR:host') for s in servers}
    empty = [h for h in sorted(race.providers()) if h not in taken]
    if not empty:
        sys.exit('window_race: needs an empty host for the source (its '
                 'first pinned CPU is the one the window frees); servers on '
                 '%s' % ', '.join(sorted(h for h in taken if h)))
    # NOTE: the last, so that a soak's servers (booted on the first
    # hosts) leave it empty; the scheduler picks the destination.
    src = empty[-1]
    sid = race.boot('nrl-window-%s' % args.label, src)
    race.wait(sid, 'ACTIVE')
    boot_at = [float(x) for x in args.boot_at.split(',') if x.strip()]
    records, hit = [], None
    try:
        for i in range(args.attempts):
            rec = race.revert_and_boot(
                sid, src, 'nrl-window-boot-%d' % i,
                boot_at[i % len(boot_at)] if boot_at else None)
            time.sleep(SETTLE)
            _books, shared = pinning.judge(pins.reading())
            rec['shared'] = shared
            records.append(rec)
            sys.stdout.write('attempt %2d %s -> %s and back: %s%s\n' % (
                i + 1, src, rec.get('dest'),
                'window read %d time(s), booted %.2fs after the revert' % (
                    rec['window_reads'], rec['boot_after_revert_s'])
                if rec['booted'] else 'window not read, no boot',
                '; SHARED: %s' % '; '.join(shared) if shared else ''))
            sys.stdout.flush()
            if shared or rec['error']:
                hit = rec
                if args.keep:
                    break
            if rec['booted']:
                race.delete([rec['booted']])
    finally:
        kept = [sid] + ([hit['booted']] if hit and hit['booted'] else [])
        if not args.keep:
            race.delete([sid] + [r['booted'] for r in records
                                 if r['booted']])
            kept = []
    summary = {
        'label': args.label, 'source': src,
        'attempts': len(records),
        'window_read': sum(1 for r in records if r['window_reads']),
        'booted': sum(1 for r in records if r['booted']),
        'booted_in_window': sum(1 for r in records
                                if r.get('boot_in_window')),
        'hits': sum(1 for r in records if r['shared']),
        'errors': sum(1 for r in records if r['error']),
        'kept': kept, 'records': records,
    }
    with open(args.out, 'w') as f:
        json.dump(summary, f, indent=2, sort_keys=True)
    print('window race %s: %d attempts, the window read in %d, %d boots '
          '(%d sent on reading it), CPUs shared after %d, errors %d' % (
              args.label, summary['attempts'], summary['window_read'],
              summary['booted'], summary['booted_in_window'],
              summary['hits'], summary['errors']))
    return 0


if __name__ == '__main__':
    sys.exit(main())
