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

"""Count an incoming resize with its new NUMA topology on the destination.

Nova bugs 1953359 and 1952915, siblings of bug 1879878. The source saves
``instance.host`` and ``node`` pointing at the destination before the
destination's ``finish_resize`` applies the migration context. A
destination ``update_available_resource`` in between counts the instance
with the *source's* pinning: the periodic task fails half way
(``CPUPinningInvalid``) or books the wrong pCPUs, and a revert then fails
to unpin (``CPUUnpinningInvalid``, ERROR).

The fix, as upstream's (32c1044d86, Nova 22.4.0, 23.2.0, 24.1.0,
25.0.0): the migration context of each instance with an incoming
migration listed for this host and node (from Victoria on, ``error``
ones too) is applied *in memory* before the node's instances are
counted. Affected Nova counts them before it reads the migrations: the
counting is deferred to ``_pair_instances_to_migrations``, which gets
upstream's list (first of the tracker mixins, it defers theirs too).
As upstream, a same-host resize counts its new topology.
"""

from oslo_log import log as logging

from nova_revert_lock.mixins import base

LOG = logging.getLogger(__name__)


class IncomingMigrationContextTracker(object):
    """Tracker side, in the periodic task's critical section: no lock."""

    _nrl_tracker_first = True

    #: (context, instances, nodename) of the deferred counting, or None
    _nrl_deferred = None

    def _update_usage_from_instances(self, context, instances, nodename):
        """Defer the counting; return all instances by uuid, as upstream."""
        self._nrl_deferred = (context, instances, nodename)
        return {instance.uuid: instance
                for instance in base.members(instances)}

    def _pair_instances_to_migrations(self, migrations, instance_by_uuid):
        """Apply the incoming contexts, count the instances, then pair."""
        deferred, self._nrl_deferred = self._nrl_deferred, None
        if deferred is not None:
            context, instances, nodename = deferred
            self._nrl_apply_incoming(migrations, instance_by_uuid, nodename)
            super(IncomingMigrationContextTracker,
                  self)._update_usage_from_instances(
                      context, instances, nodename)
        return super(IncomingMigrationContextTracker,
                     self)._pair_instances_to_migrations(
                         migrations, instance_by_uuid)

    def _nrl_apply_incoming(self, migrations, instance_by_uuid, nodename):
        for migration in migrations:
            instance = instance_by_uuid.get(migration.instance_uuid)
            if (instance is None or migration.dest_compute != self.host or
                    migration.dest_node != nodename):
                continue
            LOG.debug('Applying the migration context of incoming migration '
                      '%(migration)s (%(status)s) to count the instance on '
                      'node %(node)s', {'migration': migration.uuid,
                                        'status': migration.status,
                                        'node': nodename},
                      instance=instance)
            # NOTE: in memory only; finish_resize applies and saves it.
            instance.apply_migration_context()


# NOTE: one implementation: it uses the list each series' body reads.
SPEC = base.MixinSpec('incoming_migration_context', base.Implementation(
    tracker=IncomingMigrationContextTracker))
