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

"""The guard, live: which configured mixins may apply to this nova-compute.

Nothing is changed here: :mod:`.composition` and :mod:`.activation` compose
and register the classes after. Core mixins are admitted strictly, extras
each alone: see doc/source/reference/guard.rst, "What an operator gets on
code the guard does not know".
"""

import collections

from oslo_config import cfg
import stevedore

from nova_revert_lock import conf as nrl_conf
from nova_revert_lock import exception
from nova_revert_lock import fixes
from nova_revert_lock.guard import decision
from nova_revert_lock.guard import releases
from nova_revert_lock import locking
from nova_revert_lock import report as nrl_report

#: the service whose manager the mixins extend
SERVICE_BINARY = 'nova-compute'


class Assessment(object):
    """What :func:`assess` found.

    :ivar report: the :class:`~nova_revert_lock.report.ActivationReport`
        (its ``manager`` is None: nothing is composed here)
    :ivar applied: list of (MixinSpec, MixinCheck) to compose
    :ivar lock: the :class:`~.locking.LockSpec` they take, or None
    :ivar manager_cls: the configured compute manager class, or None
    """

    def __init__(self, report, applied=(), lock=None, manager_cls=None):
        self.report = report
        self.applied = list(applied)
        self.lock = lock
        self.manager_cls = manager_cls


def available_mixins():
    """Names in the stevedore namespace, sorted."""
    return sorted(stevedore.ExtensionManager(
        fixes.NAMESPACE, invoke_on_load=False).names())


def import_nova():
    try:
        import nova.compute.manager  # noqa: F401
        import nova.compute.resource_tracker  # noqa: F401
        import nova.service  # noqa: F401
    except ImportError as e:
        raise exception.NovaNotAvailable(
            'Nova cannot be imported here (%s). nova-revert-lock must be '
            'installed into the same Python environment as nova-compute.'
            % e)


def load_specs(names):
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
        fixes.NAMESPACE, names, invoke_on_load=False, name_order=True,
        on_load_failure_callback=_failed)
    return [ext.plugin for ext in extensions], failures


def _overridden(manager_cls, refs):
    """Replaced/relied-on ComputeManager functions the manager overrides."""
    from nova.compute import manager as nova_manager
    prefix = 'nova.compute.manager:ComputeManager.'
    upstream = nova_manager.ComputeManager
    names = [ref[len(prefix):] for ref in refs if ref.startswith(prefix)]
    return ['%s overrides %s' % (manager_cls.__name__, name)
            for name in names
            if getattr(manager_cls, name, None) is not
            getattr(upstream, name, None)]


def assess(conf, configured_manager):
    """Run the guard on this nova-compute; return an :class:`Assessment`.

    :param configured_manager: callable returning ``(path, class)`` of the
        compute manager nova-compute is configured with (not ours)
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

    def _refused(problems, **kwargs):
        return Assessment(nrl_report.ActivationReport(
            nrl_report.REFUSED, version, problems=problems, **kwargs))

    if not enabled:
        return Assessment(nrl_report.ActivationReport(
            nrl_report.DISABLED, version))
    import_nova()
    if not names:
        raise exception.ConfigurationError(
            '[revert_lock] mixins is empty; set enabled = false to run '
            'plain nova-compute, or name mixins among: %s'
            % ', '.join(available_mixins()))
    specs, problems = load_specs(names)
    if problems:
        return _refused(problems)

    try:
        manager_path, manager_cls = configured_manager()
    except (ImportError, TypeError) as e:
        return _refused(['SERVICE_MANAGERS[%r] is unusable: %s' % (
            SERVICE_BINARY, e)])

    checks = [spec.check() for spec in specs]
    pairs = [(s, c) for s, c in zip(specs, checks)
             if c.outcome != decision.NOT_APPLICABLE]
    if not pairs:
        return _refused([
            'none of the configured mixins applies to this Nova: %s' % (
                '; '.join('%s: %s' % (c.name, c.note) for c in checks))],
            checks=checks)
    core = [(s, c) for s, c in pairs if not s.extra]
    extras = [(s, c) for s, c in pairs if s.extra]
    unconfigured = _unconfigured_core_checks(names)
    missing = [c.name for c in unconfigured if c.outcome == decision.MATCH]

    # Only UNKNOWN checks have problems.
    problems = [problem for _s, c in core for problem in c.problems]
    warnings = ['%s not applied: %s' % (s.name, problem)
                for s, c in extras for problem in c.problems]
    core_admitted, lock, found = _admit(manager_cls, core, strict=True)
    problems.extend(found)
    if problems:
        # The same function can be named by several mixins: say it once.
        problems = list(collections.OrderedDict.fromkeys(problems))
        return _refused(problems, checks=checks, warnings=warnings,
                        lock=lock.describe() if lock else None)
    extras_admitted, extras_lock, found = _admit(
        manager_cls, extras, strict=False)
    warnings.extend(found)
    lock = lock or extras_lock

    admitted = core_admitted + extras_admitted
    applied = [(s, c) for s, c in pairs if (s, c) in admitted]
    core_known = [c for _s, c in core] + [
        c for c in unconfigured if c.outcome != decision.NOT_APPLICABLE]
    if missing:
        state = nrl_report.INCOMPLETE
    elif core_known and all(c.outcome == decision.FIXED_UPSTREAM
                            for c in core_known):
        state = nrl_report.ALREADY_FIXED
    else:
        state = nrl_report.PATCHED
    report = nrl_report.ActivationReport(
        state, version, mixins=[s.name for s, _c in applied],
        checks=checks, lock=lock.describe() if applied else None,
        warnings=warnings, missing=missing)
    return Assessment(report, applied, lock if applied else None,
                      manager_cls)


def _unconfigured_core_checks(names):
    """Checks of the core mixins not configured, in namespace order.

    One that matches this Nova's code is a fix this host goes without.
    """
    order = list(fixes.NAMES)
    others = sorted(
        (name for name in available_mixins() if name not in names),
        key=lambda name: (order.index(name) if name in order else len(order),
                          name))
    if not others:
        return []
    specs, _failures = load_specs(others)
    return [spec.check() for spec in specs if not spec.extra]


def _admit(manager_cls, candidates, strict):
    """The lock and override checks of the mixins that matched.

    :param strict: True for the core mixins (any failure keeps them all
        out), False for the extras (each that fails is left out alone)
    :returns: ``(admitted pairs, LockSpec or None, messages)``: problems
        (strict) or warnings naming the mixin
    """
    candidates = [(s, c) for s, c in candidates
                  if c.outcome == decision.MATCH]
    if not candidates:
        return [], None, []
    messages = []

    def _fail(spec, reason):
        messages.append(reason if strict else
                        '%s not applied: %s' % (spec.name, reason))

    try:
        lock = locking.tracker_lock(fixes.LOCK_REFS)
    except locking.UnknownLock as e:
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
