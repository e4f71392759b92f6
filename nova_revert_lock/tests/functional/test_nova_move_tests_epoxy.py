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

On 2025.1 and later the bug 1879878 mixins stand aside and only
``source_window`` is composed; Nova's own ``ServerMovingTests`` must pass
unchanged with it. Only the resize, cold migrate, confirm and revert tests
run here (live migration, evacuate and shelve never reach the code the
extension touches). Older releases are covered by the tests that run Nova's
whole class there, so this module skips on them.
"""

import re
import unittest

import testtools

from nova.tests.functional import test_servers

from nova_revert_lock import activation
from nova_revert_lock.guard import decision
from nova_revert_lock.guard import releases
from nova_revert_lock import mixins
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
        self.assertEqual(activation.ALREADY_FIXED, report.state,
                         report.problems)
        # Family mixins whose code is known here apply too (bug 1894095,
        # which no release fixes: live_migration_rollback on 31.x-34.0.0).
        family = [c.name for c in report.checks
                  if c.name in mixins.FAMILY and c.outcome == decision.MATCH]
        self.assertEqual(['source_window'] + family, report.mixins)
        self.assertEqual('RevertLockComputeManager',
                         type(self.compute1.manager).__name__)


def load_tests(loader, standard_tests, pattern):
    """Keep the resize, cold migrate, confirm and revert tests."""
    suite = unittest.TestSuite()
    for test in testtools.iterate_tests(standard_tests):
        name = test.id().rsplit('.', 1)[-1]
        if WANTED.search(name) and not UNWANTED.search(name):
            suite.addTest(test)
    return suite
