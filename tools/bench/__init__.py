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

"""Benchmarks: race exposure, cost of the fix, activation overhead.

Three modes are measured side by side in one run, each in its own
process, since one Python environment holds one Nova:

``plain``
    Nova 21.1.0 as released (affected by bug 1879878).
``extension``
    Nova 21.1.0 with nova-revert-lock activated.
``upstream``
    Nova 21.1.2, which carries upstream's fix; no extension.

:mod:`.driver` (``python -m tools.bench``) runs in an
environment holding Nova 21.1.0 and starts the plain and extension
processes with its own interpreter; the upstream process runs in a second
environment holding Nova 21.1.2, which :mod:`.venvs` creates once with the
Ussuri pins and reuses afterwards. Each process (:mod:`.harness`) starts
Nova's own in-process services and runs the blocks of cycles the driver
asks for (:mod:`.cycle_driver`, with :mod:`.locktrace` reporting each section
under the tracker's lock and :mod:`.books` judging each cycle), so that
the driver can interleave the three modes block by block and the noise
of a shared machine falls on all of them alike.
:mod:`.activation_cost` times ``activate()`` in fresh processes, and
:mod:`.report` turns the samples into the table, JSON, plot and docs.

NOTE: run from a checkout (``python -m tools.bench``), never installed:
the mode processes build on Nova's test framework and this project's
functional test helpers, which nothing under ``nova_revert_lock/`` but
its tests may import. Not under ``nova_revert_lock/tests/`` either:
importing that package monkey patches eventlet (as Nova's test packages
do), which would turn the driver's reader threads and pipes green and
add eventlet's import to the Nova import that :mod:`.activation_cost`
times. ``tools/`` has no ``__init__``: ``tools.bench`` is found from the
tree's root, which ``python -m`` run there and the editable install of
the tox envs and of the second environment put on the path.
"""
