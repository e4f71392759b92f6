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

Nova bugs 1953359 and 1952915, siblings of bug 1879878. Runs on the
destination host.

The source's ``resize_instance`` saves ``instance.host`` and
``instance.node`` pointing at the destination and casts ``finish_resize``
there; only the destination's ``finish_resize`` applies the migration
context, which replaces the instance's NUMA topology (and PCI devices) by
the ones the destination's resize claim chose. A periodic
``update_available_resource`` on the destination in between lists the
instance among the node's instances (by ``instance.host`` and ``node``)
and counts it with ``instance.numa_topology`` still the *source's*
pinning. Where that pinning does not fit the destination (its pCPUs are
used by another instance there) the periodic task fails with
``CPUPinningInvalid`` and stops half way, leaving the books inconsistent
until a periodic task outside the window; where it happens to fit, the
destination records the wrong pCPUs as pinned. A revert of such a resize
then fails to unpin (``CPUUnpinningInvalid``) and puts the instance in
ERROR.

The fix, as upstream's (32c1044d86, Nova 22.4.0, 23.2.0, 24.1.0,
25.0.0): before the node's instances are counted, the migration context
of each instance with an incoming, in-progress migration to this host
and node is applied *in memory*; the periodic task never saves the
instance, so nothing is written. Upstream reads the node's instances,
then its migrations, applies the contexts, and only then counts the
instances, the migrations read once for both. Affected Nova reads the
instances, counts them (``_update_usage_from_instances``), then reads the
migrations and pairs them with the instances
(``_pair_instances_to_migrations``). This mixin moves the counting to
where upstream's fix has it, without a read of its own:
``_update_usage_from_instances`` returns the instances by uuid, as
upstream's does, and counts nothing yet; ``_pair_instances_to_migrations``,
which receives the list upstream's body read, applies the contexts,
counts the instances (the rest of the chain: upstream's method and any
mixin extending it), then pairs. The tracker class places it first, so
that every other extension of the counting runs at that moment too
(``_nrl_tracker_first``).

The condition is upstream's, to the letter: the instance is one of the
node's instances, and a migration of it that the periodic task lists for
this host and node (``MigrationList.get_in_progress_by_host_and_node``
on Train and Ussuri, ``get_in_progress_and_error`` from Victoria on,
where it lists ``error`` migrations too) has this host and node as its
destination. So a resize to the same host counts its
new topology while it is in progress, as upstream does, and an instance
back on its source after a revert, its migration context not dropped yet,
is counted as it is: its migration is ``reverted``, not in progress.

What it replaces and relies on: ``fixes.FIXES['incoming_migration_context']``.
"""

from oslo_log import log as logging

from nova_revert_lock.mixins import base

LOG = logging.getLogger(__name__)


class IncomingMigrationContextTracker(object):
    """Tracker side: apply incoming migration contexts before counting.

    Both methods run inside the periodic task's critical section
    (upstream's ``_update_available_resource`` calls them under
    ``COMPUTE_RESOURCE_SEMAPHORE``), so neither takes a lock.
    """

    #: before every other tracker mixin: the counting it defers is theirs
    #: too (nova_revert_lock.composition)
    _nrl_tracker_first = True

    #: (context, instances, nodename) of the counting deferred until the
    #: migrations are read, or None
    _nrl_deferred = None

    def _update_usage_from_instances(self, context, instances, nodename):
        """Defer the counting until the periodic task read the migrations.

        :returns: the node's instances by uuid, as upstream's method does
            (it lists every instance, counted or not)
        """
        self._nrl_deferred = (context, instances, nodename)
        return dict((instance.uuid, instance) for instance in instances)

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
            # NOTE: in memory only: the periodic task never saves the
            # instances it counts. finish_resize applies the same context
            # and saves it.
            instance.apply_migration_context()


# NOTE: one implementation for every series it was verified on: it uses
# the list each series' periodic body reads (from Victoria on, with the
# 'error' migrations).
SPEC = base.MixinSpec('incoming_migration_context', base.Implementation(
    tracker=IncomingMigrationContextTracker))
