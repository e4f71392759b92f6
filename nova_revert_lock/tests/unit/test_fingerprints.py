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

import sys

import testtools

from nova_revert_lock import fingerprints


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
        ref = 'nova_revert_lock.fingerprints:FunctionCheck.describe'
        import inspect
        text = inspect.getsource(fingerprints.FunctionCheck.describe)
        self.assertEqual(fingerprints.fingerprint(text),
                         fingerprints.live_fingerprint(ref))

    @testtools.skipIf(sys.version_info < (3, 8),
                      'the survey tool needs ast end_lineno (Python 3.8+)')
    def test_source_survey_matches_live(self):
        import inspect
        module_source = inspect.getsource(fingerprints)
        found = fingerprints.fingerprints_in_source(
            module_source, ['FunctionCheck.describe', 'FunctionCheck.nope'])
        self.assertEqual(
            {'FunctionCheck.describe': fingerprints.live_fingerprint(
                'nova_revert_lock.fingerprints:FunctionCheck.describe')},
            found)

    def test_check_unknown_and_missing(self):
        ref = 'nova_revert_lock.fingerprints:FunctionCheck.describe'
        result = fingerprints.check(ref, table={})
        self.assertFalse(result.known)
        self.assertIn('unknown code', result.describe())
        missing = fingerprints.check(
            'nova_revert_lock.fingerprints:NoSuchClass.method', table={})
        self.assertIn('not found', missing.describe())

    def test_check_known(self):
        ref = 'nova_revert_lock.fingerprints:FunctionCheck.describe'
        digest = fingerprints.live_fingerprint(ref)
        result = fingerprints.check(ref, table={ref: {digest: ('21.1.0',)}})
        self.assertTrue(result.known)
        self.assertEqual(frozenset(['21.1.0']), result.releases)

    def test_mock_has_no_source(self):
        from unittest import mock
        with mock.patch.object(fingerprints.FunctionCheck, 'describe'):
            result = fingerprints.check(
                'nova_revert_lock.fingerprints:FunctionCheck.describe',
                table={})
        self.assertIsNotNone(result.error)

    def test_release_sorting(self):
        self.assertEqual(['20.0.0', '20.6.1', '21.1.0', '31.3.1'],
                         fingerprints.sorted_releases(
                             ['31.3.1', '21.1.0', '20.6.1', '20.0.0']))
