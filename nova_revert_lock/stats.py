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

"""Counters of the critical sections this package adds.

Kept per process and read by the RPC status endpoint and the benchmark:
how many critical sections were entered, how long the lock was held in
them, and how many raised.
"""

import contextlib
import threading
import time

_LOCK = threading.Lock()
_HOLD_SAMPLES = 4096


class _Counters(object):
    def __init__(self):
        self.reset()

    def reset(self):
        self.entered = 0
        self.errors = 0
        self.max_hold_ms = 0.0
        self.by_kind = {}
        self.samples = []

    def record(self, kind, held_ms, failed):
        with _LOCK:
            self.entered += 1
            self.by_kind[kind] = self.by_kind.get(kind, 0) + 1
            if failed:
                self.errors += 1
            self.max_hold_ms = max(self.max_hold_ms, held_ms)
            if len(self.samples) < _HOLD_SAMPLES:
                self.samples.append((kind, held_ms))


COUNTERS = _Counters()


@contextlib.contextmanager
def critical_section(kind):
    """Count one critical section; the caller already holds the lock.

    :param kind: short name of the section (``'confirm'``, ``'revert'``...)
    """
    start = time.monotonic()
    failed = True
    try:
        yield
        failed = False
    finally:
        COUNTERS.record(kind, (time.monotonic() - start) * 1000.0, failed)


def snapshot():
    """A plain dict of the counters, safe to send over RPC."""
    with _LOCK:
        return {
            'critical_sections': COUNTERS.entered,
            'critical_sections_by_kind': dict(COUNTERS.by_kind),
            'max_lock_hold_ms': round(COUNTERS.max_hold_ms, 3),
            'critical_section_errors': COUNTERS.errors,
        }


def hold_samples():
    """List of (kind, held ms) of the first sections, for benchmarks."""
    with _LOCK:
        return list(COUNTERS.samples)
