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

"""Resize+confirm and resize+revert cycles over the REST API, with books.

Runs inside the cloud's virtualenv::

    python soak.py --cycles N --out result.json [--servers 3]

N cycles of each kind, alternating, on servers pinned round-robin to the
compute hosts at boot; each cycle resizes one server to the other flavor
and confirms or reverts it, while the computes run their periodic every
second. Every cycle is judged on the books:

``stable``
    at VERIFY_RESIZE and when the move is over, each host's usage as
    Nova reports it (os-hypervisors ``vcpus_used``, ``memory_mb_used``)
    and placement's usages equal what the servers hold, once the
    trackers have caught up (see :data:`SETTLE`);
``under``
    throughout, settling included, polled continuously: a host never
    reports less than the servers that stay on it (a double free reads
    below that, bug 1879878, until the next periodic task);
``neither``
    a reverting server counted on neither host at once (the source-side
    window upstream left open).

A cycle is wrong if ``stable`` fails, ``under`` is seen, or the server
ends in ERROR. ``neither`` is reported apart, and so is ``late``: a
judgement whose books read otherwise before they settled (how long they
took, and what was read first).
"""

import argparse
import json
import statistics
import sys
import time

from keystoneauth1 import exceptions as ks_exc

from cloud_lib import bootstrap
from cloud_lib import lockholds
from cloud_lib import pinning
from cloud_lib import rest

FLAVORS = {f[0]: {'vcpus': f[2], 'ram': f[3]} for f in bootstrap.FLAVORS}
#: How long the books may take to read what the servers hold.
#: A tracker saves on its periodic task, and a run that read the
#: instances and migrations before a step of the move saves what it read
#: after that step: its host then reads it until the next run has read
#: afresh and saved. On 2025.1 the destination's periodic task reads an
#: arriving server with its old flavor between the source's save of
#: ``instance.host`` and the destination's ``finish_resize`` (upstream
#: applies only the migration context's NUMA, PCI and resources there),
#: and each run makes several conductor calls that cost at least 0.5 s
#: apiece (oslo.messaging 16.1.2 polls for replies every 0.5 s), so one
#: run takes 3 to 5 s on two loaded cores. Two runs and the interval
#: between them must fit. Wrong books below what stays on a host are
#: caught as ``under`` while settling too, so waiting hides no double
#: free; books still wrong at the deadline are wrong.
SETTLE = 15.0
POLL = 0.1
TIMEOUT = 120


class CycleError(Exception):
    pass


