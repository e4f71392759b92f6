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

"""``nova.virt.nrl_cloud`` is ``cloud_lib.fake_drivers``, on demand.

Imported at start-up by every interpreter of the cloud's virtualenv
(``nrl-cloud-driver.pth``, written by ``Cloud.ensure_venv``). It only
appends a finder to ``sys.meta_path``: nothing is imported until a
process asks for ``nova.virt.nrl_cloud``, which only a compute with
``compute_driver = nrl_cloud.NumaLiveMigrateDriver`` does, after Nova's
own finders found no such module.
"""

import importlib
import importlib.abc
import importlib.util
import sys

ALIASES = {'nova.virt.nrl_cloud': 'cloud_lib.fake_drivers'}


class _Loader(importlib.abc.Loader):

    def __init__(self, real):
        self.real = real

    def create_module(self, spec):
        return importlib.import_module(self.real)

    def exec_module(self, module):
        pass


class _Finder(importlib.abc.MetaPathFinder):

    def find_spec(self, name, path=None, target=None):
        real = ALIASES.get(name)
        if real is None:
            return None
        return importlib.util.spec_from_loader(name, _Loader(real))


if not any(isinstance(f, _Finder) for f in sys.meta_path):
    sys.meta_path.append(_Finder())
