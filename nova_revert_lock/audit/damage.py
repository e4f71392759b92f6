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

"""What the races already did to a cloud, and how to repair it.

Read-only: the API and cell databases through Nova's objects, placement
through ``nova-manage placement audit`` without ``--delete`` (the release's
own audit, where it has one), and the status endpoints of the hosts that
run the wrapper. The operator runs the repairs; nothing here writes.

Each finding is a dict: ``kind``, ``cell``, ``host``, ``node``,
``server``, ``migration``, ``bug`` (the likely one, or None), ``detail``
and ``repair`` (commands, in the order to run them).
"""

import datetime
import os
import re
import subprocess
import sys

from nova_revert_lock.audit import query
from nova_revert_lock.audit import rows as audit_rows
from nova_revert_lock.audit import targets as audit_targets

ERROR_SERVER = 'server-in-error'
PERIODIC_FAILING = 'periodic-failing'
DEGRADED_FIX = 'degraded-fix'
#: the degraded period of live_migration_rollback's bounded wait (its
#: mixin module imports Nova; this one must not)
ROLLBACK_WAIT_FIX = 'live_migration_rollback'
SHARED_PCPU = 'shared-pcpu'
BOOKS_WRONG = 'pinned-books-wrong'
ORPHANED_ALLOCATION = 'orphaned-allocation'
STALE_MIGRATION = 'stale-migration'
STUCK_SERVER = 'server-stuck-in-move'
#: in the order their repairs run: the moves that free shared CPUs
#: before the restart of a node whose periodic task they made fail
KINDS = (SHARED_PCPU, ERROR_SERVER, STUCK_SERVER, PERIODIC_FAILING,
         DEGRADED_FIX, BOOKS_WRONG, STALE_MIGRATION, ORPHANED_ALLOCATION)

#: the family's symptoms, as Nova words them in an instance fault
SYMPTOMS = (
    ('CPUUnpinningInvalid',
     re.compile(r'CPUUnpinningInvalid|must be a subset of pinned CPU set')),
    ('CPUPinningInvalid',
     re.compile(r'CPUPinningInvalid|must be a subset of free CPU set')),
    ('negative usage', re.compile(r'\bnegative\b', re.IGNORECASE)),
)
#: the instance action a symptom was raised in -> the likely bug
BUG_BY_ACTION = {
    'confirmResize': '1879878', 'revertResize': '1879878',
    'resize': '1953359', 'migrate': '1953359',
    'evacuate': '1896463', 'live-migration': '1894095',
    'unshelve': '2025480',
}
#: migrations still under way (every other status is final)
IN_PROGRESS = ('queued', 'accepted', 'preparing', 'pre-migrating',
               'migrating', 'post-migrating', 'running', 'finished',
               'confirming', 'reverting')
_AUDIT_LINE = re.compile(
    r'Allocations for consumer UUID (?P<consumer>\S+) on Resource Provider '
    r'(?P<provider>\S+) can be deleted: (?P<allocations>.*)')

#: the task states of a move, which only the move's own code clears: a
#: server left in one with no move under way is stuck (no periodic task
#: of Nova's resets it)
MOVE_TASK_STATES = ('migrating', 'resize_prep', 'resize_migrating',
                    'resize_migrated', 'resize_finish', 'resize_reverting',
                    'resize_confirming', 'rebuilding', 'rebuild_spawning',
                    'unshelving')

#: the bug whose aborted (queued) live migrations leak their allocations
ABORTED_LIVE_MIGRATION_BUG = '1949808'

STATUS_FIRST = ('nova-revert-lock status --all  # every host patched or '
                'already-fixed first, or the repairs race again')


def finding(kind, detail, repair, cell=None, host=None, node=None,
            server=None, migration=None, bug=None):
    return {'kind': kind, 'cell': cell, 'host': host, 'node': node,
            'server': server, 'migration': migration, 'bug': bug,
            'detail': detail, 'repair': list(repair)}


