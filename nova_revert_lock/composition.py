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

"""The class composition: the manager and tracker subclasses the fix runs as.

:func:`compose` builds them from the admitted mixins ("What is overridden"
in doc/source/reference/architecture.rst). Marked tracker methods get the
installed tracker's own lock. Nova's classes are never modified.
"""

import collections
import inspect

from oslo_log import log as logging

from nova_revert_lock.audit import endpoint
from nova_revert_lock import exception
from nova_revert_lock import fixes
from nova_revert_lock import locking
from nova_revert_lock import sections

LOG = logging.getLogger(__name__)


class TrackerSwap(object):
    """Give the composed manager its tracker subclass (a vendor's too)."""

    #: set by :func:`compose`
    _nrl_tracker_mixins = ()
    _nrl_tracker_namespace = None
    _nrl_tracker_guarded = None
    _nrl_tracker_classes = None

    def __init__(self, *args, **kwargs):
        super(TrackerSwap, self).__init__(*args, **kwargs)
        # NOTE: the one class change of a live object this package makes.
        # ComputeManager.__init__ builds its tracker itself, with arguments
        # that vary by release: the object keeps its state and gets the
        # composed subclass of its own class, which only adds methods. A
        # tracker mixin with state of its own sets it up in _nrl_adopt.
        self.rt.__class__ = self._nrl_tracker_for(type(self.rt))
        adopt = getattr(self.rt, '_nrl_adopt', None)
        if adopt is not None:
            adopt()

    @classmethod
    def _nrl_tracker_for(cls, tracker_cls):
        """The composed subclass of ``tracker_cls``, made once per class."""
        cache = cls._nrl_tracker_classes
        composed = cache.get(tracker_cls)
        if composed is None:
            if tracker_cls in cache.values():
                return tracker_cls
            _check_tracker_class(tracker_cls, cls._nrl_tracker_guarded)
            composed = _tracker_subclass(
                tracker_cls, cls._nrl_tracker_mixins,
                cls._nrl_tracker_namespace)
            cache[tracker_cls] = composed
        return composed


class PeriodicObserver(object):
    """First base of every composed tracker: how each periodic task ended.

    Nova's manager only logs what it raises; the status endpoint shows it.
    """

    def update_available_resource(self, *args, **kwargs):
        # (context, nodename, startup=False) in every release
        nodename = kwargs.get('nodename', args[1] if len(args) > 1 else None)
        sections.periodic_started(nodename)
        try:
            result = super(PeriodicObserver, self).update_available_resource(
                *args, **kwargs)
        except Exception as e:
            sections.periodic_ran(nodename, e)
            raise
        sections.periodic_ran(nodename)
        return result

    def remove_node(self, nodename):
        # (nodename) from Rocky on: the manager drops a node this host no
        # longer reports (an Ironic rebalance); so do the records of it.
        try:
            return super(PeriodicObserver, self).remove_node(nodename)
        finally:
            for period in sections.node_removed(nodename):
                LOG.info('Node %(node)s left this host: its %(fix)s fix is '
                         'no longer degraded here (%(what)s: failed '
                         '%(count)d time(s) since %(since)s)', period)


def _tracker_subclass(tracker_cls, tracker_mixins, namespace):
    return type('RevertLock%s' % tracker_cls.__name__,
                (PeriodicObserver,) + tuple(tracker_mixins) + (tracker_cls,),
                dict(namespace))


