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

"""Compose the compute manager with the mixins, and register it.

:func:`activate` loads the mixins named in ``[revert_lock] mixins`` from the
stevedore namespace, checks each against the live Nova (the guard), and,
when every one matches code it knows, builds::

    RevertLockResourceTracker(<tracker mixins>..., ResourceTracker)
    RevertLockComputeManager(<manager mixins>..., TrackerSwap,
                             StatusEndpointMixin, <manager>)

where ``<manager>`` is the class ``nova.service.SERVICE_MANAGERS`` names for
nova-compute (Nova's ``ComputeManager`` unless something else was
configured). The composed manager is published as this module's
``RevertLockComputeManager`` attribute and ``SERVICE_MANAGERS`` points at
it, so ``nova.service.Service.create()``, used by nova-compute and by
Nova's own functional tests, builds it. Nova's classes are never modified.

On a Nova that already carries upstream's fix for bug 1879878 the mixins
for it stand aside and the state is ``already-fixed``; mixins that go
beyond upstream (``source_window``) are still composed the same way when
they match, and only they are in the report's ``mixins``. Such a mixin
that does not match is left out with a warning, on every Nova: it never
refuses the activation.

A Nova with the affected code whose ``[revert_lock] mixins`` leaves out a
fix for bug 1879878 that would apply is ``incomplete``: what is
configured is composed, but the host is not protected and
``nova-revert-lock check`` says so.

When nothing at all is composed on a Nova that already carries the fix,
the manager gets the status endpoint only (``<manager>`` plus
:class:`~nova_revert_lock.endpoint.StatusEndpointMixin`), so that
``nova-revert-lock status`` can tell that host's state; a refusal or
``[revert_lock] enabled = false`` leaves nova-compute's manager alone.
"""

import collections
import inspect

from oslo_config import cfg
from oslo_log import log as logging
from oslo_utils import importutils
from oslo_utils import timeutils
import stevedore

from nova_revert_lock.audit import endpoint
from nova_revert_lock import conf as nrl_conf
from nova_revert_lock import exception
from nova_revert_lock import fingerprints
from nova_revert_lock import locking
from nova_revert_lock import mixins
from nova_revert_lock.mixins import base
from nova_revert_lock import releases

LOG = logging.getLogger(__name__)

PATCHED = 'patched'
ALREADY_FIXED = 'already-fixed'
#: composed, but a fix for bug 1879878 that applies to this Nova is not
#: configured: the host is not protected
INCOMPLETE = 'incomplete'
REFUSED = 'refused'
DISABLED = 'disabled'

SERVICE_BINARY = 'nova-compute'
#: dotted path of the composed manager, as SERVICE_MANAGERS holds it
MANAGER_PATH = __name__ + '.RevertLockComputeManager'


class ActivationReport(object):
    """What :func:`activate` found and did.

    :ivar state: ``'patched'``, ``'already-fixed'``, ``'incomplete'``,
        ``'refused'`` or ``'disabled'`` (a str: ``str(report.state)`` is
        the word). Mixins whose feature this Nova lacks (cross-cell resize
        on Train) are left out and listed in ``not_applicable``; if that
        leaves nothing, the state is ``'refused'``. Only ``patched`` and
        ``already-fixed`` mean the host is protected.
    :ivar nova_version: installed Nova release string, or None
    :ivar series: its series (``'ussuri'``), or ``'unknown'``
    :ivar mixins: names of the mixins applied: on ``patched``, the fixes
        for bug 1879878 and anything beyond; on ``already-fixed``, only
        the mixins that go beyond upstream (``['source_window']``), if any
    :ivar problems: list of human-readable strings (why refused)
    :ivar warnings: list of human-readable strings: why a mixin that goes
        beyond upstream was left out (on any Nova)
    :ivar missing: names of the bug 1879878 mixins that match this Nova's
        affected code but are not in ``[revert_lock] mixins`` (state
        ``incomplete``)
    :ivar checks: list of :class:`~.base.MixinCheck`, one per mixin named
    :ivar lock: how the installed tracker takes its lock, or None
    :ivar manager: the composed manager class, or None
    :ivar activated_at: when :func:`activate` registered ``manager``
        (ISO 8601, UTC), or None
    """

    def __init__(self, state, nova_version=None, mixins=(), problems=(),
                 checks=(), lock=None, manager=None, warnings=(),
                 missing=()):
        self.state = state
        self.nova_version = nova_version
        self.series = releases.series_of(nova_version or '')
        self.mixins = list(mixins)
        self.problems = list(problems)
        self.warnings = list(warnings)
        self.missing = list(missing)
        self.checks = list(checks)
        self.lock = lock
        self.manager = manager
        self.activated_at = None

    @property
    def standing_aside(self):
        """Mixins whose fix the installed Nova already carries."""
        return [c.name for c in self.checks
                if c.outcome == base.FIXED_UPSTREAM]

    @property
    def not_applied(self):
        """Mixins that apply to this Nova but were left out (warnings)."""
        aside = (set(self.standing_aside) | set(self.mixins) |
                 set(self.not_applicable))
        return [c.name for c in self.checks if c.name not in aside]

    @property
    def not_applicable(self):
        """Mixins whose feature the installed Nova does not have."""
        return [c.name for c in self.checks
                if c.outcome == base.NOT_APPLICABLE]

    def to_dict(self):
        return {
            'state': self.state,
            'nova_version': self.nova_version,
            'series': self.series,
            'mixins': self.mixins,
            'standing_aside': self.standing_aside,
            'not_applied': self.not_applied,
            'not_applicable': self.not_applicable,
            'problems': self.problems,
            'warnings': self.warnings,
            'missing': self.missing,
            'lock': self.lock,
            'checks': [c.to_dict() for c in self.checks],
        }

    def __repr__(self):
        return '<ActivationReport %s nova=%s mixins=%s problems=%d>' % (
            self.state, self.nova_version, self.mixins, len(self.problems))