class Report(object):
    """Findings, and what could not be read (so is not known clean)."""

    def __init__(self):
        self.findings = []
        self.unreadable = []
        self.checked = []
        #: cancelled live migrations: uuid -> (cell, server, source, dest)
        self.cancelled_live_migrations = {}

    def add(self, *args, **kwargs):
        self.findings.append(finding(*args, **kwargs))

    def holds_allocations(self, ctxt, consumer):
        """Does ``consumer`` hold allocations in placement (a read)?

        Unreadable: said so, and counted as holding none.
        """
        from nova.scheduler.client import report as report_client

        try:
            if getattr(self, '_placement', None) is None:
                self._placement = report_client.SchedulerReportClient()
            get = getattr(self._placement, 'get_allocs_for_consumer', None)
            if get is not None:
                held = get(ctxt, consumer).get('allocations')
            else:
                held = self._placement.get_allocations_for_consumer(
                    ctxt, consumer)
        except Exception as e:  # noqa: BLE001 - reported, not raised
            self.cannot_read('placement allocations of %s' % consumer, e)
            return False
        return bool(held)

    def cannot_read(self, what, error):
        """``error``: an exception, or the reason as text."""
        if isinstance(error, Exception):
            error = audit_rows.one_line(error)
        self.unreadable.append({'what': what, 'error': error})

    def repair_steps(self):
        """Every finding's repair once, in the order to run them."""
        if not self.findings:
            return []
        steps = [STATUS_FIRST]
        for item in sorted(self.findings, key=_order):
            steps += [step for step in item['repair'] if step not in steps]
        return steps

    def as_dict(self):
        return {'findings': sorted(self.findings, key=_order),
                'unreadable': self.unreadable, 'checked': self.checked,
                'repair': self.repair_steps()}


def _order(item):
    return (KINDS.index(item['kind']), item['cell'] or '', item['host'] or '',
            item['server'] or '')


def symptom(fault):
    """The family's symptom a fault's message names, or None."""
    text = '%s\n%s' % (getattr(fault, 'message', '') or '',
                       getattr(fault, 'details', '') or '')
    for name, pattern in SYMPTOMS:
        if pattern.search(text):
            return name
    return None


def pinned_cpus(numa_topology):
    """The host CPUs an instance's NUMA topology holds (a set)."""
    cpus = set()
    for cell in getattr(numa_topology, 'cells', None) or ():
        if cell.obj_attr_is_set('cpu_pinning_raw') and cell.cpu_pinning:
            cpus.update(cell.cpu_pinning.values())
        if (cell.obj_attr_is_set('cpuset_reserved') and
                cell.cpuset_reserved):
            cpus.update(cell.cpuset_reserved)
    return cpus


def _age(now, record):
    when = record.updated_at or record.created_at
    if when is None:
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=datetime.timezone.utc)
    return (now - when).total_seconds()


def _migrate_and_confirm(server):
    return ['openstack server migrate --wait %s' % server,
            'openstack server resize confirm %s' % server]


