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

"""MixinSpec.check: by release, and by series for builds that mix releases.

The live functions of the installed Nova are fingerprinted as usual; the
table says which releases have each digest, so that one installed Nova
can stand for a build with code from several releases (as a Nova built
with patches/<series> is: its revert_resize is 21.1.1's, its
finish_revert_resize still 21.1.0's).
"""

import fixtures
import testtools

from nova_revert_lock import fixes
from nova_revert_lock.guard import decision
from nova_revert_lock.guard import fingerprints
from nova_revert_lock.mixins import base

USSURI = ('21.0.0', '21.1.0', '21.1.1', '21.1.2')
_CM = 'nova.compute.manager:ComputeManager.'


class MixedReleasesTest(testtools.TestCase):

    NAME = 'source_window'

    def _spec(self, series=('train', 'ussuri')):
        impl = base.Implementation(manager=object)
        return base.MixinSpec(
            name=self.NAME, summary='test',
            implementations=dict((f, impl) for f in series),
            fixed_upstream=lambda: False)

    def _table(self, **releases_by_name):
        """A table with the mixin's live functions in every Ussuri release.

        Except those named (function name -> releases).
        """
        spec = self._spec()
        table = {}
        for ref in spec.refs.replaces + spec.refs.relies_on:
            name = ref.rsplit('.', 1)[1]
            try:
                digest = fingerprints.live_fingerprint(ref)
            except (ImportError, AttributeError, KeyError):
                # Not in the installed Nova (_finish_revert_resize before
                # 21.1.1): a later release has it.
                table[ref] = {'0' * 64: ('31.3.1',)}
                continue
            table[ref] = {digest: releases_by_name.get(name, USSURI)}
        return table

    def test_one_release(self):
        check = self._spec().check(self._table())
        self.assertEqual(decision.MATCH, check.outcome)
        self.assertEqual('ussuri', check.series)
        self.assertEqual(frozenset(USSURI), check.releases)
        self.assertIsNone(check.note)

    def test_releases_of_one_series(self):
        # A Ussuri Nova with one function backported from a later
        # release: each function verified, never together.
        table = self._table(revert_resize=('21.1.1', '21.1.2'),
                            finish_revert_resize=('21.0.0', '21.1.0'))
        check = self._spec().check(table)
        self.assertEqual(decision.UNKNOWN, check.outcome)
        self.assertEqual(frozenset(), check.releases)
        self.assertIn('no release has them all, so no test ran on this '
                      'combination', check.problems[0])

    def test_function_known_in_several_series(self):
        table = self._table(revert_resize=('20.6.1', '21.1.1'),
                            finish_revert_resize=('21.1.1',))
        check = self._spec().check(table)
        self.assertEqual(decision.MATCH, check.outcome, check.problems)
        self.assertEqual('ussuri', check.series)

    def test_releases_of_two_series(self):
        table = self._table(revert_resize=('20.6.1',))
        check = self._spec().check(table)
        self.assertEqual(decision.UNKNOWN, check.outcome)
        self.assertIn('no implementation was verified on it',
                      check.problems[0])

    def test_series_without_implementation(self):
        table = self._table(revert_resize=('21.1.1', '21.1.2'),
                            finish_revert_resize=('21.0.0', '21.1.0'))
        check = self._spec(series=('train',)).check(table)
        self.assertEqual(decision.UNKNOWN, check.outcome)

    def test_unknown_function(self):
        table = self._table()
        table[_CM + 'revert_resize'] = {}
        check = self._spec().check(table)
        self.assertEqual(decision.UNKNOWN, check.outcome)
        self.assertIn('revert_resize: unknown code', check.problems[0])


