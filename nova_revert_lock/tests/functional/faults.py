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

"""Fault injection and outcome recording for the reliability tests.

A :class:`FaultPoint` names one step of the critical sections the fix adds
(``drop_move_claim_at_source`` on confirm, ``drop_move_claim_at_dest`` on
revert) by what happens there, not by the code that does it, so the very
same point exists on plain Nova (whose steps are the same, in a slightly
different order and without the lock). That is what lets every fault test
run twice, with the extension and on plain Nova, and demand the same end.

:class:`FaultInjector` arms one point at a time; it fires once, in the
greenthread that runs the operation on the faulted host, and disarms.

:class:`OutcomeMixin` waits for the failed operation to settle, checks
that ``COMPUTE_RESOURCE_SEMAPHORE`` is free (a periodic task on every host
finishes within a bound), and records what an operator would see.
"""

import time

import eventlet
from nova import exception as nova_exception
from nova import objects
from nova.tests.functional.api import client
from oslo_db import exception as db_exception
import oslo_messaging

from nova_revert_lock import sections
from nova_revert_lock.tests.functional import hooks

#: seconds a periodic task may take once the lock is free
PERIODIC_BOUND = 20
#: seconds an operation may take to settle
SETTLE_BOUND = 30


class Operation(object):
    """One way to finish a resize, as the tests drive it through the API.

    :ivar name: short name, used in test ids
    :ivar action: the server action posted to the API
    :ivar final_status: the migration status its critical section sets
    :ivar role: which end runs the critical section (``'source'`` or
        ``'dest'``)
    """

    def __init__(self, name, action, final_status, role):
        self.name = name
        self.action = action
        self.final_status = final_status
        self.role = role

    def faulted_host(self, migration):
        if self.role == 'source':
            return migration.source_compute
        return migration.dest_compute


CONFIRM = Operation('confirm', 'confirmResize', 'confirmed', 'source')
REVERT = Operation('revert', 'revertResize', 'reverted', 'dest')


class FaultPoint(object):
    """A step of a critical section, and the error injected there.

    :ivar name: short name, used in test ids
    :ivar target: what fails: ``'migration.save'``, ``'placement'`` (the
        report client call of the claim drop's ``_update``),
        ``'drop_migration_context'``, ``'revert_migration_context'``,
        ``'instance.save'``
    :ivar error: callable returning the exception to raise
    :ivar after: for ``migration.save``: the write reaches the database and
        only the reply is lost (a conductor timeout)
    :ivar inside: the step runs inside the critical section (else right
        after it)
    :ivar expected: dict of the outcome Nova gives (see
        :meth:`OutcomeMixin.snapshot`); the same for plain Nova and the fix
    :ivar upstream: changes to ``expected`` where the installed Nova
        carries upstream's fix (whose steps run in another order)
    """

    def __init__(self, name, target, error, expected, after=False,
                 inside=True, upstream=None):
        self.name = name
        self.target = target
        self.error = error
        self.after = after
        self.inside = inside
        self.expected = expected
        self.upstream = upstream or {}

    def expected_on(self, upstream_fixed):
        """The expected outcome on this Nova."""
        expected = dict(self.expected)
        if upstream_fixed:
            expected.update(self.upstream)
        return expected

    def __repr__(self):
        return '<FaultPoint %s>' % self.name


def messaging_timeout():
    return oslo_messaging.MessagingTimeout(
        'injected: no reply from conductor')


def db_error():
    return db_exception.DBError('injected: database went away')


def placement_failure():
    return nova_exception.ResourceProviderUpdateFailed(
        url='/resource_providers/injected', error='injected: 503')


def task_state_error():
    return nova_exception.UnexpectedTaskStateError(
        instance_uuid='injected', expected='injected', actual='injected')


def nova_error():
    return nova_exception.NovaException('injected: migration context')