def check_cell(report, cell, ctxt, now, migration_age):
    """Findings from one cell's database; returns its compute services."""
    from nova import objects

    services = objects.ServiceList.get_by_binary(
        ctxt, 'nova-compute', include_disabled=True)
    instances = objects.InstanceList.get_by_filters(
        ctxt, {'deleted': False}, expected_attrs=['fault', 'numa_topology'])
    moving = objects.MigrationList.get_by_filters(
        ctxt, {'status': list(IN_PROGRESS)})
    nodes = objects.ComputeNodeList.get_all(ctxt)
    # NOTE: what an orphaned allocation may belong to (bug 1949808): a
    # live migration aborted while queued keeps its source's allocation.
    for migration in objects.MigrationList.get_by_filters(
            ctxt, {'status': 'cancelled',
                   'migration_type': 'live-migration'}):
        report.cancelled_live_migrations[migration.uuid] = (
            cell, migration.instance_uuid, migration.source_compute,
            migration.dest_compute)
    report.checked.append('cell %s: %d server(s), %d compute node(s), %d '
                          'move(s) under way' % (cell, len(instances),
                                                 len(nodes), len(moving)))

    for instance in instances:
        if instance.vm_state == 'error' and instance.fault is not None:
            _error_server(report, cell, ctxt, instance)

    busy = set()
    servers = {instance.uuid: instance for instance in instances}
    for migration in moving:
        server = servers.get(migration.instance_uuid)
        if _moving(server):
            busy.update([(migration.source_compute, migration.source_node),
                         (migration.dest_compute, migration.dest_node)])
            _stale(report, cell, now, migration_age, migration, server)
        elif (server is not None and
              (_age(now, migration) or 0) >= migration_age and
              report.holds_allocations(ctxt, migration.uuid)):
            # NOTE: a server at rest whose move still holds an allocation
            # (placement's audit keeps it: the move is under way for it):
            # the source's restart rolled a resize back (Nova's
            # _init_instance clears resize_prep, reverts resize_migrating)
            # or a state reset ended a stuck one, and the migration and its
            # allocation stayed. Once the allocation is deleted the record
            # left is history.
            _stale(report, cell, now, migration_age, migration, server)
    under_way = set(migration.instance_uuid for migration in moving)
    for instance in instances:
        # NOTE: a resized server (VERIFY_RESIZE) whose move is over
        # (confirmed, reverted, error) is as stuck: the API confirms or
        # reverts only a migration that is finished.
        if ((instance.task_state in MOVE_TASK_STATES or
             instance.vm_state == 'resized') and
                instance.uuid not in under_way):
            _stuck(report, cell, ctxt, now, migration_age, instance)

    by_node = {}
    for instance in instances:
        cpus = pinned_cpus(instance.numa_topology)
        if cpus and instance.host:
            by_node.setdefault((instance.host, instance.node), []).append(
                (instance, cpus))
    for (host, node), held in sorted(by_node.items()):
        _shared_pcpus(report, cell, host, node, held)
    for compute in nodes:
        key = (compute.host, compute.hypervisor_hostname)
        if key in busy or any(i.task_state for i, _c in by_node.get(key, ())):
            continue
        _books(report, cell, compute, by_node.get(key, ()))
    return services


def _moving(server):
    """Does the server still show a move (a task, or ``VERIFY_RESIZE``)?"""
    return server is not None and bool(server.task_state or
                                       server.vm_state == 'resized')


def _stale(report, cell, now, migration_age, migration, server):
    """A move older than ``migration_age`` that its server still shows.

    Or one whose server is at rest but which still holds an allocation
    (a resize the source's restart rolled back): placement's audit keeps
    it, as the move is under way for it. Once the server is reset (no
    task state, not ``resized``) and the move's allocation is deleted,
    a record left in a non-final status is history: Nova has no command
    to end it, and it holds nothing.
    """
    age = _age(now, migration)
    if age is None or age < migration_age:
        return
    if migration.status == 'finished' and server.vm_state == 'resized':
        repair = ['openstack server resize confirm %s  # or: openstack '
                  'server resize revert %s' % ((server.uuid,) * 2)]
    else:
        repair = ['openstack server set --state active %s  # once its '
                  'guest is known to run on its host (openstack server '
                  'show; the hypervisor\'s own listing)' % server.uuid
                  ] if _moving(server) else []
        repair.append('openstack resource provider allocation delete %s  # '
                      'what the move held; no service will finish it'
                      % migration.uuid)
        if _before_finish(migration):
            repair += _heal(server.uuid)
    report.add(STALE_MIGRATION, '%s migration %s for %d s, server %s/%s' % (
        migration.migration_type, migration.status, age, server.vm_state,
        server.task_state), repair, cell=cell, host=migration.source_compute,
        server=server.uuid, migration=migration.uuid)


#: a resize's or cold migration's statuses before the destination's
#: ``finish_resize`` gives the server its new flavor
_BEFORE_FINISH = ('pre-migrating', 'migrating', 'post-migrating')


def _before_finish(migration):
    """Did a stopped resize leave the server's allocation unlike its record?

    The conductor moved the server's allocation to the destination (the
    new flavor) before it asked the destination to prepare, and gave the
    source's to the migration. The record moves to the destination in the
    source's ``resize_instance``, and takes the new flavor only in the
    destination's ``finish_resize``. A resize that stopped before that
    leaves the server's own allocation on another host than its record or
    with another flavor, which neither the state reset nor the deleted
    allocation of the migration sets right.
    """
    return (migration.migration_type in ('resize', 'migration') and
            migration.status in _BEFORE_FINISH)