class AbsentFunctionTest(testtools.TestCase):
    """A function relied on that only some surveyed releases have."""

    REF = 'nova_revert_lock.guard.fingerprints:FunctionCheck.describe'
    ABSENT = ('nova_revert_lock.guard.fingerprints:'
              'FunctionCheck.no_such_method')

    def _table(self):
        digest = fingerprints.live_fingerprint(self.REF)
        return {
            self.REF: {digest: ('20.6.1', 'train-eol', '21.1.0')},
            # train-eol added it; 20.6.1 and 21.1.0 lack it
            self.ABSENT: {'0' * 64: ('train-eol',)},
        }

    def test_absent_matches_the_releases_without_it(self):
        check = fingerprints.check(self.ABSENT, self._table(),
                                   absent_ok=True)
        self.assertTrue(check.absent)
        self.assertIsNone(check.error)
        self.assertEqual(frozenset(['20.6.1', '21.1.0']), check.releases)
        self.assertIn('absent, as in Nova 20.6.1, 21.1.0', check.describe())

    def test_absent_is_an_error_unless_allowed(self):
        check = fingerprints.check(self.ABSENT, self._table())
        self.assertFalse(check.known)
        self.assertIn('not found', check.describe())

    def test_absent_and_never_surveyed_is_an_error(self):
        table = self._table()
        del table[self.ABSENT]
        check = fingerprints.check(self.ABSENT, table, absent_ok=True)
        self.assertFalse(check.known)
        self.assertIn('not found', check.describe())

    def test_absent_everywhere_surveyed_is_an_error(self):
        table = self._table()
        table[self.ABSENT] = {'0' * 64: ('20.6.1', 'train-eol', '21.1.0')}
        check = fingerprints.check(self.ABSENT, table, absent_ok=True)
        self.assertFalse(check.known)

    def _spec(self, **refs):
        impl = base.Implementation(manager=object)
        self.useFixture(fixtures.MockPatchObject(
            fixes, 'FIXES', {'test': fixes.declare(
                'test', 'test', fixes.CORE, **refs)}))
        return base.MixinSpec(
            name='test', summary='test',
            implementations={'train': impl, 'ussuri': impl},
            fixed_upstream=lambda: False)

    def test_spec_relies_on_absent_function(self):
        spec = self._spec(replaces=(self.REF,), relies_on=(self.ABSENT,))
        table = self._table()
        table[self.REF] = {fingerprints.live_fingerprint(self.REF):
                           ('20.6.1', 'train-eol')}
        check = spec.check(table)
        self.assertEqual(decision.MATCH, check.outcome, check.problems)
        self.assertEqual('train', check.series)
        self.assertEqual(frozenset(['20.6.1']), check.releases)

    def test_spec_never_replaces_an_absent_function(self):
        spec = self._spec(replaces=(self.ABSENT,), relies_on=(self.REF,))
        check = spec.check(self._table())
        self.assertEqual(decision.UNKNOWN, check.outcome)
        self.assertIn('not found', check.problems[0])


class VariantsTest(testtools.TestCase):
    """Implementations of one series chosen by the live code."""

    def test_selected_by_the_code(self):
        plain = base.Implementation(manager=object)
        other = base.Implementation(manager=dict)
        chosen = []
        spec = base.MixinSpec(
            name='confirm', summary='test',
            implementations={'train': base.Variants(
                lambda: chosen[-1], {False: plain, True: other})},
            fixed_upstream=lambda: False)
        chosen.append(False)
        self.assertIs(plain, spec.implementation('train'))
        chosen.append(True)
        self.assertIs(other, spec.implementation('train'))

    def test_calls_looks_into_nested_functions(self):
        ref = __name__ + ':_Calls.outer'
        self.assertTrue(base.calls(ref, 'inner_target', nested=True))
        self.assertTrue(base.calls(ref, 'outer_target', nested=True))
        self.assertFalse(base.calls(ref, 'nowhere', nested=True))
        # as upstream's fix is recognised: the function's own code only
        self.assertFalse(base.calls(ref, 'inner_target'))
        self.assertTrue(base.calls(ref, 'outer_target'))


class _Calls(object):

    def outer(self):
        def nested():
            return self.inner_target()
        self.outer_target()
        return nested