class FaultInjector(object):
    """Arm one :class:`FaultPoint`; it fires once on the faulted host.

    Installed with ``hooks.wrap`` on top of whatever is already
    stubbed (the race hooks), so both keep working.
    """

    def __init__(self, test):
        self.test = test
        self.point = None
        self.operation = None
        self.instance_uuid = None
        self.fired = []
        self._stepped = set()   # instance uuids past the context step
        self._install()

    def arm(self, point, operation, instance_uuid):
        self.point = point
        self.operation = operation
        self.instance_uuid = instance_uuid
        self._stepped.clear()

    def _armed(self, target, instance_uuid=None):
        if self.point is None or self.point.target != target:
            return False
        if instance_uuid is not None and instance_uuid != self.instance_uuid:
            return False
        return True

    def _fire(self):
        point, self.point = self.point, None
        self.fired.append(point.name)
        raise point.error()

    def _install(self):
        inj = self

        def migration_save(orig_migration_save, migration, *args, **kwargs):
            final = (inj.operation is not None and
                     'status' in migration.obj_what_changed() and
                     migration.status == inj.operation.final_status)
            if (final and inj._armed('migration.save',
                                     migration.instance_uuid)):
                if inj.point.after:
                    orig_migration_save(migration, *args, **kwargs)
                inj._fire()
            return orig_migration_save(migration, *args, **kwargs)

        def update_usage(orig_usage, rt, usage, nodename, sign=1):
            # NOTE: a decrement outside a periodic task is a claim drop:
            # the next placement update in this greenthread is the one the
            # drop's _update makes.
            current = eventlet.getcurrent()
            if sign < 0 and not getattr(current, 'nrl_periodic', False):
                current.nrl_drop_pending = True
            return orig_usage(rt, usage, nodename, sign=sign)

        def update_from_provider_tree(orig_uft, client, *args, **kwargs):
            current = eventlet.getcurrent()
            pending = getattr(current, 'nrl_drop_pending', False)
            current.nrl_drop_pending = False
            if pending and inj._armed('placement'):
                inj._fire()
            return orig_uft(client, *args, **kwargs)

        def drop_migration_context(orig_drop_ctx, instance, *args, **kwargs):
            if inj._armed('drop_migration_context', instance.uuid):
                inj._fire()
            inj._stepped.add(instance.uuid)
            return orig_drop_ctx(instance, *args, **kwargs)

        def revert_migration_context(orig_revert_ctx, instance, *args,
                                     **kwargs):
            if inj._armed('revert_migration_context', instance.uuid):
                inj._fire()
            inj._stepped.add(instance.uuid)
            return orig_revert_ctx(instance, *args, **kwargs)

        def instance_save(orig_instance_save, instance, *args, **kwargs):
            # The first save after the migration context step: inside the
            # critical section on revert, right after it on confirm.
            if (instance.uuid in inj._stepped and
                    inj._armed('instance.save', instance.uuid)):
                inj._fire()
            return orig_instance_save(instance, *args, **kwargs)

        for target, hook in (
                ('nova.objects.Migration.save', migration_save),
                ('nova.objects.Instance.save', instance_save),
                ('nova.objects.Instance.drop_migration_context',
                 drop_migration_context),
                ('nova.objects.Instance.revert_migration_context',
                 revert_migration_context),
                ('nova.compute.resource_tracker.ResourceTracker.'
                 '_update_usage', update_usage),
                ('nova.scheduler.client.report.SchedulerReportClient.'
                 'update_from_provider_tree', update_from_provider_tree)):
            hooks.wrap(self.test, target, hook)


