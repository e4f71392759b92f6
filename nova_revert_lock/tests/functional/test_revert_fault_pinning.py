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

"""Which order the revert section may fail in, with dedicated CPUs.

The destination's revert section does three things: the migration is
set ``reverted``, the new flavor's claim is dropped, and the instance's
migration context is reverted (its NUMA topology and pinning become the
source's again) and saved. Here each of the last two fails in turn, on
Nova's libvirt functional framework (two hosts of 4 dedicated pCPUs), with
a second pinned server on the destination so that pCPU ids collide if the
books go wrong:

``drop``
    the claim drop fails (``CPUUnpinningInvalid`` from the tracker)
``save``
    the instance save fails (the database went away)

After the failure the destination's periodic task runs, and the end state
is read: the instance record (host, pinning), the periodic task's
outcome and the destination's pinned pCPUs.

Measured (``RevertFaultPinningCanary``, ``RevertFaultPinningUpstream``):

* Nova's order before the fix (record, then claim drop) persists, when
  the drop fails, an instance on the destination with the source's
  pinning: the destination's periodic task then fails on every run with
  ``CPUPinningInvalid``;
* upstream's order (claim drop, then the record: 21.1.1 and later) fails
  safe when the drop fails, but when the save fails the manager's error
  handler saves the instance (``vm_state`` ERROR) with the reverted
  fields still pending: the same record, and on 21.1.2 the same
  collision (from 22.4.0 the periodic task applies the migration context
  of an incoming migration in ``error`` while it counts, which keeps the
  books right although the record is wrong);
* so the extension (and the patch series) use upstream's order and, when
  the save fails, apply the migration context again before re-raising:
  the record stays the destination's whatever fails, and the next
  periodic task counts it (``RevertFaultPinningTest``).
"""

from unittest import mock

from nova import exception
from nova import objects
from nova.tests.functional.api import client
from oslo_db import exception as db_exception

from nova_revert_lock.tests.functional import base
from nova_revert_lock.tests.functional import hooks
from nova_revert_lock.tests.functional import test_source_window_pinning

SOURCE = test_source_window_pinning.SOURCE
DEST = test_source_window_pinning.DEST


class _RevertFaultBase(test_source_window_pinning._PinningWindowBase):

    def setUp(self):
        super(_RevertFaultBase, self).setUp()
        self.armed = None
        self.fired = []
        self._install_faults()

    def _install_faults(self):
        test = self

        def update_usage(orig_usage, rt, usage, nodename, sign=1):
            # A decrement on the destination outside its periodic task is
            # the revert's claim drop.
            if (test.armed == 'drop' and sign < 0 and rt.host == DEST and
                    not getattr(rt, '_nrl_in_periodic', False)):
                test.armed = None
                test.fired.append('drop')
                raise exception.CPUUnpinningInvalid(
                    requested='injected', available='injected')
            return orig_usage(rt, usage, nodename, sign=sign)

        reverted = set()

        def revert_migration_context(orig_revert_ctx, instance, *args,
                                     **kwargs):
            reverted.add(instance.uuid)
            return orig_revert_ctx(instance, *args, **kwargs)

        def instance_save(orig_save, instance, *args, **kwargs):
            # The save of the reverted record, on the destination.
            if test.armed == 'save' and instance.uuid in reverted:
                test.armed = None
                test.fired.append('save')
                raise db_exception.DBError('injected: database went away')
            return orig_save(instance, *args, **kwargs)

        hooks.wrap(self, 'nova.compute.resource_tracker.ResourceTracker.'
                   '_update_usage', update_usage)
        hooks.wrap(self, 'nova.objects.Instance.save', instance_save)
        hooks.wrap(self, 'nova.objects.Instance.revert_migration_context',
                   revert_migration_context)

    def _dest_periodic(self):
        """The destination's periodic task: None, or the error it hit."""
        rt = self._tracker(DEST)
        rt._nrl_in_periodic = True
        try:
            self._periodic(DEST)
        except Exception as e:
            return type(e).__name__
        finally:
            rt._nrl_in_periodic = False
        return None

    def _dest_pinned(self):
        (node,) = self._tracker(DEST).compute_nodes.values()
        topology = objects.NUMATopology.obj_from_db_obj(node.numa_topology)
        pinned = set()
        for cell in topology.cells:
            pinned |= set(cell.pinned_cpus)
        return pinned

    def faulted_revert(self, fault):
        """Resize, revert with ``fault``; return the end state."""
        # A filler on the source takes the first two pCPUs there, so the
        # moving server is pinned to the two that the destination gives
        # the second server below.
        self._boot('nrl-filler', self.flavor_a, SOURCE)
        server = self._boot('nrl-moving', self.flavor_a, SOURCE)
        source_pcpus = self._pcpus(server['id'])
        with mock.patch('nova.virt.libvirt.driver.LibvirtDriver.'
                        'migrate_disk_and_power_off', return_value='{}'):
            self.api.post_server_action(
                server['id'], {'resize': {'flavorRef': self.flavor_b}})
            server = self._wait(server['id'], 'VERIFY_RESIZE')
        self.assertEqual(DEST, server['OS-EXT-SRV-ATTR:host'])
        dest_pcpus = self._pcpus(server['id'])
        # A second server on the destination takes the other two pCPUs,
        # the ones the moving server holds on the source.
        other = self._boot('nrl-other', self.flavor_a, DEST)
        other_pcpus = self._pcpus(other['id'])
        self.assertEqual(set(), dest_pcpus & other_pcpus)
        self.assertEqual(source_pcpus, other_pcpus,
                         'the test needs the source pinning to collide')

        self.armed = fault
        try:
            self.api.post_server_action(server['id'],
                                        {'revertResize': None})
        except client.OpenStackApiException:
            # Nova's libvirt framework runs casts as calls: the
            # destination's error comes back through the API.
            pass
        server = self._wait(server['id'], 'ERROR')
        self.assertEqual([fault], self.fired)
        instance = objects.Instance.get_by_uuid(
            self.ctxt, server['id'], expected_attrs=['numa_topology'])
        errors = [self._dest_periodic() for _run in range(2)]
        return {
            'host': instance.host,
            'record_pinning': ('dest' if self._pcpus(server['id']) ==
                               dest_pcpus else 'source'),
            'periodic_errors': errors,
            'dest_pinned': ('both' if self._dest_pinned() ==
                            dest_pcpus | other_pcpus else
                            sorted(self._dest_pinned())),
        }