class Soak(object):

    def __init__(self, clients, image, settle=SETTLE, pins=None):
        self.c = clients
        self.image = image
        self.settle_s = settle
        #: on libvirt computes, the pinned CPUs' books (pinning.Reader)
        self.pins = pins
        # NOTE: the sizes as the cloud made them (pinned ones on libvirt)
        self.flavors = {}
        for fid in FLAVORS:
            f = self.c.compute.get('/flavors/%s' % fid).json()['flavor']
            self.flavors[fid] = {'vcpus': f['vcpus'], 'ram': f['ram'],
                                 'name': f['name']}

    # -- reading ----------------------------------------------------------

    def hypervisors(self):
        hyps = self.c.compute.get('/os-hypervisors/detail').json()[
            'hypervisors']
        return {h['hypervisor_hostname']: (h['vcpus_used'],
                                           h['memory_mb_used'])
                for h in hyps}

    def providers(self):
        if not hasattr(self, '_rps'):
            rps = self.c.placement.get('/resource_providers').json()[
                'resource_providers']
            self._rps = {r['name']: r['uuid'] for r in rps}
        return self._rps

    def placement(self):
        out = {}
        for name, uuid in self.providers().items():
            u = self.c.placement.get('/resource_providers/%s/usages'
                                     % uuid).json()['usages']
            # NOTE: a pinned server's vCPUs are PCPU
            out[name] = (u.get('VCPU', 0) + u.get('PCPU', 0),
                         u.get('MEMORY_MB', 0))
        return out

    def servers(self):
        return self.c.compute.get('/servers/detail', params={
            'all_tenants': 1}).json()['servers']

    def server(self, sid):
        return self.c.compute.get('/servers/%s' % sid).json()['server']

    def allocations(self, consumer):
        """Placement's allocations of ``consumer`` (a server, a migration)."""
        return self.c.placement.get('/allocations/%s' % consumer).json()[
            'allocations']

    def at_rest(self):
        """Per host what the servers hold, or None while one moves."""
        out = {h: [0, 0] for h in self.providers()}
        for s in self.servers():
            if s.get('OS-EXT-STS:task_state') or s['status'] not in (
                    'ACTIVE', 'SHUTOFF', 'ERROR'):
                return None
            host = s.get('OS-EXT-SRV-ATTR:host')
            if host in out:
                out[host][0] += s['flavor']['vcpus']
                out[host][1] += s['flavor']['ram']
        return out

    def delete(self, sids, timeout=60):
        """Delete the servers ``sids``, wait up to ``timeout`` s for it.

        Then delete what their migrations still hold in placement: a
        deleted server takes its own allocations along, not those of a
        move a fault or a canary (plain Nova) left behind, which would
        otherwise stay on the host and be found by the next test as if
        it had left them.

        :returns: the migrations whose allocations were deleted
        """
        migrations = []
        for sid in sids:
            try:
                migrations += self.c.compute.get(
                    '/os-migrations', params={'instance_uuid': sid},
                    microversion='2.59').json()['migrations']
            except Exception:  # noqa: BLE001 - best effort clean-up
                pass
            try:
                self.c.compute.delete('/servers/%s' % sid)
            except Exception:  # noqa: BLE001 - best effort clean-up
                pass
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and any(
                s['id'] in sids for s in self.servers()):
            time.sleep(0.5)
        freed = []
        for mig in migrations:
            try:
                if self.allocations(mig['uuid']):
                    self.c.placement.delete('/allocations/%s' % mig['uuid'])
                    freed.append(mig['uuid'])
            except Exception:  # noqa: BLE001 - best effort clean-up
                pass
        return freed

    def error_detail(self, sid):
        """Why a server is in ERROR.

        Its fault, and on libvirt computes the end of its guest's QEMU log.
        """
        detail = {'id': sid}
        try:
            s = self.server(sid)
            fault = s.get('fault') or {}
            details = (fault.get('details') or '').strip().splitlines()
            detail.update({
                'host': s.get('OS-EXT-SRV-ATTR:host'),
                'fault': fault.get('message'),
                'code': fault.get('code'),
                'fault_last_line': details[-1] if details else None})
            if self.pins is not None:
                detail['qemu_log'] = self.pins.qemu_log_tail(
                    detail['host'], s.get('OS-EXT-SRV-ATTR:instance_name'))
        except Exception as e:  # noqa: BLE001 - the report still comes
            detail['unreadable'] = '%s: %s' % (type(e).__name__, e)
        return detail

    def base(self, moving):
        """Per host, what the servers other than ``moving`` hold."""
        out = {h: [0, 0] for h in self.providers()}
        for s in self.servers():
            if s['id'] == moving:
                continue
            host = s.get('OS-EXT-SRV-ATTR:host')
            if host in out:
                out[host][0] += s['flavor']['vcpus']
                out[host][1] += s['flavor']['ram']
        return out

    def check_under(self, base, under, hyp=None):
        """Note in ``under`` each host that reads below ``base``.

        :param hyp: a reading of the hypervisors, or None to read them
        :returns: the reading
        """
        hyp = hyp if hyp is not None else self.hypervisors()
        for h, (vcpus, ram) in hyp.items():
            b = base.get(h, (0, 0))
            if vcpus < b[0] or ram < b[1]:
                under.append({'host': h, 'vcpus': vcpus, 'ram': ram,
                              'base': list(b)})
        return hyp

    # -- acting -----------------------------------------------------------

    def boot(self, name, host, image=None):
        body = {'server': {
            'name': name, 'imageRef': image or self.image,
            'flavorRef': 'nrl-1',
            'networks': 'none', 'availability_zone': 'nova:%s' % host}}
        return self.c.compute.post('/servers', json=body).json()['server'][
            'id']

    def wait(self, sid, status, watch=None):
        deadline = time.monotonic() + TIMEOUT
        while True:
            s = self.server(sid)
            if s['status'] == status and not s.get('OS-EXT-STS:task_state'):
                return s
            if s['status'] == 'ERROR':
                raise CycleError('server %s in ERROR: %s' % (
                    sid, s.get('fault', {}).get('message')))
            if time.monotonic() > deadline:
                raise CycleError('server %s not %s after %ds (%s/%s)' % (
                    sid, status, TIMEOUT, s['status'],
                    s.get('OS-EXT-STS:task_state')))
            if watch:
                watch()
            time.sleep(POLL)

    def wait_migration(self, sid, status):
        deadline = time.monotonic() + TIMEOUT
        while time.monotonic() < deadline:
            migs = self.c.compute.get('/os-migrations', params={
                'instance_uuid': sid}).json()['migrations']
            if migs and sorted(migs, key=lambda m: m['id'])[-1][
                    'status'] == status:
                return
            time.sleep(POLL)
        raise CycleError('migration of %s not %s' % (sid, status))

    def settle(self, expected, watch=None):
        """Wait up to SETTLE s for both books to read ``expected``.

        :param watch: called with each reading of the hypervisors, so
            that readings taken while settling are judged too
        :returns: (ok, seconds taken or None if the first reading was
            right, first hypervisors, first placement, last hypervisors,
            last placement)
        """
        started = time.monotonic()
        first = None
        while True:
            hyp, plc = self.hypervisors(), self.placement()
            if watch:
                watch(hyp)
            ok = all(tuple(hyp.get(h, ())) == tuple(v) and
                     tuple(plc.get(h, ())) == tuple(v)
                     for h, v in expected.items())
            took = time.monotonic() - started
            if first is None:
                first = hyp, plc
                if ok:
                    return ok, None, hyp, plc, hyp, plc
            if ok or took > self.settle_s:
                return ok, took, first[0], first[1], hyp, plc
            time.sleep(0.2)

    # -- one cycle ----------------------------------------------------------

    def act(self, sid, body):
        """A server action; refused (a server in ERROR): CycleError."""
        try:
            self.c.compute.post('/servers/%s/action' % sid, json=body)
        except ks_exc.HttpError as e:
            raise CycleError('%s of %s refused: HTTP %s %s' % (
                ', '.join(body), sid, e.http_status, e.details or e))

    def cycle(self, sid, kind):
        before = self.server(sid)
        src = before['OS-EXT-SRV-ATTR:host']
        old = before['flavor']['original_name']
        old_id = ('nrl-1' if old == self.flavors['nrl-1']['name']
                  else 'nrl-2')
        new_id = 'nrl-2' if old_id == 'nrl-1' else 'nrl-1'
        base = self.base(sid)
        record = {'kind': kind, 'server': sid, 'source': src,
                  'old': old_id, 'new': new_id, 'under': [],
                  'neither': 0, 'stable': [], 'late': [], 'error': None,
                  'pinning': [], 'shared': []}
        dest = {}

        def watch(hyp=None):
            hyp = self.check_under(base, record['under'], hyp)
            d = dest.get('host')
            if kind == 'revert' and d and d in hyp:
                if (tuple(hyp[src]) == tuple(base[src]) and
                        tuple(hyp[d]) == tuple(base[d])):
                    record['neither'] += 1

        started = time.monotonic()
        try:
            self.act(sid, {'resize': {'flavorRef': new_id}})
            s = self.wait(sid, 'VERIFY_RESIZE', watch)
            dst = s['OS-EXT-SRV-ATTR:host']
            dest['host'] = dst
            record['dest'] = dst
            o, n = self.flavors[old_id], self.flavors[new_id]
            expected = {src: (base[src][0] + o['vcpus'],
                              base[src][1] + o['ram']),
                        dst: (base[dst][0] + n['vcpus'],
                              base[dst][1] + n['ram'])}
            self._judge(record, 'verify_resize', expected, watch)
            action = 'confirmResize' if kind == 'confirm' else 'revertResize'
            self.act(sid, {action: None})
            self.wait(sid, 'ACTIVE', watch)
            self.wait_migration(sid, 'confirmed' if kind == 'confirm'
                                else 'reverted')
            watch()
            if kind == 'confirm':
                expected = {src: tuple(base[src]),
                            dst: (base[dst][0] + n['vcpus'],
                                  base[dst][1] + n['ram'])}
            else:
                expected = {src: (base[src][0] + o['vcpus'],
                                  base[src][1] + o['ram']),
                            dst: tuple(base[dst])}
            self._judge(record, 'done', expected, watch)
        except CycleError as e:
            record['error'] = str(e)
        record['seconds'] = round(time.monotonic() - started, 3)
        record['wrong'] = bool(record['under'] or record['stable'] or
                               record['error'] or record['pinning'] or
                               record['shared'])
        return record

    def judge_pins(self, record, point):
        """The pinned CPUs' books against the guests, once settled.

        The books must equal the defined guests' CPUs within the time
        the usage books get; a CPU shared by two running guests is wrong
        at any reading.
        """
        started = time.monotonic()
        while True:
            try:
                reading = self.pins.reading()
            except Exception as e:  # noqa: BLE001 - judged, not raised
                record['pinning'].append({'at': point, 'error': str(e)})
                return
            books, shared = pinning.judge(reading)
            for p in shared:
                if p not in [x['problem'] for x in record['shared']]:
                    record['shared'].append({'at': point, 'problem': p})
            if not books:
                return
            if time.monotonic() - started > self.settle_s:
                record['pinning'].append({'at': point, 'problems': books,
                                          'reading': reading})
                return
            time.sleep(0.5)

    def _judge(self, record, point, expected, watch=None):
        ok, took, hyp0, plc0, hyp, plc = self.settle(expected, watch)
        if self.pins is not None:
            self.judge_pins(record, point)

        def books(hyp, plc):
            return {'hypervisors': {h: list(hyp.get(h, ()))
                                    for h in expected},
                    'placement': {h: list(plc.get(h, ()))
                                  for h in expected}}

        if took is None:
            return
        entry = {'at': point, 'seconds': round(took, 2),
                 'expected': {h: list(v) for h, v in expected.items()}}
        if not ok:
            entry.update(books(hyp, plc))
            record['stable'].append(entry)
        else:
            # NOTE: right in the end, but not at the first reading: what
            # was read first, for the report.
            entry['first'] = books(hyp0, plc0)
            record['late'].append(entry)