class TrackerSwap(object):
    """Give the composed manager its tracker subclass.

    ``ComputeManager.__init__`` builds a ``ResourceTracker``; this turns
    that very object into an instance of a subclass of *its own class*
    with the tracker mixins before it, which only adds methods, so nothing
    the constructor set up is lost and the constructor's signature (which
    varies by release) does not matter. A manager of a vendor may build a
    tracker subclass of its own: it is composed over in the same way (once
    per class), unless it overrides a tracker function the mixins replace
    or rely on, in which case the manager refuses to start
    (:class:`~nova_revert_lock.exception.ForeignTracker`) rather than
    drop or bypass that override.
    """

    #: the tracker subclass composed over Nova's ``ResourceTracker``
    _nrl_tracker_class = None
    #: what :func:`compose` built it from: the tracker mixins, the
    #: namespace, and the tracker functions a foreign class may not
    #: override (name -> the mixins that need it)
    _nrl_tracker_mixins = ()
    _nrl_tracker_namespace = None
    _nrl_tracker_guarded = None
    #: tracker class -> composed subclass
    _nrl_tracker_classes = None

    def __init__(self, *args, **kwargs):
        super(TrackerSwap, self).__init__(*args, **kwargs)
        self.rt.__class__ = self._nrl_tracker_for(type(self.rt))

    @classmethod
    def _nrl_tracker_for(cls, tracker_cls):
        """The composed subclass of ``tracker_cls``, made once per class.

        :raises ForeignTracker: if ``tracker_cls`` is no ResourceTracker
            or overrides a function the mixins replace or rely on
        """
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


def _tracker_subclass(tracker_cls, tracker_mixins, namespace):
    return type('RevertLock%s' % tracker_cls.__name__,
                tuple(tracker_mixins) + (tracker_cls,), dict(namespace))


def _check_tracker_class(tracker_cls, guarded):
    """Refuse a tracker class the mixins cannot be composed over.

    :param guarded: dict name -> mixin names: the tracker functions the
        composed tracker adds, replaces or relies on
    :raises ForeignTracker: naming the class and the functions it overrides
    """
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


class _Active(object):
    """What activate() changed, so that deactivate() can restore it."""
    key = None
    report = None
    saved_manager = None


_ACTIVE = _Active()


def _config_key(group):
    return (group.enabled, tuple(group.mixins), group.on_unknown_code)


def available_mixins():
    """Names in the stevedore namespace, sorted."""
    return sorted(stevedore.ExtensionManager(
        mixins.NAMESPACE, invoke_on_load=False).names())


def _import_nova():
    try:
        import nova.compute.manager  # noqa: F401
        import nova.compute.resource_tracker  # noqa: F401
        import nova.service  # noqa: F401
    except ImportError as e:
        raise exception.NovaNotAvailable(
            'Nova cannot be imported here (%s). nova-revert-lock must be '
            'installed into the same Python environment as nova-compute.'
            % e)


