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

"""What a mixin is (:class:`MixinSpec`), and code several mixins share.

A mixin imports the guard, never the other way round.
"""

import inspect

from nova.objects import base as obj_base

from nova_revert_lock import fixes
from nova_revert_lock.guard import decision
from nova_revert_lock.guard import fingerprints
from nova_revert_lock.guard import recognise

_DECLARED = object()


class Implementation(object):
    """The manager and tracker mixin classes (or None) for one series."""

    def __init__(self, manager=None, tracker=None):
        self.manager = manager
        self.tracker = tracker

    def select(self):
        return self


class Variants(object):
    """Implementations of one series for code that differs within it.

    A series' last code (its ``-eol`` tag) can differ from its releases.
    ``choose()`` reads the key of ``variants`` off the checked live code.
    """

    def __init__(self, choose, variants):
        self.choose = choose
        self.variants = variants

    def select(self):
        return self.variants[self.choose()]


class MixinSpec(object):
    """One mixin, as the stevedore namespace names it.

    The keyword arguments default to the declaration (tests override them).

    :param name: the entry point name, used in ``[revert_lock] mixins``
    :param implementations: dict series name -> :class:`Implementation`
        (or :class:`Variants` of it), or one of them for every series the
        declaration's ``verified`` names
    :param summary: one line for ``nova-revert-lock check``
    :param fixed_upstream: callable, True if Nova carries this fix
    :param applies_from: see :func:`nova_revert_lock.fixes.declare`; a
        Nova with that function but not the code we know is UNKNOWN.
    """

    def __init__(self, name, implementations, summary=None,
                 fixed_upstream=None, applies_from=_DECLARED):
        self.name = name
        #: the declaration: what it replaces and relies on
        self.refs = fix = fixes.FIXES[name]
        self.summary = fix.summary if summary is None else summary
        if isinstance(implementations, (Implementation, Variants)):
            implementations = dict.fromkeys(fix.verified, implementations)
        self.implementations = implementations
        self._fixed_upstream = fixed_upstream
        self.beyond_upstream = fix.kind == fixes.BEYOND_UPSTREAM
        self.extra = fixes.is_extra(name)
        self.applies_from = (fix.applies_from if applies_from is _DECLARED
                             else applies_from)

    def fixed_upstream(self):
        """True if the live code carries this fix (backports keep versions)."""
        if self._fixed_upstream is not None:
            return self._fixed_upstream()
        return recognise.fixed_live(self.refs.fixed_when)

    def _not_applicable(self):
        """A NOT_APPLICABLE check, or None if the feature exists here."""
        if self.applies_from is None:
            return None
        try:
            fingerprints.resolve(self.applies_from[0])
        except (ImportError, AttributeError, KeyError):
            return decision.MixinCheck(
                self.name, decision.NOT_APPLICABLE, [],
                note=decision.not_applicable_note(self.name,
                                                  self.applies_from))
        return None

    def check(self, table=None):
        """Check the live Nova; ``table`` as for :func:`~.decision.decide`."""
        absent = self._not_applicable()
        if absent is not None:
            return absent
        # NOTE: a function relied on may be absent, as in the surveyed
        # releases that lack it; a function replaced must exist.
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

    :param nested: True to count functions defined inside ``ref`` too (as
        ``confirm_resize``'s locked ``do_confirm_resize``)
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


def delete_stashed_flavor_info(instance):
    """Forget what a resize stashed on the instance, as upstream does."""
    instance.old_flavor = None
    instance.new_flavor = None
    instance.system_metadata.pop('old_vm_state', None)
    instance.save()


class NetworkMigration(object):
    """Manager side: the migration as the network API takes it."""

    def _nrl_network_migration(self, migration):
        return migration


class TrainNetworkMigration(NetworkMigration):
    """Train's network API takes a primitive of the migration."""

    def _nrl_network_migration(self, migration):
        return obj_base.obj_to_primitive(migration)


def members(object_list):
    """The list inside a Nova object list (a plain list as it is).

    A loop over an ``InstanceList`` itself fetches each member through
    the list object's ``__getitem__``; the periodic task's loops over a
    node's instances read the list it holds instead.
    """
    return getattr(object_list, 'objects', object_list)
