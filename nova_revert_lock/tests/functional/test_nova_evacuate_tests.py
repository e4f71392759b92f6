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

"""Nova's own evacuation and rebuild tests, with the extension active.

``evacuate_under_lock`` (bug 1896463) replaces ``rebuild_instance``, the
destination's whole evacuation and every rebuild: Nova's own functional
tests of evacuation and rebuild (allocations in placement, claims, PCI
and port resource requests, server groups, failure paths) must pass on
the composed manager as they pass on plain Nova.

The classes come from the installed release: ``test_servers`` and every
module under ``regressions`` whose source mentions evacuation or
rebuild. Each test case class there with a test whose name says it
evacuates or rebuilds is run here as a subclass with
:class:`~.base.ExtensionFixtureMixin` first in its bases, keeping only
those tests; the selection follows the installed release.
With ``NRL_NO_ACTIVATE=1`` the same tests run on plain Nova, to tell
failures of the extension from those of the release.

The mixin is applied on Train and Ussuri up to 21.1.2 only; on other
releases this module skips.
"""

import importlib
import inspect
import os
import pkgutil
import re
import unittest

import fixtures

from nova_revert_lock.guard import decision
from nova_revert_lock.tests.functional import base

_EVACUATE_TEST = re.compile('evacuat|rebuild')
_SOURCE_MENTIONS = re.compile('evacuat|rebuild')
NAME = 'evacuate_under_lock'


def _modules():
    """Nova's functional test modules that test evacuation."""
    names = ['nova.tests.functional.test_servers']
    try:
        from nova.tests.functional import regressions
    except ImportError:  # pragma: no cover - Nova without functional tests
        return names
    path = regressions.__path__
    for info in pkgutil.iter_modules(path):
        filename = os.path.join(path[0], info[1] + '.py')
        try:
            with open(filename) as f:
                if not _SOURCE_MENTIONS.search(f.read()):
                    continue
        except (IOError, OSError):
            continue
        names.append('nova.tests.functional.regressions.' + info[1])
    return names


def _evacuate_tests(cls):
    return [n for n in unittest.TestLoader().getTestCaseNames(cls)
            if _EVACUATE_TEST.search(n)]


class _EvacuateSuite(object):
    """Checks that the mixin runs; the stubs reach the composed manager."""

    def setUp(self):
        check = _spec().check()
        if check.outcome != decision.MATCH:
            self.skipTest('%s does not apply to the installed Nova (%s)'
                          % (NAME, check.outcome))
        super(_EvacuateSuite, self).setUp()
        self.assertIn(NAME, self.activation_report.mixins,
                      self.activation_report.warnings)

    def stub_out(self, old, new):
        super(_EvacuateSuite, self).stub_out(old, new)
        prefix = 'nova.compute.manager.ComputeManager.'
        report = getattr(self, 'activation_report', None)
        composed = getattr(report, 'manager', None)
        if composed is None or not old.startswith(prefix):
            return
        name = old[len(prefix):]
        if getattr(composed, name, None) is not new:
            # A mixin replaces the stubbed method: stub its override.
            self.useFixture(fixtures.MockPatchObject(composed, name, new))


def _spec():
    from nova_revert_lock.mixins import evacuate_under_lock
    return evacuate_under_lock.SPEC


def _wrap(module_name):
    """Subclasses of the module's test cases, evacuation tests only."""
    try:
        module = importlib.import_module(module_name)
    except ImportError:
        return {}
    wrapped = {}
    short = module_name.rsplit('.', 1)[-1]
    for name, cls in inspect.getmembers(module, inspect.isclass):
        if (name.startswith('_') or cls.__module__ != module_name or
                not issubclass(cls, unittest.TestCase)):
            continue
        keep = _evacuate_tests(cls)
        if not keep:
            continue
        sub = type('%s_%s' % (short, name),
                   (_EvacuateSuite, base.ExtensionFixtureMixin, cls),
                   {'__module__': __name__})
        for test in unittest.TestLoader().getTestCaseNames(sub):
            if test not in keep:
                setattr(sub, test, None)
        wrapped[sub.__name__] = sub
    return wrapped


# NOTE: only the subclasses are bound to names of this module: a Nova
# class bound here would be collected and run as it is.
for _name in _modules():
    globals().update(_wrap(_name))
del _name
