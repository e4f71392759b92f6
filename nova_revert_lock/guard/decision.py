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

"""The guard's verdict on one mixin, on live code or on a surveyed release.

:func:`decide` serves both the live check in ``nova-compute``
(``MixinSpec.check``) and the support matrix (:func:`check_release`), so
both reach the same verdict on the same code.
"""

import collections

from nova_revert_lock import fixes
from nova_revert_lock.guard import fingerprint_table
from nova_revert_lock.guard import fingerprints
from nova_revert_lock.guard import releases

#: outcome of a mixin check
MATCH = 'match'
FIXED_UPSTREAM = 'fixed-upstream'
UNKNOWN = 'unknown'
#: the installed Nova does not have the feature the mixin fixes at all
#: (cross-cell resize on Train): nothing to fix, the mixin stands aside
NOT_APPLICABLE = 'not-applicable'


class MixinCheck(object):
    """The guard's verdict on one mixin.

    :ivar outcome: one of the outcomes above
    :ivar series: the series whose implementation applies (on MATCH)
    :ivar releases: releases whose code matches every function checked
    :ivar functions: list of :class:`~.fingerprints.FunctionCheck`
    :ivar problems: human-readable reasons for UNKNOWN
    :ivar note: one line explaining the outcome, or None
    :ivar nearest: on UNKNOWN, ``(release, [refs that differ])`` for the
        surveyed release whose code differs least, or None
    """

    def __init__(self, name, outcome, functions, series=None,
                 releases=frozenset(), problems=(), note=None,
                 nearest=None):
        self.name = name
        self.outcome = outcome
        self.functions = functions
        self.series = series
        self.releases = frozenset(releases)
        self.problems = list(problems)
        self.note = note
        self.nearest = nearest

    def to_dict(self):
        return {
            'name': self.name,
            'outcome': self.outcome,
            'series': self.series,
            'releases': fingerprints.sorted_releases(self.releases),
            'functions': [f.to_dict() for f in self.functions],
            'problems': self.problems,
            'note': self.note,
            'nearest': None if self.nearest is None else {
                'release': self.nearest[0],
                'differs': list(self.nearest[1])},
        }


def not_applicable_note(name, applies_from=None):
    ref, release = applies_from or fixes.FIXES[name].applies_from
    return ('this Nova has no %s (new in Nova %s): nothing to fix'
            % (ref.split(':', 1)[1], release))


def _series_order(series):
    """Sort key of a series name: its Nova major version."""
    return releases.MAJORS.get(series, -1)


#: (table, by_release(table)) of the last table inverted: the guard asks
#: for the same table once per mixin while nova-compute starts
_BY_RELEASE = (None, None)


def by_release(table=None):
    """{surveyed release: {ref: fingerprint}}, cached: not to be modified."""
    global _BY_RELEASE
    table = fingerprint_table.FINGERPRINTS if table is None else table
    if _BY_RELEASE[0] is table:
        return _BY_RELEASE[1]
    out = collections.defaultdict(dict)
    for ref, digests in table.items():
        for digest, labels in digests.items():
            for label in labels:
                out[label][ref] = digest
    out = dict(out)
    _BY_RELEASE = (table, out)
    return out


def nearest_release(functions, table=None):
    """The surveyed release whose code differs least from ``functions``.

    :returns: ``(release, [refs that differ])``, or None if nothing was
        surveyed; ties go to the newest release, likelier the operator's.
    """
    best = None
    for label, code in by_release(table).items():
        if '+' in label:
            continue
        differs = [f.ref for f in functions
                   if (f.ref in code if f.absent else
                       f.fingerprint is None or
                       code.get(f.ref) != f.fingerprint)]
        key = (len(differs), [-k for k in fingerprints.release_key(label)])
        if best is None or key < best[0]:
            best = (key, label, differs)
    return None if best is None else (best[1], best[2])


