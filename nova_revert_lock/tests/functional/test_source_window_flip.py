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

"""The revert's flip and return, landing at every step of one periodic run.

In a deployment the destination and the source are two processes, each
with its own ``COMPUTE_RESOURCE_SEMAPHORE``: the destination's *flip*
(migration ``reverted``) and the source's *return* (``instance.host`` saved
back, then the task state and migration context cleared) can land at any
moment of the source's periodic task. In this in-process framework every
compute shares one lock, so the two are made here, inside the source's
periodic run, by the very writes the other host makes:

* flip: the migration is saved ``reverted`` and the instance's migration
  context reverted, as the destination's ``revert_resize`` does;
* return ``first``: ``instance.host``, node and flavor put back in one save
  (Nova's ``finish_revert_resize`` first save); ``second``: then the
  migration context dropped and ``launched_at`` set, in a save that keeps
  the task state ``resize_reverting`` (its second save); ``full``: then
  the task state cleared too (its last save).

The revert itself is requested through the API (task state and migration
status as the API sets them) with the destination's half held back.

Steps of the source's run where they land: ``start`` (before it),
``after-instances`` (after it listed the node's instances),
``after-migrations`` (after it listed the in-progress migrations),
``in-look-up`` (after the extension's query of reverted migrations, before
it fetches their instances) and ``end`` (after the run); one test also
places the return at ``after-look-up`` (after the extension fetched the
instances, before upstream's usage update). With the
extension every placement leaves the source counting the instance exactly
once (1 vCPU); the canary shows plain Nova counting it nowhere (0) when
the flip lands before the migration list and the return after the
instance list (the flip at the start with the return at every step, and
the flip after the instance list with the return there).

The same run also goes through :class:`SerializingIndirection`, which
sends every remotable call through the RPC serialization a real
nova-compute's conductor calls get: the look-up must work there too.
"""

import contextlib

from nova.compute import rpcapi as compute_rpcapi
from nova.compute import task_states
from nova.compute import vm_states
from nova.conductor import manager as conductor_manager
from nova import context as nova_context
from nova import objects
from nova.objects import base as objects_base
from nova.tests.functional import integrated_helpers
import oslo_messaging as messaging
from oslo_serialization import jsonutils
from oslo_utils import timeutils

from nova_revert_lock.mixins import base as mixin_base
from nova_revert_lock.mixins import source_window
from nova_revert_lock.tests.functional import base
from nova_revert_lock.tests.functional import hooks

STEPS = ('start', 'after-instances', 'after-migrations', 'in-look-up',
         'end')
#: every step in the order of the run, those only some tests use included
ORDER = ('start', 'after-instances', 'after-migrations', 'in-look-up',
         'after-look-up', 'end')
#: where the flip may land: the look-up step only matters for the return
FLIPS = ('start', 'after-instances', 'after-migrations', 'end')
RETURNS = ('first', 'second', 'full')


class SerializingIndirection(object):
    """An indirection API that sends object calls as RPC would.

    A real nova-compute has no database: ``NovaObject.indirection_api`` is
    the conductor's RPC API, so every remotable call's arguments and
    results are serialized (Nova's object serializer, then JSON on the
    wire). This does the same round trip and calls the in-process
    conductor's manager, so a ``datetime`` in a filter dict arrives as a
    string, as it does in a deployment.
    """

    def __init__(self, conductor_manager):
        self.manager = conductor_manager
        self.serializer = objects_base.NovaObjectSerializer()
        self.calls = []
        self._live = False

    @contextlib.contextmanager
    def installed(self):
        """Send every object call through this indirection meanwhile."""
        saved = objects_base.NovaObject.indirection_api
        objects_base.NovaObject.indirection_api = self
        self._live = True
        try:
            yield self
        finally:
            self._live = False
            objects_base.NovaObject.indirection_api = saved

    def _wire(self, context, value):
        sent = jsonutils.loads(jsonutils.dumps(
            self.serializer.serialize_entity(context, value)))
        return self.serializer.deserialize_entity(context, sent)

    def _remote(self, context, method, *args):
        args = [self._wire(context, a) for a in args]
        # NOTE: the conductor runs the call on the database itself. The
        # indirection is one class attribute for every greenthread, and
        # another one (the test polling the API) may call through it too:
        # put it back only while it is still installed, or a call that
        # outlives installed() would leave it in place for good (the
        # source's own saves then ran through it twice).
        objects_base.NovaObject.indirection_api = None
        try:
            result = getattr(self.manager, method)(context, *args)
        except messaging.ExpectedException as e:
            # What the RPC server sends back: the original exception.
            raise e.exc_info[1]
        finally:
            if self._live:
                objects_base.NovaObject.indirection_api = self
        return self._wire(context, result)

    def object_class_action_versions(self, context, objname, objmethod,
                                     object_versions, args, kwargs):
        self.calls.append('%s.%s' % (objname, objmethod))
        return self._remote(context, 'object_class_action_versions',
                            objname, objmethod, object_versions, args,
                            kwargs)

    def object_action(self, context, objinst, objmethod, args, kwargs):
        self.calls.append('%s.%s' % (objinst.obj_name(), objmethod))
        return self._remote(context, 'object_action', objinst, objmethod,
                            args, kwargs)

    def object_backport_versions(self, context, objinst, object_versions):
        return self._remote(context, 'object_backport_versions', objinst,
                            object_versions)