def _load_specs(names):
    unknown = sorted(set(names) - set(available_mixins()))
    if unknown:
        raise exception.ConfigurationError(
            '[revert_lock] mixins names unknown mixin(s) %s; available: %s'
            % (', '.join(unknown), ', '.join(available_mixins())))
    failures = []

    def _failed(manager, entrypoint, error):
        failures.append('mixin %s cannot be loaded: %s: %s' % (
            entrypoint.name, type(error).__name__, error))

    extensions = stevedore.NamedExtensionManager(
        mixins.NAMESPACE, names, invoke_on_load=False, name_order=True,
        on_load_failure_callback=_failed)
    return [ext.plugin for ext in extensions], failures


def _configured_manager():
    """The class SERVICE_MANAGERS names for nova-compute (not ours)."""
    from nova.compute import manager as nova_manager
    from nova import service
    path = service.SERVICE_MANAGERS.get(SERVICE_BINARY)
    if path == MANAGER_PATH:
        path = _ACTIVE.saved_manager
    cls = importutils.import_class(path)
    if not issubclass(cls, nova_manager.ComputeManager):
        raise TypeError('%s is not a ComputeManager' % path)
    return path, cls


def _overridden(manager_cls, refs):
    """Replaced/relied-on ComputeManager functions the manager overrides."""
    from nova.compute import manager as nova_manager
    prefix = 'nova.compute.manager:ComputeManager.'
    found = []
    for ref in refs:
        if not ref.startswith(prefix):
            continue
        name = ref[len(prefix):]
        if (getattr(manager_cls, name, None) is not
                getattr(nova_manager.ComputeManager, name, None)):
            found.append('%s overrides %s' % (manager_cls.__name__, name))
    return found


def evaluate(conf=None):
    """Run the guard and compose, without registering anything.

    The fixes for bug 1879878 (the core mixins) are checked strictly: one
    that matches no code we know, a lock we cannot read or a manager that
    overrides what a core mixin needs refuses the whole activation. A
    mixin that goes beyond upstream is an extra: whatever keeps it out
    (the same checks) leaves it out with a warning, and never costs the
    host the core fix, whether or not Nova carries that fix itself.

    :returns: an :class:`ActivationReport`; on ``patched``,
        ``already-fixed`` or ``incomplete`` its ``manager`` is the composed
        class, or None when nothing was composed
    :raises ConfigurationError: for option values we cannot act on
    :raises NovaNotAvailable: if Nova cannot be imported
    """
    conf = cfg.CONF if conf is None else conf
    nrl_conf.register_opts(conf)
    try:
        group = conf.revert_lock
        enabled, names = group.enabled, list(group.mixins)
        group.on_unknown_code  # validate the choice now
    except (cfg.ConfigFileValueError, ValueError) as e:
        raise exception.ConfigurationError(
            'invalid value in [revert_lock]: %s' % e)
    version = releases.installed_nova_version()
    if not enabled:
        return ActivationReport(DISABLED, version)
    _import_nova()
    if not names:
        raise exception.ConfigurationError(
            '[revert_lock] mixins is empty; set enabled = false to run '
            'plain nova-compute, or name mixins among: %s'
            % ', '.join(available_mixins()))
    specs, problems = _load_specs(names)
    if problems:
        return ActivationReport(REFUSED, version, problems=problems)

    try:
        manager_path, manager_cls = _configured_manager()
    except (ImportError, TypeError) as e:
        return ActivationReport(REFUSED, version, problems=[
            'SERVICE_MANAGERS[%r] is unusable: %s' % (SERVICE_BINARY, e)])

    checks = [spec.check() for spec in specs]
    pairs = [(s, c) for s, c in zip(specs, checks)
             if c.outcome != base.NOT_APPLICABLE]
    if not pairs:
        return ActivationReport(REFUSED, version, checks=checks, problems=[
            'none of the configured mixins applies to this Nova: %s' % (
                '; '.join('%s: %s' % (c.name, c.note) for c in checks))])
    core = [(s, c) for s, c in pairs if not s.beyond_upstream]
    extras = [(s, c) for s, c in pairs if s.beyond_upstream]
    unconfigured = _unconfigured_core_checks(names)
    missing = [c.name for c in unconfigured if c.outcome == base.MATCH]

    for _spec, check in core:
        problems.extend(check.problems)
    warnings = []
    for spec, check in extras:
        if check.outcome == base.UNKNOWN:
            warnings.extend('%s not applied: %s' % (spec.name, problem)
                            for problem in check.problems)
    core_admitted, lock, found = _admit(
        manager_cls, [(s, c) for s, c in core if c.outcome == base.MATCH],
        strict=True)
    problems.extend(found)
    if problems:
        # The same function can be named by several mixins: say it once.
        problems = list(collections.OrderedDict.fromkeys(problems))
        return ActivationReport(REFUSED, version, problems=problems,
                                checks=checks, warnings=warnings,
                                lock=lock.describe() if lock else None)
    extras_admitted, extras_lock, found = _admit(
        manager_cls, [(s, c) for s, c in extras if c.outcome == base.MATCH],
        strict=False)
    warnings.extend(found)
    lock = lock or extras_lock

    admitted = core_admitted + extras_admitted
    applied = [(s, c) for s, c in pairs if (s, c) in admitted]
    core_known = [c for _s, c in core] + [
        c for c in unconfigured if c.outcome != base.NOT_APPLICABLE]
    if missing:
        state = INCOMPLETE
    elif core_known and all(c.outcome == base.FIXED_UPSTREAM
                            for c in core_known):
        state = ALREADY_FIXED
    else:
        state = PATCHED
    manager = compose(manager_cls, applied, lock) if applied else None
    return ActivationReport(
        state, version, mixins=[s.name for s, _c in applied],
        checks=checks, lock=lock.describe() if applied else None,
        manager=manager, warnings=warnings, missing=missing)


