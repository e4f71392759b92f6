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

"""The family mixins: sibling races upstream fixed later (bug 1944759).

They stand aside where the code carries upstream's fix, like the fixes
for bug 1879878, but are admitted like the mixins beyond upstream: one
that cannot apply is left out alone with a warning, and never costs the
host the other mixins. Runs the guard against the installed Nova.
"""

import sys

import fixtures
from oslo_config import cfg
from oslotest import base as test_base

from nova_revert_lock import activation
from nova_revert_lock import conf as nrl_conf
from nova_revert_lock.guard import decision
from nova_revert_lock.guard import fingerprint_table
from nova_revert_lock.guard import releases
from nova_revert_lock import mixins
from nova_revert_lock.mixins import base
from nova_revert_lock.mixins import resize_source_flavor

NAME = 'resize_source_flavor'
RESIZE_INSTANCE = 'nova.compute.manager:ComputeManager._resize_instance'


def installed_has_fix():
    """From the version: the releases upstream's fix b841e55321 is in."""
    version = releases.installed_nova_version()
    key = tuple(int(p) for p in version.split('.')[:3])
    return (key >= (22, 4, 0) and key[0] != 21 and
            not ((23, 0, 0) <= key < (23, 2, 0)) and
            not ((24, 0, 0) <= key < (24, 1, 0)))


class DeclarationsTest(test_base.BaseTestCase):

    def test_family_and_shipped(self):
        self.assertIn(NAME, mixins.FAMILY)
        self.assertIn(NAME, mixins.EXTRAS)
        self.assertNotIn(NAME, mixins.BEYOND_UPSTREAM)
        self.assertIn(NAME, nrl_conf.SHIPPED_MIXINS)
        spec = resize_source_flavor.SPEC
        self.assertTrue(spec.extra)
        self.assertFalse(spec.beyond_upstream)
        self.assertEqual(sorted(mixins.VERIFIED[NAME]),
                         sorted(spec.implementations))

    def test_fix_recognised_where_upstream_has_it(self):
        marker = mixins.FIXED_WHEN[NAME]
        self.assertIn(marker.ref, mixins.REFS[NAME].replaces)
        fixed = fingerprint_table.CALLS[marker.ref][marker.name]
        for release in ('22.4.0', '23.2.0', '24.1.0', '25.0.0', '31.3.1'):
            self.assertIn(release, fixed)
        for release in ('20.6.1', '21.1.0', '21.1.2', '21.2.4', '22.3.0',
                        '23.1.0', '24.0.0'):
            self.assertNotIn(release, fixed)

    def test_support_matrix_outcomes(self):
        expected = {
            '20.6.1': decision.MATCH, '21.1.0': decision.MATCH,
            '21.1.2': decision.MATCH, '22.3.0': decision.MATCH,
            '23.1.0': decision.MATCH, '24.0.0': decision.MATCH,
            '22.4.0': decision.FIXED_UPSTREAM,
            '23.2.0': decision.FIXED_UPSTREAM,
            '24.1.0': decision.FIXED_UPSTREAM,
            '31.3.1': decision.FIXED_UPSTREAM,
            # known, affected, no implementation verified on it (an older
            # _resize_instance)
            '20.0.1': decision.UNKNOWN,
        }
        found = {label: decision.check_release(NAME, label).outcome
                 for label in expected}
        self.assertEqual(expected, found)
        self.assertEqual(
            'train', decision.check_release(NAME, '20.6.1').series)
        self.assertEqual(
            'ussuri', decision.check_release(NAME, '21.1.2').series)
        for label, series in (('22.0.0', 'victoria'), ('23.0.0', 'wallaby'),
                              ('24.0.0', 'xena')):
            self.assertEqual(
                series, decision.check_release(NAME, label).series)


