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

"""tools/cloud: a small OpenStack cloud on loopback, one process a service.

The modules run in two places: the orchestrator (``cli``, ``cloud``,
``procs``, ``configs``, ``series``, ``tempest``, ``logcheck``) runs on
any Python 3.6+ with the standard library only; ``wsgi_server``,
``bootstrap`` and ``soak`` run inside the cloud's own virtualenv, where
the services and their clients are installed.
"""