class FlipProbeMixin(object):
    """Run the source's periodic task with the flip and return placed."""

    source = 'host1'
    dest = 'host2'
    #: send the probed run's object calls through RPC serialization
    serialize = True

    def setUp(self):
        super(FlipProbeMixin, self).setUp()
        self.pending = []           # (step, callable), in order
        self.probing = False
        self.indirection = SerializingIndirection(
            conductor_manager.ConductorManager())
        self._install_step_hooks()

    # -- the other hosts' writes ------------------------------------------

    def _records(self, server_id):
        ctxt = nova_context.get_admin_context()
        instance = objects.Instance.get_by_uuid(
            ctxt, server_id, expected_attrs=['flavor', 'migration_context',
                                             'system_metadata',
                                             'numa_topology'])
        return ctxt, instance, self._migration(server_id)

    def flip(self, server_id):
        """What the destination's revert_resize writes."""
        _ctxt, instance, migration = self._records(server_id)
        migration.status = 'reverted'
        migration.save()
        instance.revert_migration_context()
        instance.save()

    def return_first(self, server_id):
        """finish_revert_resize's first save: host, node and flavor.

        Train does it inline in ``finish_revert_resize``: done here as it
        does it. Up to 20.6.1 that save clears the stashed flavors too;
        train-eol keeps them until ``finish_revert_resize`` ends.
        """
        _ctxt, instance, migration = self._records(server_id)
        manager = self.computes[self.source].manager
        for name in ('_finish_revert_resize_update_instance_flavor_host_'
                     'node',                       # Ussuri
                     '_revert_instance_flavor_host_node'):  # 2023.1+
            real = getattr(manager, name, None)
            if real is not None:
                # Nova's own code for this save.
                real(instance, migration)
                return
        manager._set_instance_info(instance, instance.old_flavor)
        if not mixin_base.calls(
                'nova.compute.manager:ComputeManager.finish_revert_resize',
                '_delete_stashed_flavor_info'):
            instance.old_flavor = None
            instance.new_flavor = None
        instance.host = migration.source_compute
        instance.node = migration.source_node
        instance.save(expected_task_state=[task_states.RESIZE_REVERTING])

    def return_second(self, server_id):
        """Two saves: back, migration context dropped, still reverting.

        Nova's second save drops the migration context and sets
        ``launched_at`` but keeps the task state; the last one, which
        clears it, comes after the volume attachments are completed, and
        in a deployment each save is a conductor call.
        """
        self.return_first(server_id)
        _ctxt, instance, _migration = self._records(server_id)
        instance.drop_migration_context()
        instance.launched_at = timeutils.utcnow()
        instance.save(expected_task_state=task_states.RESIZE_REVERTING)

    def return_full(self, server_id):
        """Every save: back, migration context dropped, task state clear."""
        self.return_second(server_id)
        _ctxt, instance, _migration = self._records(server_id)
        # Nova's last save: back to the state it had (ACTIVE here).
        instance.vm_state = vm_states.ACTIVE
        instance.task_state = None
        instance.save()

    # -- steps of the probed run --------------------------------------------

    def reach(self, step):
        """Make the writes placed at ``step`` (and any left before it)."""
        if not self.probing:
            return
        limit = ORDER.index(step)
        while self.pending and ORDER.index(self.pending[0][0]) <= limit:
            _step, write = self.pending.pop(0)
            write()

    def _install_step_hooks(self):
        test = self
        source = self.source
        if hasattr(objects.MigrationList, 'get_in_progress_and_error'):
            in_progress_name = 'get_in_progress_and_error'
        else:
            in_progress_name = 'get_in_progress_by_host_and_node'

        def get_by_host_and_node(instance_list, context, host, node, *args,
                                 **kwargs):
            result = instance_list(context, host, node, *args, **kwargs)
            if host == source:
                test.reach('after-instances')
            return result

        def get_in_progress(in_progress, context, host, node, *args,
                            **kwargs):
            result = in_progress(context, host, node, *args, **kwargs)
            if host == source:
                test.reach('after-migrations')
            return result

        def get_by_filters(migration_filters, context, filters, *args,
                           **kwargs):
            result = migration_filters(context, filters, *args, **kwargs)
            if (filters.get('status') == 'reverted' and
                    filters.get('source_compute') == source):
                test.reach('in-look-up')
            return result

        def instances_by_filters(instance_filters, context, filters, *args,
                                 **kwargs):
            result = instance_filters(context, filters, *args, **kwargs)
            if 'uuid' in filters:
                # the extension's fetch of the reverting instances
                test.reach('after-look-up')
            return result

        hooks.wrap(self, 'nova.objects.InstanceList.get_by_host_and_node',
                   get_by_host_and_node)
        hooks.wrap(self, 'nova.objects.MigrationList.%s' % in_progress_name,
                   get_in_progress)
        hooks.wrap(self, 'nova.objects.MigrationList.get_by_filters',
                   get_by_filters)
        hooks.wrap(self, 'nova.objects.InstanceList.get_by_filters',
                   instances_by_filters)

    def probe(self, flip_step, ret_step, ret_kind, prepare=None):
        """One reverting server, one probed run; the source's vCPUs.

        :param prepare: called with the server's id once it is booted
        """
        server = self._boot(self.flavor_small, host=self.source)
        if prepare is not None:
            prepare(server['id'])
        server = self.resize(server, self.flavor_large)
        self.assertEqual(self.dest, self._host_of(server))
        # The API's half of the revert, the destination's held back.
        self.stub_out('nova.compute.rpcapi.ComputeAPI.revert_resize',
                      lambda *a, **kw: None)
        self.admin_api.post_server_action(server['id'],
                                          {'revertResize': None})
        self._wait_migration(server['id'], 'reverting')
        self.stub_out('nova.compute.rpcapi.ComputeAPI.revert_resize',
                      compute_rpcapi.ComputeAPI.revert_resize)
        ret = getattr(self, 'return_%s' % ret_kind)
        self.pending = [(flip_step, lambda: self.flip(server['id'])),
                        (ret_step, lambda: ret(server['id']))]
        self.pending.sort(key=lambda p: ORDER.index(p[0]))
        self.probing = True
        with (self.indirection.installed() if self.serialize
              else contextlib.ExitStack()):
            self.reach('start')
            self.run_periodic(self.source)
        self.reach('end')
        self.probing = False
        vcpus = self.vcpus_used(self.source)
        # Clean up for the next placement: nothing of this server stays,
        # not even the source allocation the migration holds (the real
        # revert, held back here, would have given it to the instance).
        migration_uuid = self._migration(server['id']).uuid
        self.admin_api.delete_server(server['id'])
        placement = (getattr(self, 'placement', None) or
                     getattr(self, 'placement_api'))
        placement.delete('/allocations/%s' % migration_uuid)
        self._wait_gone(server['id'])
        for host in self.hosts:
            self.run_periodic(host)
        self.assertEqual(0, self.vcpus_used(self.source))
        return vcpus

    def placements(self, flip_step):
        """(return step, kind) pairs at or after ``flip_step``."""
        return [(step, kind) for step in STEPS[STEPS.index(flip_step):]
                for kind in RETURNS]

    def probe_all(self, flip_step):
        return dict(((step, kind), self.probe(flip_step, step, kind))
                    for step, kind in self.placements(flip_step))


