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

"""Committed facts checked against the Nova installed in the test env.

The fingerprint table is generated from released wheels without importing
Nova, and the guard compares it with live function objects; the two paths
normalise the same source through different means (ast offsets against
``inspect.getsource``), on different Pythons. Each tox env installs one
surveyed release, so each checks that the table lists exactly what that
release's live code gives. The lock test pins the one fact the fix cannot
get wrong: which kind of ``compute_resources`` lock the tracker takes.
"""

import os

import testtools

from nova_revert_lock import activation
from nova_revert_lock import fixes
from nova_revert_lock.guard import fingerprint_table
from nova_revert_lock.guard import fingerprints
from nova_revert_lock.guard import releases
from nova_revert_lock import locking
from nova_revert_lock import report as nrl_report
from nova_revert_lock.tests.unit import guard_helpers

#: first Nova major version whose tracker takes the lock with fair=True
FIRST_FAIR_MAJOR = 21


#: Names the label the table surveyed the installed code under, for a
#: Nova installed from a git tag with a version of our own (train-eol:
#: tools/lib/nova-source).
SURVEY_LABEL_ENV = 'NRL_SURVEYED_AS'


def _installed_nova():
    version = releases.installed_nova_version()
    if version is None:
        raise testtools.TestCase.skipException('Nova is not installed')
    return version


def installed_label():
    """The installed Nova's label in the fingerprint table."""
    version = _installed_nova()
    return os.environ.get(SURVEY_LABEL_ENV) or version


class FingerprintTableTest(testtools.TestCase):

    def test_every_ref_is_surveyed(self):
        self.assertEqual([], sorted(set(fixes.all_refs()) -
                                    set(fingerprint_table.FINGERPRINTS)))

    def test_table_lists_the_installed_release(self):
        version = installed_label()
        if version not in fingerprint_table.SURVEYED_RELEASES:
            # An env that names the label says the table must have it.
            self.assertNotIn(SURVEY_LABEL_ENV, os.environ,
                             '%s was not surveyed' % version)
            self.skipTest('Nova %s was not surveyed' % version)
        wrong = []
        for ref, by_digest in sorted(fingerprint_table.FINGERPRINTS.items()):
            listed = {digest for digest, found_in in by_digest.items()
                      if version in found_in}
            try:
                live = {fingerprints.live_fingerprint(ref)}
            except (ImportError, AttributeError, KeyError):
                live = set()  # not in this release: must not be listed
            if listed != live:
                wrong.append('%s: live %s, table lists %s for %s' % (
                    ref, sorted(live) or 'absent', sorted(listed) or 'none',
                    version))
        self.assertEqual([], wrong)


class InstalledLockTest(testtools.TestCase):

    def test_tracker_lock_kind_of_the_series(self):
        version = _installed_nova()
        lock = locking.tracker_lock(fixes.LOCK_REFS)
        self.assertEqual('compute_resources', lock.name)
        self.assertFalse(lock.external)
        # NOTE: Train takes it plain, Ussuri switched to fair=True.
        expect_fair = int(version.split('.')[0]) >= FIRST_FAIR_MAJOR
        self.assertEqual(expect_fair, lock.fair, lock)

    def test_composed_tracker_takes_the_installed_lock(self):
        _installed_nova()
        report = activation.build()
        if report.state != nrl_report.PATCHED:
            self.skipTest('activation is %s here' % report.state)
        lock = locking.tracker_lock(fixes.LOCK_REFS)
        self.assertEqual(lock.describe(), report.lock)
        tracker_cls = guard_helpers.composed_tracker(report.manager)
        # Every method a mixin marked to run under the semaphore.
        locked = [name for name, value in vars(tracker_cls).items()
                  if getattr(value, '_nrl_under_semaphore', False)]
        self.assertNotEqual([], locked)
        for name in locked:
            self.assertEqual(
                repr(lock), repr(locking.lock_of(vars(tracker_cls)[name])),
                name)
