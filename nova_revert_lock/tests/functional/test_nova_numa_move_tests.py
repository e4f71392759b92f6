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

"""Nova's own NUMA resize and cold-migration tests, extension active.

``incoming_migration_context`` changes how the destination's periodic
task counts an instance with an incoming move, and ``source_window`` how
the source counts a reverting one; both matter most with NUMA topologies
and pinned CPUs. Nova's own tests of those moves on its libvirt
functional framework (``nova.tests.functional.libvirt.
test_numa_servers``, the installed release's) must pass on the composed
tracker and manager as they pass on plain Nova.

Each class below is Nova's class of the installed release with
:class:`~.base.ExtensionFixtureMixin` first in its bases, so every Nova
test runs with the default mixins activated before the computes start;
only the tests whose name says they resize, migrate, revert or confirm
are kept (:func:`~.test_nova_move_tests.is_move_test`). A class the
installed release lacks is left out.
"""

from nova_revert_lock import report as nrl_report
from nova_revert_lock.tests.functional import base
from nova_revert_lock.tests.functional import test_nova_move_tests

try:
    from nova.tests.functional.libvirt import test_numa_servers
except ImportError:  # pragma: no cover - not a Nova with functional tests
    test_numa_servers = None

#: Nova's classes whose move tests run here, where the release has them
CLASSES = ('NUMAServersTest', 'NUMAServersWithNetworksTest')


class _Activated(base.ExtensionFixtureMixin):

    def setUp(self):
        super(_Activated, self).setUp()
        report = self.activation_report
        self.assertIn(report.state,
                      (nrl_report.PATCHED, nrl_report.ALREADY_FIXED),
                      report.problems)
        # Applied, or standing aside for upstream's own fix.
        self.assertIn('incoming_migration_context',
                      report.mixins + report.fixed_upstream,
                      report.warnings)


def _wrapped():
    """name -> Nova's class of that name, wrapped, for each it has."""
    found = {}
    for name in CLASSES if test_numa_servers is not None else ():
        nova_cls = getattr(test_numa_servers, name, None)
        if nova_cls is not None:
            found[name] = test_nova_move_tests.only_move_tests(
                type(name, (_Activated, nova_cls),
                     {'__module__': __name__}))
    return found


# NOTE: Nova's classes are only reached through their module: a TestCase
# class bound to a name in this module would be collected and run as it
# is, on plain Nova.
globals().update(_wrapped())