class _FlipTestBase(base.ExtensionFixtureMixin, base.RaceMixin,
                    FlipProbeMixin,
                    integrated_helpers.ProviderUsageBaseTestCase):
    pass


class SourceWindowFlipTest(base.OnFixedWindowNovaMixin,
                           _FlipTestBase):
    """With the extension: counted exactly once wherever they land.

    On a Nova that closes the window itself (a build with a series of
    patches/) the mixin stands aside and the same flips run on Nova's own
    look-up; the test of the mixin's own logging skips.
    """

    on_fixed_nova = ('test_flip_at_start', 'test_flip_after_instances',
                     'test_flip_after_migrations', 'test_flip_at_end',
                     'test_return_after_the_look_up_with_an_earlier_'
                     'failed_move')

    def setUp(self):
        super(SourceWindowFlipTest, self).setUp()
        if not base.window_fixed_upstream():
            self.assertIn('source_window', self.activation_report.mixins)

    def _assert_once(self, flip_step):
        counted = self.probe_all(flip_step)
        self.assertEqual(dict((p, 1) for p in counted), counted)
        # Every object call of the probed runs went through the
        # serializing indirection, the look-up's included.
        self.assertIn('MigrationList.get_by_filters', self.indirection.calls)

    def test_flip_at_start(self):
        self._assert_once('start')

    def test_flip_after_instances(self):
        self._assert_once('after-instances')

    def test_flip_after_migrations(self):
        self._assert_once('after-migrations')

    def test_flip_at_end(self):
        self._assert_once('end')

    def test_return_after_the_look_up_with_an_earlier_failed_move(self):
        # An earlier failed move of the instance left an 'error' migration,
        # which Victoria and later list first. The look-up reads the
        # instance still reverting; the return lands before upstream's
        # usage update, which must judge the instance by the look-up's
        # copy, not by one it loads again for the error migration.
        if not base.lists_error_migrations():
            self.skipTest('this Nova does not list error migrations with '
                          'the in-progress ones')

        def failed_move(server_id):
            self.record_migration(server_id, 'error', self.source,
                                  self.dest)

        counted = dict(
            (kind, self.probe('start', 'after-look-up', kind,
                              prepare=failed_move))
            for kind in RETURNS)
        self.assertEqual(dict((kind, 1) for kind in RETURNS), counted)

    def test_failed_look_up_logs_once(self):
        def broken(*args, **kwargs):
            raise messaging.MessagingTimeout('conductor gone')

        self.stub_out('nova_revert_lock.mixins.source_window.'
                      'SourceWindowTracker._nrl_query', broken)
        for _i in range(3):
            self.run_periodic(self.source)
        output = self.stdlog.logger.output
        self.assertEqual(1, output.count('Cannot look up reverted'))
        self.assertNotIn('Traceback', output)


