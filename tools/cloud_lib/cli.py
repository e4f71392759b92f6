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

"""``tools/cloud``: the command line."""

import argparse
import json
import os
import sys

from cloud_lib import cloud as cloud_mod
from cloud_lib import procs
from cloud_lib.series import SERIES

DEFAULT_STATE = os.environ.get('NRL_CLOUD_DIR') or os.path.join(
    cloud_mod.TOP, '.cloud')


def _cloud(args):
    return cloud_mod.Cloud(args.state_dir, getattr(args, 'series', 'ussuri'))


def cmd_up(args):
    c = _cloud(args)
    try:
        c.up(mode='plain' if args.plain else args.mode,
             hypervisor=args.hypervisor)
    except cloud_mod.UpError as e:
        sys.stderr.write('cloud up: %s\n' % e)
        return 1
    except procs.StartError as e:
        sys.stderr.write('cloud up: %s did not start: %s\n' % (e.name,
                                                               e.reason))
        if e.log:
            sys.stderr.write('--- last lines of %s ---\n%s\n---\n'
                             % (e.log, procs.tail(e.log)))
        sys.stderr.write('cloud up: stopped everything it had started\n')
        return 1
    return 0


def cmd_down(args):
    c = _cloud(args)
    try:
        c.down()
    except cloud_mod.UpError as e:
        sys.stderr.write('cloud down: %s\n' % e)
        return 1
    return 0


def cmd_status(args):
    c = _cloud(args)
    st = c.status()
    if args.format == 'json':
        print(json.dumps(st, indent=2, sort_keys=True))
    else:
        print('state dir:   %s' % st['state_dir'])
        print('nova:        %s (%s)' % (st['nova_version'], st['series']))
        print('clouds.yaml: %s (cloud nrl)' % st['clouds_yaml'])
        print('nova.conf:   %s' % st['nova_conf'])
        for s in st['services']:
            print('  %-26s pid %-7s port %-6s %s  %s' % (
                s['name'], s['pid'], s['port'] or '-',
                'running' if s['running'] else 'STOPPED', s['log']))
        for h in st['computes']:
            print('  compute %s: %s, %s%s' % (
                h['host'], h['mode'], h['hypervisor'],
                ' (%s)' % h['libvirt_uri'] if h['libvirt_uri'] else ''))
    services = st['services']
    return 0 if services and all(s['running'] for s in services) else 3


def cmd_logs(args):
    c = _cloud(args)
    if not c.state:
        sys.stderr.write('cloud logs: no cloud in %s\n' % c.state_dir)
        return 1
    names = [s['name'] for s in c.state.services]
    if not args.service:
        for s in c.state.services:
            print('%-26s %s' % (s['name'], s['log']))
        return 0
    for s in c.state.services:
        if s['name'] == args.service or s.get('host') == args.service:
            print(procs.tail(s['log'], args.lines))
            return 0
    sys.stderr.write('cloud logs: no service %s (have: %s)\n'
                     % (args.service, ', '.join(names)))
    return 1


def cmd_restart_compute(args):
    c = _cloud(args)
    try:
        c.restart_compute(args.host, args.mode, args.nova, image=args.image)
    except procs.StartError as e:
        sys.stderr.write('cloud: %s: %s\n%s\n' % (e.name, e.reason,
                                                  procs.tail(e.log)))
        return 1
    print('cloud: %s restarted as %s' % (args.host, args.mode))
    return 0


def cmd_infra(args):
    c = _cloud(args)
    try:
        if args.action == 'stop':
            done = c.stop_infra(args.service)
        else:
            done = c.start_infra(args.service)
    except procs.StartError as e:
        sys.stderr.write('cloud: %s: %s\n%s\n' % (e.name, e.reason,
                                                  procs.tail(e.log)))
        return 1
    if done:
        said = {'stop': 'stopped', 'start': 'started'}[args.action]
    else:
        said = {'stop': 'was not running', 'start': 'already runs'}[
            args.action]
    print('cloud: %s %s' % (args.service, said))
    return 0


def cmd_partition(args):
    c = _cloud(args)
    try:
        if args.action == 'cut':
            c.cut_off(args.host)
            print('cloud: %s cut off from the broker' % args.host)
        else:
            healed = c.reconnect(args.host)
            print('cloud: %s %s' % (args.host, 'reconnected' if healed
                                    else 'was not cut off'))
    except cloud_mod.UpError as e:
        sys.stderr.write('cloud: %s\n' % e)
        return 1
    return 0


def build_parser():
    p = argparse.ArgumentParser(
        prog='tools/cloud',
        description='A small OpenStack cloud on loopback: every service '
                    'its own process, two computes through '
                    'nova-compute-revert-lock and one plain.')
    p.add_argument('--state-dir', default=DEFAULT_STATE,
                   help='where configs, data and logs go (default %s, or '
                        '$NRL_CLOUD_DIR)' % DEFAULT_STATE)
    sub = p.add_subparsers(dest='command')
    sub.required = True
    up = sub.add_parser('up', help='start the cloud')
    up.add_argument('--series', choices=sorted(SERIES), default='ussuri')
    up.add_argument('--mode', choices=('mixed', 'plain', 'wrapper'),
                    default='mixed',
                    help='mixed: two computes through '
                         'nova-compute-revert-lock, one plain (default); '
                         'plain or wrapper: all three so')
    up.add_argument('--plain', action='store_true',
                    help='same as --mode plain (the baseline)')
    up.add_argument('--hypervisor', choices=cloud_mod.HYPERVISORS,
                    default='fake',
                    help="fake: the series' fake driver (default); "
                         'libvirt: a libvirtd per compute, QEMU (TCG), '
                         'dedicated CPUs')
    up.set_defaults(func=cmd_up)
    down = sub.add_parser('down', help='stop what up started')
    down.set_defaults(func=cmd_down)
    status = sub.add_parser('status', help='what runs, where')
    status.add_argument('--format', choices=('table', 'json'),
                        default='table')
    status.set_defaults(func=cmd_status)
    logs = sub.add_parser('logs', help='list the logs, or tail one')
    logs.add_argument('service', nargs='?')
    logs.add_argument('-n', '--lines', type=int, default=40)
    logs.set_defaults(func=cmd_logs)
    rc = sub.add_parser('restart-compute',
                        help='restart one compute as wrapper or plain')
    rc.add_argument('host')
    rc.add_argument('mode', choices=('wrapper', 'plain'))
    rc.add_argument('--image', action='store_true',
                    help="wrapper only: started as an image's nova-compute, "
                         "made by contrib/kolla's override steps")
    rc.add_argument('--nova', help="run another Nova release (one of the "
                                   "series' peers: a cloud mid-upgrade)")
    rc.set_defaults(func=cmd_restart_compute)
    inf = sub.add_parser('infra',
                         help='stop or start the broker or the database '
                              '(a fault: the services stay up)')
    inf.add_argument('action', choices=('stop', 'start'))
    inf.add_argument('service', choices=cloud_mod.INFRA)
    inf.set_defaults(func=cmd_infra)
    part = sub.add_parser('partition',
                          help='cut one compute off from the broker, or '
                               'heal it (a fault: its packets to and from '
                               'RabbitMQ are dropped)')
    part.add_argument('action', choices=('cut', 'heal'))
    part.add_argument('host')
    part.set_defaults(func=cmd_partition)
    from cloud_lib import checks
    checks.add_parsers(sub)
    return p


def main(argv=None):
    args = build_parser().parse_args(argv)
    return args.func(args)
