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

"""Offline checks of the CI configuration (``tox -e lint-ci``).

Zuul only reads ``.zuul.yaml`` once a change is proposed, and devstack
only runs the plugin on a real node. These tests catch what can be caught
without either: names that point nowhere, playbooks that do not exist,
tox envs that are not defined, shell that does not parse, and a devstack
plugin that would write or start the wrong thing.
"""

import os

#: The repository's top directory.
TOP = os.path.abspath(os.path.join(os.path.dirname(__file__), '..', '..'))


def path(*parts):
    return os.path.join(TOP, *parts)