def _heal(server):
    return ['openstack resource provider allocation delete %s  # the '
            "server's own: the destination's, of the new flavor" % server,
            'nova-manage placement heal_allocations --instance %s  # '
            'made again from the server\'s flavor on its host' % server]


def _stuck(report, cell, ctxt, now, migration_age, instance):
    """A server left in a move's task state with no move under way.

    Or left ``resized`` (``VERIFY_RESIZE``) once its move is over: a
    compute killed in a confirm right after it saved ``confirmed``.

    A move that failed half-way (its migration ``error``, or none at all)
    and whose error handling did not run to the end (a compute killed, an
    exception raised in the rollback itself) leaves the task state set:
    Nova clears it only in the move's own code, so the server refuses
    every action but a delete or a state reset, and its node's books are
    not judged while it is there.
    """
    from nova import objects

    age = _age(now, instance)
    if age is None or age < migration_age:
        return
    migrations = objects.MigrationList.get_by_filters(
        ctxt, {'instance_uuid': instance.uuid})
    last = sorted(migrations, key=lambda m: m.created_at)[-1] if (
        migrations) else None
    detail = 'server %s/%s for %d s on %s, no move under way' % (
        instance.vm_state, instance.task_state, age, instance.host)
    if last is not None:
        detail += ' (last move: %s %s, %s -> %s)' % (
            last.migration_type, last.status, last.source_compute,
            last.dest_compute)
    name = symptom(instance.fault) if instance.fault is not None else None
    if name is not None:
        detail += '; %s: %s' % (name, instance.fault.message)
    report.add(STUCK_SERVER, detail,
               ['openstack server set --state active %s  # once its guest '
                'is known to run on %s (openstack server show; the '
                'hypervisor\'s own listing)' % (instance.uuid, instance.host)],
               cell=cell, host=instance.host, node=instance.node,
               server=instance.uuid,
               migration=last.uuid if last is not None else None,
               bug=(BUG_BY_ACTION.get(_LAST_ACTION_BY_TYPE.get(
                   last.migration_type)) if last is not None and
                   name is not None else None))


#: a migration's type -> the instance action it belongs to
_LAST_ACTION_BY_TYPE = {'live-migration': 'live-migration',
                        'resize': 'resize', 'migration': 'migrate',
                        'evacuation': 'evacuate'}


def _error_server(report, cell, ctxt, instance):
    from nova import objects

    name = symptom(instance.fault)
    if name is None:
        return
    action = None
    actions = objects.InstanceActionList.get_by_instance_uuid(
        ctxt, instance.uuid)
    if actions:
        action = sorted(actions, key=lambda a: a.start_time)[-1].action
    migrations = objects.MigrationList.get_by_filters(
        ctxt, {'instance_uuid': instance.uuid})
    last = sorted(migrations, key=lambda m: m.created_at)[-1] if (
        migrations) else None
    detail = '%s in %s: %s' % (name, action or 'unknown action',
                               instance.fault.message)
    if last is not None:
        detail += ' (last move: %s %s, %s -> %s)' % (
            last.migration_type, last.status, last.source_compute,
            last.dest_compute)
    report.add(ERROR_SERVER, detail,
               ['openstack server set --state active %s' % instance.uuid]
               + _migrate_and_confirm(instance.uuid),
               cell=cell, host=instance.host, node=instance.node,
               server=instance.uuid,
               migration=last.uuid if last is not None else None,
               bug=BUG_BY_ACTION.get(action))


def _shared_pcpus(report, cell, host, node, held):
    owners = {}
    for instance, cpus in held:
        for cpu in cpus:
            owners.setdefault(cpu, []).append(instance.uuid)
    shared = {}
    for cpu, servers in owners.items():
        if len(servers) > 1:
            shared.setdefault(tuple(sorted(servers)), []).append(cpu)
    for servers, cpus in sorted(shared.items()):
        report.add(SHARED_PCPU,
                   'dedicated CPU(s) %s pinned by %d servers: %s' % (
                       sorted(cpus), len(servers), ', '.join(servers)),
                   _migrate_and_confirm(servers[-1]),
                   cell=cell, host=host, node=node, server=servers[-1],
                   bug='1879878')