class OutcomeMixin(object):
    """Settle, lock and outcome checks; use with base.RaceMixin."""

    def setUp(self):
        super(OutcomeMixin, self).setUp()
        self.stuck_periodics = []

    def wait_server(self, server_id, statuses=('ACTIVE',), timeout=None):
        """Wait until the server is in one of ``statuses``, no task."""
        deadline = time.time() + (timeout or SETTLE_BOUND)
        while True:
            server = self.admin_api.get_server(server_id)
            if (server['status'] in statuses and
                    server.get('OS-EXT-STS:task_state') is None):
                return server
            if time.time() > deadline:
                self.fail('server %s is %s/%s, not %s' % (
                    server_id, server['status'],
                    server.get('OS-EXT-STS:task_state'), statuses))
            eventlet.sleep(0.2)

    def wait_action_done(self, server_id, action, timeout=None):
        """Wait until every event of the last ``action`` has finished.

        The compute's decorators (fault, migration error, instance state)
        have all run by then, whatever state they left.
        """
        deadline = time.time() + (timeout or SETTLE_BOUND)
        base = '/servers/%s/os-instance-actions' % server_id
        while True:
            actions = [a for a in self.admin_api.api_get(base).body[
                'instanceActions'] if a['action'] == action]
            if actions:
                latest = sorted(actions, key=lambda a: a['start_time'])[-1]
                detail = self.admin_api.api_get('%s/%s' % (
                    base, latest['request_id'])).body['instanceAction']
                events = detail.get('events') or []
                if events and all(e.get('finish_time') for e in events):
                    return detail
            if time.time() > deadline:
                self.fail('%s of %s did not finish' % (action, server_id))
            eventlet.sleep(0.2)

    def bounded_periodics(self, hosts=None, bound=PERIODIC_BOUND):
        """Run each host's periodic in a greenthread, bounded in time.

        :returns: list of hosts whose periodic did not finish in time
            (so the lock is still held: the whole host would stall)
        """
        stuck = []
        for host in hosts or self.hosts:
            gt = eventlet.spawn(self.run_periodic, host)
            try:
                with eventlet.Timeout(bound):
                    gt.wait()
            except eventlet.Timeout:
                # NOTE: not killed: a greenthread killed while it queues
                # for a fair lock could leave the queue wedged. It is
                # left to finish (or to the test's timeout).
                stuck.append(host)
                self.stuck_periodics.append(gt)
        return stuck

    def assert_lock_free(self):
        self.assertEqual([], self.bounded_periodics(),
                         'COMPUTE_RESOURCE_SEMAPHORE still held')

    # -- what an operator sees ---------------------------------------------

    def truth(self):
        """vCPUs each host should count, from the database's view.

        Every instance counts on its ``host`` with its current flavor; in
        these tests no migration is left in progress.
        """
        usage = {h: 0 for h in self.hosts}
        for inst in objects.InstanceList.get_all(self.ctxt):
            if inst.host in usage:
                usage[inst.host] += inst.flavor.vcpus
        return usage

    def usage(self):
        return {h: self.vcpus_used(h) for h in self.hosts}

    def placement_vcpus(self):
        found = {}
        for host in self.hosts:
            rp = self._get_provider_uuid_by_host(host)
            found[host] = self._get_provider_usages(rp).get('VCPU', 0)
        return found

    def snapshot(self, server_id):
        """One failed operation's end, as an operator would read it."""
        server = self.admin_api.get_server(server_id)
        faults = objects.InstanceFaultList.get_by_instance_uuids(
            self.ctxt, [server_id])
        inst = objects.Instance.get_by_uuid(
            self.ctxt, server_id,
            expected_attrs=['flavor', 'migration_context'])
        return {
            'status': server['status'],
            'task_state': server.get('OS-EXT-STS:task_state'),
            'host': server['OS-EXT-SRV-ATTR:host'],
            'fault': bool(faults.objects),
            'migration': self._migration(server_id).status,
            'vcpus': inst.flavor.vcpus,
            # what the failure left for a later operation to trip on
            'stashed_flavors': (inst.old_flavor is not None,
                                inst.new_flavor is not None),
            'migration_context': inst.migration_context is not None,
        }

    def hard_reboot(self, server_id):
        """Hard reboot an ERROR server as an operator would.

        :returns: ``'ok'``, or ``'reset-state'`` when the API refused the
            reboot because of the task state the failure left (Nova's
            ``reverts_task_state`` keeps it on UnexpectedTaskStateError)
            and the operator had to reset the state first.
        """
        how = 'ok'
        body = {'reboot': {'type': 'HARD'}}
        try:
            self.admin_api.post_server_action(server_id, body)
        except client.OpenStackApiException as e:
            if getattr(e.response, 'status_code', None) != 409:
                raise
            how = 'reset-state'
            self.admin_api.post_server_action(
                server_id, {'os-resetState': {'state': 'error'}})
            self.admin_api.post_server_action(server_id, body)
        self.wait_server(server_id, ('ACTIVE',))
        return how


def stats_errors():
    return sections.snapshot()['critical_section_errors']
