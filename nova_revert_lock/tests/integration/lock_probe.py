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

"""Does the lock hold in a process started as nova-compute is started?

    python .../nova_revert_lock/tests/integration/lock_probe.py \\
        --config-file nova.conf

(by path: ``python -m`` would import the ``nova_revert_lock.tests``
package first, which imports ``nova.monkey_patch``.)

The process is set up exactly as ``nova-compute-revert-lock`` sets it up
(Nova's entry module first, so eventlet or native threading as the
release and the configuration choose; then configuration and
activation). Then, with the threads of that concurrency model:

- one thread holds ``COMPUTE_RESOURCE_SEMAPHORE`` through a function
  decorated as the mixins' critical sections are (the lock read off the
  installed tracker, :func:`nova_revert_lock.locking.tracker_lock`);
- another calls the tracker's own ``_update_available_resource``, the
  locked body of the periodic task, with stand-ins that record entry.

The periodic must not enter while the section holds the lock, and must
enter once it is released. A canary repeats this with the lock taken the
other way (fair and plain swapped), which must *not* exclude: it shows
the probe can tell a wrong lock. One JSON line goes to stdout.
"""

import json
import sys
import time

from nova_revert_lock.cmd import compute as cmd_compute
from nova_revert_lock import fixes
from nova_revert_lock import startup

#: how long the periodic is given to enter while the lock is held
HOLD = 1.0
#: how long it is given to enter once the lock is released
ENTER_TIMEOUT = 10.0


class _Entered(Exception):
    pass


class _Recorder(object):
    """Stands in for the tracker and its arguments; records entry."""

    def __init__(self, events):
        self._events = events

    def __getattr__(self, name):
        self._events.append(('entered', time.monotonic()))
        raise _Entered(name)

    def __getitem__(self, key):
        self._events.append(('entered', time.monotonic()))
        raise _Entered(key)


def _race(spec, periodic):
    """Hold ``spec``'s lock while ``periodic`` tries to run.

    :returns: (entered while held, entered after release)
    """
    import threading

    events = []
    holding = threading.Event()
    release = threading.Event()

    @spec.synchronized()
    def critical_section():
        holding.set()
        release.wait(ENTER_TIMEOUT + HOLD)

    def run_periodic():
        recorder = _Recorder(events)
        try:
            periodic(recorder, None, recorder)
        except _Entered:
            pass

    holder = threading.Thread(target=critical_section)
    holder.start()
    holding.wait(ENTER_TIMEOUT)
    thread = threading.Thread(target=run_periodic)
    thread.start()
    time.sleep(HOLD)
    during = bool(events)
    release.set()
    holder.join(ENTER_TIMEOUT)
    thread.join(ENTER_TIMEOUT)
    return during, bool(events)


def probe(argv):
    entry_point, compute = cmd_compute.start_concurrency()
    if compute is None:
        return {'error': 'nova-compute-revert-lock would exit %s'
                % entry_point}
    code = cmd_compute.prepare(argv, entry_point)
    if code is not None:
        return {'error': 'prepare() returned %s' % code}
    import threading

    from nova.compute import resource_tracker

    from nova_revert_lock import activation
    from nova_revert_lock import locking

    spec = locking.tracker_lock(fixes.LOCK_REFS)
    periodic = resource_tracker.ResourceTracker._update_available_resource
    result = {
        'nova_version': entry_point.version,
        'entry_point': entry_point.shape,
        'backend': startup.running_backend(),
        'thread_class': '%s.%s' % (threading.Thread.__module__,
                                   threading.Thread.__name__),
        'state': activation.current_report().state,
        'lock': spec.describe(),
    }
    manager = activation.current_report().manager
    if hasattr(manager, '_nrl_tracker_for'):
        from nova.compute import resource_tracker
        tracker = manager._nrl_tracker_for(resource_tracker.ResourceTracker)
        # The composed tracker's own critical sections take the same lock.
        result['composed_sections'] = sorted(
            '%s=%s' % (name, locking.lock_of(getattr(tracker, name))
                       .describe())
            for name in dir(tracker)
            if getattr(getattr(tracker, name), '_nrl_under_semaphore',
                       False) and name not in dir(
                resource_tracker.ResourceTracker))
    result['entered_while_held'], result['entered_after_release'] = _race(
        spec, periodic)
    other = locking.LockSpec(spec.name, dict(spec.kwargs,
                                             fair=not spec.fair))
    try:
        result['canary_entered_while_held'] = _race(other, periodic)[0]
    except TypeError as e:  # an oslo.concurrency without fair locks
        result['canary_entered_while_held'] = 'unavailable: %s' % e
    return result


def main(argv=None):
    argv = sys.argv if argv is None else argv
    print(json.dumps(probe(argv), sort_keys=True))
    sys.stdout.flush()
    return 0


if __name__ == '__main__':
    sys.exit(main())
