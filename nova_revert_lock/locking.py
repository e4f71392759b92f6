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

"""Take ``COMPUTE_RESOURCE_SEMAPHORE`` exactly as the installed tracker does.

A fair and a plain lock of one name never exclude each other, and Train
takes it plain, later releases fair: see "Lock identity" in
doc/source/reference/architecture.rst. The lock is not reentrant: code
under it must never call a synchronized tracker method.
"""

import inspect

from oslo_concurrency import lockutils

from nova_revert_lock.guard import fingerprints


class UnknownLock(Exception):
    """The installed tracker does not lock the way we can reproduce."""


class LockSpec(object):
    """The arguments one ``lockutils.synchronized`` wrapper was made with.

    :ivar name: the lock name (``'compute_resources'``)
    :ivar kwargs: every other argument, as the wrapper closed over it
    """

    def __init__(self, name, kwargs):
        self.name = name
        self.kwargs = dict(kwargs)

    @property
    def fair(self):
        return bool(self.kwargs.get('fair', False))

    @property
    def external(self):
        return bool(self.kwargs.get('external', False))

    def describe(self):
        return '%s (%s%s)' % (self.name, 'fair' if self.fair else 'plain',
                              ', external' if self.external else '')

    def __repr__(self):
        return 'LockSpec(%r, %r)' % (self.name, self.kwargs)

    def synchronized(self):
        """A decorator taking this very lock, as the tracker takes it."""
        return lockutils.synchronized(self.name, **self.kwargs)


def lock_of(func):
    """The :class:`LockSpec` a ``lockutils.synchronized`` function takes.

    Nova's ``utils.synchronized`` is a prefixed partial of it.

    :raises UnknownLock: if ``func`` is not such a wrapper
    """
    func = getattr(func, '__func__', func)
    # every lockutils.synchronized wrapper shares one code object
    wrapper = lockutils.synchronized('nova-revert-lock-probe')(lambda: None)
    if getattr(func, '__code__', None) is not wrapper.__code__:
        raise UnknownLock('%r is not wrapped by lockutils.synchronized'
                          % (func,))
    closure = inspect.getclosurevars(func).nonlocals
    accepted = inspect.signature(lockutils.synchronized).parameters
    kwargs = {k: v for k, v in closure.items()
              if k in accepted and k != 'name'}
    if 'name' not in closure:
        raise UnknownLock('cannot read the lock name of %r' % (func,))
    return LockSpec(closure['name'], kwargs)


def tracker_lock(refs):
    """The one lock all of ``refs`` (``module:Class.method``) take.

    The periodic task must be among them.

    :raises UnknownLock: if one is not synchronized or they disagree
    """
    specs = {}
    for ref in refs:
        try:
            func = fingerprints.resolve(ref)
        except (ImportError, AttributeError, KeyError):
            raise UnknownLock('%s not found' % ref)
        specs[ref] = lock_of(func)
    distinct = {repr(s) for s in specs.values()}
    if len(distinct) != 1:
        raise UnknownLock('tracker methods take different locks: %s' % (
            ', '.join('%s=%s' % (r, s.describe())
                      for r, s in sorted(specs.items()))))
    return next(iter(specs.values()))


def under_compute_resource_semaphore(func):
    """Mark a tracker method to run under the tracker's own lock.

    :func:`apply_lock` applies it when the tracker class is composed, so
    the choice of fair or plain lock stays out of the mixins.
    """
    func._nrl_under_semaphore = True
    return func


def apply_lock(cls_dict_items, spec):
    """{name: locked function} for the marked ones of ``cls_dict_items``."""
    return {name: spec.synchronized()(value) for name, value in cls_dict_items
            if getattr(value, '_nrl_under_semaphore', False)}
