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

"""The ``nova-revert-lock`` command: check, status, support-matrix.

Exit codes of ``check``: 0 patched or already-fixed; 1 incomplete (a fix
for bug 1879878 that applies is configured out), refused, disabled, or
Nova not importable, and with ``--command-starts-fix`` also when the
``nova-compute`` command does not start through the fix; 2 bad usage or
configuration.
"""

import argparse
import json
import sys

from oslo_config import cfg

from nova_revert_lock.cmd import common
from nova_revert_lock.cmd import damage
from nova_revert_lock.cmd import status
from nova_revert_lock.guard import fingerprints
from nova_revert_lock import report as nrl_report
from nova_revert_lock import startup

EXIT_OK = common.EXIT_OK
EXIT_NOT_PROTECTED = common.EXIT_NOT_PROTECTED
EXIT_USAGE = common.EXIT_USAGE


def _load_config(config_files):
    from nova_revert_lock import conf as nrl_conf
    conf = cfg.ConfigOpts()
    nrl_conf.register_opts(conf)
    conf(common.config_args(config_files), project='nova',
         default_config_files=common.default_files(config_files))
    return conf


def _short(ref):
    return ref.split(':', 1)[1]


#: what the ``Command:`` line says of each :func:`startup.nova_compute_command`
_STARTS = {
    startup.STARTS_FIX: 'starts nova-compute-revert-lock (the fix)',
    startup.STARTS_NOVA: "starts Nova's own nova-compute (no fix)",
    startup.STARTS_UNKNOWN: 'is not a console script nova-revert-lock '
                            'knows',
}


def describe_command(command):
    """One line on the ``nova-compute`` command: ``(path, starts)``."""
    path, starts = command
    if path is None:
        return 'no nova-compute command on PATH or beside %s' % (
            sys.executable)
    return '%s %s' % (path, _STARTS[starts])


def format_check_table(report, command=None):
    lines = [
        'Nova:      %s (%s)' % (report.nova_version or 'unknown',
                                report.series),
        'State:     %s' % report.state,
        'Lock:      %s' % (report.lock or '-'),
        'Applied:   %s' % (', '.join(report.mixins) or '-'),
    ]
    if command is not None:
        lines.append('Command:   %s' % describe_command(command))
    if report.fixed_upstream:
        lines.append('Fixed upstream (standing aside): %s'
                     % ', '.join(report.fixed_upstream))
    if report.not_applied:
        lines.append('Not applied: %s' % ', '.join(report.not_applied))
    lines.append('Bugs:      %s' % ('; '.join(
        '%s %s%s' % (bug, status, ' (%s)' % why if status == 'open' else '')
        for bug, (status, why) in report.bugs.items()) or '-'))
    if report.not_applicable:
        lines.append('Not applicable to this Nova: %s'
                     % ', '.join(report.not_applicable))
    if report.missing:
        lines.append('MISSING:   %s (this Nova has the code they fix; '
                     'not in [revert_lock] mixins)'
                     % ', '.join(report.missing))
    width = max([50] + [len(_short(f.ref)) for c in report.checks
                        for f in c.functions])
    for check in report.checks:
        lines.append('')
        lines.append('mixin %-20s %s%s' % (
            check.name, check.outcome,
            ' (%s)' % check.series if check.series else ''))
        if check.note:
            lines.append('  %s' % check.note)
        for function in check.functions:
            if function.error:
                result = function.error
            elif function.known:
                rel = fingerprints.sorted_releases(function.releases)
                result = '%s: %s' % (
                    'absent, as in' if function.absent else 'known',
                    rel[0] if len(rel) == 1 else '%s .. %s (%d releases)'
                    % (rel[0], rel[-1], len(rel)))
            else:
                result = 'UNKNOWN CODE'
            lines.append('  %-*s %-12s %s' % (
                width, _short(function.ref),
                (function.fingerprint or '-')[:12], result))
    lines.append('')
    if report.missing:
        lines.append('NOT PROTECTED against bug 1879878: add %s to '
                     '[revert_lock] mixins.' % ', '.join(report.missing))
    if report.warnings:
        lines.append('Warnings:')
        lines.extend('  - %s' % w for w in report.warnings)
    if report.problems:
        lines.append('Problems:')
        lines.extend('  - %s' % p for p in report.problems)
    else:
        lines.append('Problems:  none')
    return '\n'.join(lines)


def cmd_check(args):
    from nova_revert_lock import activation
    from nova_revert_lock import exception
    try:
        conf = _load_config(args.config_file)
        report = activation.check(conf)
    except (exception.ConfigurationError, cfg.Error) as e:
        sys.stderr.write('nova-revert-lock: %s\n' % e)
        return EXIT_USAGE
    except exception.NovaNotAvailable as e:
        if args.format == 'json':
            print(json.dumps({'state': None, 'nova_version': None,
                              'series': None, 'mixins': [],
                              'problems': [str(e)]}, indent=2))
        else:
            sys.stderr.write('nova-revert-lock: %s\n' % e)
        return EXIT_NOT_PROTECTED
    command = startup.nova_compute_command()
    if args.format == 'json':
        data = report.to_dict()
        data['command'] = {'path': command[0], 'starts': command[1]}
        print(json.dumps(data, indent=2, sort_keys=True))
    else:
        print(format_check_table(report, command))
    if args.command_starts_fix and command[1] != startup.STARTS_FIX:
        sys.stderr.write('nova-revert-lock: the nova-compute command does '
                         'not start through the fix: %s\n'
                         % describe_command(command))
        return EXIT_NOT_PROTECTED
    if report.state in (nrl_report.PATCHED, nrl_report.ALREADY_FIXED):
        return EXIT_OK
    return EXIT_NOT_PROTECTED


def cmd_support_matrix(args):
    from nova_revert_lock.guard import matrix
    if args.format == 'json':
        print(json.dumps(matrix.to_dict(by=args.by), indent=2))
    elif args.format == 'rst':
        print(matrix.format_rst(by=args.by), end='')
    else:
        print(matrix.format_text(by=args.by))
    return EXIT_OK


def build_parser():
    parser = argparse.ArgumentParser(
        prog='nova-revert-lock',
        description='Inspect nova-revert-lock, the fix for Nova bug '
                    '1879878 on releases without it.')
    sub = parser.add_subparsers(dest='command', metavar='COMMAND')
    sub.required = True

    check = sub.add_parser(
        'check', help='report on the Nova installed here: release, '
                      'state, each mixin and fingerprint')
    common.add_config_file_argument(check, ' to read [revert_lock] from')
    check.add_argument('--format', choices=('table', 'json'),
                       default='table')
    check.add_argument(
        '--command-starts-fix', action='store_true',
        help='also exit 1 unless the nova-compute command (the first on '
             'PATH) starts through nova-compute-revert-lock: for images '
             'whose nova-compute was replaced by it (Kolla, TripleO)')
    check.set_defaults(func=cmd_check)

    status.add_parser(sub)
    damage.add_parser(sub)

    support = sub.add_parser(
        'support-matrix',
        help='what check says of each mixin on every surveyed Nova '
             'release and branch tip (needs no Nova)')
    support.add_argument('--format', choices=('table', 'json', 'rst'),
                         default='table')
    support.add_argument('--by', choices=('mixin', 'bug'), default='mixin',
                         help='a column per mixin (default), or per bug '
                              'of the family')
    support.set_defaults(func=cmd_support_matrix)
    return parser


def main(argv=None):
    parser = build_parser()
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    return args.func(args)


if __name__ == '__main__':
    sys.exit(main())
