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

"""Kill this nova-compute at a chosen point of a move (the cloud's only).

Installed by ``traced_compute.py``, after Nova's entry module has set up
concurrency, into the computes ``tools/cloud faults`` starts (plain or
wrapper; ``NRL_CLOUD_FAULT_HOOK`` in their environment), and into no
other; nothing of it is in ``nova_revert_lock``. It does nothing until
the fault runner (``faults.py``) writes an *arm file*,
``computes/<host>/fault.json`` beside the compute's lock trace::

    {"point": "status-saved", "status": "confirmed"}
    {"point": "finish-revert"}

``status-saved``
    right after this process saved a migration with that status: the
    confirm's source or the revert's destination, between the status
    save and the claim drop, in either mode (the extension saves it
    inside the tracker's lock, plain Nova before taking it);
``finish-revert``
    as the source's RPC server dispatches ``finish_revert_resize`` (the
    message already acknowledged, as oslo.messaging does), after the
    destination dropped its claim and cast to it: the window between the
    two halves of a revert.

At the point the hook removes the arm file (the restarted process must
not die again), writes ``fault.fired`` (the point and the time) and
sends itself SIGKILL: no clean-up runs, as with the OOM killer.
"""

import json
import os
import signal
import time

ARM = 'fault.json'
FIRED = 'fault.fired'


class Hook(object):

    def __init__(self, directory):
        self.arm = os.path.join(directory, ARM)
        self.fired = os.path.join(directory, FIRED)

    def armed(self, point):
        """The arm file's content if it names ``point``, else None."""
        if not os.path.exists(self.arm):
            return None
        try:
            with open(self.arm) as f:
                spec = json.load(f)
        except (IOError, OSError, ValueError):
            return None
        return spec if spec.get('point') == point else None

    def fire(self, spec, what):
        try:
            os.unlink(self.arm)
        except OSError:
            pass
        with open(self.fired, 'w') as f:
            json.dump({'point': spec.get('point'), 'what': what,
                       't': time.time(), 'pid': os.getpid()}, f)
            f.flush()
            os.fsync(f.fileno())
        os.kill(os.getpid(), signal.SIGKILL)


def install(directory):
    """Wrap the two functions the points are in; return the hook."""
    from nova.objects import migration as migration_obj
    from oslo_messaging.rpc import dispatcher

    hook = Hook(directory)
    save = migration_obj.Migration.save

    def saved(self, *args, **kwargs):
        result = save(self, *args, **kwargs)
        spec = hook.armed('status-saved')
        if spec is not None and self.obj_attr_is_set('status') and (
                self.status == spec.get('status')):
            hook.fire(spec, 'migration %s saved %s' % (
                getattr(self, 'uuid', '?'), self.status))
        return result

    migration_obj.Migration.save = saved

    # NOTE: at the RPC dispatch, not on ComputeManager: the guard
    # fingerprints the manager's methods and refuses a wrapper it does
    # not know (as it must), so the hook stays outside Nova's classes.
    dispatch = dispatcher.RPCDispatcher._do_dispatch

    def _do_dispatch(self, endpoint, method, *args, **kwargs):
        if method == 'finish_revert_resize':
            spec = hook.armed('finish-revert')
            if spec is not None:
                hook.fire(spec, 'finish_revert_resize dispatched')
        return dispatch(self, endpoint, method, *args, **kwargs)

    dispatcher.RPCDispatcher._do_dispatch = _do_dispatch
    return hook
