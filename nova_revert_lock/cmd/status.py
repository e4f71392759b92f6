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

"""``nova-revert-lock status``: ask nova-computes whether they are protected.

One row per host (:mod:`nova_revert_lock.audit`). Exit codes: 0 every host
reports ``patched`` or ``already-fixed``; 1 any other answer, no answer,
or no host found; 2 bad usage or unusable configuration.
"""

import json
import logging
import sys

from nova_revert_lock import audit
from nova_revert_lock.audit import query
from nova_revert_lock.audit import rows as audit_rows
from nova_revert_lock.audit import targets
from nova_revert_lock.cmd import common

#: loggers whose output the rows replace
QUIET_LOGGERS = query.MESSAGING_LOGGERS + ('kombu', 'amqp', 'oslo_db',
                                           'oslo.db')


def _cell(value):
    if value is None or value == []:
        return '-'
    if isinstance(value, bool):
        return 'yes' if value else 'NO'
    if isinstance(value, list):
        return ','.join(str(v) for v in value)
    return str(value)


def format_table(rows):
    columns = [('HOST', 'host')]
    if any(r['cell'] for r in rows):
        columns.append(('CELL', 'cell'))
    columns += [('REACHABLE', 'reachable'), ('STATE', 'state'),
                ('NOVA', 'nova_version'), ('SERIES', 'series'),
                ('MIXINS', 'mixins'), ('OPEN TO', audit_rows.open_bugs),
                ('PERIODIC', audit_rows.periodic),
                ('DEGRADED', audit_rows.degraded),
                ('SECTIONS', 'critical_sections'),
                ('MAX HOLD MS', 'max_lock_hold_ms'),
                ('ERRORS', 'critical_section_errors'), ('NOTE', 'error')]
    table = [[title for title, _key in columns]]
    for row in rows:
        table.append([_cell(key(row) if callable(key) else row[key])
                      for _title, key in columns])
    widths = [max(len(cell) for cell in column) for column in zip(*table)]
    return '\n'.join('  '.join(v.ljust(w) for v, w in zip(line, widths))
                     .rstrip() for line in table)


def summary(rows):
    good = sum(1 for r in rows if audit_rows.protected(r))
    text = '%d of %d host(s) protected' % (good, len(rows))
    degraded = sum(1 for r in rows if r.get('degraded'))
    if degraded:
        text += ('; %d with a degraded fix (a read fails, or a live '
                 'migration rollback outlasted the wait: see DEGRADED)'
                 % degraded)
    return text


def add_parser(subparsers):
    """Register ``status`` on the ``nova-revert-lock`` subparsers."""
    parser = subparsers.add_parser(
        'status',
        help='ask nova-computes over RPC whether they run the fix',
        description='Ask each nova-compute, over oslo.messaging, whether '
                    'it runs nova-revert-lock and in which state. Exit 0 '
                    'only if every host is patched or already fixed.')
    common.add_config_file_argument(
        parser, needs='. --host needs [DEFAULT] transport_url, --all '
                      '[api_database] connection')
    which = parser.add_mutually_exclusive_group(required=True)
    which.add_argument('--host', action='append', dest='hosts',
                       metavar='HOST',
                       help='a compute host to ask (repeatable)')
    which.add_argument('--all', action='store_true',
                       help='every nova-compute service in every cell')
    parser.add_argument('--timeout', type=common.positive_seconds,
                        default=10.0, metavar='SECONDS',
                        help='seconds to wait for each host (default 10)')
    parser.add_argument('--format', choices=('table', 'json'),
                        default='table')
    parser.set_defaults(func=cmd_status)
    return parser


def quiet_logging():
    """Leave stderr to the rows (status) or findings (damage)."""
    # NOTE: the rows carry the reasons; driver retries and tracebacks on
    # stderr would bury them. The messaging loggers keep their warnings
    # for query._TransportErrors.
    logging.basicConfig(level=logging.ERROR, stream=sys.stderr)
    for name in QUIET_LOGGERS:
        logger = logging.getLogger(name)
        logger.propagate = False
        logger.setLevel(logging.WARNING if name in query.MESSAGING_LOGGERS
                        else logging.CRITICAL + 1)


def run(args):
    """Rows for the parsed arguments; raises audit.UsageError (exit 2)."""
    if args.all:
        conf = targets.load_nova_config(args.config_file)
        found, rows = targets.targets_from_cells(conf)
    else:
        conf = targets.load_host_config(args.config_file)
        found, rows = targets.targets_from_hosts(conf, args.hosts), []
    return rows + query.query(conf, found, args.timeout)


def cmd_status(args):
    quiet_logging()
    try:
        rows = run(args)
    except audit.UsageError as e:
        sys.stderr.write('nova-revert-lock status: %s\n' % e)
        return common.EXIT_USAGE
    if args.format == 'json':
        print(json.dumps(rows, indent=2, sort_keys=True))
    else:
        print(format_table(rows) if rows else 'no nova-compute found')
        print(summary(rows))
    if not rows:
        sys.stderr.write('nova-revert-lock status: no nova-compute service '
                         'found\n')
        return common.EXIT_NOT_PROTECTED
    if all(audit_rows.protected(r) for r in rows):
        return common.EXIT_OK
    return common.EXIT_NOT_PROTECTED