class SourceWindowFlipCanary(_FlipTestBase):
    """Plain Nova: the instance counted nowhere in some placements."""

    extension = False

    def setUp(self):
        check = source_window.SPEC.check()
        if check.outcome == 'fixed-upstream':
            self.skipTest('the installed Nova closes the source window')
        super(SourceWindowFlipCanary, self).setUp()

    def _probe_map(self, placements):
        return dict(((flip_step, step, kind),
                     self.probe(flip_step, step, kind))
                    for flip_step, step, kind in placements)

    def test_flip_at_start(self):
        # The flip before the run: the instance counted only where the
        # return lands before the run too (the run sees it back on the
        # source); nowhere wherever the return lands later.
        counted = self._probe_map(('start', step, kind) for step, kind
                                  in self.placements('start'))
        expected = dict((key, 1 if key[1] == 'start' else 0)
                        for key in counted)
        self.assertEqual(expected, counted)

    def test_flip_after_the_instance_list(self):
        # The flip after the instance list, before the migration list:
        # nowhere, once for each kind of return. (The extension's test
        # places the return at every later step too.)
        counted = self._probe_map(('after-instances', 'after-instances',
                                   kind) for kind in RETURNS)
        self.assertEqual(dict((key, 0) for key in counted), counted)

    def test_datetime_filter_fails_through_the_conductor(self):
        # The look-up this package shipped first: a changes-since
        # datetime, which the conductor receives as a string.
        ctxt = nova_context.get_admin_context()
        with self.indirection.installed():
            self.assertRaises(
                AttributeError, objects.MigrationList.get_by_filters, ctxt,
                {'status': 'reverted', 'changes-since': timeutils.utcnow()})
