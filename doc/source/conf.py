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

"""Sphinx configuration for the nova-revert-lock documentation.

The build is offline: no intersphinx, nothing fetched. The configuration
reference is generated from the options themselves by oslo.config's
extension (``show-options``), through the ``oslo.config.opts`` entry point,
so the package must be installed in the build environment (tox does it).
The table of fixes is rendered from their declarations (``_exts``).
"""

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), '_exts'))

extensions = [
    'openstackdocstheme',
    'oslo_config.sphinxext',
    'nrl_fixes',
]

# openstackdocstheme
openstackdocs_repo_name = 'x/nova-revert-lock'
openstackdocs_use_storyboard = False
openstackdocs_bug_project = 'nova-revert-lock'
openstackdocs_bug_tag = 'doc'
openstackdocs_auto_name = False

templates_path = []
source_suffix = '.rst'
master_doc = 'index'

project = 'nova-revert-lock'
copyright = '2026, nova-revert-lock developers'

exclude_patterns = []
add_module_names = False
pygments_style = 'native'

html_theme = 'openstackdocs'
html_static_path = []

# Nothing to look up across projects; keep the build offline.
intersphinx_mapping = {}

man_pages = [
    ('cli/nova-compute-revert-lock', 'nova-compute-revert-lock',
     'nova-compute with the fix for Nova bug 1879878',
     ['nova-revert-lock developers'], 1),
    ('cli/nova-revert-lock', 'nova-revert-lock',
     'inspect nova-revert-lock on a compute host',
     ['nova-revert-lock developers'], 1),
]
