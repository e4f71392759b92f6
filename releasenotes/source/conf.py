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

"""Sphinx configuration for the nova-revert-lock release notes (reno).

reno reads the notes from the git history, not from the working tree
alone: build from a clone, not from an exported tarball.
"""

extensions = [
    'openstackdocstheme',
    'reno.sphinxext',
]

openstackdocs_repo_name = 'x/nova-revert-lock'
openstackdocs_use_storyboard = False
openstackdocs_bug_project = 'nova-revert-lock'
openstackdocs_bug_tag = 'releasenotes'
openstackdocs_auto_name = False

templates_path = []
source_suffix = '.rst'
master_doc = 'index'

project = 'nova-revert-lock Release Notes'
copyright = '2026, nova-revert-lock developers'

# Release notes are not versioned with the code they describe.
version = ''
release = ''

exclude_patterns = []
pygments_style = 'native'
html_theme = 'openstackdocs'
html_static_path = []

# Nothing to look up across projects; keep the build offline.
intersphinx_mapping = {}

locale_dirs = ['locale/']
