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

"""How long the cloud's computes hold the tracker's lock, section by section.

Every compute of the cloud runs under the same lock tracer
(``traced_compute.py``), plain or wrapper, and appends one line per
section under ``COMPUTE_RESOURCE_SEMAPHORE`` to its trace. Read over a
time window (one soak), the traces give per compute mode and per
synchronized function the number of sections and their hold times:
the periodic task (``_update_available_resource``) with and without the
extension, and the sections the mixins hold the lock for.

Standard library and the package's own lock counters only (which
import nothing else): the orchestrator reads these, as does the soak in
the cloud's virtualenv.
"""

import datetime
import json
import os

from nova_revert_lock.sections import percentile  # noqa: F401 - for soak.py

#: the locked body of the periodic task
PERIODIC = '_update_available_resource'
DOC = 'doc/source/benchmarks.rst'
BEGIN = '.. BENCH-CLOUD-BEGIN'
END = '.. BENCH-CLOUD-END'


def read(path, since, until):
    """The trace's sections released within [since, until] (epoch s)."""
    out = []
    try:
        with open(path) as f:
            for line in f:
                try:
                    rec = json.loads(line)
                except ValueError:
                    continue  # a line cut short by a stopped compute
                if since <= rec.get('t', 0) <= until:
                    out.append(rec)
    except IOError:
        pass
    return out


def figures(values):
    return {'n': len(values),
            'p50': round(percentile(values, 50), 2),
            'p99': round(percentile(values, 99), 2),
            'max': round(max(values), 2)}


def summarize(computes, trace_of, since, until):
    """{mode: {function: figures}} over the computes' traces.

    :param computes: [{'host', 'mode'}] as they ran during the window
    :param trace_of: host -> the path of its trace
    """
    by_mode = {}
    for h in computes:
        for rec in read(trace_of(h['host']), since, until):
            by_mode.setdefault(h['mode'], {}).setdefault(
                rec['f'], []).append(rec['hold_ms'])
    return {mode: {f: figures(v) for f, v in sorted(fs.items())}
            for mode, fs in sorted(by_mode.items())}


def table(holds):
    """Lines: one per compute mode and function, the periodic first."""
    lines = ['  %-8s %-40s %6s %9s %9s %9s' % (
        'computes', 'section (synchronized function)', 'n', 'p50 ms',
        'p99 ms', 'max ms')]
    for mode, fs in sorted(holds.items()):
        for f in sorted(fs, key=lambda f: (f != PERIODIC, f)):
            x = fs[f]
            lines.append('  %-8s %-40s %6d %9.2f %9.2f %9.2f' % (
                mode, f, x['n'], x['p50'], x['p99'], x['max']))
    return lines


def extension_table(status_rows):
    """Lines: the extension's own counters per kind, per wrapper compute.

    What ``nova-revert-lock status`` reports (``lock_hold_ms_by_kind``):
    measured by the mixins themselves, inside the lock.
    """
    lines = []
    for row in sorted(status_rows, key=lambda r: r.get('host') or ''):
        for kind, x in sorted((row.get('lock_hold_ms_by_kind')
                               or {}).items()):
            lines.append('  %-14s %-26s %6d %9.2f %9.2f %9.2f' % (
                row.get('host'), kind, x['n'], x['p50'], x['p99'],
                x['max']))
    if lines:
        lines.insert(0, '  %-14s %-26s %6s %9s %9s %9s' % (
            'host', 'section (status)', 'n', 'p50 ms', 'p99 ms', 'max ms'))
    return lines


def ratio(holds, key='p50'):
    """Periodic hold, wrapper over plain computes (or None)."""
    try:
        return round(holds['wrapper'][PERIODIC][key] /
                     holds['plain'][PERIODIC][key], 3)
    except (KeyError, ZeroDivisionError):
        return None


def render(soaks):
    """The benchmark page's cloud section, from the soaks' results.

    :param soaks: {label: soak result with 'lock_holds' and 'status'}
    """
    holds = {}
    for label, soak in sorted(soaks.items()):
        holds.update(soak.get('lock_holds') or {})
    cycles = max(s.get('cycles', 0) for s in soaks.values()) // 2
    out = ['Results: the lock as deployed',
           '-----------------------------',
           '',
           'Measured with ``tools/cloud short --cycles %d`` on %s: the '
           'tracker lock\'s sections on the cloud\'s three computes '
           '(Nova 21.1.0, MariaDB, RabbitMQ, the periodic task every '
           'second) during the soaks, %s.' % (
               cycles, datetime.date.today().isoformat(),
               ' and '.join('%d resize cycles on %s computes' % (
                   s.get('cycles', 0), label)
                   for label, s in sorted(soaks.items()))),
           '',
           '.. code-block:: text',
           '']
    body = table(holds)
    for key in ('p50', 'p99'):
        body.append('  periodic task hold %s, wrapper / plain computes: %s'
                    % (key, ratio(holds, key)))
    ext = []
    for label, soak in sorted(soaks.items()):
        ext += extension_table(soak.get('status') or [])
    if ext:
        body += ['', '  the extension\'s own counters (nova-revert-lock '
                 'status), whole life of each compute'] + ext
    out += ['   ' + line.strip('\n') if line.strip() else ''
            for line in body]
    return '\n'.join(out) + '\n'


def write_docs(top, text):
    """Replace the marked section of the benchmark page with ``text``."""
    path = os.path.join(top, DOC)
    with open(path) as f:
        page = f.read()
    head, sep, rest = page.partition(BEGIN)
    if not sep:
        raise ValueError('%s has no %s marker' % (path, BEGIN))
    _old, sep, tail = rest.partition(END)
    if not sep:
        raise ValueError('%s has no %s marker' % (path, END))
    with open(path, 'w') as f:
        f.write(head + BEGIN + ' (generated by tools/cloud lock-holds '
                '--write-docs; do not edit by hand)\n\n' + text + '\n' +
                END + tail)
