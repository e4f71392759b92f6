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

"""How :func:`nova_revert_lock.audit.query.ask_hosts` asks a large fleet.

No transport: the status client and the transport are stand-ins, so that
the tests see the threads, the order and the timing of the questions.
"""

import threading
import time

import fixtures
import oslo_messaging as messaging
import testtools

from nova_revert_lock.audit import client
from nova_revert_lock.audit import query
from nova_revert_lock.audit import targets as audit_targets

#: --timeout of these tests, in seconds
TIMEOUT = 1.0


class FakeStatusAPI(object):
    """Answers at once, except for ``silent`` hosts (a full timeout)."""

    silent = ()

    def __init__(self, transport, timeout, retry=None):
        self.timeout = timeout
        self.lock = threading.Lock()
        self.running = 0
        self.most_running = 0
        self.threads = set()

    def get_status(self, context, host):
        with self.lock:
            self.running += 1
            self.most_running = max(self.most_running, self.running)
            self.threads.add(threading.current_thread().name)
        try:
            if host in self.silent:
                time.sleep(self.timeout)
                raise messaging.MessagingTimeout('no reply')
            time.sleep(0.001)
            return {'host': host, 'state': 'patched'}
        finally:
            with self.lock:
                self.running -= 1


class FakeTransport(object):

    def __init__(self, close_takes=0.0):
        self.close_takes = close_takes
        self.closed = threading.Event()

    def cleanup(self):
        time.sleep(self.close_takes)
        self.closed.set()


class AskHostsTest(testtools.TestCase):

    def setUp(self):
        super(AskHostsTest, self).setUp()
        self.apis = []

        def make_api(*args, **kwargs):
            self.apis.append(FakeStatusAPI(*args, **kwargs))
            return self.apis[-1]

        self.useFixture(fixtures.MockPatchObject(client, 'StatusAPI',
                                                 make_api))
        self.useFixture(fixtures.MockPatchObject(query, 'probe_broker',
                                                 return_value=None))
        self.transport = FakeTransport()
        self.useFixture(fixtures.MockPatchObject(
            audit_targets, 'make_transport',
            side_effect=lambda conf, url: self.transport))

    def ask(self, hosts, silent=()):
        self.useFixture(fixtures.MockPatchObject(FakeStatusAPI, 'silent',
                                                 frozenset(silent)))
        start = time.monotonic()
        rows = query.ask_hosts(None, None, [audit_targets.Target(h)
                                            for h in hosts], TIMEOUT)
        return rows, time.monotonic() - start

    def test_a_fixed_number_of_threads_asks_every_host_in_order(self):
        self.useFixture(fixtures.MockPatchObject(query, 'MAX_PARALLEL', 3))
        hosts = ['cmp-%02d' % i for i in range(20)]
        rows, _elapsed = self.ask(hosts)
        self.assertEqual(hosts, [r['host'] for r in rows])
        self.assertEqual(['patched'] * 20, [r['state'] for r in rows])
        api, = self.apis
        self.assertLessEqual(api.most_running, 3)
        self.assertLessEqual(len(api.threads), 3)
        self.assertTrue(self.transport.closed.is_set())

    def test_fewer_hosts_than_threads(self):
        rows, _elapsed = self.ask(['cmp-1'])
        self.assertEqual(['cmp-1'], [r['host'] for r in rows])
        self.assertEqual(1, len(self.apis[0].threads))

    def test_silent_hosts_cost_one_timeout_together(self):
        # NOTE: more silent hosts than the 16 threads of old: asked one
        # round after another, they took three timeouts.
        hosts = ['cmp-%03d' % i for i in range(200)]
        silent = hosts[::5]
        self.assertEqual(40, len(silent))
        rows, elapsed = self.ask(hosts, silent)
        self.assertEqual(hosts, [r['host'] for r in rows])
        for row in rows:
            if row['host'] in silent:
                self.assertFalse(row['reachable'])
                self.assertTrue(row['error'].startswith(
                    'no answer within 1s'), row['error'])
            else:
                self.assertEqual('patched', row['state'])
        self.assertLess(elapsed, 2 * TIMEOUT + 0.5)

    def test_a_slow_close_is_not_waited_for(self):
        self.transport.close_takes = 10
        self.useFixture(fixtures.MockPatchObject(query, 'CLEANUP_WAIT',
                                                 0.2))
        rows, elapsed = self.ask(['cmp-1', 'cmp-2'])
        self.assertEqual(['patched', 'patched'], [r['state'] for r in rows])
        self.assertLess(elapsed, 2)
        self.assertFalse(self.transport.closed.is_set())


class CloseTransportTest(testtools.TestCase):

    def test_waits_for_a_quick_close(self):
        transport = FakeTransport(close_takes=0.05)
        query.close_transport(transport, wait=5)
        self.assertTrue(transport.closed.is_set())

    def test_a_failing_close_raises_nothing(self):
        class Failing(object):
            def cleanup(self):
                raise RuntimeError('broker went away')

        logger = self.useFixture(fixtures.FakeLogger(level='DEBUG'))
        query.close_transport(Failing(), wait=5)
        self.assertIn('closing the transport failed', logger.output)