def expand(specs, labels):
    """Surveyed labels named by ``specs`` (labels or closed ranges).

    A range ``20.0.0-20.6.1`` takes every release in it; patched builds
    and branch tips are only ever named one by one.
    """
    key = fingerprints.release_key
    out = set()
    for spec in specs:
        low, sep, high = spec.partition('-')
        if not sep or not high[:1].isdigit():
            out.add(spec)
            continue
        out.update(label for label in labels
                   if releases.is_release(label) and
                   key(low) <= key(label) <= key(high))
    return out


def verified_releases(name, implemented, table=None):
    """{series: set of labels} the implementations were verified on.

    From the declaration's ``verified``; a series without a declaration (a
    test's spec) counts every surveyed release of that series.
    """
    labels = set(by_release(table))
    declared = fixes.FIXES[name].verified if name in fixes.FIXES else {}
    out = {}
    for series in implemented:
        if series in declared:
            out[series] = expand(declared[series], labels)
        else:
            out[series] = {label for label in labels
                           if releases.series_of(label) == series}
    return out


def decide(name, functions, fixed, verified, table=None):
    """The verdict on mixin ``name`` for code described by ``functions``.

    :param fixed: True when the code carries upstream's fix (``fixed_when``)
    :param verified: {series: labels} (:func:`verified_releases`)

    One verified release must ship every function as the code has them
    (doc/source/reference/guard.rst, "How code is verified"). Of several
    matching series the newest wins.
    """
    if fixed:
        return MixinCheck(name, FIXED_UPSTREAM, functions)
    problems = [f.describe() for f in functions if not f.known]
    if problems:
        nearest = note = None
        if any(f.fingerprint is not None and not f.known
               for f in functions):
            # Code nobody surveyed: name the release it is nearest to, so
            # that an operator can report it.
            nearest = nearest_release(functions, table)
        if nearest is not None:
            note = 'nearest known release: Nova %s (differs in %s)' % (
                nearest[0], ', '.join(r.split(':', 1)[1]
                                      for r in nearest[1]))
            problems.append('%s: %s' % (name, note))
        return MixinCheck(name, UNKNOWN, functions, problems=problems,
                          note=note, nearest=nearest)
    common = frozenset.intersection(*[f.releases for f in functions])
    series_found = [series for series, labels in verified.items()
                    if common & labels]
    if not series_found:
        known_in = fingerprints.sorted_releases(common)
        tested = '; '.join(
            '%s on %s' % (series, ', '.join(
                fingerprints.sorted_releases(labels)) or 'nothing surveyed')
            for series, labels in sorted(
                verified.items(), key=lambda item: _series_order(item[0])))
        return MixinCheck(name, UNKNOWN, functions, problems=[
            '%s: the code is known (%s) but no implementation was '
            'verified on it (verified: %s)' % (
                name, 'Nova %s' % ', '.join(known_in) if known_in else
                'each function in some release, no release has them '
                'all, so no test ran on this combination',
                tested or 'no implementation')])
    series = max(series_found, key=_series_order)
    return MixinCheck(name, MATCH, functions, series=series,
                      releases=common)


def check_release(name, label, table=None):
    """What ``check`` says of mixin ``name`` on surveyed release ``label``."""
    table = fingerprint_table if table is None else table
    code = by_release(table.FINGERPRINTS).get(label, {})
    fix = fixes.FIXES[name]
    if fix.applies_from is not None and fix.applies_from[0] not in code:
        return MixinCheck(name, NOT_APPLICABLE, [],
                          note=not_applicable_note(name))
    functions = [
        fingerprints.check_digest(ref, code.get(ref), table.FINGERPRINTS,
                                  absent_ok=ref in fix.relies_on,
                                  where='Nova %s' % label)
        for ref in fix.replaces + fix.relies_on]
    fixed = label in table.FIXED.get(name, ())
    verified = verified_releases(name, fix.verified, table.FINGERPRINTS)
    return decide(name, functions, fixed, verified, table.FINGERPRINTS)
