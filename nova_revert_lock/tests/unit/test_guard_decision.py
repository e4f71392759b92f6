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

"""The support matrix: the guard's verdict on every surveyed release.

The matrix and the live check share one decision; these tests pin the
decision's rules on small tables, that the generated page is current,
and, in each tox env, that the live check on the installed release says
what the matrix says of it.
"""

import os

import stevedore
import testtools

from nova_revert_lock import fixes
from nova_revert_lock.guard import decision
from nova_revert_lock.guard import fingerprint_table
from nova_revert_lock.guard import fingerprints
from nova_revert_lock.guard import matrix
from nova_revert_lock.guard import releases

_CM = 'nova.compute.manager:ComputeManager.'
REF_A = _CM + 'revert_resize'
REF_B = _CM + 'finish_revert_resize'
DOCS = os.path.join(os.path.dirname(__file__), os.pardir, os.pardir,
                    os.pardir, 'doc', 'source', 'reference')
DOC = os.path.join(DOCS, 'support-matrix.rst')
BUG_DOC = os.path.join(DOCS, 'bug-matrix.rst')


def _checks(table, code):
    """FunctionChecks for {ref: digest} against a FINGERPRINTS mapping."""
    return [fingerprints.FunctionCheck(ref, digest,
                                       table.get(ref, {}).get(digest, ()))
            for ref, digest in sorted(code.items())]


class DecideTest(testtools.TestCase):

    TABLE = {
        REF_A: {'a1': ('21.0.0', '21.1.0'), 'a2': ('21.1.1', '22.0.0')},
        REF_B: {'b1': ('21.0.0', '21.1.0', '21.1.1'), 'b2': ('22.0.0',)},
    }

    def _decide(self, code, verified):
        functions = _checks(self.TABLE, code)
        verified = dict((s, decision.expand(v, decision.by_release(
            self.TABLE))) for s, v in verified.items())
        return decision.decide('source_window', functions, False,
                               verified, self.TABLE)

    def test_verified_release(self):
        check = self._decide({REF_A: 'a1', REF_B: 'b1'},
                             {'ussuri': ('21.0.0-21.1.0',)})
        self.assertEqual(decision.MATCH, check.outcome)
        self.assertEqual('ussuri', check.series)
        self.assertEqual({'21.0.0', '21.1.0'}, check.releases)

    def test_known_but_not_verified_is_unknown(self):
        # 22.0.0 is surveyed, so its code is known; nothing verified it.
        check = self._decide({REF_A: 'a2', REF_B: 'b2'},
                             {'ussuri': ('21.0.0-21.1.0',)})
        self.assertEqual(decision.UNKNOWN, check.outcome)
        self.assertIn('no implementation was verified on it',
                      check.problems[0])
        self.assertIn('Nova 22.0.0', check.problems[0])
        # Known code: nothing to report as nearest.
        self.assertIsNone(check.nearest)

    def test_each_function_verified_code(self):
        # A build mixing 21.1.1's revert_resize with code both share.
        check = self._decide({REF_A: 'a2', REF_B: 'b1'},
                             {'ussuri': ('21.0.0-21.1.1',)})
        self.assertEqual(decision.MATCH, check.outcome)
        self.assertEqual({'21.1.1'}, check.releases)
        check = self._decide({REF_A: 'a2', REF_B: 'b1'},
                             {'ussuri': ('21.0.0-21.1.0',)})
        self.assertEqual(decision.UNKNOWN, check.outcome)

    def test_a_combination_no_verified_release_ships_is_unknown(self):
        # 21.1.0's revert_resize beside 22.0.0's finish_revert_resize:
        # each verified (21.1.0 and 22.0.0), never together, no release
        # ships both. The tests never ran on that combination.
        check = self._decide({REF_A: 'a1', REF_B: 'b2'},
                             {'ussuri': ('21.1.0', '22.0.0')})
        self.assertEqual(decision.UNKNOWN, check.outcome)
        self.assertEqual(frozenset(), frozenset(check.releases))
        self.assertIn('no test ran on this combination', check.problems[0])
        # A release that ships both, verified: applied.
        check = self._decide({REF_A: 'a2', REF_B: 'b1'},
                             {'ussuri': ('21.1.1', '22.0.0')})
        self.assertEqual(decision.MATCH, check.outcome)

    def test_newest_verified_series_applies(self):
        check = self._decide({REF_A: 'a2', REF_B: 'b1'},
                             {'ussuri': ('21.1.1',), '2025.1': ('21.1.1',)})
        self.assertEqual('2025.1', check.series)

    def test_unknown_code_names_the_nearest_release(self):
        check = self._decide({REF_A: 'zz', REF_B: 'b2'},
                             {'ussuri': ('21.0.0-21.1.0',)})
        self.assertEqual(decision.UNKNOWN, check.outcome)
        self.assertEqual(('22.0.0', [REF_A]), check.nearest)
        self.assertIn('nearest known release: Nova 22.0.0 (differs in '
                      'ComputeManager.revert_resize)', check.note)
        self.assertIn('nearest known release', check.problems[-1])

    def test_fixed_upstream_needs_no_known_code(self):
        functions = _checks(self.TABLE, {REF_A: 'zz'})
        check = decision.decide('confirm', functions, True, {}, self.TABLE)
        self.assertEqual(decision.FIXED_UPSTREAM, check.outcome)


