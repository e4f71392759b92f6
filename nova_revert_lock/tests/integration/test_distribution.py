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

"""What ``nova-revert-lock check`` says of a distribution's packaged Nova.

Runs where ``NRL_DISTRIBUTION_NOVA`` names the build (the ``debian-zed``
env: Debian 12's ``python3-nova`` 26.2.2, installed with apt, run by the
system Python 3.11 through a ``--system-site-packages`` virtualenv, which
``tools/distro-nova-env`` checked). The command runs as an operator runs
it, as a process; the answer is read off its JSON.

Debian 12's Nova is upstream's 26.2.2 for every function the guard
checks: upstream's fixes for bugs 1879878, 1944759, 1953359, 1896463,
1949808 and 2025480 are in it, and bug 1894095 and the source-side
window are open there, which ``live_migration_rollback`` and
``source_window`` close.
"""

import json
import os
import subprocess
import sys

import testtools
from testtools import content

BUILD_ENV = 'NRL_DISTRIBUTION_NOVA'

#: build -> what check must say of it
EXPECTED = {
    'debian-12': {
        'nova_version': '26.2.2',
        'state': 'already-fixed',
        'mixins': ['source_window', 'live_migration_rollback'],
        'bugs': {'1879878': 'fixed-upstream', '1944759': 'fixed-upstream',
                 '1953359': 'fixed-upstream', '1896463': 'fixed-upstream',
                 '1894095': 'patched', '1949808': 'fixed-upstream',
                 '2025480': 'fixed-upstream'},
    },
}


class DistributionCheckTest(testtools.TestCase):

    def setUp(self):
        super(DistributionCheckTest, self).setUp()
        self.build = os.environ.get(BUILD_ENV)
        if not self.build:
            self.skipTest('%s names no distribution build' % BUILD_ENV)
        if self.build not in EXPECTED:
            self.fail('%s=%s: no expectations for that build (known: %s)'
                      % (BUILD_ENV, self.build, ', '.join(sorted(EXPECTED))))

    def _check(self):
        command = os.path.join(os.path.dirname(sys.executable),
                               'nova-revert-lock')
        out = subprocess.run([command, 'check', '--format', 'json'],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             universal_newlines=True, timeout=120)
        self.addDetail('stderr', content.text_content(out.stderr))
        return out.returncode, json.loads(out.stdout)

    def test_check_on_the_packaged_nova(self):
        expected = EXPECTED[self.build]
        code, report = self._check()
        self.assertEqual(0, code, report)
        self.assertEqual(expected['nova_version'], report['nova_version'])
        self.assertEqual(expected['state'], report['state'])
        self.assertEqual(expected['mixins'], report['mixins'])
        self.assertEqual(expected['bugs'], report['bugs'])
        self.assertEqual([], report['problems'])
        self.assertEqual([], report['not_applied'], report['warnings'])