def _check_tracker_class(tracker_cls, guarded):
    """Raise ForeignTracker if the mixins cannot be composed over it."""
    from nova.compute import resource_tracker
    stock = resource_tracker.ResourceTracker
    name = '%s.%s' % (tracker_cls.__module__, tracker_cls.__qualname__)
    if not issubclass(tracker_cls, stock):
        message = ('the compute manager built a resource tracker of class '
                   '%s, which is not a ResourceTracker: nova-revert-lock '
                   'cannot compose over it' % name)
    else:
        overridden = sorted(
            n for n in guarded
            if getattr(tracker_cls, n, None) is not getattr(stock, n, None))
        if not overridden:
            return
        message = (
            'the compute manager built a resource tracker of class %s, '
            'which overrides %s that nova-revert-lock (%s) replaces or '
            'relies on; composing over it would drop or bypass those '
            'overrides, so nova-compute is not started. Set '
            '[revert_lock] enabled = false to run it without '
            'nova-revert-lock.' % (
                name, ', '.join('ResourceTracker.%s' % n
                                for n in overridden),
                ', '.join(sorted({m for n in overridden
                                  for m in guarded[n]}))))
    LOG.error('nova-revert-lock: %s', message)
    raise exception.ForeignTracker(message)


def compose(manager_cls, applied, lock):
    """The composed manager class, over ``manager_cls``.

    :param applied: list of (MixinSpec, MixinCheck) that matched
    :param lock: the :class:`~.locking.LockSpec` of the installed tracker
    """
    from nova.compute import resource_tracker
    stock = resource_tracker.ResourceTracker

    impls = [spec.implementation(check.series) for spec, check in applied]
    # NOTE: mixins may share a tracker class (confirm and cross-cell
    # confirm), which may appear only once in the bases. A tracker mixin
    # deferring a call of upstream's periodic body comes first, so that
    # the others' extensions of that call run when it runs (stable sort).
    tracker_mixins = tuple(sorted(
        collections.OrderedDict.fromkeys(i.tracker for i in impls
                                         if i.tracker),
        key=lambda m: not getattr(m, '_nrl_tracker_first', False)))
    namespace = {'__module__': __name__}
    if not hasattr(stock, '_drop_move_claim'):
        # NOTE: the installed drop_move_claim's body without its lock (the
        # guard checked it is the code we know). The lock is not reentrant,
        # so code holding it calls this, as upstream's fix calls its own
        # _drop_move_claim, which must not be replaced: it would recurse.
        namespace['_drop_move_claim'] = inspect.unwrap(
            stock.__dict__['drop_move_claim'])
    for mixin in tracker_mixins:
        namespace.update(locking.apply_lock(
            ((name, getattr(mixin, name)) for name in dir(mixin)), lock))
    tracker_cls = _tracker_subclass(stock, tracker_mixins, namespace)
    manager_mixins = tuple(i.manager for i in impls if i.manager)
    return type('RevertLockComputeManager',
                manager_mixins + (TrackerSwap, endpoint.StatusEndpointMixin,
                                  manager_cls),
                {'__module__': __name__,
                 '_nrl_tracker_mixins': tracker_mixins,
                 '_nrl_tracker_namespace': namespace,
                 '_nrl_tracker_guarded': _guarded_tracker_functions(
                     applied, namespace),
                 '_nrl_tracker_classes': {stock: tracker_cls}})


def _guarded_tracker_functions(applied, namespace):
    """{function: mixins needing it} a foreign tracker must not override."""
    prefix = 'nova.compute.resource_tracker:ResourceTracker.'
    guarded = collections.defaultdict(set)
    names = [s.name for s, _c in applied]
    for ref in fixes.LOCK_REFS:
        guarded[ref[len(prefix):]].update(names)
    for spec, check in applied:
        for ref in spec.refs.replaces + spec.refs.relies_on:
            if ref.startswith(prefix):
                guarded[ref[len(prefix):]].add(spec.name)
        impl = spec.implementation(check.series)
        if impl.tracker is not None:
            for attr in vars(impl.tracker):
                if not attr.startswith('__'):
                    guarded[attr].add(spec.name)
    for attr in namespace:
        if not attr.startswith('__'):
            guarded[attr].update(names)
    return {k: sorted(v) for k, v in guarded.items()}


def compose_status_only(manager_cls):
    """The manager class with the status endpoint and nothing else."""
    return type('RevertLockComputeManager',
                (endpoint.StatusEndpointMixin, manager_cls),
                {'__module__': __name__})