#: the record stays the destination's, the periodic task rebuilds
#: consistent books
CONSISTENT = {'host': DEST, 'record_pinning': 'dest',
              'periodic_errors': [None, None], 'dest_pinned': 'both'}

#: the destination's periodic task aborts on every run: the record on the
#: destination has the source's pinning, which collides there
COLLIDES = {'host': DEST, 'record_pinning': 'source',
            'periodic_errors': ['CPUPinningInvalid', 'CPUPinningInvalid']}


def _without_books(outcome):
    """The outcome less the pCPUs an aborted periodic task left counted."""
    return dict((k, v) for k, v in outcome.items() if k != 'dest_pinned')


class RevertFaultPinningTest(_RevertFaultBase):
    """The extension: whichever step fails, never inconsistent."""

    def setUp(self):
        super(RevertFaultPinningTest, self).setUp()
        # NOTE: a Nova built with the Train or Ussuri series has the
        # mixin's behaviour in its own code, and must pass the same tests.
        if ('revert' not in self.activation_report.mixins and
                not base.revert_fixed_by_series()):
            self.skipTest('the revert mixin stands aside on this Nova')

    def test_drop_fails(self):
        self.assertEqual(CONSISTENT, self.faulted_revert('drop'))

    def test_save_fails(self):
        self.assertEqual(CONSISTENT, self.faulted_revert('save'))


class RevertFaultPinningUpstream(_RevertFaultBase):
    """The reference: a Nova with upstream's fix, under the same faults.

    Upstream's order fails safe when the drop fails; when the save fails
    the error handler persists the reverted record anyway (the extension
    puts it back first).
    """

    extension = False

    def setUp(self):
        if base.nova_is_affected():
            self.skipTest('the installed Nova lacks upstream\'s fix')
        if base.revert_fixed_by_series():
            self.skipTest('the installed Nova has the fix of a series of '
                          'patches/, which RevertFaultPinningTest tests')
        super(RevertFaultPinningUpstream, self).setUp()

    def test_drop_fails(self):
        self.assertEqual(CONSISTENT, self.faulted_revert('drop'))

    def test_save_fails(self):
        outcome = self.faulted_revert('save')
        # The record contradicts its host on every release with upstream's
        # fix. Whether the periodic task then fails depends on the release:
        # from 22.4.0 (bug 1953359) it applies the migration context of an
        # incoming migration in "error" as it counts, which hides it.
        self.assertEqual({'host': DEST, 'record_pinning': 'source'},
                         dict((k, outcome[k])
                              for k in ('host', 'record_pinning')))
        if 'get_in_progress_and_error' in dir(objects.MigrationList):
            self.assertEqual([None, None], outcome['periodic_errors'])
        else:
            self.assertEqual(COLLIDES, _without_books(outcome))


class RevertFaultPinningCanary(base.CanaryMixin, _RevertFaultBase):
    """Plain affected Nova: the source's pinning persisted either way."""

    def test_drop_fails(self):
        # Nova's order saves the reverted record before the drop.
        outcome = self.faulted_revert('drop')
        self.assertEqual(COLLIDES, _without_books(outcome))
        self.assertNotEqual('both', outcome['dest_pinned'])

    def test_save_fails(self):
        # The error handler saves the reverted record after all.
        outcome = self.faulted_revert('save')
        self.assertEqual(COLLIDES, _without_books(outcome))
