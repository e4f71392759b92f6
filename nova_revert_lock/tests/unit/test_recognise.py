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

"""Recognising upstream's fixes by what the code does.

First on small module texts (the survey's input), then on the installed
Nova made into code no survey has seen: a later release that moved a
fixed body into a helper and renamed a private method (the guard must
stand aside on a fixed Nova, not refuse it), and partial or mere-mention
backports (the guard must never call an open host fixed).
"""

import functools
import textwrap

import fixtures
from oslotest import base as test_base

from nova_revert_lock import fixes
from nova_revert_lock.guard import fingerprint_table
from nova_revert_lock.guard import recognise
from nova_revert_lock.mixins import resize_source_flavor
from nova_revert_lock.mixins import revert
from nova_revert_lock.mixins import unshelve_claim
from nova_revert_lock import report as nrl_report
from nova_revert_lock.tests.unit import future_nova
from nova_revert_lock.tests.unit import guard_helpers

Does = fixes.Does

MANAGER = textwrap.dedent('''
    import foo


    def helper_function(x):
        return x.SPAWNING


    class Manager(object):

        @foo.synchronized('lock', fair=True)
        def locked(self):
            pass

        def entry(self, instance):
            return self._helper(instance)

        def _helper(self, instance):
            self._deeper(instance)

        def _deeper(self, instance):
            self._deepest(instance)

        def _deepest(self, instance):
            self.rt.far_away(instance)

        def nested(self, instance):
            def inner():
                self.rt.drop_move_claim_at_dest(instance)
            return inner

        def reads(self, instance):
            LOG.debug('old flavor: %s', instance.old_flavor)
            return 'drop_move_claim_at_dest'

        def writes(self, instance):
            instance.old_flavor, instance.new_flavor = instance.flavor, None
            self._helper(instance)
''')

_M = 'manager:Manager.'


class TextRecogniseTest(test_base.BaseTestCase):

    def _holds(self, ref, does, name):
        sources = recognise.TextSources({'manager': MANAGER})
        return recognise.Recogniser(sources).holds(Does(ref, does, name))

    def test_helpers_followed_to_max_depth(self):
        self.assertEqual(2, recognise.MAX_DEPTH)
        # entry -> _helper -> _deeper: two levels, found.
        self.assertTrue(self._holds(_M + 'entry', 'calls', '_deepest'))
        # _deepest is a third level below entry: not looked at.
        self.assertFalse(self._holds(_M + 'entry', 'calls', 'far_away'))
        self.assertTrue(self._holds(_M + '_helper', 'calls', 'far_away'))

    def test_nested_functions_are_the_functions_code(self):
        self.assertTrue(self._holds(_M + 'nested', 'calls',
                                    'drop_move_claim_at_dest'))

    def test_a_mention_is_not_a_call_nor_an_assignment(self):
        self.assertFalse(self._holds(_M + 'reads', 'calls',
                                     'drop_move_claim_at_dest'))
        self.assertFalse(self._holds(_M + 'reads', 'assigns',
                                     'old_flavor'))
        self.assertTrue(self._holds(_M + 'reads', 'refers', 'old_flavor'))
        self.assertTrue(self._holds(_M + 'writes', 'assigns',
                                    'old_flavor'))
        self.assertTrue(self._holds(_M + 'writes', 'assigns',
                                    'new_flavor'))

    def test_decorated(self):
        self.assertTrue(self._holds(_M + 'locked', 'decorated',
                                    'synchronized'))
        self.assertFalse(self._holds(_M + 'entry', 'decorated',
                                     'synchronized'))

    def test_module_functions(self):
        self.assertTrue(self._holds('manager:helper_function', 'refers',
                                    'SPAWNING'))

    def test_missing_anchor_or_module(self):
        self.assertFalse(self._holds(_M + 'nowhere', 'calls', 'x'))
        self.assertFalse(self._holds('other:Manager.entry', 'calls', 'x'))

    def test_unknown_action_is_an_error(self):
        self.assertRaises(ValueError, self._holds, _M + 'entry', 'reads',
                          'x')

    def test_every_part_needed(self):
        sources = recognise.TextSources({'manager': MANAGER})
        recogniser = recognise.Recogniser(sources)
        whole = (Does(_M + 'nested', 'calls', 'drop_move_claim_at_dest'),
                 Does(_M + 'locked', 'decorated', 'synchronized'))
        self.assertTrue(recogniser.fixed(whole))
        partial = whole + (Does(_M + 'reads', 'assigns', 'old_flavor'),)
        self.assertFalse(recogniser.fixed(partial))
        self.assertFalse(recogniser.holds(partial[2]))
        self.assertFalse(recogniser.fixed(()))


