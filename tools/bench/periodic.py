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

"""The periodic task's own cost, on loaded hosts, in one mode process.

Used by :mod:`.harness` inside the started Nova test case. Each scenario
gets a compute host of its own, started after the race cycles (so that
the scheduler never picks it for them) on ``fake.FakeDriver``, whose
capacity (1,000 vCPUs) holds every instance placed on it:

* ``nodes`` nodes, reported by the fake driver as Nova's functional tests
  make a multi-node compute (``driver._set_nodes``), each created by one
  periodic task before any timing;
* ``instances`` instance records per node, written directly to the
  database with host, node and flavor set (``Instance.create()``). The
  periodic task only reads instances, so this is the load it sees from
  booted servers, without the boot;
* ``reverts`` reverts in flight on the multi-node host (third scenario),
  one per node from its first: the destination has set the migration
  ``reverted`` and dropped its claim, the instance is still on the
  destination (``resize_reverting``, its migration context naming the
  migration), the source's ``finish_revert_resize`` has not run: the
  window the ``source_window`` mixin closes. Upstream counts these
  instances nowhere; the extension counts each on its source node, by
  its look-up, on every run while the revert is in flight (the worst
  case: a real revert is in flight for one or two runs). A host's
  history of finished reverts costs nothing after its first run, so it
  is not a scenario of its own.

A run times one ``update_available_resource`` of the host's compute
manager, as the periodic task calls it: every node, the database reads,
the placement updates and, with the extension, its look-up. It counts
the database API and placement calls the run made and checks the books
afterwards: each node must count its own instances exactly once.
"""

import gc
import time

from oslo_utils import timeutils
from oslo_utils import uuidutils

#: The driver the scenario hosts run: big enough for every instance.
DRIVER = 'fake.FakeDriver'
HOST_PREFIX = 'periodic-'
#: Where the instances of the "moved on" reverts live now.
ELSEWHERE = 'periodic-elsewhere'


def scenarios(instances, nodes, node_instances, reverts):
    """The scenario list the driver sends to every mode process.

    :param instances: instances on the one node of the first scenario
        (and of the third, which adds ``reverts``)
    :param nodes: nodes of the second scenario
    :param node_instances: instances per node of the second scenario
    :param reverts: reverts in flight in the third scenario, on the
        second's host, one per node (0: no third scenario)
    :returns: list of dicts with ``name``, ``label``, ``nodes``,
        ``instances`` (per node) and ``reverts``
    """
    found = [
        {'name': 'one-node', 'nodes': 1, 'instances': instances,
         'reverts': 0,
         'label': '1 node x %d instances' % instances},
        {'name': 'many-nodes', 'nodes': nodes, 'instances': node_instances,
         'reverts': 0,
         'label': '%d nodes x %d instances' % (nodes, node_instances)},
    ]
    if reverts:
        found.append(
            {'name': 'many-nodes-reverts', 'nodes': nodes,
             'instances': node_instances, 'reverts': min(reverts, nodes),
             'label': '%d nodes x %d instances, %d reverts in flight'
                      % (nodes, node_instances, min(reverts, nodes))})
    return found


