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

import functools
import os
import sys
from unittest import mock

import fixtures
import testtools

from nova_revert_lock import fixes
from nova_revert_lock.guard import fingerprint_table
from nova_revert_lock.guard import fingerprints
from nova_revert_lock.guard import releases


SOURCE = '''
    @decorator(arg=1)
    def method(self, a, b=None):
        """Docstring that does not count."""
        # a comment that does not count
        x = a + 1

        return x, b
'''


class NormalizeTestCase(testtools.TestCase):

    def test_comments_blank_lines_docstrings_do_not_count(self):
        other = '''
        @decorator(arg=1)
        def method(self, a, b=None):
            """Another docstring."""
            x = a + 1   # trailing comment
            return x, b
        '''
        self.assertEqual(fingerprints.fingerprint(SOURCE),
                         fingerprints.fingerprint(other))

    def test_code_change_counts(self):
        changed = SOURCE.replace('a + 1', 'a + 2')
        self.assertNotEqual(fingerprints.fingerprint(SOURCE),
                            fingerprints.fingerprint(changed))

    def test_decorator_change_counts(self):
        changed = SOURCE.replace('arg=1', 'arg=1, fair=True')
        self.assertNotEqual(fingerprints.fingerprint(SOURCE),
                            fingerprints.fingerprint(changed))

    def test_string_statement_later_in_body_counts(self):
        changed = SOURCE.replace('return x, b', '"not a docstring"\n'
                                 '        return x, b')
        # A string statement that is not the docstring is kept.
        self.assertNotEqual(fingerprints.normalize(SOURCE),
                            fingerprints.normalize(changed))

    def test_normalized_text(self):
        self.assertEqual(
            '@ decorator ( arg = 1 ) def method ( self , a , b = None ) : '
            'x = a + 1 return x , b',
            fingerprints.normalize(SOURCE))


class LiveFingerprintTestCase(testtools.TestCase):

    def test_live_function_matches_its_source_text(self):
        ref = 'nova_revert_lock.guard.fingerprints:FunctionCheck.describe'
        import inspect
        text = inspect.getsource(fingerprints.FunctionCheck.describe)
        self.assertEqual(fingerprints.fingerprint(text),
                         fingerprints.live_fingerprint(ref))

    @testtools.skipIf(sys.version_info < (3, 8),
                      'the survey tool needs ast end_lineno (Python 3.8+)')
    def test_source_survey_matches_live(self):
        import inspect
        module_source = inspect.getsource(fingerprints)
        found = fingerprints.sources_in_source(
            module_source, ['FunctionCheck.describe', 'FunctionCheck.nope'])
        self.assertEqual(['FunctionCheck.describe'], list(found))
        self.assertEqual(
            fingerprints.live_fingerprint(
                'nova_revert_lock.guard.fingerprints:FunctionCheck.describe'),
            fingerprints.fingerprint(found['FunctionCheck.describe']))

    def test_check_unknown_and_missing(self):
        ref = 'nova_revert_lock.guard.fingerprints:FunctionCheck.describe'
        result = fingerprints.check(ref, table={})
        self.assertFalse(result.known)
        self.assertIn('unknown code', result.describe())
        missing = fingerprints.check(
            'nova_revert_lock.guard.fingerprints:NoSuchClass.method', table={})
        self.assertIn('not found', missing.describe())

    def test_check_known(self):
        ref = 'nova_revert_lock.guard.fingerprints:FunctionCheck.describe'
        digest = fingerprints.live_fingerprint(ref)
        result = fingerprints.check(ref, table={ref: {digest: ('21.1.0',)}})
        self.assertTrue(result.known)
        self.assertEqual(frozenset(['21.1.0']), result.releases)

    def test_mock_has_no_source(self):
        from unittest import mock
        with mock.patch.object(fingerprints.FunctionCheck, 'describe'):
            result = fingerprints.check(
                'nova_revert_lock.guard.fingerprints:FunctionCheck.describe',
                table={})
        self.assertIsNotNone(result.error)

    def test_release_sorting(self):
        self.assertEqual(['20.0.0', '20.6.1', '21.1.0', '31.3.1'],
                         fingerprints.sorted_releases(
                             ['31.3.1', '21.1.0', '20.6.1', '20.0.0']))