class LabelsTest(testtools.TestCase):

    def test_branch_tips_belong_to_their_series(self):
        self.assertEqual('train', releases.series_of('train-eol'))
        self.assertEqual('2023.2', releases.series_of('2023.2-eol'))
        self.assertEqual('unknown', releases.series_of('master'))

    def test_branch_tips_sort_after_their_releases(self):
        self.assertEqual(
            ['20.6.1', '20.6.1+patches', 'train-eol', '21.0.0', '28.3.1',
             '2023.2-eol', '29.0.0'],
            fingerprints.sorted_releases(
                ['29.0.0', '2023.2-eol', 'train-eol', '28.3.1', '21.0.0',
                 '20.6.1+patches', '20.6.1']))

    def test_ranges_leave_out_tips_and_builds(self):
        labels = ['20.5.0', '20.6.1', '20.6.1+patches', 'train-eol',
                  '21.0.0']
        self.assertEqual({'20.5.0', '20.6.1'},
                         decision.expand(['20.0.0-20.6.1'], labels))
        self.assertEqual({'train-eol'},
                         decision.expand(['train-eol'], labels))


class TableTest(testtools.TestCase):

    def test_every_release_has_a_source(self):
        labels = set(fingerprint_table.SURVEYED_RELEASES) | set(
            fingerprint_table.SURVEYED_PATCHES)
        self.assertEqual(labels, set(fingerprint_table.SOURCES))

    def test_verified_releases_were_surveyed(self):
        labels = set(decision.by_release())
        for name, fix in fixes.FIXES.items():
            for series, specs in fix.verified.items():
                found = decision.expand(specs, labels)
                self.assertTrue(found, '%s %s' % (name, series))
                self.assertLessEqual(found, labels)

    def test_matrix_covers_every_label(self):
        found = matrix.matrix()
        self.assertEqual(
            set(fingerprint_table.SURVEYED_RELEASES) |
            set(fingerprint_table.SURVEYED_PATCHES), set(found))
        for row in found.values():
            self.assertEqual(list(fixes.NAMES), list(row))

    def test_generated_page_is_current(self):
        with open(DOC) as f:
            committed = f.read()
        self.assertEqual(
            matrix.format_rst(), committed,
            'doc/source/reference/support-matrix.rst is stale: run '
            '`nova-revert-lock support-matrix --format rst > '
            'doc/source/reference/support-matrix.rst`')

    def test_generated_bug_page_is_current(self):
        with open(BUG_DOC) as f:
            committed = f.read()
        self.assertEqual(
            matrix.format_rst(by='bug'), committed,
            'doc/source/reference/bug-matrix.rst is stale: run '
            '`nova-revert-lock support-matrix --by bug --format rst > '
            'doc/source/reference/bug-matrix.rst`')

    def test_bug_verdicts(self):
        # Open wins over everything (a mixin of the bug is on unknown
        # code), then this package's fix, then upstream's.
        def checks(*outcomes):
            return dict(
                ('m%d' % i, decision.MixinCheck('m%d' % i, outcome, []))
                for i, outcome in enumerate(outcomes))
        names = ['m0', 'm1']
        self.assertEqual('open', matrix.bug_verdict(
            checks(decision.MATCH, decision.UNKNOWN), names))
        self.assertEqual('patched', matrix.bug_verdict(
            checks(decision.MATCH, decision.NOT_APPLICABLE), names))
        self.assertEqual('patched', matrix.bug_verdict(
            checks(decision.FIXED_UPSTREAM, decision.MATCH), names))
        self.assertEqual('fixed-upstream', matrix.bug_verdict(
            checks(decision.FIXED_UPSTREAM, decision.NOT_APPLICABLE),
            names))
        self.assertEqual('not-applicable', matrix.bug_verdict(
            checks(decision.NOT_APPLICABLE, decision.NOT_APPLICABLE),
            names))

    def test_bug_matrix_covers_every_bug(self):
        for release, bugs in matrix.to_dict(by='bug').items():
            self.assertEqual(list(fixes.BUGS), list(bugs), release)


class InstalledReleaseTest(testtools.TestCase):
    """The live check says what the matrix says of the installed Nova."""

    def test_live_check_agrees_with_the_matrix(self):
        version = releases.installed_nova_version()
        label = os.environ.get('NRL_SURVEYED_AS', version)
        if label not in decision.by_release():
            self.skipTest('Nova %s was not surveyed' % version)
        specs = stevedore.ExtensionManager(fixes.NAMESPACE)
        self.assertEqual(set(fixes.NAMES), set(specs.names()))
        wrong = []
        for ext in specs:
            spec = ext.plugin
            self.assertEqual(set(fixes.FIXES[spec.name].verified),
                             set(spec.implementations), spec.name)
            live = spec.check()
            listed = decision.check_release(spec.name, label)
            if (live.outcome, live.series) != (listed.outcome,
                                               listed.series):
                wrong.append('%s: live %s (%s), matrix %s (%s)' % (
                    spec.name, live.outcome, live.series, listed.outcome,
                    listed.series))
        self.assertEqual([], wrong)