def _unconfigured_core_checks(names):
    """Checks of the bug 1879878 mixins left out of ``[revert_lock] mixins``.

    Only the core mixins are looked at: one of them that matches this
    Nova's affected code is a fix this host goes without.

    :param names: the configured mixin names
    :returns: list of :class:`~.base.MixinCheck`, in namespace order
    """
    order = list(mixins.REFS)
    others = sorted(
        (name for name in available_mixins() if name not in names),
        key=lambda name: (order.index(name) if name in order else len(order),
                          name))
    if not others:
        return []
    specs, _failures = _load_specs(others)
    return [spec.check() for spec in specs if not spec.beyond_upstream]


def _admit(manager_cls, candidates, strict):
    """The lock and override checks of the mixins that matched.

    The tracker's lock must be readable (every mixin composed takes it or
    relies on it) and the configured manager must not override a function
    a mixin replaces or relies on.

    :param manager_cls: the compute manager class to extend
    :param candidates: list of (MixinSpec, MixinCheck) that matched
    :param strict: True for the bug 1879878 mixins: any failure keeps all
        of them out and the messages are the activation's problems (it is
        refused). False for mixins beyond upstream: each one that fails is
        left out alone, with a warning naming it.
    :returns: ``(admitted, lock, messages)``: the pairs that may be
        composed, the :class:`~.locking.LockSpec` (or None) and the
        problems (strict) or warnings
    """
    if not candidates:
        return [], None, []
    messages = []

    def _fail(spec, reason):
        messages.append(reason if strict else
                        '%s not applied: %s' % (spec.name, reason))

    try:
        lock = locking.tracker_lock(mixins.LOCK_REFS)
    except locking.UnknownLock as e:
        lock = None
        reason = ('cannot tell how the tracker takes '
                  'COMPUTE_RESOURCE_SEMAPHORE: %s' % e)
        for spec, _check in (candidates[:1] if strict else candidates):
            _fail(spec, reason)
        return [], None, messages
    admitted = []
    for spec, check in candidates:
        overridden = _overridden(
            manager_cls, spec.refs.replaces + spec.refs.relies_on)
        for reason in overridden:
            _fail(spec, reason)
        if not overridden:
            admitted.append((spec, check))
    if strict and messages:
        admitted = []
    return admitted, lock, messages