def _profiled(func):
    """A wrapper as a profiler or a vendor patch would add at run time."""
    @functools.wraps(func)
    def profiled(*args, **kwargs):
        return func(*args, **kwargs)
    return profiled


class WrapperTestCase(testtools.TestCase):
    """Only Nova's and oslo.concurrency's decorators are looked through."""

    PAIRING = ('nova.compute.resource_tracker:ResourceTracker.'
               '_pair_instances_to_migrations')
    REVERT = 'nova.compute.manager:ComputeManager.revert_resize'

    def _wrap(self, ref):
        """Wrap the real Nova function ``ref`` for this test only."""
        owner, name = ref.rsplit('.', 1)
        cls = fingerprints.resolve(owner)
        wrapped = _profiled(cls.__dict__[name])
        self.useFixture(fixtures.MockPatchObject(cls, name, wrapped))
        return wrapped

    def test_nova_decorators_are_looked_through(self):
        for ref in (self.PAIRING, self.REVERT):
            result = fingerprints.check(ref)
            self.assertIsNone(result.error, result.describe())
            self.assertTrue(result.known, result.describe())

    def test_foreign_wrapper_is_named(self):
        for ref in (self.PAIRING, self.REVERT):
            self._wrap(ref)
            result = fingerprints.check(ref)
            self.assertFalse(result.known)
            self.assertIsNone(result.fingerprint)
            # module and qualname (Python 3.11+) or name of its code
            self.assertRegex(
                result.describe(), r'wrapped at run time by %s\.'
                r'(_profiled\.<locals>\.)?profiled, which is not'
                % __name__.replace('.', r'\.'))
            self.assertIn(ref, result.describe())

    def test_wrapper_names_its_own_code(self):
        wrapped = self._wrap(self.PAIRING)
        # functools.wraps made it look like Nova's ...
        self.assertEqual('nova.compute.resource_tracker', wrapped.__module__)
        # ... but its code is ours.
        self.assertIn(fingerprints.wrapper_name(wrapped), (
            __name__ + '.profiled', __name__ + '._profiled.<locals>.profiled'))

    def test_unwrap(self):
        from nova.compute import manager
        inner = fingerprints.unwrap(manager.ComputeManager.revert_resize)
        self.assertFalse(hasattr(inner, '__wrapped__'))
        self.assertRaises(fingerprints.UnknownWrapper, fingerprints.unwrap,
                          _profiled(manager.ComputeManager.revert_resize))


class PatchedBuildsTestCase(testtools.TestCase):
    """The table knows the builds of this tree's patch series."""

    # nova_revert_lock/guard/fingerprint_table.py -> the tree's top
    PATCHES = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(
        os.path.abspath(fingerprint_table.__file__)))), 'patches')

    def setUp(self):
        super(PatchedBuildsTestCase, self).setUp()
        if not os.path.isdir(self.PATCHES):
            self.skipTest('not run from a source tree: no patches/')

    def _targets_a_release(self, name):
        path = os.path.join(self.PATCHES, name, 'series')
        if not os.path.exists(path):
            return False
        with open(path) as f:
            return any(line.startswith('# target: nova==') for line in f)

    def test_surveyed_series_are_the_patches_here(self):
        # NOTE: series for a released Nova name it on a "# target:" line;
        # the one for Nova's master (for Gerrit) has no build to survey.
        series = sorted(d for d in os.listdir(self.PATCHES)
                        if self._targets_a_release(d))
        surveyed = fingerprint_table.SURVEYED_PATCHES
        self.assertEqual(series, sorted(s for s, _d in surveyed.values()))
        for label, (name, digest) in sorted(surveyed.items()):
            # NOTE: a patch changed without a new survey: run
            # tools/survey_fingerprints.py as the table's header says.
            self.assertEqual(
                digest, fingerprints.patch_series_digest(
                    os.path.join(self.PATCHES, name)),
                '%s: patches/%s changed since the survey' % (label, name))

    def test_labels_sort_after_their_release(self):
        self.assertEqual(
            ['20.6.1', '20.6.1+patches', '21.0.0', '21.1.0',
             '21.1.0+patches', '21.1.1'],
            fingerprints.sorted_releases(
                ['21.1.1', '21.1.0+patches', '21.0.0', '20.6.1+patches',
                 '21.1.0', '20.6.1']))


