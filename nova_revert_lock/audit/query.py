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

"""Ask the targets: in parallel, in bounded time, one row each."""

import collections
import logging
import threading
import time

import oslo_messaging as messaging

from nova_revert_lock.audit import client
from nova_revert_lock.audit import rows as audit_rows
from nova_revert_lock.audit import targets as audit_targets

#: hosts asked at the same time on one transport, by as many threads: a
#: silent host holds its thread for the whole timeout, so dozens of them
#: should cost one timeout, not one each.
MAX_PARALLEL = 64
#: seconds the transport may take to close once every host answered
CLEANUP_WAIT = 1.0
#: seconds on top of the reply timeout before a host is given up
GRACE = 5.0
MESSAGING_LOGGERS = ('oslo_messaging', 'oslo.messaging')


class _TransportErrors(logging.Handler):
    """Remember what the messaging driver last logged.

    The drivers retry a broker they cannot reach and only log why.
    """

    def __init__(self):
        super(_TransportErrors, self).__init__(logging.WARNING)
        self.last = None

    def emit(self, record):
        try:
            self.last = record.getMessage()
        except Exception:  # noqa: BLE001 - never break logging
            pass


def probe_broker(conf, url, timeout):
    """Can we log in to the broker? None if so (or cannot tell), else why.

    oslo.messaging would retry an unreachable broker forever instead of
    failing a call. Only ``rabbit://`` URLs without TLS are probed.
    """
    try:
        parsed = messaging.TransportURL.parse(conf, url)
    except messaging.InvalidTransportURL:
        return None
    if parsed.transport != 'rabbit':
        return None
    try:
        if conf.oslo_messaging_rabbit.ssl:
            return None
    except Exception:  # noqa: BLE001 - option names vary by release
        return None
    import kombu
    reasons = []
    for host in parsed.hosts or [messaging.TransportHost()]:
        address = '%s:%s' % (host.hostname or 'localhost', host.port or 5672)
        connection = kombu.Connection(
            hostname=host.hostname or 'localhost', port=host.port or 5672,
            userid=host.username or 'guest',
            password=host.password or 'guest',
            virtual_host=parsed.virtual_host or '/', transport='pyamqp',
            connect_timeout=timeout)
        try:
            connection.connect()
            return None
        except Exception as e:  # noqa: BLE001 - the reason is the answer
            reasons.append('%s: %s' % (address, audit_rows.one_line(e)))
        finally:
            try:
                connection.release()
            except Exception:  # noqa: BLE001
                pass
    return 'broker unreachable (%s)' % '; '.join(reasons)


class _Answers(object):
    """Rows the asking threads deliver, until the caller stops waiting."""

    def __init__(self, count):
        self._lock = threading.Lock()
        self._rows = [None] * count
        self._closed = False

    def deliver(self, index, row):
        with self._lock:
            if not self._closed:
                self._rows[index] = row

    def close(self):
        """Stop taking rows (late ones are dropped); return them."""
        with self._lock:
            self._closed = True
            return list(self._rows)


def _answer(api, target):
    """Ask one host; return its row."""
    try:
        status = api.get_status(None, target.host)
    except client.NotRunningExtension as e:
        return audit_rows.new_row(
            target.host, target.cell, reachable=True,
            error='%s (%s)' % (audit_rows.NOT_RUNNING, e))
    except messaging.MessagingTimeout:
        return audit_rows.new_row(
            target.host, target.cell,
            error='no answer within %gs (nova-compute down, not on this '
                  'broker, or no such host)' % api.timeout)
    except Exception as e:  # noqa: BLE001 - a row, not a traceback
        return audit_rows.new_row(
            target.host, target.cell,
            error='transport error: %s' % audit_rows.one_line(e))
    return audit_rows.row_from_status(target, status)


def _ask_each(api, work, answers):
    """Ask the hosts of ``work``, (index, target) pairs, until none is left."""
    while True:
        try:
            index, target = work.popleft()
        except IndexError:
            return
        answers.deliver(index, _answer(api, target))


def _close(transport):
    try:
        transport.cleanup()
    except Exception:  # noqa: BLE001 - the rows are what counts
        logging.getLogger(__name__).debug('closing the transport failed',
                                          exc_info=True)


def close_transport(transport, wait=None):
    """Close ``transport``, waiting at most ``wait`` (:data:`CLEANUP_WAIT`).

    oslo.messaging's reply waiter (12.1, Ussuri's, among others) checks
    whether to stop only between waits for replies, which grow up to the
    heartbeat interval (15 s) while none comes: after silent hosts,
    closing can take seconds for nothing. What is not closed by then goes
    with the process.
    """
    thread = threading.Thread(target=_close, args=(transport,),
                              name='nrl-status-close')
    # NOTE: a close still under way must not keep the command running.
    thread.daemon = True
    thread.start()
    thread.join(CLEANUP_WAIT if wait is None else wait)


def ask_hosts(conf, url, targets, timeout):
    """Ask every target on one transport; one row each, in order.

    A host still waiting on its transport after every round of
    ``timeout`` (plus :data:`GRACE`) is reported unreachable.
    """
    try:
        transport = audit_targets.make_transport(conf, url)
    except audit_targets.UsageError as e:
        if url is None:
            raise
        return [audit_rows.new_row(t.host, t.cell, error=str(e))
                for t in targets]
    # NOTE: after the transport exists: creating it registers the driver's
    # options (TLS...) the probe reads. It does not connect yet.
    reason = probe_broker(conf, url, timeout)
    if reason:
        transport.cleanup()
        return [audit_rows.new_row(t.host, t.cell, error=reason)
                for t in targets]
    api = client.StatusAPI(transport, timeout=timeout, retry=0)
    errors = _TransportErrors()
    for name in MESSAGING_LOGGERS:
        logging.getLogger(name).addHandler(errors)
    answers = _Answers(len(targets))
    work = collections.deque(enumerate(targets))
    threads = []
    try:
        for i in range(min(MAX_PARALLEL, len(targets))):
            thread = threading.Thread(
                target=_ask_each, args=(api, work, answers),
                name='nrl-status-%d' % i)
            # NOTE: a thread stuck in a driver that keeps retrying must
            # not keep the command from exiting.
            thread.daemon = True
            thread.start()
            threads.append(thread)
        rounds = -(-len(targets) // MAX_PARALLEL)
        deadline = time.monotonic() + rounds * timeout + GRACE
        for thread in threads:
            thread.join(max(0.0, deadline - time.monotonic()))
    finally:
        for name in MESSAGING_LOGGERS:
            logging.getLogger(name).removeHandler(errors)
    rows = answers.close()
    stuck = False
    for i, target in enumerate(targets):
        if rows[i] is None:
            stuck = True
            rows[i] = audit_rows.new_row(target.host, target.cell, error=(
                'no answer within %gs; the transport kept retrying: %s' % (
                    timeout, errors.last or 'no reason given')))
    if not stuck:
        close_transport(transport)
    return rows


def query(conf, targets, timeout):
    """Rows for ``targets``, grouped by transport URL, in target order."""
    by_url = {}
    for target in targets:
        by_url.setdefault(target.url, []).append(target)
    rows = {}
    for url, group in by_url.items():
        for target, row in zip(group, ask_hosts(conf, url, group, timeout)):
            rows[id(target)] = row
    return [rows[id(t)] for t in targets]