class DeclarationsTest(test_base.BaseTestCase):

    def test_parts_are_well_formed(self):
        for fix in fixes.FIXES.values():
            for part in fix.fixed_when:
                self.assertIsInstance(part, fixes.Does)
                self.assertIn(part.does, recognise.ACTIONS, part)
                self.assertIn(':', part.ref, part)

    def test_table_says_where_each_fix_is(self):
        self.assertEqual(
            sorted(n for n, fix in fixes.FIXES.items() if fix.fixed_when),
            sorted(fingerprint_table.FIXED))
        # Upstream's releases of each fix, and releases before it.
        fixed = {'revert': ('21.1.1', '22.0.0', '34.0.0'),
                 'resize_source_flavor': ('22.4.0', '25.0.0', '34.0.0'),
                 'unshelve_claim': ('26.2.2', '29.0.0', '34.0.0'),
                 'evacuate_under_lock': ('21.2.0', '22.1.0', '34.0.0'),
                 # no release: the builds of patches/2025.1 on
                 'live_migration_rollback': ('31.3.1+patches',),
                 'source_window': ('20.6.1+patches', '21.1.0+patches',
                                   '21.2.4+patches', '31.3.1+patches')}
        open_ = {'revert': ('20.6.1', '21.1.0', 'train-eol'),
                 'resize_source_flavor': ('21.2.4', '22.3.0', '24.0.0'),
                 'unshelve_claim': ('24.0.0', '26.2.1', '27.2.0'),
                 'evacuate_under_lock': ('21.1.2', '22.0.0'),
                 'live_migration_rollback': ('21.1.0', '31.3.1', '34.0.0'),
                 'source_window': ('21.2.4', '31.3.1', '34.0.0')}
        for name, releases in fixed.items():
            for release in releases:
                self.assertIn(release, fingerprint_table.FIXED[name],
                              (name, release))
        for name, releases in open_.items():
            for release in releases:
                self.assertNotIn(release, fingerprint_table.FIXED[name],
                                 (name, release))


def allow_resource_removal(vm_state, task_state=None):
    """What f1dc4ec39b adds to vm_states, for a partial backport."""
    from nova.compute import task_states
    from nova.compute import vm_states
    return (vm_state == vm_states.DELETED or
            vm_state == vm_states.SHELVED_OFFLOADED and
            task_state != task_states.SPAWNING)


