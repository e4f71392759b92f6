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

"""Give back what a queued live migration holds when it is aborted.

Nova bugs 1949808 and 1960412, siblings of bug 1879878 in what they do
to a host's books. Runs on the source host.

With ``max_concurrent_live_migrations`` reached, the source queues a
live migration (status ``queued``, then ``preparing``) after the
conductor has already made the migration consumer hold the allocation
on the destination and, with Neutron port binding extended, bound the
ports INACTIVE to the destination. Aborting it while it is queued
cancels the queued future and marks the migration ``cancelled``, and
nothing else: ``_do_live_migration`` never runs, so nothing rolls back.
The destination's placement allocation leaks (held by a migration no
longer in progress, never counted by the tracker again), the INACTIVE
port bindings stay, and the server stays in task state ``migrating``,
which blocks every further action on it.

Upstream fixed it in 219520d9ce (25.0.0; backported to 24.1.1 and the
wallaby-eol tip). The mixin does what that change does, in the branch
where the queued future was cancelled: the allocation goes back to the
instance (``_revert_allocation``), the destination's port bindings are
torn down (a failure to delete them is logged, as upstream logs it, not
raised), the task state is reset, and then the migration is
``cancelled``. The other branches (running, or already being prepared)
are upstream's.
"""

from nova.compute import manager as nova_manager
from nova.compute import task_states
from nova.compute import utils as compute_utils
from nova import exception
from nova import objects
from nova.objects import fields
from oslo_log import log as logging
from oslo_utils import excutils

from nova_revert_lock.mixins import base

LOG = logging.getLogger(__name__)


class LiveMigrationAbortQueuedMixin(object):
    """Manager side: ``live_migration_abort`` that cleans up the queued."""

    @nova_manager.wrap_exception()
    @nova_manager.wrap_instance_event(prefix='compute')
    @nova_manager.wrap_instance_fault
    def live_migration_abort(self, context, instance, migration_id):
        """Abort a live migration, queued or in progress.

        :param context: Security context
        :param instance: The instance that is being migrated
        :param migration_id: ID of the live migration
        """
        self._notify_about_instance_usage(
            context, instance, 'live.migration.abort.start')
        compute_utils.notify_about_instance_action(
            context, instance, self.host,
            action=fields.NotificationAction.LIVE_MIGRATION_ABORT,
            phase=fields.NotificationPhase.START)
        # NOTE: three cases, as upstream: still queued and cancelled (the
        # cleanup below); queued but its _do_live_migration already
        # started (it finds itself popped and rolls back); not queued any
        # more, so running: the driver aborts it.
        try:
            migration, future = (
                self._waiting_live_migrations.pop(instance.uuid))
            if future and future.cancel():
                self._nrl_cancel_queued(context, instance, migration)
        except KeyError:
            migration = objects.Migration.get_by_id(context, migration_id)
            if migration.status != 'running':
                raise exception.InvalidMigrationState(
                    migration_id=migration_id, instance_uuid=instance.uuid,
                    state=migration.status, method='abort live migration')
            self.driver.live_migration_abort(instance)
        self._notify_live_migrate_abort_end(context, instance)

    def _nrl_cancel_queued(self, context, instance, migration):
        """Undo what the conductor did for a migration that never ran.

        The conductor moved the allocation to the destination (the
        migration consumer holds it) and bound the ports there INACTIVE;
        the API set the task state. _do_live_migration will not run, so
        nothing else gives them back.
        """
        LOG.info('Live migration %s aborted while queued: giving back its '
                 'allocation and the port bindings on %s',
                 migration.uuid, migration.dest_compute, instance=instance)
        self._revert_allocation(context, instance, migration)
        try:
            self.network_api.setup_networks_on_host(
                context, instance, host=migration.dest_compute,
                teardown=True)
        except exception.PortBindingDeletionFailed as e:
            # NOTE: not critical: the INACTIVE bindings do no harm but
            # clutter; the operator can delete them in Neutron.
            LOG.error('Network cleanup failed for destination host %s '
                      'after aborting a queued live migration. You may '
                      'need to clean up resources in the network service '
                      'manually. Error: %s', migration.dest_compute, e,
                      instance=instance)
        except Exception:
            with excutils.save_and_reraise_exception():
                LOG.exception('An error occurred while cleaning up the '
                              'network after aborting a queued live '
                              'migration.', instance=instance)
        instance.task_state = None
        instance.save(expected_task_state=[task_states.MIGRATING])
        self._set_migration_status(migration, 'cancelled')


# NOTE: one implementation: live_migration_abort is the same from 20.0.0
# to 24.1.0.
SPEC = base.MixinSpec('live_migration_abort_queued', base.Implementation(
    manager=LiveMigrationAbortQueuedMixin))
