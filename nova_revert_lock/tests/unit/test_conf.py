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

from oslo_config import cfg
import stevedore
import testtools

from nova_revert_lock import conf as nrl_conf
from nova_revert_lock import fixes


class ConfTestCase(testtools.TestCase):

    def test_generator_entry_point(self):
        ext = stevedore.ExtensionManager('oslo.config.opts',
                                         invoke_on_load=False)
        self.assertIn('nova_revert_lock', ext.names())
        list_opts = ext['nova_revert_lock'].plugin
        ((group, opts),) = list_opts()
        self.assertEqual('revert_lock', group.name)
        self.assertEqual(['enabled', 'mixins', 'on_unknown_code'],
                         [o.name for o in opts])

    def test_defaults(self):
        conf = cfg.ConfigOpts()
        nrl_conf.register_opts(conf)
        nrl_conf.register_opts(conf)  # twice is fine
        conf([])
        self.assertTrue(conf.revert_lock.enabled)
        self.assertEqual(list(fixes.NAMES), conf.revert_lock.mixins)
        self.assertEqual('fail', conf.revert_lock.on_unknown_code)
