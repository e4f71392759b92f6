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

"""The loader, the guard and activation, against the installed Nova.

These use the real stevedore namespace and the real Nova classes; only
the fingerprint table or Nova's importability are replaced where a test
needs a Nova we do not have.
"""

import functools
import sys
from unittest import mock

import fixtures
from oslo_config import cfg
from oslo_config import fixture as config_fixture
from oslotest import base
import stevedore

from nova_revert_lock import activation
from nova_revert_lock import composition
from nova_revert_lock import conf as nrl_conf
from nova_revert_lock import exception
from nova_revert_lock import fixes
from nova_revert_lock.guard import assess
from nova_revert_lock.guard import fingerprint_table
from nova_revert_lock import locking
from nova_revert_lock import report as nrl_report
from nova_revert_lock.tests.unit import guard_helpers


class ActivationTestCase(base.BaseTestCase):

    def setUp(self):
        super(ActivationTestCase, self).setUp()
        self.conf = self.useFixture(config_fixture.Config(
            cfg.ConfigOpts())).conf
        nrl_conf.register_opts(self.conf)
        self.addCleanup(activation.deactivate)
        from nova import service
        self.service = service
        self.original = dict(service.SERVICE_MANAGERS)
        self.expected = activation.build(self.conf)

    def _managers_unchanged(self):
        self.assertEqual(self.original, self.service.SERVICE_MANAGERS)

    def test_declarations_are_the_entry_points(self):
        # setup.cfg names one entry point per declaration, and each names
        # the spec of the module of that name.
        self.assertEqual(sorted(fixes.NAMES), assess.available_mixins())
        for ext in stevedore.ExtensionManager(fixes.NAMESPACE):
            self.assertEqual(ext.name, ext.plugin.name)
            self.assertEqual('nova_revert_lock.mixins.%s:SPEC' % ext.name,
                             ext.entry_point_target)

    def test_activate_is_idempotent_and_reversible(self):
        first = activation.activate(self.conf)
        self.assertIs(first, activation.activate(self.conf))
        if first.state == nrl_report.PATCHED:
            self.assertEqual(
                activation.MANAGER_PATH,
                self.service.SERVICE_MANAGERS['nova-compute'])
            self.assertIsNotNone(activation.RevertLockComputeManager)
        activation.deactivate()
        self._managers_unchanged()
        self.assertFalse(hasattr(activation, 'RevertLockComputeManager'))

    def test_nova_classes_untouched(self):
        from nova.compute import manager
        from nova.compute import resource_tracker
        before = (dict(vars(manager.ComputeManager)),
                  dict(vars(resource_tracker.ResourceTracker)))
        report = activation.activate(self.conf)
        after = (dict(vars(manager.ComputeManager)),
                 dict(vars(resource_tracker.ResourceTracker)))
        self.assertEqual(before, after)
        if report.state == nrl_report.PATCHED:
            composed = report.manager
            self.assertTrue(issubclass(composed, manager.ComputeManager))
            tracker = guard_helpers.composed_tracker(composed)
            self.assertTrue(issubclass(tracker,
                                       resource_tracker.ResourceTracker))
            self.assertTrue(hasattr(tracker, '_drop_move_claim'))

    def test_reconfigure_starts_over(self):
        activation.activate(self.conf)
        self.conf.set_override('enabled', False, group='revert_lock')
        report = activation.activate(self.conf)
        self.assertEqual(nrl_report.DISABLED, report.state)
        self._managers_unchanged()

    def test_disabled(self):
        self.conf.set_override('enabled', False, group='revert_lock')
        report = activation.activate(self.conf)
        self.assertEqual('disabled', str(report.state))
        self.assertEqual([], report.mixins)
        self.assertIsNone(report.manager)
        self._managers_unchanged()

    def test_unknown_mixin_names_the_available_ones(self):
        self.conf.set_override('mixins', ['confirm', 'bogus'],
                               group='revert_lock')
        e = self.assertRaises(exception.ConfigurationError,
                              activation.activate, self.conf)
        self.assertIn('bogus', str(e))
        for name in list(fixes.NAMES):
            self.assertIn(name, str(e))
        self._managers_unchanged()

    def test_empty_mixin_list(self):
        self.conf.set_override('mixins', [], group='revert_lock')
        self.assertRaises(exception.ConfigurationError,
                          activation.activate, self.conf)
        self._managers_unchanged()

    def test_bad_choice(self):
        path = self.create_tempfiles(
            [('nova', '[revert_lock]\non_unknown_code = explode\n')])[0]
        self.conf(['--config-file', path])
        e = self.assertRaises(exception.ConfigurationError,
                              activation.activate, self.conf)
        self.assertIn('explode', str(e))
        self._managers_unchanged()

    def test_unknown_code_is_refused_and_names_functions(self):
        if self.expected.state != nrl_report.PATCHED:
            self.skipTest('installed Nova is not an affected release')
        with mock.patch.dict(fingerprint_table.FINGERPRINTS, clear=True):
            report = activation.activate(self.conf)
        self.assertEqual(nrl_report.REFUSED, report.state)
        self.assertEqual([], report.mixins)
        self.assertIsNone(report.manager)
        text = '\n'.join(report.problems)
        for name in report.checks[0].functions:
            self.assertIn(name.ref, text)
        self.assertIn('on_unknown_code',
                      activation.describe_refusal(report))
        self._managers_unchanged()

    def test_other_manager_overriding_is_refused(self):
        if self.expected.state != nrl_report.PATCHED:
            self.skipTest('installed Nova is not an affected release')
        from nova.compute import manager

        class Vendor(manager.ComputeManager):
            def revert_resize(self, *args, **kwargs):
                pass

        sys.modules[__name__].Vendor = Vendor
        self.addCleanup(delattr, sys.modules[__name__], 'Vendor')
        path = __name__ + '.Vendor'
        with mock.patch.dict(self.service.SERVICE_MANAGERS,
                             {'nova-compute': path}):
            report = activation.activate(self.conf)
            self.assertEqual(nrl_report.REFUSED, report.state)
            self.assertIn('Vendor overrides revert_resize',
                          '\n'.join(report.problems))
            self.assertEqual(path,
                             self.service.SERVICE_MANAGERS['nova-compute'])

    def test_other_manager_is_extended(self):
        if self.expected.state != nrl_report.PATCHED:
            self.skipTest('installed Nova is not an affected release')
        from nova.compute import manager

        class Vendor(manager.ComputeManager):
            def vendor_method(self):
                pass

        sys.modules[__name__].Vendor = Vendor
        self.addCleanup(delattr, sys.modules[__name__], 'Vendor')
        path = __name__ + '.Vendor'
        with mock.patch.dict(self.service.SERVICE_MANAGERS,
                             {'nova-compute': path}):
            report = activation.activate(self.conf)
            self.assertTrue(issubclass(report.manager, Vendor))
            activation.deactivate()
            self.assertEqual(path,
                             self.service.SERVICE_MANAGERS['nova-compute'])

    def test_nova_not_importable(self):
        with mock.patch.dict(sys.modules, {'nova.compute.manager': None}):
            e = self.assertRaises(exception.NovaNotAvailable,
                                  activation.activate, self.conf)
        self.assertIn('same Python environment', str(e))
        self._managers_unchanged()


