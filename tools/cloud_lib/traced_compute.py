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

"""nova-compute (plain or the wrapper) with its tracker's lock timed.

    python traced_compute.py TRACE_FILE BINARY [nova-compute arguments]

Runs the console script BINARY (``nova-compute`` or
``nova-compute-revert-lock`` of the same virtualenv, or a copy of either
under another name: what it runs is read from the file) as it runs itself,
with one addition: every section under ``compute_resources`` (the
tracker's ``COMPUTE_RESOURCE_SEMAPHORE``) appends a line to TRACE_FILE
when it releases the lock, naming the synchronized function and giving
how long it waited and held the lock (:mod:`bench.locktrace`, the
benchmark's instrument). The same instrument in both modes, so the
periodic task's hold on a plain compute and on a wrapper compute, and
the sections the mixins add, are compared as deployed: real processes,
MariaDB through the conductor, RabbitMQ.

The tracer is installed after Nova's entry module has set up
concurrency (eventlet's monkey patching on the releases that use it):
``oslo_concurrency`` imported earlier would make native locks that
block the whole process.

The fault runner's kill points (:mod:`fault_hook`) are installed the same
way in the computes ``tools/cloud faults`` starts (``NRL_CLOUD_FAULT_HOOK``
set), and stay inert until it arms one; no other compute has them.
"""

import json
import os
import sys
import time

#: the lock the tracker's synchronized methods take (Nova's
#: COMPUTE_RESOURCE_SEMAPHORE)
LOCK = 'compute_resources'
#: set by ``tools/cloud faults`` for the computes it (re)starts
FAULT_HOOK_ENV = 'NRL_CLOUD_FAULT_HOOK'


def install(path):
    """Wrap lockutils.lock; each release appends one JSON line to path."""
    sys.path.insert(0, os.path.dirname(os.path.dirname(
        os.path.abspath(__file__))))
    from bench import locktrace
    from oslo_concurrency import lockutils

    out = open(path, 'a', buffering=1)

    def released(fname, rt, attempt, acquired, done):
        out.write(json.dumps({
            't': round(time.time(), 3), 'f': fname,
            'wait_ms': round((acquired - attempt) * 1000.0, 3),
            'hold_ms': round((done - acquired) * 1000.0, 3)}) + '\n')

    tracer = locktrace.LockTracer(LOCK, released)
    lockutils.lock = tracer.lock
    return tracer


def main():
    trace, binary = sys.argv[1], sys.argv[2]
    sys.argv = [binary] + sys.argv[3:]
    # The console script's own first import: Nova sets up concurrency.
    import nova.cmd.compute  # noqa: F401
    install(trace)
    # The fault runner's kill points, in the computes it starts only.
    if os.environ.get(FAULT_HOOK_ENV):
        import fault_hook
        fault_hook.install(os.path.dirname(os.path.abspath(trace)))
    # NOTE: what the console script runs, not its name: an image's
    # nova-compute may be the wrapper's script (contrib/kolla).
    from nova_revert_lock import startup
    if startup.nova_compute_command(binary)[1] == startup.STARTS_FIX:
        from nova_revert_lock.cmd import compute
    else:
        compute = nova.cmd.compute
    return compute.main()


if __name__ == '__main__':
    sys.exit(main())
