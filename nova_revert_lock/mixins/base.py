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

"""What a mixin is, and how the guard decides whether it may apply.

A mixin is described by a :class:`MixinSpec`, which the stevedore
namespace ``nova_revert_lock.compute_mixins`` names. The spec says which
upstream functions the mixin replaces and relies on, how to recognise a
Nova that already carries the fix, and which implementation (a compute
manager mixin class, optionally a resource tracker mixin class) to apply
for each release family whose code it knows.
"""

from nova_revert_lock import fingerprints
from nova_revert_lock import mixins
from nova_revert_lock import releases

#: outcome of a mixin check
MATCH = 'match'
FIXED_UPSTREAM = 'fixed-upstream'
UNKNOWN = 'unknown'
#: the installed Nova does not have the feature the mixin fixes at all
#: (cross-cell resize on Train): nothing to fix, the mixin stands aside
NOT_APPLICABLE = 'not-applicable'


class Implementation(object):
    """The classes one mixin contributes for one release family.

    :ivar manager: mixin class placed before Nova's ``ComputeManager``
    :ivar tracker: mixin class placed before Nova's ``ResourceTracker`` in
        the tracker subclass the composed manager uses, or None. Methods
        marked with :func:`~nova_revert_lock.locking.\
under_compute_resource_semaphore` get the installed tracker's lock.
    """

    def __init__(self, manager, tracker=None):
        self.manager = manager
        self.tracker = tracker


class MixinCheck(object):
    """The guard's verdict on one mixin against the live Nova.

    :ivar name: the mixin name
    :ivar outcome: :data:`MATCH`, :data:`FIXED_UPSTREAM` or :data:`UNKNOWN`
    :ivar family: the series whose implementation applies (on MATCH)
    :ivar releases: releases whose code matches every function checked
        (empty on a MATCH decided by series: see :meth:`MixinSpec.check`)
    :ivar functions: list of :class:`~.fingerprints.FunctionCheck`
    :ivar problems: human-readable reasons for UNKNOWN
    :ivar note: one line explaining the outcome (NOT_APPLICABLE), or None
    """

    def __init__(self, name, outcome, functions, family=None,
                 releases=frozenset(), problems=(), note=None):
        self.name = name
        self.outcome = outcome
        self.functions = functions
        self.family = family
        self.releases = frozenset(releases)
        self.problems = list(problems)
        self.note = note

    def to_dict(self):
        return {
            'name': self.name,
            'outcome': self.outcome,
            'family': self.family,
            'releases': fingerprints.sorted_releases(self.releases),
            'functions': [f.to_dict() for f in self.functions],
            'problems': self.problems,
            'note': self.note,
        }


class MixinSpec(object):
    """One mixin, as the stevedore namespace names it.

    :param name: the entry point name, used in ``[revert_lock] mixins``
    :param summary: one line for ``nova-revert-lock check``
    :param implementations: dict series name -> :class:`Implementation`
    :param fixed_upstream: callable returning True when the installed Nova
        already carries this fix (decided from the code, since
        distributions backport without changing the version)
    :param beyond_upstream: True for a mixin that fixes what upstream left
        open (not bug 1879878 itself). It also applies to a Nova that
        carries upstream's fix; there, if it cannot apply, it stays out
        with a warning instead of refusing.

    :param applies_from: optional ``(ref, release)``: the upstream function
        that came with the feature this mixin fixes, and the first Nova
        release that has it. On a Nova without that function the feature
        does not exist, so there is nothing to fix: the check says
        :data:`NOT_APPLICABLE` and activation leaves the mixin out instead
        of refusing. A Nova that has the function but not the code we
        know is still UNKNOWN.
    """

    def __init__(self, name, summary, implementations, fixed_upstream,
                 beyond_upstream=False, applies_from=None):
        self.name = name
        self.summary = summary
        self.refs = mixins.REFS[name]
        self.implementations = implementations
        self.fixed_upstream = fixed_upstream
        self.beyond_upstream = beyond_upstream
        self.applies_from = applies_from

    def _not_applicable(self):
        """A NOT_APPLICABLE check, or None if the feature exists here."""
        if self.applies_from is None:
            return None
        ref, release = self.applies_from
        try:
            fingerprints.resolve(ref)
        except (ImportError, AttributeError, KeyError):
            return MixinCheck(
                self.name, NOT_APPLICABLE, [], note=(
                    'this Nova has no %s (new in Nova %s): nothing to fix'
                    % (ref.split(':', 1)[1], release)))
        return None

    def check(self, table=None):
        """Check the live Nova; return a :class:`MixinCheck`.

        The mixin matches when every function it replaces or relies on is
        known and either one release has all of them, in a series with an
        implementation, or (a build mixing releases of one series, such as
        a Nova built with the patch series) every function is known in the
        same single series that has an implementation.
        """
        absent = self._not_applicable()
        if absent is not None:
            return absent
        refs = list(self.refs.replaces) + list(self.refs.relies_on)
        functions = [fingerprints.check(ref, table) for ref in refs]
        try:
            fixed = self.fixed_upstream()
        except (ImportError, AttributeError, KeyError):
            fixed = False
        if fixed:
            return MixinCheck(self.name, FIXED_UPSTREAM, functions)
        problems = [f.describe() for f in functions if not f.known]
        if problems:
            return MixinCheck(self.name, UNKNOWN, functions,
                              problems=problems)
        common = frozenset.intersection(*[f.releases for f in functions])
        families = {releases.series_of(r) for r in common}
        families &= set(self.implementations)
        note = None
        if not common:
            # NOTE: no single release has all of this code: a build that
            # took some functions from a later release of the series (a
            # distribution's backport, this project's patch series). Each
            # function is code an implementation was checked against, so
            # the series decides when every function is known in one and
            # the same series and that series has an implementation.
            families = frozenset.intersection(*[
                frozenset(releases.series_of(r) for r in f.releases)
                for f in functions]) & set(self.implementations)
            if len(families) == 1:
                note = ('no single release has all of this code; every '
                        'function is known in %s' % min(families))
        if len(families) != 1:
            return MixinCheck(self.name, UNKNOWN, functions, problems=[
                '%s: the functions match no single known release or '
                'series (%s)' % (self.name, '; '.join(
                    f.describe() for f in functions))])
        (family,) = families
        return MixinCheck(self.name, MATCH, functions,
                          family=family, releases=common, note=note)

    def implementation(self, family):
        return self.implementations[family]


def calls(ref, name):
    """True if the live function ``ref`` refers to the attribute ``name``.

    Used to recognise upstream's fix from the code: a ``_confirm_resize``
    that calls ``drop_move_claim_at_source`` carries it.
    """
    func = fingerprints.resolve(ref)
    func = getattr(func, '__func__', func)
    while hasattr(func, '__wrapped__'):
        func = func.__wrapped__
    return name in func.__code__.co_names
