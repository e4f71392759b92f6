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

"""The support matrix: the guard's verdict on every surveyed release.

``nova-revert-lock support-matrix`` prints it as a table, JSON or reST
(``doc/source/reference/support-matrix.rst``, and ``bug-matrix.rst`` for
``--by bug``, a verdict per bug of the family). Each cell is
:func:`~.decision.check_release`.
"""

import collections

from nova_revert_lock import fixes
from nova_revert_lock.guard import decision
from nova_revert_lock.guard import fingerprint_table
from nova_revert_lock.guard import fingerprints
from nova_revert_lock.guard import releases
from nova_revert_lock import report


def matrix(table=None):
    """{release: {mixin: MixinCheck}} for every surveyed release."""
    table = fingerprint_table if table is None else table
    labels = fingerprints.sorted_releases(
        set(table.SURVEYED_RELEASES) | set(table.SURVEYED_PATCHES))
    return collections.OrderedDict(
        (label, collections.OrderedDict(
            (name, decision.check_release(name, label, table))
            for name in fixes.NAMES))
        for label in labels)


def _short(check):
    """A mixin's cell in the printed matrix."""
    if check.outcome == decision.MATCH:
        return 'match (%s)' % check.series
    if check.outcome == decision.NOT_APPLICABLE:
        return 'n/a'
    return check.outcome


def bug_verdict(checks, names):
    """What a release is to a bug, with the default mixins: ``BUG_*``.

    :param checks: {mixin: MixinCheck} of one release
    :param names: the mixins that fix the bug (``fixes.BUGS``)
    """
    outcomes = set(checks[name].outcome for name in names)
    if decision.UNKNOWN in outcomes:
        return report.BUG_OPEN
    if decision.MATCH in outcomes:
        return report.BUG_PATCHED
    if decision.FIXED_UPSTREAM in outcomes:
        return report.BUG_FIXED_UPSTREAM
    return report.BUG_NOT_APPLICABLE


def _details(check):
    """A mixin's cell in the JSON matrix."""
    return {'outcome': check.outcome, 'series': check.series,
            'note': check.note, 'problems': check.problems}


def _cells(checks, by, mixin_cell):
    """{column: cell} of one release: a verdict per bug, or per mixin."""
    if by == 'bug':
        return collections.OrderedDict(
            (bug, bug_verdict(checks, names))
            for bug, names in fixes.BUGS.items())
    return collections.OrderedDict(
        (name, mixin_cell(check)) for name, check in checks.items())


def grouped(table=None, by='mixin'):
    """The matrix with neighbouring releases of identical rows merged.

    :param by: ``'mixin'`` (a column per mixin) or ``'bug'`` (per bug)
    :returns: list of ``(first, last, count, {column: cell})``; a patched
        build or a branch tip always stands alone
    """
    rows = []
    joinable = False
    for label, checks in matrix(table).items():
        cells = _cells(checks, by, _short)
        alone = not releases.is_release(label)
        if joinable and not alone and rows[-1][3] == cells and (
                releases.series_of(rows[-1][0]) ==
                releases.series_of(label)):
            first, _, count, _ = rows[-1]
            rows[-1] = (first, label, count + 1, cells)
        else:
            rows.append((label, label, 1, cells))
        joinable = not alone
    return rows


def _release_cell(first, last, count):
    if count == 1:
        return first
    return '%s - %s (%d)' % (first, last, count)


def _printed(table, by):
    """The header and the rows of the printed matrix, as lists of cells."""
    rows = grouped(table, by)
    names = list(rows[0][3]) if rows else []
    body = [[_release_cell(first, last, count),
             releases.series_of(first)] + list(cells.values())
            for first, last, count, cells in rows]
    return ['release', 'series'] + names, body


def format_text(table=None, by='mixin'):
    head, body = _printed(table, by)
    widths = [max(len(r[i]) for r in [head] + body)
              for i in range(len(head))]
    lines = ['  '.join(c.ljust(w) for c, w in zip(r, widths)).rstrip()
             for r in [head] + body]
    lines.insert(1, '  '.join('-' * w for w in widths))
    return '\n'.join(lines)


def to_dict(table=None, by='mixin'):
    """{release: {mixin: {outcome, series, note, problems}}}.

    With ``by='bug'``: {release: {bug: verdict}}.
    """
    return collections.OrderedDict(
        (label, _cells(checks, by, _details))
        for label, checks in matrix(table).items())


RST_HEADER = """\
..
   GENERATED by ``nova-revert-lock support-matrix --format rst``
   from the fingerprint table; do not edit by hand (``tox -e
   support-matrix -- --format rst`` prints it, a unit test compares).

==============
Support matrix
==============

What ``nova-revert-lock check`` says of each mixin on every Nova release
and branch tip the fingerprint table surveyed (%(count)d in all, from
%(first)s to %(last)s). Neighbouring releases with the same answers share a
row.

``match (series)``
    the code is code that implementation was verified on (the tests ran on
    it, or on identical code): the mixin applies.
``fixed-upstream``
    the code carries upstream's fix: the mixin stands aside.
``n/a``
    the feature the mixin fixes does not exist in that release.
``unknown``
    surveyed, but no implementation was verified on that code: the mixin is
    not applied (a core mixin makes ``nova-compute-revert-lock`` refuse to
    start; ``source_window`` is left out with a warning).

``x+patches`` is release ``x`` with this project's patch series applied;
``<series>-eol`` is the unreleased tip of a stable branch (tag in
openstack/nova). Where each release was read from is recorded in
``nova_revert_lock/guard/fingerprint_table.py`` (``SOURCES``).

"""


BUG_RST_HEADER = """\
..
   GENERATED by ``nova-revert-lock support-matrix --by bug --format rst``
   from the fingerprint table; do not edit by hand (``tox -e
   support-matrix -- --by bug --format rst`` prints it, a unit test
   compares).

==================
Releases and bugs
==================

What a host running each surveyed Nova release (%(count)d in all, from
%(first)s to %(last)s) is to each bug of the family, with
``nova-compute-revert-lock`` and the default ``[revert_lock] mixins``:
``nova-revert-lock check`` says the same in its ``Bugs:`` line.
Neighbouring releases with the same answers share a row.

``fixed-upstream``
    the release carries upstream's fix: this package's mixin stands aside.
``patched``
    the release has the bug and this package's mixin for it applies.
``open``
    the release has the bug, but no implementation of the mixin was
    verified on its code: the mixin is left out, with a warning (for the
    mixins of bug 1879878, the wrapper refuses to start instead).
``not-applicable``
    the release does not have the feature the bug is in.

Each bug has its page: :doc:`/bugs/index`. The verdicts per mixin are in
:doc:`support-matrix`.

"""


def format_rst(table=None, by='mixin'):
    head, body = _printed(table, by)
    labels = fingerprints.sorted_releases(decision.by_release(
        None if table is None else table.FINGERPRINTS))
    header = BUG_RST_HEADER if by == 'bug' else RST_HEADER
    out = [header % {'count': len(labels), 'first': labels[0],
                     'last': labels[-1]}]
    out.append('.. list-table::\n   :header-rows: 1\n\n')
    for row in [head] + body:
        out.append('   * - %s\n' % row[0])
        out.extend('     - %s\n' % cell for cell in row[1:])
    return ''.join(out)
