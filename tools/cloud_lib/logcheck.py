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

"""The logs are part of the result.

Fails when any service log has an ERROR or CRITICAL line from
``nova_revert_lock``, or when a compute that ran the wrapper logged more
ERROR lines than the plain compute did. The status audit's probes make
a plain compute log ERROR tracebacks of its own (``UnsupportedVersion``,
see the audit's documentation); they are counted apart, so that they
cannot make room for a wrapper's errors. So are the errors of the
failures the family's libvirt steps make on purpose, which they make on
wrapper computes only in the short run: ``live-block``'s (a
destination's ``pre_live_migration`` raising ``DestinationDiskExists``:
the source's and the destination's tracebacks) and the aborts' (the
source's libvirt driver logs "Live Migration failure: ... canceled by
client" at ERROR for every aborted job; when the destination's QEMU
reads the broken stream first, libvirt reports the job failed instead:
"Migration operation has aborted" and "... failed: Unable to write to
socket: Broken pipe"). A wrapper compute's own failure with the same
words would be discounted too.

Nova's pinning errors (``CPUUnpinningInvalid``, ``CPUPinningInvalid``:
the symptoms of a double free on a host with dedicated CPUs) are
counted per compute and fail a compute that ran the wrapper.
"""

import os
import re

from cloud_lib import pinning

OURS = re.compile(r' (ERROR|CRITICAL) nova_revert_lock[.\s]')
#: date, time, pid, level, logger
LINE = re.compile(r'^(\S+ \S+) (\d+) (ERROR|CRITICAL) (\S+)')
PROBE = re.compile(r'UnsupportedVersion.*get_status')
#: the failures the family's live-block and abort steps make (family.py)
INJECTED = re.compile(r'DestinationDiskExists|canceled by client|'
                      r'Migration operation has aborted|'
                      r'Unable to write to socket: Broken pipe')


def _errors(path):
    """(ERROR lines, of them probes', of them injected, lines from us).

    oslo.messaging logs a probe as "Exception during message handling"
    plus its traceback, every line an ERROR line with the same time stamp
    and pid; a block naming ``UnsupportedVersion`` for ``get_status``
    counts as the probe's. A block (same time stamp, pid and logger)
    naming a failure the family's libvirt steps make counts apart too.
    """
    try:
        with open(path, 'rb') as f:
            lines = f.read().decode('utf-8', 'replace').splitlines()
    except (IOError, OSError):
        return 0, 0, []
    ours, errors, probes, injected = [], [], set(), set()
    for line in lines:
        if OURS.search(line):
            ours.append(line.strip()[:300])
        m = LINE.match(line)
        if m:
            key = (m.group(1), m.group(2), m.group(4))
            errors.append(key)
            if m.group(4) == 'oslo_messaging.rpc.server' and (
                    PROBE.search(line)):
                probes.add(key)
            if INJECTED.search(line):
                injected.add(key)
    probe = sum(1 for key in errors if key in probes)
    made = sum(1 for key in errors if key in injected and key not in probes)
    return len(errors), probe, made, ours


def ours_in(directory):
    """Every log in ``directory`` with ERROR/CRITICAL lines of ours.

    For runs that restart, kill and cut off computes on purpose (faults,
    load): Nova's own errors are what the faults make; ours never are.

    :returns: problems, one per log
    """
    problems = []
    for name in sorted(os.listdir(directory)):
        path = os.path.join(directory, name)
        if not os.path.isfile(path):
            continue
        _total, _probe, _made, ours = _errors(path)
        if ours:
            problems.append('%s: %d ERROR/CRITICAL lines from '
                            'nova_revert_lock, first: %s' % (
                                path, len(ours), ours[0]))
    return problems


def check(services):
    """Judge the logs of ``services`` (state entries, retired ones too).

    :returns: (ok, report dict)
    """
    report = {'ours': {}, 'computes': []}
    for s in services:
        total, probe, made, ours = _errors(s['log'])
        if ours:
            report['ours'][s['log']] = ours
        if s.get('host'):
            symptoms = pinning.count_symptoms(s['log'])
            report['computes'].append({
                'host': s['host'], 'mode': s['mode'], 'log': s['log'],
                'errors': total, 'probe_errors': probe,
                'injected_errors': made,
                'other_errors': total - probe - made,
                'pinning_errors': symptoms})
    problems = []
    for log, lines in sorted(report['ours'].items()):
        problems.append('%s: %d ERROR/CRITICAL lines from nova_revert_lock, '
                        'first: %s' % (log, len(lines), lines[0]))
    plain = [v['other_errors'] for v in report['computes']
             if v['mode'] == 'plain']
    if plain:
        ceiling = min(plain)
        report['plain_ceiling'] = ceiling
        for v in report['computes']:
            if v['mode'] == 'wrapper' and v['other_errors'] > ceiling:
                problems.append(
                    '%s (%s) ran the wrapper and logged %d ERROR lines, the '
                    'plain compute %d' % (v['host'], v['log'],
                                          v['other_errors'], ceiling))
    for v in report['computes']:
        if v['mode'] == 'wrapper' and any(v['pinning_errors'].values()):
            problems.append('%s (%s) ran the wrapper and logged Nova\'s '
                            'pinning errors: %s' % (
                                v['host'], v['log'], ', '.join(
                                    '%s %d lines' % kv for kv in sorted(
                                        v['pinning_errors'].items())
                                    if kv[1])))
    report['problems'] = problems
    return not problems, report
