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

"""Nova's own resize and cold-migration tests, with the extension active.

The mixins replace ``_confirm_resize`` and ``revert_resize`` (bug 1879878)
and ``_resize_instance`` (bug 1944759): Nova's own functional tests of
those operations (allocations in placement, usage on each host,
notifications, failure paths) must pass on the composed manager exactly
as they pass on plain Nova. ``ServerMovingTests`` below is Nova's class
of the installed release with
:class:`~.base.ExtensionFixtureMixin` first in its bases, so every Nova
test runs with the extension activated before the computes start.

Only the tests whose name says they resize, migrate, revert or confirm
are kept; live migration and evacuation do not run the replaced code.
The selection is by name so that it follows the installed release, whose
test names differ from one series to the next. If the installed Nova has
no ``ServerMovingTests`` at all, the class skips. On Victoria and later
(no confirm/revert mixin applies there) ``test_nova_move_tests_epoxy``
runs them instead, so this module skips.

Some of Nova's tests make a step fail by stubbing its method on Nova's
``ComputeManager`` (``test_resize_instance_fails_allocation_cleanup``
stubs ``_resize_instance``). Where a mixin replaces that method the
composed manager's own would hide the stub, so
:meth:`~.base.ExtensionFixtureMixin.stub_out` puts the stub on the
composed manager too: the test then fails the step it means to fail, and
checks Nova's clean-up around it.

On plain Nova 20.6.1 and 21.1.0 every selected test passes, so any
failure here is the extension's.
"""

import re
import unittest

import testtools

from nova_revert_lock.guard import releases
from nova_revert_lock import report as nrl_report
from nova_revert_lock.tests.functional import base

try:
    from nova.tests.functional import test_servers
except ImportError:  # pragma: no cover - not a Nova with functional tests
    test_servers = None

#: first Nova major version left to test_nova_move_tests_epoxy (Victoria)
FIRST_MAJOR_ELSEWHERE = 22

_MOVE_TEST = re.compile('resize|migrat|revert|confirm')
_NOT_COLD_MOVE = re.compile('live|evacuat')


def is_move_test(name):
    """True for the test names this module runs."""
    return bool(_MOVE_TEST.search(name) and not _NOT_COLD_MOVE.search(name))


def _major(version):
    try:
        return int(str(version).split('.')[0])
    except ValueError:
        return 0


def only_move_tests(cls):
    """Class decorator: hide every inherited test that is not a move test.

    A test method set to None is not collected by unittest's loader, so
    the others do not even show up as skipped.
    """
    for name in unittest.TestLoader().getTestCaseNames(cls):
        if not is_move_test(name):
            setattr(cls, name, None)
    return cls


# NOTE: Nova's class is only reached through its module: a TestCase class
# bound to a name in this module would be collected and run as it is, on
# plain Nova and without its api-paste.ini.
if getattr(test_servers, 'ServerMovingTests', None) is None:
    class ServerMovingTests(testtools.TestCase):
        """Stands in for the Nova test class the installed release lacks."""

        def test_nova_server_moving_tests(self):
            self.skipTest('the installed Nova has no nova.tests.functional.'
                          'test_servers.ServerMovingTests')
else:
    @only_move_tests
    class ServerMovingTests(base.ExtensionFixtureMixin,
                            test_servers.ServerMovingTests):
        """Nova's resize/migrate/revert/confirm tests, extension active."""

        def setUp(self):
            version = releases.installed_nova_version()
            if _major(version) >= FIRST_MAJOR_ELSEWHERE:
                self.skipTest('Nova %s: test_nova_move_tests_epoxy runs '
                              'these tests' % version)
            super(ServerMovingTests, self).setUp()
            # Prove the computes Nova's setUp started are the composed
            # manager (or that the installed Nova needs none).
            report = self.activation_report
            self.assertIn(report.state,
                          (nrl_report.PATCHED, nrl_report.ALREADY_FIXED),
                          report.problems)
            if report.state == nrl_report.PATCHED:
                for compute in (self.compute1, self.compute2):
                    self.assertIsInstance(compute.manager, report.manager)
            # No release this module runs on carries upstream's fix for
            # bug 1944759: its mixin is among the default ones applied,
            # or stands aside on a build with a series of patches/.
            self.assertIn('resize_source_flavor',
                          report.mixins + report.fixed_upstream,
                          report.warnings)
