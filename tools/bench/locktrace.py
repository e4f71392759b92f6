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

"""Time every acquisition of the tracker's lock, and tell who took it.

One job: wrap ``oslo_concurrency.lockutils.lock`` so that each section
under one lock reports, when it releases the lock, the synchronized
function that took it, the resource tracker it ran on, and when it asked
for, got and released the lock. What is done with that is the caller's:
the cycles keep the timings, the books check runs on each release.
"""

import sys
import time


def now():
    return time.perf_counter()


class LockTracer(object):
    """Time every acquisition of one lock, and tell who took it.

    Wraps ``oslo_concurrency.lockutils.lock``, which the wrapper of
    ``lockutils.synchronized`` calls for each call of a synchronized
    function; that wrapper's frame names the function and its arguments,
    whose first is the resource tracker for the tracker's methods.
    """

    def __init__(self, name, on_release):
        from oslo_concurrency import lockutils
        self.name = name
        self.on_release = on_release
        self.errors = []
        self.orig = lockutils.lock
        self.wrapper_code = lockutils.synchronized(
            'nova-revert-lock-bench')(lambda: None).__code__

    def lock(self, name, *args, **kwargs):
        cm = self.orig(name, *args, **kwargs)
        if name != self.name:
            return cm
        caller = sys._getframe(1)
        func = rt = None
        if caller.f_code is self.wrapper_code:
            local = caller.f_locals
            func = local.get('f')
            call_args = local.get('args') or ()
            rt = call_args[0] if call_args else None
        fname = getattr(func, '__name__', '?')
        return self._traced(cm, fname, rt)

    def released(self, *args):
        # NOTE: runs inside Nova's code path: a failing check must not
        # change what Nova does, only be reported.
        try:
            self.on_release(*args)
        except Exception as e:  # noqa: BLE001
            self.errors.append('%s: %s' % (type(e).__name__, e))

    def _traced(self, cm, fname, rt):
        tracer = self

        class _Traced(object):
            def __enter__(self):
                self.attempt = now()
                value = cm.__enter__()
                self.acquired = now()
                return value

            def __exit__(self, *exc):
                released = now()
                try:
                    return cm.__exit__(*exc)
                finally:
                    tracer.released(fname, rt, self.attempt,
                                    self.acquired, released)
        return _Traced()