def compose(manager_cls, applied, lock):
    """Build the tracker subclass and the manager class.

    :param manager_cls: the compute manager class to extend
    :param applied: list of (MixinSpec, MixinCheck) that matched
    :param lock: the :class:`~.locking.LockSpec` of the installed tracker
    :returns: the composed manager class
    """
    from nova.compute import resource_tracker

    impls = [spec.implementation(check.family) for spec, check in applied]
    # NOTE: mixins for different callers of the same locked tracker method
    # (same-cell and cross-cell confirm both need drop_move_claim_at_source)
    # share its tracker class; a class may appear only once in the bases.
    tracker_mixins = []
    for impl in impls:
        if impl.tracker and impl.tracker not in tracker_mixins:
            tracker_mixins.append(impl.tracker)
    tracker_mixins = tuple(tracker_mixins)
    namespace = {'__module__': __name__}
    if not hasattr(resource_tracker.ResourceTracker, '_drop_move_claim'):
        # NOTE: the body of the installed drop_move_claim without its lock
        # (the guard checked it is the code we know, and that it takes no
        # lock itself). The lock is not reentrant, so code already holding
        # it must call this, as upstream's fix calls _drop_move_claim. A
        # Nova with upstream's fix has its own, which its drop_move_claim
        # calls: replacing that one with this body would recurse.
        namespace['_drop_move_claim'] = inspect.unwrap(
            resource_tracker.ResourceTracker.__dict__['drop_move_claim'])
    for mixin in tracker_mixins:
        namespace.update(locking.apply_lock(
            ((name, getattr(mixin, name)) for name in dir(mixin)), lock))
    stock = resource_tracker.ResourceTracker
    tracker_cls = _tracker_subclass(stock, tracker_mixins, namespace)
    manager_mixins = tuple(i.manager for i in impls)
    return type('RevertLockComputeManager',
                manager_mixins + (TrackerSwap, endpoint.StatusEndpointMixin,
                                  manager_cls),
                {'__module__': __name__,
                 '_nrl_tracker_class': tracker_cls,
                 '_nrl_tracker_mixins': tracker_mixins,
                 '_nrl_tracker_namespace': namespace,
                 '_nrl_tracker_guarded': _guarded_tracker_functions(
                     applied, namespace),
                 '_nrl_tracker_classes': {stock: tracker_cls}})


def _guarded_tracker_functions(applied, namespace):
    """Tracker functions a foreign tracker class must not override.

    Those the applied mixins replace or rely on, those whose lock is read
    (:data:`~nova_revert_lock.mixins.LOCK_REFS`), and those the composed
    tracker defines itself.

    :returns: dict function name -> sorted names of the mixins needing it
    """
    prefix = 'nova.compute.resource_tracker:ResourceTracker.'
    guarded = collections.defaultdict(set)
    names = [s.name for s, _c in applied]
    for ref in mixins.LOCK_REFS:
        guarded[ref[len(prefix):]].update(names)
    for spec, check in applied:
        for ref in spec.refs.replaces + spec.refs.relies_on:
            if ref.startswith(prefix):
                guarded[ref[len(prefix):]].add(spec.name)
        impl = spec.implementation(check.family)
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


def _status_only_manager(report):
    """For a report that patches nothing: the class to register, or None.

    Already fixed upstream, or incomplete with nothing that applies:
    nothing of Nova's is overridden, but the host still answers
    ``nova-revert-lock status`` with its state.
    Refused or disabled: nothing is touched, nova-compute runs exactly as
    shipped (the audit then reports the host as not running the
    extension, which is the truth).
    """
    if report.state not in (ALREADY_FIXED, INCOMPLETE):
        return None
    try:
        _import_nova()
        _path, manager_cls = _configured_manager()
    except (exception.NovaNotAvailable, ImportError, TypeError):
        return None
    return compose_status_only(manager_cls)


def activate(conf=None):
    """Apply the configured mixins to nova-compute's manager.

    Calling it again with the same configuration returns the same report
    and changes nothing; with a different configuration it starts over.

    :param conf: an oslo.config ConfigOpts (default: the global CONF, on
        which Nova registers its options)
    :returns: :class:`ActivationReport`
    :raises ConfigurationError: bad ``[revert_lock]`` values (nothing is
        changed)
    :raises NovaNotAvailable: Nova cannot be imported
    """
    conf = cfg.CONF if conf is None else conf
    nrl_conf.register_opts(conf)
    try:
        key = _config_key(conf.revert_lock)
    except (cfg.ConfigFileValueError, ValueError) as e:
        raise exception.ConfigurationError(
            'invalid value in [revert_lock]: %s' % e)
    if _ACTIVE.report is not None and _ACTIVE.key == key:
        return _ACTIVE.report

    # NOTE: evaluate before undoing the activation in force: a new
    # configuration that cannot be acted on raises here and leaves the
    # previous activation whole, never half undone. evaluate() reads the
    # manager we replaced, not ours, from SERVICE_MANAGERS.
    report = evaluate(conf)
    deactivate()
    manager = report.manager
    if manager is None:
        manager = _status_only_manager(report)
    if manager is not None:
        _register(manager, report)
    _ACTIVE.key, _ACTIVE.report = key, report
    _log(report)
    return report


