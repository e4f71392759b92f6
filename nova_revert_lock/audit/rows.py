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

"""One row per host: what the audit found, or why it found nothing."""

#: the states in which a host is protected
PROTECTED = ('patched', 'already-fixed')
NOT_RUNNING = 'not running the extension'

#: keys of every row, in order (JSON and table)
ROW_KEYS = ('host', 'cell', 'reachable', 'state', 'nova_version', 'series',
            'mixins', 'activated_at', 'critical_sections', 'max_lock_hold_ms',
            'critical_section_errors', 'error')
_EXTRA_KEYS = ('rpc_version', 'missing', 'critical_sections_by_kind',
               'lock_hold_ms_by_kind', 'bugs',
               'critical_section_errors_by_kind', 'periodic_by_node',
               'degraded', 'degraded_ended')


def new_row(host, cell=None, **values):
    row = dict.fromkeys(ROW_KEYS)
    row.update({'host': host, 'cell': cell, 'reachable': False,
                'mixins': []})
    row.update(values)
    return row


def row_from_status(target, status):
    row = new_row(target.host, target.cell, reachable=True)
    if not isinstance(status, dict):
        row['error'] = 'unexpected answer: %r' % (status,)
        return row
    for key in ROW_KEYS[3:-1] + _EXTRA_KEYS:
        if key in status:
            row[key] = status[key]
    if row['state'] not in PROTECTED:
        row['error'] = 'not protected: state %s' % row['state']
        if row.get('missing'):
            row['error'] += ' (missing %s)' % ', '.join(row['missing'])
    return row


def protected(row):
    return bool(row['reachable']) and row['state'] in PROTECTED


def degraded(row):
    """The host's degraded fixes in a few words, or None if none.

    ``source_window@node1 x3 since 2026-12-05T10:00:00Z (MessagingTimeout)``
    per fix and node whose reads fail now: the node counts as upstream's
    code does until they work again.
    """
    periods = row.get('degraded')
    if not periods:
        return None
    return '; '.join('%s@%s x%d since %s (%s)' % (
        p['fix'], p['node'], p['count'], p['since'],
        (p.get('reason') or '').split(':')[0]) for p in periods)


def open_bugs(row):
    """The bugs a host reported itself open to, sorted (or [])."""
    return sorted(bug for bug, status in (row.get('bugs') or {}).items()
                  if status == 'open')


def periodic(row):
    """The host's periodic tasks in a few words, or None if unobserved.

    ``ok``; ``not run yet``; or, per node whose latest run failed, how many
    runs in a row did and the error's class (``node1 failing x3
    CPUPinningInvalid``), per node whose first run has not ended, since
    when.
    """
    nodes = row.get('periodic_by_node')
    if nodes is None:
        return None
    if not nodes:
        return 'not run yet'
    notes = []
    for node, entry in sorted(nodes.items()):
        if entry.get('outcome') == 'failed':
            notes.append('%s failing x%d %s' % (
                node, entry['failed_in_a_row'],
                (entry['error'] or '').split(':')[0]))
        elif entry.get('outcome') is None:
            notes.append('%s first run since %s' % (
                node, entry.get('running_since')))
    return '; '.join(notes) or 'ok'


def one_line(error):
    """An exception as one line: its class, and the first line of it."""
    text = str(error).strip().splitlines()
    text = text[0] if text else ''
    name = type(error).__name__
    return '%s: %s' % (name, text) if text else name
