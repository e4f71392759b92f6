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

"""tools/kolla_render.py judges rendered Dockerfiles, and can fail."""

import os
import subprocess
import sys
import tempfile
import unittest

from ci_lint import path

sys.path.insert(0, path('tools'))

import kolla_render  # noqa: E402

PIP = ('RUN python3 -m pip --no-cache-dir install --upgrade '
       '-c /requirements/upper-constraints.txt oslo-vmware%s \\\n'
       '    && true\n')


class JudgeTestCase(unittest.TestCase):

    def _judge(self, text):
        with tempfile.NamedTemporaryFile('w', suffix='Dockerfile') as f:
            f.write(text)
            f.flush()
            return kolla_render.judge(f.name)

    def test_rendered_with_the_override(self):
        text = (PIP % ' nova-revert-lock' + '\n' + kolla_render.footer() +
                '\n\nUSER nova\n')
        self.assertEqual([], self._judge(text))

    def test_rendered_without_it(self):
        problems = self._judge(PIP % '' + '\nUSER nova\n')
        self.assertEqual(2, len(problems), problems)

    def test_order_and_python_2(self):
        text = (kolla_render.footer() + '\n' + PIP % ' nova-revert-lock' +
                '\nUSER nova\n')
        self.assertIn("the footer comes before nova-revert-lock's install",
                      self._judge(text))
        text = ('RUN python2.7 -m pip --no-cache-dir install '
                'nova-revert-lock\n' + kolla_render.footer() +
                '\nUSER nova\n')
        self.assertIn("the image's Python is 2.x", self._judge(text))
        text = (PIP % ' nova-revert-lock' + 'USER nova\n' +
                kolla_render.footer())
        self.assertIn('the footer does not run before USER nova',
                      self._judge(text))

    def test_footer_is_posix_shell(self):
        subprocess.check_call(['/bin/sh', '-n', '-c',
                               kolla_render.footer_shell()])
        self.assertIn('--command-starts-fix', kolla_render.footer_shell())

    def test_unknown_release_is_refused(self):
        proc = subprocess.run(
            [sys.executable, path('tools/kolla_render.py'), '--work-dir',
             os.devnull, '1.0.0'], stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT, universal_newlines=True)
        self.assertEqual(2, proc.returncode)
        self.assertIn('unknown kolla release', proc.stdout)


class TripleOTestCase(unittest.TestCase):

    def test_same_steps_as_kolla(self):
        with open(path('contrib/tripleo/Dockerfile')) as f:
            text = f.read()
        self.assertIn(kolla_render.footer(), text)
        self.assertLess(text.index('install nova-revert-lock'),
                        text.index(kolla_render.footer()))
        self.assertTrue(text.rstrip().endswith('USER nova'))
