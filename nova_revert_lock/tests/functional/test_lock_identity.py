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

"""The new critical sections must take the tracker's very lock.

oslo.concurrency keeps fair and plain locks apart: a section that takes
``compute_resources`` the other way than the installed tracker (Train:
plain, Ussuri and later: fair) excludes nothing. These tests activate the
extension with the lock read off the installed tracker but its fairness
flipped, and check that the periodic task then gets into the window, as
on plain Nova. They are written against whatever the installed tracker
does, so they run unchanged on every affected release.
"""

import fixtures
from nova.compute import resource_tracker
from nova.tests.functional import integrated_helpers
from oslo_config import cfg

from nova_revert_lock import conf as nrl_conf
from nova_revert_lock import locking
from nova_revert_lock import report as nrl_report
from nova_revert_lock.tests.functional import base
from nova_revert_lock.tests.functional import test_same_cell_race

CONF = cfg.CONF
#: the mixins whose new critical sections race Nova's own periodic task
RACED_MIXINS = ['confirm', 'revert']


def installed_lock():
    """The LockSpec the installed tracker's periodic task takes."""
    return locking.lock_of(resource_tracker.ResourceTracker.__dict__[
        '_update_available_resource'])


def other_kind(spec):
    """The same lock name and arguments, with the fairness flipped."""
    kwargs = dict(spec.kwargs)
    kwargs['fair'] = not spec.fair
    return locking.LockSpec(spec.name, kwargs)


class OtherKindOfLockRaceTest(base.ExtensionFixtureMixin, base.RaceMixin,
                              test_same_cell_race._Scenarios,
                              integrated_helpers.ProviderUsageBaseTestCase):
    """The fix with the other kind of lock: the race shows again."""

    def setUp(self):
        if not base.nova_is_affected():
            self.skipTest('the installed Nova carries the fix: nothing is '
                          'composed')
        self.right_lock = installed_lock()
        self.wrong_lock = other_kind(self.right_lock)
        self.assertNotEqual(repr(self.right_lock), repr(self.wrong_lock))
        self.useFixture(fixtures.MonkeyPatch(
            'nova_revert_lock.locking.tracker_lock',
            lambda refs: self.wrong_lock))
        # NOTE: source_window composes the periodic task itself with the
        # lock spec; flipped, the periodic would take the same wrong lock
        # as the new sections, and only Nova's other tracker methods would
        # go unexcluded. Leave it out so that the periodic stays Nova's,
        # under the installed lock, as the race harness needs.
        nrl_conf.register_opts(CONF)
        CONF.set_override('mixins', RACED_MIXINS, group='revert_lock')
        self.addCleanup(CONF.clear_override, 'mixins', group='revert_lock')
        super(OtherKindOfLockRaceTest, self).setUp()
        # NOTE: where Nova has cross-cell resize, its fixes are left out
        # too: composed, but reported incomplete.
        self.assertIn(self.activation_report.state,
                      (nrl_report.PATCHED, nrl_report.INCOMPLETE),
                      self.activation_report.problems)
        self.assertLessEqual(
            set(self.activation_report.missing),
            {'cross_cell_confirm', 'cross_cell_revert'})
        self.assertEqual(RACED_MIXINS, self.activation_report.mixins)
        self.assertEqual(self.wrong_lock.describe(),
                         self.activation_report.lock)
        # The composed tracker really takes the wrong lock.
        for host in self.hosts:
            tracker_cls = type(self.tracker(host))
            for name in ('drop_move_claim_at_source',
                         'drop_move_claim_at_dest'):
                self.assertEqual(
                    repr(self.wrong_lock),
                    repr(locking.lock_of(tracker_cls.__dict__[name])), name)

    def test_confirm_race_shows_with_the_other_lock(self):
        self._raced_confirm()
        # Nothing kept the periodic out: it rebuilt the books between the
        # status change and the claim drop, which then counted twice.
        self.assertEqual(1, len(self.window_seen), self.window_seen)
        self.assertEqual(-1, self.vcpus_used('host1'))
        self._assert_healed(0, 2)

    def test_revert_race_shows_with_the_other_lock(self):
        self._raced_revert()
        self.assertEqual(1, len(self.window_seen), self.window_seen)
        self._assert_healed(1, 0)
