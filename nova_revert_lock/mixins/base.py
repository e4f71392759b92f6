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
for each series whose code it was verified on.
"""

import inspect

from nova_revert_lock.guard import decision
from nova_revert_lock.guard import fingerprints
from nova_revert_lock.guard import recognise
from nova_revert_lock import mixins

# NOTE: the verdict and its outcomes live in decision.py, which the support
# matrix shares without importing Nova; these names are kept for callers.
MATCH = decision.MATCH
FIXED_UPSTREAM = decision.FIXED_UPSTREAM
UNKNOWN = decision.UNKNOWN
NOT_APPLICABLE = decision.NOT_APPLICABLE
MixinCheck = decision.MixinCheck

_DECLARED = object()


class Implementation(object):
    """The classes one mixin contributes for one series.

    :ivar manager: mixin class placed before Nova's ``ComputeManager``
    :ivar tracker: mixin class placed before Nova's ``ResourceTracker`` in
        the tracker subclass the composed manager uses, or None. Methods
        marked with :func:`~nova_revert_lock.locking.\
under_compute_resource_semaphore` get the installed tracker's lock.
    """

    def __init__(self, manager, tracker=None):
        self.manager = manager
        self.tracker = tracker

    def select(self):
        """The implementation for the live code: this one."""
        return self


class Variants(object):
    """Implementations of one series for code that differs within it.

    A series' last code (its ``-eol`` tag) can differ from its releases
    around the functions a mixin replaces. Which variant applies is read
    off the live code, as :func:`calls` recognises upstream's fix; the
    guard has checked that code against the fingerprint table before any
    variant is chosen.

    :param choose: callable returning the key of the variant that fits
        the installed Nova
    :param variants: dict key -> :class:`Implementation`
    """

    def __init__(self, choose, variants):
        self.choose = choose
        self.variants = variants

    def select(self):
        return self.variants[self.choose()]


class MixinSpec(object):
    """One mixin, as the stevedore namespace names it.

    What the guard checks is declared in :mod:`nova_revert_lock.mixins`
    (``REFS``, ``FIXED_WHEN``, ``APPLIES_FROM``, ``BEYOND_UPSTREAM``,
    ``FAMILY``, ``VERIFIED``), so that the support matrix can ask the
    same questions without importing Nova; the spec adds the classes.
    The keyword arguments default to those declarations (tests override
    them).

    :param name: the entry point name, used in ``[revert_lock] mixins``
    :param summary: one line for ``nova-revert-lock check``
    :param implementations: dict series name -> :class:`Implementation`
        (or :class:`Variants` of it), one per series
        ``mixins.VERIFIED[name]`` declares
    :param fixed_upstream: callable returning True when the installed
        Nova already carries this fix
    :param applies_from: ``(ref, release)``: the upstream function that
        came with the feature this mixin fixes, and the first release
        that has it. On a Nova without it there is nothing to fix: the
        check says :data:`NOT_APPLICABLE`. A Nova that has the function
        but not the code we know is still UNKNOWN.
    """

    def __init__(self, name, summary, implementations, fixed_upstream=None,
                 applies_from=_DECLARED):
        self.name = name
        self.summary = summary
        self.refs = mixins.REFS[name]
        self.implementations = implementations
        self._fixed_upstream = fixed_upstream
        self.beyond_upstream = name in mixins.BEYOND_UPSTREAM
        #: admitted alone, with a warning when it cannot apply, rather
        #: than refusing the activation (``mixins.EXTRAS``)
        self.extra = name in mixins.EXTRAS
        self.applies_from = (mixins.APPLIES_FROM.get(name)
                             if applies_from is _DECLARED else applies_from)

    def fixed_upstream(self):
        """True when the installed Nova already carries this fix.

        Decided from what the code does (``mixins.FIXED_WHEN``, every
        part of the fix; :mod:`~nova_revert_lock.guard.recognise`), since
        distributions backport without changing the version.
        """
        if self._fixed_upstream is not None:
            return self._fixed_upstream()
        return recognise.fixed_live(mixins.FIXED_WHEN.get(self.name, ()))

    def _not_applicable(self):
        """A NOT_APPLICABLE check, or None if the feature exists here."""
        if self.applies_from is None:
            return None
        try:
            fingerprints.resolve(self.applies_from[0])
        except (ImportError, AttributeError, KeyError):
            return MixinCheck(self.name, NOT_APPLICABLE, [],
                              note=decision.not_applicable_note(
                                  self.name, self.applies_from))
        return None

    def check(self, table=None):
        """Check the live Nova; return a :class:`MixinCheck`.

        :param table: a ``FINGERPRINTS`` mapping (default: the generated
            table); see :func:`~nova_revert_lock.decision.decide`

        A function relied on that is absent from the installed Nova is
        known in the surveyed releases that lack it too (see
        :func:`~nova_revert_lock.guard.fingerprints.check`).
        """
        absent = self._not_applicable()
        if absent is not None:
            return absent
        # NOTE: a function relied on may be absent where a release lacks
        # it (train-eol split _finish_revert_resize out of
        # finish_revert_resize): absent, it matches the surveyed releases
        # without it. A function replaced must exist.
        functions = (
            [fingerprints.check(ref, table) for ref in self.refs.replaces] +
            [fingerprints.check(ref, table, absent_ok=True)
             for ref in self.refs.relies_on])
        try:
            fixed = self.fixed_upstream()
        except (ImportError, AttributeError, KeyError):
            fixed = False
        verified = decision.verified_releases(
            self.name, self.implementations, table)
        return decision.decide(self.name, functions, fixed, verified, table)

    def implementation(self, series):
        """The :class:`Implementation` for ``series`` and the live code."""
        return self.implementations[series].select()


def calls(ref, name, nested=False):
    """True if the live function ``ref`` refers to the attribute ``name``.

    Used to recognise upstream's fix from the code: a ``_confirm_resize``
    that calls ``drop_move_claim_at_source`` carries it.

    :param nested: True to count functions defined inside ``ref`` as its
        code (``confirm_resize`` does its work in a nested, locked
        ``do_confirm_resize``)
    """
    func = fingerprints.innermost(fingerprints.resolve(ref))
    codes = [func.__code__]
    while codes:
        code = codes.pop()
        if name in code.co_names:
            return True
        if nested:
            codes.extend(c for c in code.co_consts if inspect.iscode(c))
    return False