def _books(report, cell, compute, held):
    from nova import objects

    if not compute.numa_topology:
        return
    topology = objects.NUMATopology.obj_from_db_obj(compute.numa_topology)
    books = set()
    for numa_cell in topology.cells:
        books.update(numa_cell.pinned_cpus or ())
    guests = set()
    for _instance, cpus in held:
        guests.update(cpus)
    if books == guests:
        return
    notes = []
    if guests - books:
        notes.append('pinned by servers but free in the books: %s'
                     % sorted(guests - books))
    if books - guests:
        notes.append('pinned in the books, held by no server: %s'
                     % sorted(books - guests))
    report.add(BOOKS_WRONG,
               'the node\'s NUMA books are frozen (%s); its periodic task '
               'has not rebuilt them, last saved %s' % (
                   '; '.join(notes), compute.updated_at),
               ['restart nova-compute on %s' % compute.host],
               cell=cell, host=compute.host,
               node=compute.hypervisor_hostname)


def check_periodic(report, status_rows):
    """Findings from the status endpoints: failing tasks, degraded fixes."""
    answered = 0
    for row in status_rows:
        if not row['reachable']:
            # down, or on a broker that is down: not known to be well
            report.cannot_read('status endpoint of %s' % row['host'],
                               row['error'])
            continue
        nodes = row.get('periodic_by_node')
        if nodes is None:
            continue
        answered += 1
        for node, entry in sorted(nodes.items()):
            if entry.get('outcome') != 'failed':
                continue
            error = entry.get('error') or ''
            report.add(
                PERIODIC_FAILING,
                '%d run(s) in a row failed, last at %s: %s; last good run %s'
                % (entry.get('failed_in_a_row') or 0, entry.get('at'), error,
                   entry.get('last_ok_at') or 'never'),
                ['restart nova-compute on %s once the servers sharing its '
                 'CPUs are moved' % row['host']],
                cell=row.get('cell'), host=row['host'], node=node,
                bug='1879878' if 'Pinning' in error else None)
        for period in row.get('degraded') or ():
            _degraded_finding(report, row, period)
    report.checked.append('status endpoints: %d of %d host(s) report their '
                          'periodic task' % (answered, len(status_rows)))


def _degraded_finding(report, row, period):
    """A ``degraded-fix`` finding for one period a status row reports."""
    host = row['host']
    if period['fix'] == ROLLBACK_WAIT_FIX:
        # the live migration rollback's bounded wait (1894095)
        message = (
            '%s could not %s: %d rollback(s) outlasted it since %s, last '
            'at %s (%s); the source may have booked the destination\'s '
            'resources for such an instance until its rollback ended' % (
                period['fix'], period['what'], period['count'],
                period['since'], period.get('last_at'),
                period.get('reason')))
        repairs = [
            'read in the log of nova-compute on %s why the live migration '
            'rollback took that long (the driver\'s clean-up of the '
            'destination); [DEFAULT] rpc_response_timeout there bounds the '
            'wait (half of it)' % host,
            'nova-revert-lock damage  # again after the source\'s next '
            'periodic task: wrong books of the instance show there',
            'nova-revert-lock status --host %s  # DEGRADED empty: the next '
            'rollback that ends within the wait ends it' % host]
        bug = '1894095'
    else:
        message = (
            '%s cannot %s: %d failed read(s) since %s, last at %s (%s); '
            'the node counts as upstream does meanwhile' % (
                period['fix'], period['what'], period['count'],
                period['since'], period.get('last_at'),
                period.get('reason')))
        repairs = [
            'make the conductor, RabbitMQ and the database reachable from '
            '%s (its log says which read fails)' % host,
            'nova-revert-lock status --host %s  # DEGRADED empty: the next '
            'good read ends it' % host]
        bug = None
    report.add(DEGRADED_FIX, message, repairs, cell=row.get('cell'),
               host=host, node=period['node'], bug=bug)


def nova_manage():
    """The nova-manage of the Nova this Python runs."""
    here = os.path.join(os.path.dirname(sys.executable), 'nova-manage')
    return here if os.path.exists(here) else 'nova-manage'


def has_placement_audit():
    from nova.cmd import manage
    return hasattr(manage.PlacementCommands, 'audit')


