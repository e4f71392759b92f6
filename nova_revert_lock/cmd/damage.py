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

"""``nova-revert-lock damage``: what the races already did, and the repair.

Exit codes: 0 nothing found and everything read; 1 damage found; 2 bad
usage or unusable configuration; 3 nothing found in what could be read,
but some of it (a cell's database, placement) could not be.
"""

import json
import sys
import time

from nova_revert_lock import audit
from nova_revert_lock.audit import damage
from nova_revert_lock.cmd import common
from nova_revert_lock.cmd import status

EXIT_INCOMPLETE = 3


def add_parser(subparsers):
    parser = subparsers.add_parser(
        'damage',
        help='find what the races already did (servers in ERROR, frozen '
             'periodic tasks, shared pinned CPUs, orphaned allocations, '
             'stuck migrations) and say how to repair it; read-only',
        description='Read the API and cell databases, placement (through '
                    'nova-manage placement audit, without --delete) and '
                    'the status endpoints of the hosts that run the fix; '
                    'print each damage found and the repair commands in '
                    'the order to run them. Writes nothing. Exit 0 clean, '
                    '1 damage found, 3 part of the cloud could not be '
                    'read.')
    common.add_config_file_argument(
        parser, needs='. Needs [api_database] connection, and [placement] '
                      'credentials for the allocations')
    parser.add_argument('--timeout', type=common.positive_seconds,
                        default=10.0, metavar='SECONDS',
                        help='seconds to wait for each status endpoint '
                             '(default 10)')
    parser.add_argument('--migration-age', type=common.positive_seconds,
                        default=3600.0, metavar='SECONDS',
                        help='a move under way for longer than this is '
                             'reported as stuck (default 3600)')
    parser.add_argument('--format', choices=('table', 'json'),
                        default='table')
    parser.set_defaults(func=cmd_damage)
    return parser


def format_text(result):
    lines = []
    for item in result['findings']:
        where = ' '.join('%s=%s' % (key, item[key]) for key in
                         ('cell', 'host', 'node', 'server', 'migration',
                          'bug') if item[key])
        lines.append('%s %s\n    %s' % (item['kind'], where, item['detail']))
    for item in result['unreadable']:
        lines.append('NOT CHECKED %s: %s' % (item['what'], item['error']))
    lines.append('checked:')
    lines += ['  %s' % item for item in result['checked']]
    if result['repair']:
        lines.append('repair, in this order:')
        lines += ['  %d. %s' % (n, step)
                  for n, step in enumerate(result['repair'], 1)]
    lines.append('%d finding(s) in %.1f s' % (len(result['findings']),
                                              result['seconds']))
    return '\n'.join(lines)


def cmd_damage(args):
    status.quiet_logging()
    started = time.time()
    try:
        report = damage.collect(args.config_file, timeout=args.timeout,
                                migration_age=args.migration_age)
    except audit.UsageError as e:
        sys.stderr.write('nova-revert-lock damage: %s\n' % e)
        return common.EXIT_USAGE
    result = report.as_dict()
    result['seconds'] = round(time.time() - started, 1)
    if args.format == 'json':
        print(json.dumps(result, indent=2, sort_keys=True))
    else:
        print(format_text(result))
    if result['findings']:
        return common.EXIT_NOT_PROTECTED
    return EXIT_INCOMPLETE if result['unreadable'] else common.EXIT_OK
