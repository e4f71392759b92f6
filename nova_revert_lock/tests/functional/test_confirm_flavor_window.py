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

"""Confirm: the periodic task during the driver's clean-up.

Affected Nova (Train 20.x, Ussuri 21.0.0/21.1.0) clears
``instance.old_flavor`` at the start of ``_confirm_resize``, before the
driver cleans up the source and long before the claim is dropped. The
periodic task counts an outgoing migration with the old flavor, so a
periodic on the source in that time counts nothing for it, and the claim
drop then takes the old flavor away a second time. That window is wider
than the one around the status change (the driver can take minutes) and
needs no lock to close: the fix keeps the stashed flavors until the claim
is gone. Here the periodic runs while the driver confirms the migration.

Train's last code (``train-eol``) closed this window itself ("Don't unset
Instance.old_flavor, new_flavor until necessary"): its ``confirm_resize``
clears the stashed flavors last. There the canary shows that plain Nova
counts the outgoing migration during the driver step, and the window
around the status change (``test_same_cell_race``) is what is left.
"""

from nova.tests.functional import integrated_helpers

from nova_revert_lock.mixins import base as mixin_base
from nova_revert_lock.tests.functional import base
from nova_revert_lock.tests.functional import test_same_cell_race


class _DriverStepScenario(test_same_cell_race._Scenarios):

    def _run_periodic_in_driver_confirm(self):
        self.usage_in_driver = {}
        driver = self.computes['host1'].manager.driver
        orig = driver.confirm_migration
        test = self

        def confirm_migration(context, migration, instance, network_info):
            # The source's own periodic, run where the driver cleans up;
            # no lock is held here, with or without the fix.
            host = migration.source_compute
            test.run_periodic(host)
            test.usage_in_driver[host] = test.vcpus_used(host)
            return orig(context, migration, instance, network_info)

        driver.confirm_migration = confirm_migration

    def _confirm_with_periodic_in_driver(self):
        server = self._resized_server()
        self._run_periodic_in_driver_confirm()
        self.confirm(server)
        self.assertEqual(['host1'], list(self.usage_in_driver))


class ConfirmDriverStepTest(base.ExtensionFixtureMixin, base.RaceMixin,
                            _DriverStepScenario,
                            integrated_helpers.ProviderUsageBaseTestCase):
    """The fix: the outgoing migration is counted until its claim drop."""

    def test_periodic_during_driver_confirm(self):
        self._confirm_with_periodic_in_driver()
        self.assertEqual({'host1': 1}, self.usage_in_driver)
        self.assertEqual(0, self.vcpus_used('host1'))
        self._assert_healed(0, 2)


class ConfirmDriverStepCanary(base.CanaryMixin, base.ExtensionFixtureMixin,
                              base.RaceMixin, _DriverStepScenario,
                              integrated_helpers.ProviderUsageBaseTestCase):
    """Plain Nova: the periodic loses the outgoing migration."""

    def test_periodic_during_driver_confirm_on_plain_nova(self):
        self._confirm_with_periodic_in_driver()
        if keeps_flavors_until_confirmed():
            # train-eol: old_flavor is still there, the periodic counts
            # the outgoing migration and the claim drop frees it once.
            self.assertEqual({'host1': 1}, self.usage_in_driver)
            self.assertEqual(0, self.vcpus_used('host1'))
        else:
            # old_flavor was already gone: the periodic did not count the
            # outgoing migration, then the claim drop removed it again.
            self.assertEqual({'host1': 0}, self.usage_in_driver)
            self.assertEqual(-1, self.vcpus_used('host1'))
        self._assert_healed(0, 2)


def keeps_flavors_until_confirmed():
    """True if the installed Nova clears the stashed flavors last.

    Its ``confirm_resize`` does, after ``_confirm_resize`` (train-eol,
    Ussuri 21.1.1 and later); earlier ``_confirm_resize`` clears them
    first.
    """
    return mixin_base.calls(
        'nova.compute.manager:ComputeManager.confirm_resize',
        '_delete_stashed_flavor_info', nested=True)