def check_placement(report, config_files, timeout):
    """``nova-manage placement audit --verbose`` (never ``--delete``)."""
    if not has_placement_audit():
        report.cannot_read('placement allocations', RuntimeError(
            'this release\'s nova-manage has no placement audit (Ussuri '
            'brought it); not checked'))
        return
    command = [nova_manage()]
    for path in config_files or ():
        command += ['--config-file', path]
    command += ['placement', 'audit', '--verbose']
    try:
        done = subprocess.run(command, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, timeout=timeout,
                              universal_newlines=True)
    except (OSError, subprocess.TimeoutExpired) as e:
        report.cannot_read('placement allocations', e)
        return
    if done.returncode not in (0, 3):
        report.cannot_read('placement allocations', RuntimeError(
            '%s exited %d: %s' % (' '.join(command[:1] + command[-3:]),
                                  done.returncode,
                                  done.stdout.strip()[-300:])))
        return
    found = 0
    for line in done.stdout.splitlines():
        match = _AUDIT_LINE.search(line)
        if match and _aborted_live_migration(report, match):
            found += 1
        elif match:
            found += 1
            report.add(ORPHANED_ALLOCATION,
                       'placement allocations of %s on provider %s, which '
                       'is no server there and no move under way: %s' % (
                           match.group('consumer'),
                           match.group('provider'),
                           match.group('allocations')),
                       ['nova-manage placement audit --verbose --delete '
                        '--resource_provider %s' % match.group('provider')],
                       server=match.group('consumer'))
    report.checked.append('placement: nova-manage placement audit, %d '
                          'orphaned allocation(s)' % found)


def _aborted_live_migration(report, match):
    """Name an orphan of a live migration aborted while queued.

    Bug 1949808: its migration keeps the source's allocation and its
    server the destination's, while the server runs on the source (in
    task state ``migrating``). Deleting either as the audit would leaves
    the server without its allocation: move it back instead.

    :returns: True if the consumer is such a migration or its server
    """
    consumer = match.group('consumer')
    found = report.cancelled_live_migrations.get(consumer)
    migration = consumer
    if found is None:
        for uuid, item in sorted(report.cancelled_live_migrations.items()):
            if item[1] == consumer:
                found, migration = item, uuid
                break
    if found is None:
        return False
    cell, server, source, dest = found
    what = ('the cancelled live migration %s' % migration
            if consumer == migration else 'server %s' % server)
    report.add(
        ORPHANED_ALLOCATION,
        'placement allocations of %s on provider %s: %s; live migration '
        '%s -> %s aborted while queued, its allocations never given back '
        '(server %s runs on %s)' % (what, match.group('provider'),
                                    match.group('allocations'), source,
                                    dest, server, source),
        # NOTE: heal_allocations skips a server in a task state: the
        # state first.
        ['openstack server set --state active %s  # if still MIGRATING '
         '(task state migrating); only once its guest is known to run on '
         '%s' % (server, source),
         'openstack resource provider allocation delete %s  # the aborted '
         'migration\'s hold on %s' % (migration, source),
         'openstack resource provider allocation delete %s  # the server\'s '
         'allocation is %s\'s' % (server, dest),
         'nova-manage placement heal_allocations --instance %s  # its '
         'allocation on %s again' % (server, source),
         'openstack port list --server %s  # then, for each port, delete '
         'its INACTIVE binding: DELETE /v2.0/ports/<port>/bindings/%s'
         % (server, dest)],
        cell=cell, host=source, server=server, migration=migration,
        bug=ABORTED_LIVE_MIGRATION_BUG)
    return True


def collect(config_files, timeout=10.0, migration_age=3600.0,
            placement_timeout=300.0, now=None):
    """The damage report of the cloud the configuration files describe."""
    conf = audit_targets.load_nova_config(config_files)
    now = now or datetime.datetime.now(datetime.timezone.utc)
    report = Report()
    targets, rows = audit_targets.targets_from_cells(
        conf, lambda name, cctxt: check_cell(report, name, cctxt, now,
                                             migration_age))
    for row in rows:
        report.cannot_read('cell %s' % row['cell'], row['error'])
    check_periodic(report, query.query(conf, targets, timeout)
                   if targets else [])
    check_placement(report, config_files, placement_timeout)
    return report
