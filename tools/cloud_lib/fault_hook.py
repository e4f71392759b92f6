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

"""Stop this nova-compute at a chosen point of a move (the cloud's only).

Installed by ``traced_compute.py``, after Nova's entry module has set up
concurrency, into the computes ``tools/cloud faults`` starts (plain or
wrapper; ``NRL_CLOUD_FAULT_HOOK`` in their environment), and into no
other; nothing of it is in ``nova_revert_lock``. It does nothing until
the fault runner (``faults.py``) writes an *arm file*,
``computes/<host>/fault.json`` beside the compute's lock trace::

    {"point": "status-saved", "status": "confirmed"}
    {"point": "finish-revert"}
    {"point": "status-saving", "status": "confirmed", "action": "pause"}
    {"point": "rpc-call", "method": "drop_move_claim_at_destination",
     "action": "pause"}
    {"point": "dispatch", "method": "drop_move_claim_at_destination"}

``status-saving``
    just before this process saves a migration with that status (the
    save is a conductor call: the one a database outage fails);
``status-saved``
    right after this process saved a migration with that status: the
    confirm's source or the revert's destination, between the status
    save and the claim drop, in either mode (the extension saves it
    inside the tracker's lock, plain Nova before taking it);
``finish-revert``
    as the source's RPC server dispatches ``finish_revert_resize`` (the
    message already acknowledged, as oslo.messaging does), after the
    destination dropped its claim and cast to it: the window between the
    two halves of a revert;
``dispatch``
    the same for the RPC method the spec names (``"method"``), e.g. the
    destination's ``drop_move_claim_at_destination`` in a live
    migration's rollback;
``rpc-call``
    as this process is about to send that RPC to another compute (one of
    ``RPC_POINTS``): the live migration rollback's source, before it asks
    the destination to drop its claim;
``look-up``
    as this process sends the conductor its read of its ``reverted``
    migrations (``MigrationList.get_by_filters``: the look-up of the
    extension's ``source_window``; upstream's periodic task makes no such
    read). Only the action ``fail`` applies: the read raises what the
    conductor answers when its database is down (a ``RemoteError`` of
    ``DBConnectionError``), every time, for as long as the arm file is
    there (``{"point": "look-up", "action": "fail"}``); ``fault.fired``
    counts the failed reads.
``driver-rollback``
    as the cloud's fake driver (:mod:`fake_drivers`) starts a live
    migration's rollback on this host, the destination
    (``rollback_live_migration_at_destination``, reached for a block
    migration only): with ``"action": "pause"`` the destination's
    clean-up outlasts ``live_migration_rollback``'s wait for it, as a
    slow disk clean-up would.

At the point the hook removes the arm file (the restarted process must
not die again) and writes ``fault.fired`` (the point and the time).
Then, by the spec's ``action``:

``kill`` (the default)
    it sends itself SIGKILL: no clean-up runs, as with the OOM killer;
    with ``"delay": S`` (seconds) the step goes on and the kill comes
    ``S`` seconds later, wherever the process then is (the random kill
    points of ``faults --random``: between the named points too);
``pause``
    it waits, inside the section, until the runner writes
    ``fault.resume`` (it has stopped the broker or the database
    meanwhile), at most ``PAUSE_S``; then the move goes on into the
    outage. The wait sleeps the calling thread only (green under
    eventlet), as a slow step would.
"""

import json
import os
import signal
import threading
import time

ARM = 'fault.json'
FIRED = 'fault.fired'
RESUME = 'fault.resume'
#: the longest a paused section waits for the runner
PAUSE_S = 300
#: the compute RPC client methods the ``rpc-call`` point can stop before
RPC_POINTS = ('drop_move_claim_at_destination',)


def _kill_after(delay):
    time.sleep(delay)
    os.kill(os.getpid(), signal.SIGKILL)


