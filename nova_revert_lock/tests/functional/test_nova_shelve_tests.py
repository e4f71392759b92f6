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

"""Nova's own shelve and unshelve tests, with the extension active.

``unshelve_claim`` (bug 2025480) changes what the resource tracker counts
for a server in vm_state ``SHELVED_OFFLOADED``: Nova's own functional
tests of shelve, shelve offload and unshelve (usage on each host,
allocations in placement, volumes, ports with resource requests, the
regressions of earlier shelve bugs) must pass on the composed manager as
they pass on plain Nova.

For each test class of :data:`MODULES` (those of the installed release
that exist) with tests whose name says shelve, a class here puts
:class:`~.base.ExtensionFixtureMixin` first in its bases, so every one of
those tests runs with the extension activated before the computes start;
its other tests are hidden. The selection is by name so that it follows
the installed release. ``NRL_NO_ACTIVATE=1`` runs the same selection on
plain Nova, to tell the extension's failures from Nova's own.
"""

import importlib
import inspect
import re
import unittest

from nova_revert_lock import report as nrl_report
from nova_revert_lock.tests.functional import base

#: Nova's functional test modules with shelve tests (each optional).
MODULES = (
    'nova.tests.functional.test_servers',
    'nova.tests.functional.test_boot_from_volume',
    'nova.tests.functional.regressions.test_bug_1669054',
    'nova.tests.functional.regressions.test_bug_1675570',
    'nova.tests.functional.regressions.test_bug_1815153',
    'nova.tests.functional.regressions.test_bug_1835822',
    'nova.tests.functional.regressions.test_bug_1862633',
    'nova.tests.functional.regressions.test_bug_2025480',
)

_SHELVE_TEST = re.compile('shelve')


def _shelve_tests(cls):
    return [n for n in unittest.TestLoader().getTestCaseNames(cls)
            if _SHELVE_TEST.search(n)]


class _Activated(base.ExtensionFixtureMixin):
    """The extension, checked to be active, before Nova's test case."""

    def setUp(self):
        super(_Activated, self).setUp()
        report = self.activation_report
        self.assertIn(report.state,
                      (nrl_report.PATCHED, nrl_report.ALREADY_FIXED),
                      report.problems)
        # Applied where the installed Nova lacks upstream's fix.
        self.assertTrue('unshelve_claim' in report.mixins or
                        'unshelve_claim' in report.fixed_upstream,
                        report.warnings)


def _extended(name, nova_cls):
    """``nova_cls`` with the extension, its shelve tests only."""
    keep = set(_shelve_tests(nova_cls))
    namespace = {'__module__': __name__}
    for test_name in unittest.TestLoader().getTestCaseNames(nova_cls):
        if test_name not in keep:
            namespace[test_name] = None
    return type(name, (_Activated, nova_cls), namespace)


def _collect():
    found = {}
    for module_name in MODULES:
        try:
            module = importlib.import_module(module_name)
        except ImportError:
            continue
        prefix = module_name.rsplit('.', 1)[1]
        for name, cls in sorted(vars(module).items()):
            if (inspect.isclass(cls) and cls.__module__ == module_name and
                    issubclass(cls, unittest.TestCase) and
                    _shelve_tests(cls)):
                extended = '%s_%s' % (prefix, name)
                found[extended] = _extended(extended, cls)
    return found


globals().update(_collect())
