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

import threading

from oslo_concurrency import lockutils
import testtools

from nova_revert_lock import locking


@lockutils.synchronized('nrl-test-plain')
def _plain():
    pass


@lockutils.synchronized('nrl-test-fair', fair=True)
def _fair():
    pass


def _undecorated():
    pass


class LockOfTestCase(testtools.TestCase):

    def test_plain(self):
        spec = locking.lock_of(_plain)
        self.assertEqual('nrl-test-plain', spec.name)
        self.assertFalse(spec.fair)
        self.assertEqual('nrl-test-plain (plain)', spec.describe())

    def test_fair(self):
        spec = locking.lock_of(_fair)
        self.assertTrue(spec.fair)
        self.assertIn('fair', spec.describe())

    def test_not_synchronized(self):
        self.assertRaises(locking.UnknownLock, locking.lock_of, _undecorated)

    def test_tracker_lock_disagreement(self):
        self.assertRaises(
            locking.UnknownLock, locking.tracker_lock,
            ['nova_revert_lock.tests.unit.test_locking:_plain',
             'nova_revert_lock.tests.unit.test_locking:_fair'])

    def test_tracker_lock_missing(self):
        self.assertRaises(
            locking.UnknownLock, locking.tracker_lock,
            ['nova_revert_lock.tests.unit.test_locking:_nope'])

    def test_apply_lock_only_marked(self):
        @locking.under_compute_resource_semaphore
        def marked(self):
            return 'marked'

        def unmarked(self):
            return 'unmarked'

        locked = locking.apply_lock(
            [('marked', marked), ('unmarked', unmarked)],
            locking.lock_of(_fair))
        self.assertEqual(['marked'], list(locked))
        self.assertEqual(repr(locking.lock_of(_fair)),
                         repr(locking.lock_of(locked['marked'])))


class ExclusionTestCase(testtools.TestCase):
    """The decorator we build excludes exactly the lock it was read from."""

    def _blocks(self, holder_lock, spec):
        """True if a function decorated from ``spec`` waits for holder."""
        entered = threading.Event()

        @spec.synchronized()
        def section():
            entered.set()

        with holder_lock:
            t = threading.Thread(target=section)
            t.start()
            blocked = not entered.wait(0.2)
        t.join(5)
        return blocked

    def test_same_kind_excludes(self):
        for kind, fn in (('plain', _plain), ('fair', _fair)):
            spec = locking.lock_of(fn)
            holder = lockutils.lock(spec.name, fair=spec.fair)
            self.assertTrue(self._blocks(holder, spec), kind)

    def test_other_kind_does_not_exclude(self):
        # The trap the module exists for: same name, other registry.
        spec = locking.lock_of(_fair)
        holder = lockutils.lock(spec.name, fair=False)
        self.assertFalse(self._blocks(holder, spec))