class PeriodicBench(object):
    """Scenario hosts of one mode process, and the timed runs.

    :param case: the started Nova test case (``RaceMixin`` helpers)
    :param calls: ``collections.Counter`` that the harness's yielding
        wrappers increment per call (keys ``db`` and ``placement``)
    """

    def __init__(self, case, calls):
        from nova import context as nova_context
        from nova import objects

        self.case = case
        self.calls = calls
        self.objects = objects
        self.nova_context = nova_context
        self.ctxt = nova_context.get_admin_context()
        self.hosts = {}         # scenario name -> host
        self.expected = {}      # scenario name -> node -> vCPUs
        self.expected_nova = {}  # the same, counted by Nova's own tracker
        self.steps = {}         # scenario name -> set-up step -> seconds
        self.last_nova = {}     # scenario name -> latest run's nova_tracker
        self.flavor = None

    def setup(self, specs):
        """Start a host per scenario and write its load; time nothing."""
        started = time.time()
        self.flavor = self.objects.Flavor.get_by_flavor_id(
            self.ctxt, self.case.flavor_small)
        previous = self.case.flags
        driver = _current_driver()
        # NOTE: the race cycles' hosts keep their driver; only the hosts
        # started here get the big one.
        previous(compute_driver=DRIVER)
        try:
            for spec in specs:
                self._setup_one(spec)
        finally:
            previous(compute_driver=driver)
        # NOTE: every service of the process saves its heartbeat every 10 s
        # (report_interval). A turn of the modes takes about as long, so
        # the heartbeats fall into the same mode's runs turn after turn
        # and bias them; they have nothing to do with the periodic task.
        self.case.stub_out('nova.objects.Service.save', _no_heartbeat)
        return {'setup_s': round(time.time() - started, 1),
                'steps': self.steps, 'hosts': dict(self.hosts)}

    def _setup_one(self, spec):
        host = HOST_PREFIX + spec['name']
        steps = self.steps.setdefault(spec['name'], {})
        started = time.time()
        compute = self.case._start_compute(host)
        nodes = [host] + ['%s-node%02d' % (host, i)
                          for i in range(1, spec['nodes'])]
        compute.manager.driver._set_nodes(nodes)
        # Creates the other nodes' records and resource providers.
        compute.manager.update_available_resource(self._context())
        steps['nodes_s'] = round(time.time() - started, 1)
        started = time.time()
        for node in nodes:
            for _i in range(spec['instances']):
                self._instance(host, node)
        expected = dict((node, spec['instances'] * self.flavor.vcpus)
                        for node in nodes)
        # With the look-up (source_window) the source node counts the
        # reverting instance; upstream counts it nowhere.
        counts_window = hasattr(compute.manager.rt, '_nrl_note_outgoing')
        resized = [self._resized(host, node)
                   for node in nodes[:spec['reverts']]]
        if resized:
            # As a host sees a resize from it: in progress (the periodic
            # task lists it) before the destination reverts it.
            compute.manager.update_available_resource(self._context())
        # What Nova's own tracker class counts, for the runs made with it
        # in the same process (see run()).
        self.expected_nova[spec['name']] = dict(expected)
        for migration, instance in resized:
            self._flip(migration, instance)
            if counts_window:
                expected[migration.source_node] += self.flavor.vcpus
        self.hosts[spec['name']] = host
        self.expected[spec['name']] = expected
        steps['load_s'] = round(time.time() - started, 1)
        # NOTE: one run untimed: the first run after the load was written
        # updates every node's record and inventory.
        started = time.time()
        self.run(spec['name'])
        steps['first_run_s'] = round(time.time() - started, 1)

    def _context(self):
        # NOTE: a context per run: oslo.db keeps the transaction on it.
        return self.nova_context.get_admin_context()

    def _compute_id(self, host, node):
        """{'compute_id': ...} where Nova has the field (2023.2 on).

        Such a Nova refuses an instance with a node and no compute_id; the
        "moved on" reverts' host has no node record: None (nullable).
        """
        if 'compute_id' not in self.objects.Instance.fields:
            return {}
        if host == ELSEWHERE:
            return {'compute_id': None}
        cache = self.__dict__.setdefault('_compute_ids', {})
        if (host, node) not in cache:
            cache[(host, node)] = self.objects.ComputeNode.\
                get_by_host_and_nodename(self.ctxt, host, node).id
        return {'compute_id': cache[(host, node)]}

    def _instance(self, host, node):
        flavor = self.flavor
        instance = self.objects.Instance(
            context=self.ctxt, uuid=uuidutils.generate_uuid(),
            project_id='periodic-bench', user_id='periodic-bench',
            host=host, node=node, vm_state='active', power_state=1,
            task_state=None, instance_type_id=flavor.id, flavor=flavor,
            old_flavor=None, new_flavor=None, memory_mb=flavor.memory_mb,
            vcpus=flavor.vcpus, root_gb=flavor.root_gb,
            ephemeral_gb=flavor.ephemeral_gb, launched_at=timeutils.utcnow(),
            numa_topology=None, system_metadata={},
            **self._compute_id(host, node))
        instance.create()
        return instance

    def _resized(self, host, node):
        """A resize from ``node`` waiting for its confirmation."""
        instance = self._instance(ELSEWHERE, ELSEWHERE)
        migration = self.objects.Migration(
            context=self.ctxt, instance_uuid=instance.uuid,
            source_compute=host, source_node=node,
            dest_compute=ELSEWHERE, dest_node=ELSEWHERE,
            migration_type='resize', status='finished',
            old_instance_type_id=self.flavor.id,
            new_instance_type_id=self.flavor.id)
        if 'dest_compute_id' in self.objects.Migration.fields:
            migration.dest_compute_id = None    # no node record there
        migration.create()
        instance.vm_state = 'resized'
        instance.old_flavor = self.flavor
        instance.new_flavor = self.flavor
        instance.migration_context = self.objects.MigrationContext(
            instance_uuid=instance.uuid, migration_id=migration.id,
            old_numa_topology=None, new_numa_topology=None)
        instance.save()
        return migration, instance

    def _flip(self, migration, instance):
        """The revert in flight: flipped, claim dropped, not back yet."""
        instance.task_state = 'resize_reverting'
        instance.save()
        migration.status = 'reverted'
        migration.save()

    def run(self, name, nova_tracker=False, collect=False, around=None):
        """One timed periodic task on the scenario's host.

        :param nova_tracker: run it with Nova's own resource tracker class
            in place of the extension's composed one, in this process, on
            this host: the extension's code against Nova's, with the same
            heap, data and interpreter (two processes of one mode differ
            by a few percent, see :doc:`benchmarks`)
        :param collect: run the garbage collector, untimed, before the
            run: the garbage of earlier work (the set-up, the other
            scenarios, the other class) is then not collected in
            whichever timed run crosses the collector's threshold
        :param around: ``around(function, *args)`` calls the timed
            periodic task itself (``tools.bench.instructions`` counts the
            instructions executed inside it); None calls it directly
        :returns: dict with ``ms`` (wall), ``cpu_ms``, ``gc_ms`` (of it,
            in garbage collections), ``db_calls``, ``placement_calls``,
            ``calls`` (function name -> calls, e.g.
            ``db.migration_get_all_by_filters``) and ``wrong_nodes`` (nodes
            whose vCPU usage is not their instances' after the run)
        """
        host = self.hosts[name]
        manager = self.case.computes[host].manager
        rt = manager.rt
        composed = type(rt)
        if nova_tracker:
            rt.__class__ = nova_tracker_class(composed)
        try:
            if (self.last_nova.get(name, nova_tracker) != nova_tracker and
                    self.expected[name] != self.expected_nova[name]):
                # NOTE: the two classes count this host's reverts in
                # flight differently: the first run after one of the other
                # class saves the nodes' records and inventories again,
                # which a host running one class never does. That run is
                # not timed, whichever order the modes took in the turn.
                manager.update_available_resource(self._context())
            self.last_nova[name] = nova_tracker
            ctxt = self._context()
            if collect:
                gc.collect()
            before = dict(self.calls)
            GC_TIME.reset()
            cpu, wall = time.process_time(), time.perf_counter()
            if around is None:
                manager.update_available_resource(ctxt)
            else:
                around(manager.update_available_resource, ctxt)
            wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
            in_gc = GC_TIME.seconds
        finally:
            rt.__class__ = composed
        calls = {k: n - before.get(k, 0) for k, n in self.calls.items()
                 if n != before.get(k, 0)}
        expected = (self.expected_nova if nova_tracker else
                    self.expected)[name]
        # NOTE: the manager logs a node's failure and goes on; a broken
        # run would look fast. The books say whether it did the work.
        wrong = sorted(node for node, cn in manager.rt.compute_nodes.items()
                       if cn.vcpus_used != expected[node])
        return {'ms': round(wall * 1e3, 3), 'cpu_ms': round(cpu * 1e3, 3),
                'gc_ms': round(in_gc * 1e3, 3),
                'db_calls': calls.pop('db', 0),
                'placement_calls': calls.pop('placement', 0),
                'calls': calls, 'wrong_nodes': len(wrong)}


class _GcTime(object):
    """Seconds spent in garbage collections since :meth:`reset`."""

    def __init__(self):
        self.seconds = 0.0
        self._started = None
        gc.callbacks.append(self._callback)

    def reset(self):
        self.seconds = 0.0

    def _callback(self, phase, _info):
        if phase == 'start':
            self._started = time.perf_counter()
        elif self._started is not None:
            self.seconds += time.perf_counter() - self._started
            self._started = None


GC_TIME = _GcTime()


def nova_tracker_class(composed):
    """Nova's tracker class under the extension's ``composed`` one."""
    from nova_revert_lock import composition
    if composition.PeriodicObserver not in composed.__mro__:
        raise ValueError('%s is not composed by the extension' % composed)
    return composed.__bases__[-1]


def _no_heartbeat(service):
    """Service.save while the runs are timed: the heartbeat only."""


def _current_driver():
    from oslo_config import cfg
    return cfg.CONF.compute_driver
