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

"""Activate the fix in this process: register the composed compute manager.

See doc/source/reference/architecture.rst, "What is overridden". When
nothing is composed on an ``already-fixed`` or ``incomplete`` Nova, the
manager gets the status endpoint only, so that ``nova-revert-lock status``
can tell that host's state; a refusal or ``enabled = false`` leaves
nova-compute's manager as shipped (the audit says so).
"""

from oslo_config import cfg
from oslo_log import log as logging
from oslo_utils import importutils
from oslo_utils import timeutils

from nova_revert_lock import composition
from nova_revert_lock import conf as nrl_conf
from nova_revert_lock import exception
from nova_revert_lock.guard import assess
from nova_revert_lock.guard import fingerprints
from nova_revert_lock import report as nrl_report

LOG = logging.getLogger(__name__)

MANAGER_PATH = __name__ + '.RevertLockComputeManager'


class _Active(object):
    """What activate() changed, so that deactivate() can restore it."""
    key = None
    report = None
    saved_manager = None


_ACTIVE = _Active()


def _configured_manager():
    """The class SERVICE_MANAGERS names for nova-compute (not ours)."""
    from nova.compute import manager as nova_manager
    from nova import service
    path = service.SERVICE_MANAGERS.get(assess.SERVICE_BINARY)
    if path == MANAGER_PATH:
        path = _ACTIVE.saved_manager
    cls = importutils.import_class(path)
    if not issubclass(cls, nova_manager.ComputeManager):
        raise TypeError('%s is not a ComputeManager' % path)
    return path, cls


def check(conf=None):
    """The guard's verdict only (``nova-revert-lock check``): no manager."""
    return assess.assess(conf, _configured_manager).report


def build(conf=None):
    """Run the guard and compose the classes; register nothing.

    The report's ``manager`` is the composed class, or None.
    """
    found = assess.assess(conf, _configured_manager)
    if found.applied:
        found.report.manager = composition.compose(
            found.manager_cls, found.applied, found.lock)
    return found.report


def _status_only_manager(report):
    """The status endpoint alone, for an already-fixed or incomplete host."""
    if report.state not in (nrl_report.ALREADY_FIXED, nrl_report.INCOMPLETE):
        return None
    try:
        assess.import_nova()
        _path, manager_cls = _configured_manager()
    except (exception.NovaNotAvailable, ImportError, TypeError):
        return None
    return composition.compose_status_only(manager_cls)


def activate(conf=None):
    """Apply the configured mixins to nova-compute's manager.

    Idempotent for the same configuration; a different one starts over.
    Bad ``[revert_lock]`` values raise ConfigurationError, changing nothing.
    """
    conf = cfg.CONF if conf is None else conf
    nrl_conf.register_opts(conf)
    try:
        group = conf.revert_lock
        key = (group.enabled, tuple(group.mixins), group.on_unknown_code)
    except (cfg.ConfigFileValueError, ValueError) as e:
        raise exception.ConfigurationError(
            'invalid value in [revert_lock]: %s' % e)
    if _ACTIVE.report is not None and _ACTIVE.key == key:
        return _ACTIVE.report

    # NOTE: build before deactivate(): a configuration that cannot be
    # acted on raises here and leaves the activation in force whole (the
    # guard reads the manager ours replaced, see _configured_manager).
    report = build(conf)
    deactivate()
    manager = report.manager or _status_only_manager(report)
    if manager is not None:
        _register(manager, report)
    _ACTIVE.key, _ACTIVE.report = key, report
    _log(report)
    return report


def _register(manager, report):
    from nova import service
    report.activated_at = timeutils.utcnow().isoformat() + 'Z'
    # NOTE: the status endpoint reads the report off the class it serves:
    # each composed class answers for the activation that built it.
    manager._nrl_report = report
    _ACTIVE.saved_manager = service.SERVICE_MANAGERS.get(assess.SERVICE_BINARY)
    globals()['RevertLockComputeManager'] = manager
    service.SERVICE_MANAGERS[assess.SERVICE_BINARY] = MANAGER_PATH


def deactivate():
    """Undo :func:`activate`: nova-compute gets the manager it had."""
    if _ACTIVE.saved_manager is not None:
        from nova import service
        managers = service.SERVICE_MANAGERS
        if managers.get(assess.SERVICE_BINARY) == MANAGER_PATH:
            managers[assess.SERVICE_BINARY] = _ACTIVE.saved_manager
    globals().pop('RevertLockComputeManager', None)
    _ACTIVE.key = _ACTIVE.report = _ACTIVE.saved_manager = None


def current_report():
    """The report of the activation in force in this process, or None."""
    return _ACTIVE.report


def _log(report):
    values = {'version': report.nova_version, 'series': report.series,
              'mixins': ', '.join(report.mixins), 'lock': report.lock,
              'aside': ', '.join(report.fixed_upstream),
              'missing': ', '.join(report.missing)}
    if report.state == nrl_report.PATCHED:
        if report.fixed_upstream:
            values['aside'] = '; already fixed upstream: ' + values['aside']
        LOG.info('nova-revert-lock: applied %(mixins)s to Nova %(version)s '
                 '(%(series)s); COMPUTE_RESOURCE_SEMAPHORE taken as the '
                 'tracker takes it: %(lock)s%(aside)s', values)
    elif report.state == nrl_report.ALREADY_FIXED and report.mixins:
        LOG.info('nova-revert-lock: Nova %(version)s (%(series)s) already '
                 'carries the fix for bug 1879878 (standing aside: '
                 '%(aside)s); applied beyond upstream: %(mixins)s; '
                 'COMPUTE_RESOURCE_SEMAPHORE taken as the tracker takes '
                 'it: %(lock)s', values)
    elif report.state == nrl_report.ALREADY_FIXED:
        LOG.info('nova-revert-lock: Nova %s (%s) already carries the fix '
                 'for bug 1879878; standing aside', report.nova_version,
                 report.series)
    elif report.state == nrl_report.INCOMPLETE:
        values['mixins'] = values['mixins'] or 'nothing'
        LOG.warning('nova-revert-lock: Nova %(version)s (%(series)s) has the '
                    'code of bug 1879878 and [revert_lock] mixins leaves '
                    'out its fixes %(missing)s: this host is NOT protected '
                    'against it; applied: %(mixins)s', values)
    elif report.state == nrl_report.DISABLED:
        LOG.info('nova-revert-lock: disabled by [revert_lock] enabled')
    else:
        LOG.error('nova-revert-lock: refused to patch Nova %s: %s',
                  report.nova_version, '; '.join(report.problems))
    for warning in report.warnings:
        LOG.warning('nova-revert-lock: %s', warning)


def describe_refusal(report):
    """One paragraph for an operator: what did not match, what to do."""
    from nova_revert_lock.guard import fingerprint_table
    known = fingerprints.sorted_releases(fingerprint_table.SURVEYED_RELEASES)
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
            'known': '%s to %s' % (known[0], known[-1]) if known else 'none'})
