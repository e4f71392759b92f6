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

"""The fleet audit: every nova-compute says whether it is protected.

* :mod:`.endpoint`: what a compute serves, on nova-compute's own RPC
  server; the only module of this package a compute host imports.
* :mod:`.client`: :class:`~.client.StatusAPI`, which asks one host.
* :mod:`.targets`: which hosts to ask, and on which broker.
* :mod:`.query`: asks the targets, in parallel and in bounded time, and
  turns every answer (or silence) into a row (:mod:`.rows`).

``nova-revert-lock status`` (:mod:`nova_revert_lock.cmd.status`) is the
command line on top.
"""


class UsageError(Exception):
    """Bad usage or unusable configuration: the command exits 2."""
