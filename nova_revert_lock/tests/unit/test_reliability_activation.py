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

"""Activation cycles within one process leave Nova exactly as shipped.

Against the installed Nova: whatever sequence of activations,
re-configurations, refusals and deactivations runs, Nova's classes,
modules and ``SERVICE_MANAGERS`` end as they started, and no composed
class outlives its activation.
"""

import gc
from unittest import mock

from oslo_config import cfg
from oslo_config import fixture as config_fixture
from oslotest import base

from nova_revert_lock import activation
from nova_revert_lock import conf as nrl_conf
from nova_revert_lock import exception
from nova_revert_lock.guard import fingerprint_table
from nova_revert_lock import report as nrl_report


def _nova_state():
    """Everything activation could conceivably touch, by identity."""
    from nova.compute import manager
    from nova.compute import resource_tracker
    from nova import service
    return {
        'ComputeManager': dict(vars(manager.ComputeManager)),
        'ResourceTracker': dict(vars(resource_tracker.ResourceTracker)),
        'nova.compute.manager': dict(vars(manager)),
        'nova.compute.resource_tracker': dict(vars(resource_tracker)),
        'SERVICE_MANAGERS': dict(service.SERVICE_MANAGERS),
    }


def _composed_alive():
    """ids of the composed classes still alive.

    Other tests may keep reports (and so composed classes) of their own
    alive, so callers compare before and after.
    """
    from nova.compute import manager
    from nova.compute import resource_tracker
    gc.collect()
    return {id(c)
            for cls in (manager.ComputeManager,
                        resource_tracker.ResourceTracker)
            for c in cls.__subclasses__()
            if c.__module__ == activation.__name__}


class ActivationCycleTest(base.BaseTestCase):

    def setUp(self):
        super(ActivationCycleTest, self).setUp()
        self.conf = self.useFixture(config_fixture.Config(
            cfg.ConfigOpts())).conf
        nrl_conf.register_opts(self.conf)
        self.addCleanup(activation.deactivate)
        activation.deactivate()
        self.installed = activation.build(self.conf).state
        self.shipped = _nova_state()
        self.alive = _composed_alive()

    def _assert_as_shipped(self):
        self.assertEqual(self.shipped, _nova_state())
        self.assertFalse(hasattr(activation, 'RevertLockComputeManager'))
        self.assertIsNone(activation.current_report())
        self.assertEqual(set(), _composed_alive() - self.alive)

    def _activate(self, **overrides):
        for name, value in overrides.items():
            self.conf.set_override(name, value, group='revert_lock')
        try:
            return activation.activate(self.conf).state
        finally:
            for name in overrides:
                self.conf.clear_override(name, group='revert_lock')

    def test_activate_deactivate_cycles(self):
        for _ in range(3):
            self.assertEqual(self.installed, self._activate())
            activation.deactivate()
            self._assert_as_shipped()

    def test_reconfigurations_then_deactivate(self):
        states = [self._activate(),
                  self._activate(mixins=['confirm']),
                  self._activate(mixins=['revert']),
                  self._activate(enabled=False),
                  self._activate(),
                  self._activate(on_unknown_code='warn')]
        self.assertEqual(nrl_report.DISABLED, states[3])
        activation.deactivate()
        self._assert_as_shipped()

    def test_refusal_then_deactivate(self):
        with mock.patch.dict(fingerprint_table.FINGERPRINTS, clear=True):
            self._activate()
        activation.deactivate()
        self._assert_as_shipped()

    def test_deactivate_twice_and_without_activation(self):
        activation.deactivate()
        self._activate()
        activation.deactivate()
        activation.deactivate()
        self._assert_as_shipped()

    def test_failed_reconfiguration_keeps_the_activation(self):
        """A bad new configuration raises and changes nothing.

        The previous activation stays in force: not deactivated half-way,
        and not replaced by a partly composed manager.
        """
        from nova import service
        first = activation.activate(self.conf)
        before = (dict(service.SERVICE_MANAGERS),
                  getattr(activation, 'RevertLockComputeManager', None))
        for bad in ({'mixins': ['confirm', 'bogus']}, {'mixins': []}):
            self.assertRaises(exception.ConfigurationError,
                              self._activate, **bad)
            self.assertIs(first, activation.current_report())
            self.assertEqual(before, (
                dict(service.SERVICE_MANAGERS),
                getattr(activation, 'RevertLockComputeManager', None)))
        del first, before
        activation.deactivate()
        self._assert_as_shipped()