def main(argv=None):
    parser = argparse.ArgumentParser()
    parser.add_argument('--cycles', type=int, default=10,
                        help='cycles of each kind (confirm, revert)')
    parser.add_argument('--servers', type=int, default=3)
    parser.add_argument('--out', required=True)
    parser.add_argument('--label', default='')
    parser.add_argument('--keep', action='store_true',
                        help='leave the servers (and whatever the races did '
                             'to them) for the damage report')
    parser.add_argument('--settle', type=float, default=SETTLE,
                        help='seconds the books may take to settle at each '
                             'judgement (default %(default)s)')
    args = parser.parse_args(argv)
    clients = rest.Clients(rest.env_clouds_yaml())
    images = clients.image.get('/v2/images', params={
        'name': bootstrap.IMAGE_NAME}).json()['images']
    soak = Soak(clients, images[0]['id'], settle=args.settle,
                pins=pinning.Reader.from_env())
    # NOTE: the books of every cycle are computed from the servers that
    # stay put; a server mid-move elsewhere would make them wrong.
    busy = [s['id'] for s in soak.servers()
            if s['status'] != 'ACTIVE' or s.get('OS-EXT-STS:task_state')]
    if busy:
        sys.exit('soak: servers not at rest: %s' % ', '.join(busy))
    hosts = sorted(soak.providers())
    sids = [soak.boot('nrl-soak-%d' % i, hosts[i % len(hosts)])
            for i in range(args.servers)]
    records = []
    stopped = None
    try:
        for sid in sids:
            soak.wait(sid, 'ACTIVE')
        for i in range(2 * args.cycles):
            kind = 'confirm' if i % 2 == 0 else 'revert'
            # NOTE: a server the race put in ERROR (plain Nova on pinned
            # hosts) cannot move again: the cycle goes to the next one.
            usable = [sid for sid in sids
                      if soak.server(sid)['status'] != 'ERROR']
            if not usable:
                stopped = 'every server is in ERROR'
                break
            sid = sids[i % len(sids)]
            if sid not in usable:
                sid = usable[i % len(usable)]
            rec = soak.cycle(sid, kind)
            records.append(rec)
            sys.stdout.write('cycle %3d %-7s %s -> %s %5.1fs %s\n' % (
                i + 1, kind, rec['source'], rec.get('dest'), rec['seconds'],
                'WRONG' if rec['wrong'] else 'ok'))
            sys.stdout.flush()
    finally:
        # NOTE: read before the clean-up deletes them
        in_error = sorted(s['id'] for s in soak.servers()
                          if s['id'] in sids and s['status'] == 'ERROR')
        error_details = [soak.error_detail(sid) for sid in in_error]
        for sid in [] if args.keep else sids:
            try:
                clients.compute.delete('/servers/%s' % sid)
            except Exception:  # noqa: BLE001 - best effort clean-up
                pass
        deadline = time.monotonic() + 60
        while not args.keep and time.monotonic() < deadline and any(
                s['id'] in sids for s in soak.servers()):
            time.sleep(0.5)
    times = [r['seconds'] for r in records]
    summary = {
        'label': args.label,
        'cycles': len(records),
        'wrong': sum(1 for r in records if r['wrong']),
        'wrong_by_kind': {k: sum(1 for r in records
                                 if r['wrong'] and r['kind'] == k)
                          for k in ('confirm', 'revert')},
        'under_samples': sum(len(r['under']) for r in records),
        'neither_cycles': sum(1 for r in records if r['neither']),
        'late_judgements': sum(len(r['late']) for r in records),
        'settle_max_s': max([j['seconds'] for r in records
                             for j in r['late'] + r['stable']] or [0]),
        'settle_limit_s': args.settle,
        'errors': sum(1 for r in records if r['error']),
        'servers_in_error': in_error,
        'servers_in_error_details': error_details,
        'stopped': stopped,
        'kept': sids if args.keep else [],
        'hypervisor': 'libvirt' if soak.pins is not None else 'fake',
        'pinning_wrong': sum(1 for r in records if r['pinning']),
        'shared_cpu_cycles': sum(1 for r in records if r['shared']),
        'median_s': round(statistics.median(times), 2) if times else None,
        'p95_s': lockholds.percentile(times, 95),
        'records': records,
    }
    with open(args.out, 'w') as f:
        json.dump(summary, f, indent=2, sort_keys=True)
    if stopped or in_error:
        print('soak %s: %d servers in ERROR%s' % (
            args.label, len(in_error), '; stopped early: %s' % stopped
            if stopped else ''))
        for d in error_details:
            print('  %s on %s: %s%s' % (
                d['id'], d.get('host'), d.get('fault') or d.get(
                    'unreadable'),
                '; QEMU log: %s' % d['qemu_log'][-1]
                if d.get('qemu_log') else ''))
    print('soak %s: %d cycles, %d wrong (confirm %d, revert %d), %d with '
          'the revert window seen, %d judgements settled late (at most '
          '%.1fs), median %.2fs, p95 %.2fs' % (
              args.label, summary['cycles'], summary['wrong'],
              summary['wrong_by_kind']['confirm'],
              summary['wrong_by_kind']['revert'],
              summary['neither_cycles'], summary['late_judgements'],
              summary['settle_max_s'], summary['median_s'] or 0,
              summary['p95_s'] or 0))
    return 0


if __name__ == '__main__':
    sys.exit(main())