class WrappedFunctionTestCase(base.BaseTestCase):
    """A checked function wrapped at run time by a decorator we do not know.

    Such a function fingerprints as the function it wraps; a mixin that
    replaced it would drop the wrapper silently. The guard names the
    wrapper instead: a fix for bug 1879878 is refused, an extra is left
    out with a warning.
    """

    def setUp(self):
        super(WrappedFunctionTestCase, self).setUp()
        self.conf = self.useFixture(config_fixture.Config(
            cfg.ConfigOpts())).conf
        nrl_conf.register_opts(self.conf)
        installed = activation.build(self.conf)
        self.installed = installed.state
        self.installed_mixins = installed.mixins

    def _wrap(self, cls, name):
        original = cls.__dict__[name]

        @functools.wraps(original)
        def vendor_trace(*args, **kwargs):
            return original(*args, **kwargs)

        self.useFixture(fixtures.MockPatchObject(cls, name, vendor_trace))

    def test_extra_left_out_naming_the_wrapper(self):
        from nova.compute import resource_tracker
        self._wrap(resource_tracker.ResourceTracker,
                   '_pair_instances_to_migrations')
        before = self.installed_mixins
        report = activation.build(self.conf)
        self.assertEqual(self.installed, report.state)
        self.assertNotIn('source_window', report.mixins)
        # incoming_migration_context (Train to Xena) extends it too.
        ref = ('nova.compute.resource_tracker:ResourceTracker.'
               '_pair_instances_to_migrations')
        sharing = sorted(m for m in before
                         if ref in fixes.FIXES[m].replaces +
                         fixes.FIXES[m].relies_on)
        self.assertIn('source_window', sharing)
        self.assertEqual(sharing, sorted(report.not_applied))
        self.assertEqual(len(sharing), len(report.warnings), report.warnings)
        (warning,) = [w for w in report.warnings
                      if w.startswith('source_window not applied')]
        self.assertIn('_pair_instances_to_migrations', warning)
        self.assertIn('wrapped at run time by %s.' % __name__, warning)
        self.assertIn('vendor_trace', warning)

    def test_core_fix_refused_naming_the_wrapper(self):
        if self.installed != nrl_report.PATCHED:
            self.skipTest('installed Nova is not an affected release')
        from nova.compute import manager
        self._wrap(manager.ComputeManager, 'revert_resize')
        report = activation.build(self.conf)
        self.assertEqual(nrl_report.REFUSED, report.state)
        self.assertIsNone(report.manager)
        text = '\n'.join(report.problems)
        self.assertIn('ComputeManager.revert_resize: wrapped at run time '
                      'by %s.' % __name__, text)
        self.assertIn('vendor_trace', text)