def _register(manager, report):
    from nova import service
    report.activated_at = timeutils.utcnow().isoformat() + 'Z'
    # NOTE: the status endpoint reads the report from the class it serves,
    # so each composed class answers for the activation that built it.
    manager._nrl_report = report
    _ACTIVE.saved_manager = service.SERVICE_MANAGERS.get(SERVICE_BINARY)
    globals()['RevertLockComputeManager'] = manager
    service.SERVICE_MANAGERS[SERVICE_BINARY] = MANAGER_PATH


def deactivate():
    """Undo :func:`activate`: nova-compute gets the manager it had."""
    if _ACTIVE.saved_manager is not None:
        from nova import service
        if service.SERVICE_MANAGERS.get(SERVICE_BINARY) == MANAGER_PATH:
            service.SERVICE_MANAGERS[SERVICE_BINARY] = _ACTIVE.saved_manager
    globals().pop('RevertLockComputeManager', None)
    _ACTIVE.key = _ACTIVE.report = _ACTIVE.saved_manager = None


def current_report():
    """The report of the activation in force in this process, or None."""
    return _ACTIVE.report


def _log(report):
    if report.state == PATCHED:
        LOG.info('nova-revert-lock: applied %(mixins)s to Nova %(version)s '
                 '(%(series)s); COMPUTE_RESOURCE_SEMAPHORE taken as the '
                 'tracker takes it: %(lock)s%(aside)s',
                 {'mixins': ', '.join(report.mixins),
                  'version': report.nova_version, 'series': report.series,
                  'lock': report.lock,
                  'aside': ('; already fixed upstream: %s'
                            % ', '.join(report.standing_aside)
                            if report.standing_aside else '')})
    elif report.state == ALREADY_FIXED and report.mixins:
        LOG.info('nova-revert-lock: Nova %(version)s (%(series)s) already '
                 'carries the fix for bug 1879878 (standing aside: '
                 '%(aside)s); applied beyond upstream: %(mixins)s; '
                 'COMPUTE_RESOURCE_SEMAPHORE taken as the tracker takes '
                 'it: %(lock)s',
                 {'version': report.nova_version, 'series': report.series,
                  'aside': ', '.join(report.standing_aside),
                  'mixins': ', '.join(report.mixins), 'lock': report.lock})
    elif report.state == ALREADY_FIXED:
        LOG.info('nova-revert-lock: Nova %s (%s) already carries the fix '
                 'for bug 1879878; standing aside', report.nova_version,
                 report.series)
    elif report.state == INCOMPLETE:
        LOG.warning('nova-revert-lock: Nova %(version)s (%(series)s) has the '
                    'code of bug 1879878 and [revert_lock] mixins leaves '
                    'out its fixes %(missing)s: this host is NOT protected '
                    'against it; applied: %(mixins)s',
                    {'version': report.nova_version, 'series': report.series,
                     'missing': ', '.join(report.missing),
                     'mixins': ', '.join(report.mixins) or 'nothing'})
    elif report.state == DISABLED:
        LOG.info('nova-revert-lock: disabled by [revert_lock] enabled')
    else:
        LOG.error('nova-revert-lock: refused to patch Nova %s: %s',
                  report.nova_version, '; '.join(report.problems))
    for warning in report.warnings:
        LOG.warning('nova-revert-lock: %s', warning)


def describe_refusal(report):
    """One paragraph for an operator: what did not match, what to do."""
    return (
        'nova-revert-lock refused to patch Nova %(version)s (%(series)s): '
        '%(problems)s. The mixins only replace code they have verified, '
        'and this Nova differs from every release they know (%(known)s '
        'surveyed). Check that the installed Nova is a release this '
        'version of nova-revert-lock supports (`nova-revert-lock check` '
        'lists each function), upgrade nova-revert-lock, or set '
        '[revert_lock] on_unknown_code = warn to start nova-compute '
        'unpatched.' % {
            'version': report.nova_version, 'series': report.series,
            'problems': '; '.join(report.problems),
            'known': _surveyed_range()})


def _surveyed_range():
    from nova_revert_lock import fingerprint_table
    rel = fingerprints.sorted_releases(fingerprint_table.SURVEYED_RELEASES)
    return '%s to %s' % (rel[0], rel[-1]) if rel else 'none'