class FutureNovaTest(test_base.BaseTestCase):
    """The installed Nova, changed as no surveyed release is."""

    def _bug(self, report, bug):
        return report.bugs[bug][0]

    def test_fix_moved_into_a_helper_and_a_private_method_renamed(self):
        """A later release keeps the fix: stand aside, never refuse.

        ``revert_resize`` becomes one line calling a new helper with its
        body; ``_confirm_resize`` is renamed. On a Nova with the fix for
        bug 1879878 the guard recognises it all the same; on one without
        it, the changed code is not the fix either.
        """
        fixed_here = revert.SPEC.fixed_upstream()
        self.useFixture(future_nova.FutureModule(
            'nova.compute.manager', 'ComputeManager', [
                future_nova.move_into_helper(
                    'ComputeManager.revert_resize', '_revert_resize_at_dest'),
                future_nova.rename('_confirm_resize',
                                   '_confirm_resize_at_source')]))
        report = guard_helpers.evaluate()
        if fixed_here:
            self.assertEqual(nrl_report.ALREADY_FIXED, report.state,
                             report.problems)
            self.assertEqual([], report.problems)
            self.assertIn('revert', report.fixed_upstream)
            self.assertIn('confirm', report.fixed_upstream)
            self.assertEqual(nrl_report.BUG_FIXED_UPSTREAM,
                             self._bug(report, '1879878'))
        else:
            self.assertEqual(nrl_report.REFUSED, report.state)
            self.assertNotIn('revert', report.fixed_upstream)
            self.assertNotIn('confirm', report.fixed_upstream)
            self.assertNotEqual(nrl_report.BUG_FIXED_UPSTREAM,
                                self._bug(report, '1879878'))

    def test_reading_old_flavor_is_not_the_fix(self):
        """Bug 1944759: a ``_resize_instance`` that logs ``old_flavor``."""
        if resize_source_flavor.SPEC.fixed_upstream():
            self.skipTest('the installed Nova carries the fix')
        self.useFixture(future_nova.FutureModule(
            'nova.compute.manager', 'ComputeManager', [
                future_nova.wrap_with(
                    'ComputeManager._resize_instance',
                    "LOG.debug('Old flavor: %s', instance.old_flavor)")]))
        self.assertFalse(resize_source_flavor.SPEC.fixed_upstream())
        report = guard_helpers.evaluate()
        self.assertNotIn('resize_source_flavor', report.fixed_upstream)
        self.assertNotIn('resize_source_flavor', report.mixins)
        self.assertEqual(nrl_report.BUG_OPEN, self._bug(report, '1944759'))

    def test_a_wrapper_added_at_run_time_hides_nothing(self):
        """A hook around upstream's function: the fix is still read.

        Standing aside changes nothing, so recognition looks through any
        ``__wrapped__`` layer (applying a mixin does not: the fingerprint
        check refuses unknown wrappers).
        """
        from nova.compute import resource_tracker
        part = fixes.FIXES['unshelve_claim'].fixed_when[0]
        before = recognise.Recogniser(recognise.LiveSources()).holds(part)
        orig = resource_tracker.ResourceTracker._update_usage_from_instances

        @functools.wraps(orig)
        def hooked(*args, **kwargs):
            return orig(*args, **kwargs)

        self.useFixture(fixtures.MonkeyPatch(
            'nova.compute.resource_tracker.ResourceTracker.'
            '_update_usage_from_instances', hooked))
        self.assertIsNotNone(recognise.LiveSources().source(part.ref))
        self.assertEqual(
            before, recognise.Recogniser(recognise.LiveSources()).holds(part))

    def test_one_of_three_places_backported_is_not_the_fix(self):
        """Bug 2025480: only the usage update asks the new vm_states."""
        if unshelve_claim.SPEC.fixed_upstream():
            self.skipTest('the installed Nova carries the fix')
        self.useFixture(fixtures.MonkeyPatch(
            'nova.compute.vm_states.allow_resource_removal',
            allow_resource_removal))
        self.useFixture(future_nova.FutureModule(
            'nova.compute.resource_tracker', 'ResourceTracker', [
                future_nova.replace_in(
                    'ResourceTracker._update_usage_from_instances',
                    'instance.vm_state not in vm_states.'
                    'ALLOW_RESOURCE_REMOVAL',
                    'not vm_states.allow_resource_removal('
                    'vm_state=instance.vm_state, '
                    'task_state=instance.task_state)')]))
        self.assertFalse(unshelve_claim.SPEC.fixed_upstream())
        recogniser = recognise.Recogniser(recognise.LiveSources())
        missing = [part for part in fixes.FIXES['unshelve_claim'].fixed_when
                   if not recogniser.holds(part)]
        self.assertEqual(
            ['nova.compute.resource_tracker:'
             'ResourceTracker._update_usage_from_instance',
             'nova.compute.stats:Stats.update_stats_for_instance'],
            [p.ref for p in missing])
        report = guard_helpers.evaluate()
        self.assertNotIn('unshelve_claim', report.fixed_upstream)
        self.assertEqual(nrl_report.BUG_OPEN, self._bug(report, '2025480'))
