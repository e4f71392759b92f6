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

"""What the guard found on this host, and what was done.

``nova-revert-lock check`` prints it, ``nova-compute-revert-lock`` acts on
it, and the status endpoint serves it to the fleet audit.
"""

import collections

from nova_revert_lock import fixes
from nova_revert_lock.guard import decision
from nova_revert_lock.guard import releases

#: the host is affected and the fixes that apply are composed
PATCHED = 'patched'
#: the installed Nova carries upstream's fix for bug 1879878
ALREADY_FIXED = 'already-fixed'
#: a fix for bug 1879878 this Nova needs is left out of [revert_lock]
#: mixins: what is configured is composed, the host is not protected
INCOMPLETE = 'incomplete'
#: code the mixins do not know (or cannot compose over): nothing applied
REFUSED = 'refused'
#: [revert_lock] enabled = false
DISABLED = 'disabled'
#: the states in which a host is protected
PROTECTED = (PATCHED, ALREADY_FIXED)

#: what a report says of one bug (:attr:`ActivationReport.bugs`): this
#: Nova carries upstream's fix; this package's fix is applied; the feature
#: does not exist here; or the host is open to it
BUG_FIXED_UPSTREAM = 'fixed-upstream'
BUG_PATCHED = 'patched'
BUG_NOT_APPLICABLE = 'not-applicable'
BUG_OPEN = 'open'


class ActivationReport(object):
    """What :func:`~nova_revert_lock.activation.activate` found and did.

    :ivar state: one of the states above
    :ivar series: of ``nova_version`` (``'ussuri'``), or ``'unknown'``
    :ivar mixins: the mixins applied; on ``already-fixed`` only the extras
        (``fixes.is_extra``), if any
    :ivar problems: why refused, for an operator
    :ivar warnings: why an extra was left out, for an operator
    :ivar missing: the bug 1879878 mixins this Nova needs that
        ``[revert_lock] mixins`` leaves out (state ``incomplete``)
    :ivar checks: a :class:`~.guard.decision.MixinCheck` per mixin named
    :ivar lock: how the installed tracker takes its lock, or None
    :ivar manager: the composed manager class, or None
    :ivar activated_at: when it was registered (ISO 8601, UTC), or None
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
    def fixed_upstream(self):
        """Mixins whose fix the installed Nova already carries."""
        return [c.name for c in self.checks
                if c.outcome == decision.FIXED_UPSTREAM]

    @property
    def not_applied(self):
        """Mixins that apply to this Nova but were left out (warnings)."""
        aside = (set(self.fixed_upstream) | set(self.mixins) |
                 set(self.not_applicable))
        return [c.name for c in self.checks if c.name not in aside]

    @property
    def not_applicable(self):
        """Mixins whose feature the installed Nova does not have."""
        return [c.name for c in self.checks
                if c.outcome == decision.NOT_APPLICABLE]

    @property
    def bugs(self):
        """{bug: (what the host is to it, why)} for each of ``fixes.BUGS``.

        Any of a bug's mixins left out or not checked leaves the host open.
        """
        by_name = dict((c.name, c) for c in self.checks)
        out = collections.OrderedDict()
        for bug, names in fixes.BUGS.items():
            covered, fixed, absent, open_ = [], [], [], []
            for name in names:
                check = by_name.get(name)
                if name in self.mixins:
                    covered.append(name)
                elif check is None:
                    open_.append('%s not checked' % name)
                elif check.outcome == decision.FIXED_UPSTREAM:
                    fixed.append(name)
                elif check.outcome == decision.NOT_APPLICABLE:
                    absent.append(name)
                else:
                    open_.append('%s not applied (%s)' % (name,
                                                          check.outcome))
            if open_:
                out[bug] = (BUG_OPEN, '; '.join(open_)
                            if self.state != DISABLED else 'disabled')
            elif covered:
                out[bug] = (BUG_PATCHED, ', '.join(covered))
            elif fixed:
                out[bug] = (BUG_FIXED_UPSTREAM, ', '.join(fixed))
            else:
                out[bug] = (BUG_NOT_APPLICABLE, ', '.join(absent))
        return out

    def to_dict(self):
        data = {name: getattr(self, name) for name in (
            'state', 'nova_version', 'series', 'mixins', 'fixed_upstream',
            'not_applied', 'not_applicable', 'problems', 'warnings',
            'missing', 'lock')}
        data['bugs'] = collections.OrderedDict(
            (bug, status) for bug, (status, _why) in self.bugs.items())
        data['checks'] = [c.to_dict() for c in self.checks]
        return data

    def __repr__(self):
        return '<ActivationReport %s nova=%s mixins=%s problems=%d>' % (
            self.state, self.nova_version, self.mixins, len(self.problems))