class Hook(object):

    def __init__(self, directory):
        self.arm = os.path.join(directory, ARM)
        self.fired = os.path.join(directory, FIRED)
        self.resume = os.path.join(directory, RESUME)

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
        if spec.get('action', 'kill') == 'kill':
            delay = float(spec.get('delay') or 0)
            if delay <= 0:
                os.kill(os.getpid(), signal.SIGKILL)
            # NOTE: a thread (green under eventlet: it runs whenever the
            # step yields, as any other greenthread would) that kills the
            # process later; the step goes on meanwhile.
            killer = threading.Thread(target=_kill_after, args=(delay,))
            killer.daemon = True
            killer.start()
            return
        deadline = time.time() + PAUSE_S
        while not os.path.exists(self.resume) and time.time() < deadline:
            time.sleep(0.2)
        try:
            os.unlink(self.resume)
        except OSError:
            pass

    def failed(self, spec, what):
        """Record one more read failed at ``spec``'s point; stay armed."""
        count = 0
        try:
            with open(self.fired) as f:
                count = json.load(f).get('count', 0)
        except (IOError, OSError, ValueError):
            pass
        with open(self.fired, 'w') as f:
            json.dump({'point': spec.get('point'), 'what': what,
                       't': time.time(), 'pid': os.getpid(),
                       'count': count + 1}, f)

    def matches(self, point, migration):
        spec = self.armed(point)
        if spec is not None and migration.obj_attr_is_set('status') and (
                migration.status == spec.get('status')):
            return spec
        return None


def install(directory):
    """Wrap the two functions the points are in; return the hook."""
    from nova.objects import migration as migration_obj
    from oslo_messaging.rpc import dispatcher

    hook = Hook(directory)
    save = migration_obj.Migration.save

    def saved(self, *args, **kwargs):
        spec = None
        if 'status' in self.obj_what_changed():
            spec = hook.matches('status-saving', self)
        if spec is not None:
            hook.fire(spec, 'migration %s saving %s' % (
                getattr(self, 'uuid', '?'), self.status))
        result = save(self, *args, **kwargs)
        spec = hook.matches('status-saved', self)
        if spec is not None:
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
        spec = hook.armed('dispatch')
        if spec is not None and spec.get('method') == method:
            hook.fire(spec, '%s dispatched' % method)
        return dispatch(self, endpoint, method, *args, **kwargs)

    dispatcher.RPCDispatcher._do_dispatch = _do_dispatch

    _install_look_up(hook)
    _install_driver_rollback(hook)

    from nova.compute import rpcapi
    for name in RPC_POINTS:
        method = getattr(rpcapi.ComputeAPI, name, None)
        if method is not None:
            setattr(rpcapi.ComputeAPI, name, _rpc_point(hook, name, method))
    return hook


def _install_driver_rollback(hook):
    # NOTE: the cloud's own driver class, not Nova's: computes on another
    # driver (libvirt) have no such point.
    try:
        from nova.virt import nrl_cloud
    except ImportError:
        return
    cls = nrl_cloud.NumaLiveMigrateDriver
    rollback = cls.rollback_live_migration_at_destination

    def rollback_live_migration_at_destination(self, context, instance,
                                               *args, **kwargs):
        spec = hook.armed('driver-rollback')
        if spec is not None:
            hook.fire(spec, 'the driver\'s rollback of instance %s'
                      % instance.uuid)
        return rollback(self, context, instance, *args, **kwargs)

    cls.rollback_live_migration_at_destination = (
        rollback_live_migration_at_destination)


def _rpc_point(hook, name, method):
    def call(self, *args, **kwargs):
        spec = hook.armed('rpc-call')
        if spec is not None and spec.get('method') == name:
            hook.fire(spec, '%s about to be sent' % name)
        return method(self, *args, **kwargs)
    call.__name__ = name
    return call


#: what a compute receives when the conductor's database is down
DB_DOWN = ('DBConnectionError',
           "(pymysql.err.OperationalError) (2003, \"Can't connect to MySQL "
           "server on '127.0.0.1' ([Errno 111] Connection refused)\")")


def _install_look_up(hook):
    # NOTE: at the conductor's RPC client, where the read leaves this
    # process: the extension's guard fingerprints MigrationList itself
    # and refuses to run the look-up on code it does not know (as it
    # must), so the hook stays outside Nova's objects.
    import oslo_messaging as messaging

    from nova.conductor import rpcapi

    send = rpcapi.ConductorAPI.object_class_action_versions

    def object_class_action_versions(self, context, objname, objmethod,
                                     object_versions, args, kwargs):
        spec = hook.armed('look-up')
        filters = args[0] if args else kwargs.get('filters') or {}
        if (spec is not None and spec.get('action') == 'fail' and
                objname == 'MigrationList' and
                objmethod == 'get_by_filters' and
                isinstance(filters, dict) and
                filters.get('status') == 'reverted'):
            hook.failed(spec, 'reverted migrations read failed')
            raise messaging.RemoteError(DB_DOWN[0], DB_DOWN[1], '')
        return send(self, context, objname, objmethod, object_versions,
                    args, kwargs)

    rpcapi.ConductorAPI.object_class_action_versions = (
        object_class_action_versions)