_LAYOUTS = '''
import functools


def deco(*args, **kwargs):
    return lambda f: f


class Layouts(object):

    @deco(
        'multi-line decorator')
    @deco()
    def decorated(self, a,
                  b=None):
        """Docstring."""
        x = [a,
             b]
        # a comment at the end of the body

        return x

    def trailing_comment(self):
        return 1
    # a comment at the class level

    def string_at_column_zero(self):
        return """
text
"""

    def last(self):
        pass
'''


class QuickSourceTestCase(testtools.TestCase):
    """The survey's shortcut finds the text the survey takes."""

    def setUp(self):
        super(QuickSourceTestCase, self).setUp()
        fingerprints._LIVE.clear()
        self.addCleanup(fingerprints._LIVE.clear)

    def _module(self):
        tmp = self.useFixture(fixtures.TempDir()).path
        with open(os.path.join(tmp, 'nrl_layouts.py'), 'w') as f:
            f.write(_LAYOUTS)
        self.useFixture(fixtures.MonkeyPatch(
            'sys.path', [tmp] + sys.path))
        self.addCleanup(sys.modules.pop, 'nrl_layouts', None)
        import nrl_layouts
        return nrl_layouts

    @testtools.skipIf(sys.version_info < (3, 8),
                      'the survey tool needs ast end_lineno (Python 3.8+)')
    def test_same_text_as_the_survey(self):
        module = self._module()
        names = ['decorated', 'trailing_comment', 'last']
        texts = fingerprints.sources_in_source(
            _LAYOUTS, ['Layouts.%s' % n for n in names])
        for name in names:
            self.assertEqual(
                texts['Layouts.%s' % name],
                fingerprints.quick_source(vars(module.Layouts)[name]), name)

    def test_other_layouts_take_the_long_way(self):
        module = self._module()
        func = module.Layouts.string_at_column_zero
        text = fingerprints.quick_source(func)
        # Cut at the string's column-0 line: a text no survey has, so the
        # guard tokenizes (and gets it right).
        self.assertNotIn('text', text)
        self.assertEqual(
            fingerprints.fingerprint(fingerprints.live_source(func)),
            fingerprints.live_fingerprint(
                'nrl_layouts:Layouts.string_at_column_zero'))

    @staticmethod
    def _resolves(ref):
        # NOTE: a mixin may rely on a function later releases renamed,
        # where its fix stands aside (resize_source_flavor relies on
        # _get_instance_type, which Xena renamed _get_flavor).
        try:
            fingerprints.resolve(ref)
        except (ImportError, AttributeError, KeyError):
            return False
        return True

    def test_surveyed_text_is_not_tokenized(self):
        refs = [r for r in fixes.all_refs() if r.startswith(
            'nova.compute.resource_tracker:') and self._resolves(r)]
        with mock.patch.object(fingerprints, 'fingerprint',
                               wraps=fingerprints.fingerprint) as tokenized:
            digests = [fingerprints.live_fingerprint(r) for r in refs]
        table = fingerprint_table.SOURCE_DIGESTS
        installed = (os.environ.get('NRL_SURVEYED_AS') or
                     releases.installed_nova_version())
        if installed in fingerprint_table.SURVEYED_RELEASES:
            self.assertEqual(0, tokenized.call_count)
        fingerprints._LIVE.clear()
        for ref, digest in zip(refs, digests):
            func = fingerprints.unwrap(fingerprints.resolve(ref))
            # the shortcut and the tokenizer agree
            self.assertEqual(
                fingerprints.fingerprint(fingerprints.live_source(func)),
                digest, ref)
            if installed in fingerprint_table.SURVEYED_RELEASES:
                self.assertIn(fingerprints.source_digest(
                    fingerprints.quick_source(func)), table[ref])

    def test_once_per_process(self):
        ref = 'nova_revert_lock.guard.fingerprints:FunctionCheck.describe'
        with mock.patch.object(fingerprints, 'fingerprint',
                               wraps=fingerprints.fingerprint) as tokenized:
            first = fingerprints.live_fingerprint(ref)
            self.assertEqual(first, fingerprints.live_fingerprint(ref))
            self.assertEqual(first, fingerprints.check(ref, {}).fingerprint)
        self.assertEqual(1, tokenized.call_count)
