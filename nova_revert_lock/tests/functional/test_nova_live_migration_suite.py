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

"""Nova's own live migration tests, with the extension active.

``live_migration_rollback`` (bug 1894095) replaces the destination's
``drop_move_claim_at_destination``: Nova's own functional tests of NUMA
live migration (success, rollback, RPC-pinned and legacy paths) and of
live migration rollbacks (port bindings, volume attachments, hardware
offloaded ports) must pass on the composed manager as they pass on plain
Nova. Each class below is Nova's class of the installed release with
:class:`~.base.ExtensionFixtureMixin` first in its bases; the default
``[revert_lock] mixins`` are activated before any compute starts.

Nova has most of these tests from 22.0.0 (Victoria) on; where the
installed release lacks a module or class, it is not collected.

NOTE: upstream's reproducer for bug 1894095
(``NUMALiveMigrationRollbackTests.test_bug_1894095_*``) runs its
periodic tasks from a stub of ``ResourceTracker.drop_move_claim``; with
the mixin the destination drops the claim through the unlocked
``_drop_move_claim`` inside its own critical section, so that stub (and
the FIXME assertions in it) does not run there, and the tests check only
the books after the rollback. ``test_live_migration_rollback`` races the
same window with the mixin.
"""

from nova.tests import functional  # noqa: F401 (eventlet first)

import importlib

from nova_revert_lock.tests.functional import base

#: (module, class names) of Nova's tests run here
SUITES = (
    ('nova.tests.functional.libvirt.test_numa_live_migration',
     ('NUMALiveMigrationPositiveTests', 'NUMALiveMigrationRollbackTests',
      'NUMALiveMigrationLegacyTests', 'NUMALiveMigrationLegacyRollbackTests',
      'NUMALiveMigrationNegativeTests')),
    ('nova.tests.functional.regressions.test_bug_1888395',
     ('TestLiveMigrationWithoutMultiplePortBindings',
      'TestLiveMigrationRollbackWithoutMultiplePortBindings')),
    ('nova.tests.functional.regressions.test_bug_1944619',
     ('TestRollbackWithHWOffloadedOVS',)),
    ('nova.tests.functional.regressions.test_bug_1889108',
     ('TestVolAttachmentsDuringPreLiveMigration',)),
    ('nova.tests.functional.compute.test_live_migration',
     ('LiveMigrationCinderFailure', 'TestVolAttachmentsDuringLiveMigration',
      'LiveMigrationNeutronInteractionsTest')),
)


def _with_extension(nova_cls):
    """Nova's test class with the extension activated first."""

    def setUp(self):
        super(cls, self).setUp()
        report = self.activation_report
        # Applied, or standing aside on a build with a series of patches/
        # (no release fixes bug 1894095).
        self.assertIn('live_migration_rollback',
                      report.mixins + report.fixed_upstream,
                      report.warnings)

    cls = type(nova_cls.__name__, (base.ExtensionFixtureMixin, nova_cls),
               {'__module__': __name__, 'setUp': setUp})
    return cls


def _collect():
    found = {}
    for module_name, class_names in SUITES:
        try:
            module = importlib.import_module(module_name)
        except ImportError:
            continue
        for class_name in class_names:
            nova_cls = getattr(module, class_name, None)
            if nova_cls is not None:
                found[class_name] = _with_extension(nova_cls)
    return found


globals().update(_collect())
