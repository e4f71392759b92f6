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

"""Counters of the critical sections this package adds to nova-compute.

Per process, served by the RPC status endpoint (:func:`snapshot`), with
the outcome of each node's latest periodic task (:func:`periodic_ran`)
and the fixes that cannot act on a node for now (:func:`degraded`).
Not to be confused with Nova's ``nova.compute.stats`` (per-node instance
counts).
"""

import collections
import contextlib
import datetime
import threading
import time

from nova_revert_lock.audit import rows

_LOCK = threading.Lock()
#: the latest hold times kept per kind of section, for the percentiles
_HOLD_SAMPLES = 1024
#: a node's periodic task, before its first run ended
_NOT_RUN = {'outcome': None, 'at': None, 'error': None, 'runs': 0,
            'failed_in_a_row': 0, 'last_ok_at': None, 'running_since': None}


class _Counters(object):
    def __init__(self):
        self.reset()

    def reset(self):
        # per kind of section: entered, raised, longest and latest holds
        self.by_kind = collections.Counter()
        self.errors_by_kind = collections.Counter()
        self.max_by_kind = collections.defaultdict(float)
        self.samples = collections.defaultdict(
            lambda: collections.deque(maxlen=_HOLD_SAMPLES))
        #: node -> what its latest periodic task did (periodic_ran)
        self.periodic = {}
        #: (fix, node, what) -> the degraded period under way (degraded)
        self.degraded = {}
        #: fix -> how many degraded periods ended (recovered)
        self.degraded_ended = collections.Counter()

    def record(self, kind, held_ms, failed):
        with _LOCK:
            self.by_kind[kind] += 1
            if failed:
                self.errors_by_kind[kind] += 1
            self.max_by_kind[kind] = max(self.max_by_kind[kind], held_ms)
            self.samples[kind].append(held_ms)


COUNTERS = _Counters()


@contextlib.contextmanager
def counted(kind):
    """Count one section of ``kind`` (``'confirm'``...), run under the lock."""
    start = time.monotonic()
    failed = True
    try:
        yield
        failed = False
    finally:
        COUNTERS.record(kind, (time.monotonic() - start) * 1000.0, failed)


def _now():
    # NOTE: not utcnow(), deprecated from Python 3.12 (2026.2 runs on it).
    now = datetime.datetime.now(datetime.timezone.utc)
    return now.replace(microsecond=0, tzinfo=None).isoformat() + 'Z'


def periodic_started(nodename):
    """Record that ``nodename``'s periodic task started (``running_since``).

    A run that hangs (on a conductor or a database that does not answer)
    never ends: the time it started tells it from one that ended well.
    """
    now = _now()
    with _LOCK:
        entry = COUNTERS.periodic.setdefault(nodename, dict(_NOT_RUN))
        entry['running_since'] = now


def periodic_ran(nodename, error=None):
    """Record that ``nodename``'s periodic task ended, raising ``error``.

    Nova logs the exception and goes on: a node whose every run fails
    (``CPUPinningInvalid``, say) keeps its books frozen, which only these
    records show from outside the host.
    """
    now = _now()
    with _LOCK:
        last = COUNTERS.periodic.get(nodename, _NOT_RUN)
        entry = {'runs': last['runs'] + 1, 'at': now,
                 'last_ok_at': last['last_ok_at'], 'running_since': None}
        if error is None:
            entry.update(outcome='ok', failed_in_a_row=0, error=None,
                         last_ok_at=now)
        else:
            entry.update(
                outcome='failed', failed_in_a_row=last['failed_in_a_row'] + 1,
                error=rows.one_line(error))
        COUNTERS.periodic[nodename] = entry


def degraded(fix, nodename, what, error):
    """Record that ``fix`` could not ``what`` for ``nodename``.

    The node then counts as upstream's code does: the fix is off there
    until :func:`recovered`. One period per (fix, node, what): its start,
    the latest reason and how many reads failed in it.

    :returns: True if this failure starts a period (the caller logs it at
        WARNING; the later ones at DEBUG)
    """
    now = _now()
    key = (fix, nodename, what)
    with _LOCK:
        period = COUNTERS.degraded.get(key)
        started = period is None
        if started:
            period = COUNTERS.degraded[key] = {
                'fix': fix, 'node': nodename, 'what': what, 'since': now,
                'count': 0}
        period.update(count=period['count'] + 1, last_at=now,
                      reason=rows.one_line(error))
    return started


def recovered(fix, nodename, what):
    """``what`` works again for ``nodename``: end its period, if any.

    :returns: the period that ended (a dict), or None if there was none
    """
    with _LOCK:
        period = COUNTERS.degraded.pop((fix, nodename, what), None)
        if period is not None:
            COUNTERS.degraded_ended[fix] += 1
    return period


def node_removed(nodename):
    """``nodename`` left this host: forget its records.

    Its degraded periods end without a good read (they are not counted
    as ended) and its periodic task's record goes: a node an Ironic
    rebalance moved to another compute is that compute's to report now.

    :returns: the degraded periods dropped (a list of dicts)
    """
    with _LOCK:
        dropped = [COUNTERS.degraded.pop(key) for key in
                   [k for k in COUNTERS.degraded if k[1] == nodename]]
        COUNTERS.periodic.pop(nodename, None)
    return dropped


def percentile(values, p):
    """The nearest-rank ``p``-th percentile of ``values`` (or None)."""
    values = sorted(values)
    if not values:
        return None
    rank = int(-(-p * len(values) // 100))  # ceil, without floats
    return values[max(0, min(len(values), rank) - 1)]


def snapshot():
    """A plain dict of the counters, safe to send over RPC.

    ``lock_hold_ms_by_kind`` gives per kind the median and 99th percentile
    hold of the latest ``n`` sections and the longest hold ever.
    """
    with _LOCK:
        status = {
            'critical_sections': sum(COUNTERS.by_kind.values()),
            'critical_sections_by_kind': dict(COUNTERS.by_kind),
            'max_lock_hold_ms': round(
                max(COUNTERS.max_by_kind.values(), default=0.0), 3),
            'critical_section_errors': sum(COUNTERS.errors_by_kind.values()),
            'critical_section_errors_by_kind': dict(COUNTERS.errors_by_kind),
            'periodic_by_node': {node: dict(entry) for node, entry
                                 in COUNTERS.periodic.items()},
            'degraded': [dict(period) for _key, period
                         in sorted(COUNTERS.degraded.items())],
            'degraded_ended': dict(COUNTERS.degraded_ended),
        }
        latest = {kind: list(held) for kind, held in COUNTERS.samples.items()}
        longest = dict(COUNTERS.max_by_kind)
    # NOTE: sorted outside the lock: sections wait for it, not for this.
    status['lock_hold_ms_by_kind'] = {
        kind: {'n': len(held), 'p50': round(percentile(held, 50), 3),
               'p99': round(percentile(held, 99), 3),
               'max': round(longest[kind], 3)}
        for kind, held in latest.items()}
    return status