class ForeignTrackerTestCase(base.BaseTestCase):
    """A manager that builds its own ResourceTracker subclass.

    The composed tracker must be a subclass of that very class (its
    overrides kept), or the manager must refuse to start naming it; never
    the stock tracker in its place.
    """

    def setUp(self):
        super(ForeignTrackerTestCase, self).setUp()
        from nova.compute import resource_tracker
        self.stock = resource_tracker.ResourceTracker
        conf = self.useFixture(config_fixture.Config(
            cfg.ConfigOpts())).conf
        nrl_conf.register_opts(conf)
        report = activation.build(conf)
        if report.manager is None:
            self.skipTest('nothing is composed on this Nova')
        specs, _failures = assess.load_specs(report.mixins)
        checks = {c.name: c for c in report.checks}
        self.applied = [(s, checks[s.name]) for s in specs]
        self.lock = locking.tracker_lock(fixes.LOCK_REFS)

    def _manager(self, tracker_cls):
        """A composed manager whose base builds a ``tracker_cls``."""

        class VendorManager(object):
            def __init__(self, host):
                self.host = host
                self.additional_endpoints = []
                # NOTE: the constructor's arguments vary by release; the
                # swap does not depend on them.
                self.rt = tracker_cls.__new__(tracker_cls)

        return composition.compose(VendorManager, self.applied, self.lock)

    def test_stock_tracker(self):
        manager_cls = self._manager(self.stock)
        manager = manager_cls('host1')
        self.assertIs(guard_helpers.composed_tracker(manager_cls),
                      type(manager.rt))

    def test_vendor_tracker_is_composed_over(self):
        class VendorTracker(self.stock):
            def vendor_audit(self):
                return 'vendor'

        manager_cls = self._manager(VendorTracker)
        manager = manager_cls('host1')
        tracker_cls = type(manager.rt)
        self.assertTrue(issubclass(tracker_cls, VendorTracker))
        self.assertEqual('RevertLockVendorTracker', tracker_cls.__name__)
        self.assertEqual('vendor', manager.rt.vendor_audit())
        stock_composed = guard_helpers.composed_tracker(manager_cls)
        for name in vars(stock_composed):
            if not name.startswith('__'):
                self.assertIs(vars(stock_composed)[name],
                              vars(tracker_cls)[name], name)
        # one class per tracker class
        self.assertIs(tracker_cls, type(manager_cls('host2').rt))

    def test_vendor_override_is_refused(self):
        class VendorTracker(self.stock):
            def _update_usage_from_migrations(self, *args, **kwargs):
                pass

        manager_cls = self._manager(VendorTracker)
        e = self.assertRaises(exception.ForeignTracker, manager_cls, 'host1')
        self.assertIn('%s.%s' % (__name__, VendorTracker.__qualname__),
                      str(e))
        self.assertIn('overrides ResourceTracker.'
                      '_update_usage_from_migrations', str(e))
        self.assertIn('[revert_lock] enabled = false', str(e))

    def test_vendor_lock_override_is_refused(self):
        class VendorTracker(self.stock):
            def drop_move_claim(self, *args, **kwargs):
                pass

        e = self.assertRaises(exception.ForeignTracker,
                              self._manager(VendorTracker), 'host1')
        self.assertIn('ResourceTracker.drop_move_claim', str(e))

    def test_not_a_resource_tracker(self):
        class Other(object):
            pass

        e = self.assertRaises(exception.ForeignTracker,
                              self._manager(Other), 'host1')
        self.assertIn('not a ResourceTracker', str(e))