class LiveGuardTest(test_base.BaseTestCase):

    def _evaluate(self, mixin_names=None, on_unknown_code=None):
        conf = cfg.ConfigOpts()
        nrl_conf.register_opts(conf)
        conf([], project='nova', default_config_files=[])
        for name, value in (('mixins', mixin_names),
                            ('on_unknown_code', on_unknown_code)):
            if value is not None:
                conf.set_override(name, value, group='revert_lock')
        return activation.build(conf)

    def test_outcome_on_installed_nova(self):
        check = resize_source_flavor.SPEC.check()
        if installed_has_fix():
            self.assertEqual(base.FIXED_UPSTREAM, check.outcome)
        else:
            self.assertEqual(base.MATCH, check.outcome, check.problems)

    def _forget_resize_instance(self):
        table = dict(fingerprint_table.FINGERPRINTS)
        table.pop(RESIZE_INSTANCE)
        self.useFixture(fixtures.MockPatchObject(
            fingerprint_table, 'FINGERPRINTS', table))

    def test_unknown_code_is_left_out_with_a_warning(self):
        if installed_has_fix():
            self.skipTest('the installed Nova carries the fix for 1944759')
        before = self._evaluate()
        self.assertIn(NAME, before.mixins)
        self._forget_resize_instance()
        for choice in ('fail', 'warn'):
            report = self._evaluate(on_unknown_code=choice)
            # Nothing else changes: the state, the other mixins.
            self.assertEqual(before.state, report.state)
            self.assertEqual([m for m in before.mixins if m != NAME],
                             report.mixins)
            self.assertEqual([], report.problems)
            self.assertEqual([], report.missing)
            # (Other extras may be left out on this release already.)
            self.assertEqual(sorted(before.not_applied + [NAME]),
                             sorted(report.not_applied))
            new = [w for w in report.warnings if w not in before.warnings]
            self.assertTrue(new)
            for warning in new:
                self.assertIn('%s not applied' % NAME, warning)
            self.assertIn('_resize_instance', new[0])
            # (Where it was the only mixin to apply, nothing is composed.)
            self.assertFalse(report.manager is not None and issubclass(
                report.manager, resize_source_flavor.SourceFlavorMixin))

    def test_overriding_manager_leaves_it_out(self):
        if installed_has_fix():
            self.skipTest('the installed Nova carries the fix for 1944759')
        from nova.compute import manager
        from nova import service

        class Vendor(manager.ComputeManager):
            def _resize_instance(self, *args, **kwargs):
                pass

        module = sys.modules[__name__]
        module.Vendor = Vendor
        self.addCleanup(delattr, module, 'Vendor')
        before = self._evaluate()
        self.useFixture(fixtures.MockPatchObject(
            service, 'SERVICE_MANAGERS',
            dict(service.SERVICE_MANAGERS,
                 **{'nova-compute': __name__ + '.Vendor'})))
        report = self._evaluate()
        self.assertEqual(before.state, report.state)
        self.assertEqual([m for m in before.mixins if m != NAME],
                         report.mixins)
        self.assertEqual(before.warnings +
                         ['%s not applied: Vendor overrides '
                          '_resize_instance' % NAME], report.warnings)

    def test_alone_on_affected_nova(self):
        if installed_has_fix():
            self.skipTest('the installed Nova carries the fix for 1944759')
        report = self._evaluate([NAME])
        self.assertEqual([NAME], report.mixins)
        self.assertTrue(issubclass(report.manager,
                                   resize_source_flavor.SourceFlavorMixin))
        full = self._evaluate()
        if full.state == activation.PATCHED:
            # The 1879878 fixes this Nova needs are missing.
            self.assertEqual(activation.INCOMPLETE, report.state)
        else:
            self.assertEqual(activation.ALREADY_FIXED, report.state)

    def test_stands_aside_on_fixed_nova(self):
        if not installed_has_fix():
            self.skipTest('the installed Nova lacks the fix for 1944759')
        report = self._evaluate()
        self.assertNotIn(NAME, report.mixins)
        self.assertIn(NAME, report.fixed_upstream)
        self.assertNotIn(NAME, report.not_applied)
