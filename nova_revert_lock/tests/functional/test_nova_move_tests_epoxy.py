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

"""Nova's own move tests on current Nova, with the extension active.

On Victoria and later the bug 1879878 mixins stand aside; ``source_window``
and the mixins of the family whose fix the release lacks are composed
(``resize_source_flavor`` on 22.0.0-24.0.0, for instance), and Nova's own
``ServerMovingTests`` must pass unchanged with them. Only the resize,
cold migrate, confirm and revert tests run here (live migration, evacuate
and shelve never reach the code this module is about). Older releases are
covered by the tests that run Nova's whole class there, so this module
skips on them.
"""

import re
import unittest

import testtools

from nova.tests.functional import test_servers

from nova_revert_lock import fixes
from nova_revert_lock.guard import releases
from nova_revert_lock import report as nrl_report
from nova_revert_lock.tests.functional import base

#: tests of ServerMovingTests that go through resize/migrate/confirm/revert
WANTED = re.compile(r'resize|migrat|revert|confirm')
UNWANTED = re.compile(r'live_migrat|evacuate|shelve')
#: first Nova major version these tests run on (22 = Victoria)
FIRST_MAJOR = 22


def _nova_major():
    try:
        return int(str(releases.installed_nova_version()).split('.')[0])
    except ValueError:
        return 0


class ServerMovingTestsWithExtension(base.ExtensionFixtureMixin,
                                     test_servers.ServerMovingTests):
    """Nova's ServerMovingTests, nova-compute built by the extension."""

    def setUp(self):
        if _nova_major() < FIRST_MAJOR:
            self.skipTest('Nova %s: its move tests run in the module for '
                          'affected releases' %
                          releases.installed_nova_version())
        super(ServerMovingTestsWithExtension, self).setUp()
        report = self.activation_report
        self.assertEqual(nrl_report.ALREADY_FIXED, report.state,
                         report.problems)
        # What applies depends on the release (source_window, the family's
        # mixins where upstream lacks their fix), never a 1879878 fix; on
        # a build with a series of patches/ nothing does (the manager is
        # still composed, for the status endpoint).
        self.assertEqual(
            [], [m for m in report.mixins if m in fixes.BUGS['1879878']])
        if base.window_fixed_upstream():
            self.assertEqual([], report.mixins)
        else:
            self.assertIn('source_window', report.mixins)
        self.assertEqual('ComputeManager' if base.activation_disabled()
                         else 'RevertLockComputeManager',
                         type(self.compute1.manager).__name__)


def load_tests(loader, standard_tests, pattern):
    """Keep the resize, cold migrate, confirm and revert tests."""
    suite = unittest.TestSuite()
    for test in testtools.iterate_tests(standard_tests):
        name = test.id().rsplit('.', 1)[-1]
        if WANTED.search(name) and not UNWANTED.search(name):
            suite.addTest(test)
    return suite
