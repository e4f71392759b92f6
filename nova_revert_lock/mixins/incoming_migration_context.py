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
instance, so nothing is written. Upstream does it in
``_update_available_resource``, which the ``source_window`` mixin already
replaces; this mixin extends ``_update_usage_from_instances`` instead,
which that body calls with the node's instances right before it counts
them, and then calls the method it overrides, so that both compose.

The condition is upstream's, to the letter: the instance is one of the
node's instances, and a migration of it that the periodic task lists for
this host and node (``MigrationList.get_in_progress_by_host_and_node``
on Train and Ussuri, ``get_in_progress_and_error`` from Victoria on,
where it lists ``error`` migrations too) has this host and node as its
destination. So a resize to the same host counts its
new topology while it is in progress, as upstream does, and an instance
back on its source after a revert, its migration context not dropped yet,
is counted as it is: its migration is ``reverted``, not in progress.

The in-progress migrations are read through a remotable object method
(the conductor, in a real nova-compute), and only when one of the node's
instances carries a migration context: a host with no move under way
pays nothing.

Upstream functions (``mixins.REFS['incoming_migration_context']``)
------------------------------------------------------------------

Replaces:

* ``ResourceTracker._update_usage_from_instances``

Relies on:

* ``ResourceTracker._update_available_resource``
* ``ResourceTracker._update_usage_from_instance``
* ``Instance.apply_migration_context``
* ``ComputeManager._finish_resize``
* ``MigrationList.get_in_progress_by_host_and_node``
* ``MigrationList.get_in_progress_and_error``
"""

from nova import objects
from oslo_log import log as logging

from nova_revert_lock.mixins import base

LOG = logging.getLogger(__name__)


class IncomingMigrationContextTracker(object):
    """Tracker side: apply incoming migration contexts before counting."""

    def _update_usage_from_instances(self, context, instances, nodename):
        """Apply the incoming migrations' contexts, then count as upstream.

        Runs inside the periodic task's critical section (upstream's
        ``_update_available_resource`` calls it under
        ``COMPUTE_RESOURCE_SEMAPHORE``), so it takes no lock itself.
        """
        candidates = self._nrl_incoming_candidates(instances, nodename)
        if candidates:
            self._nrl_apply_incoming(context, candidates, nodename)
        return super(IncomingMigrationContextTracker,
                     self)._update_usage_from_instances(
                         context, instances, nodename)

    def _nrl_incoming_candidates(self, instances, nodename):
        """uuid -> instance of the node's instances in the middle of a move.

        An instance without a migration context has nothing to apply, so
        a node where none has one reads no migrations. Which contexts to
        apply the migrations decide (:meth:`_nrl_apply_incoming`).
        """
        return dict((instance.uuid, instance) for instance in instances
                    if instance.obj_attr_is_set('migration_context') and
                    instance.migration_context is not None)

    def _nrl_listed_migrations(self, context, nodename):
        """The node's migrations, as the installed periodic task lists them.

        Train and Ussuri list the in-progress migrations.
        """
        return objects.MigrationList.get_in_progress_by_host_and_node(
            context, self.host, nodename)

    def _nrl_apply_incoming(self, context, candidates, nodename):
        migrations = self._nrl_listed_migrations(context, nodename)
        for migration in migrations:
            instance = candidates.get(migration.instance_uuid)
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


class VictoriaIncomingMigrationContextTracker(
        IncomingMigrationContextTracker):
    """Victoria to Xena: the periodic task lists ``error`` migrations too.

    Upstream's fix iterates over the list the periodic body reads, which
    from Victoria on is ``MigrationList.get_in_progress_and_error``: it
    applies the context of an incoming migration in ``error`` as well
    (a resize that failed on the destination before ``finish_resize``
    applied it), and so does this variant.
    """

    def _nrl_listed_migrations(self, context, nodename):
        return objects.MigrationList.get_in_progress_and_error(
            context, self.host, nodename)


class IncomingMigrationContextMixin(object):
    """Manager side: nothing to change.

    The destination's tracker subclass does the work.
    """


_IMPLEMENTATION = base.Implementation(
    manager=IncomingMigrationContextMixin,
    tracker=IncomingMigrationContextTracker)
_VICTORIA = base.Implementation(
    manager=IncomingMigrationContextMixin,
    tracker=VictoriaIncomingMigrationContextTracker)

SPEC = base.MixinSpec(
    name='incoming_migration_context',
    summary='resize (destination): count an incoming instance with its '
            'migration context applied (bugs 1953359, 1952915)',
    implementations={'train': _IMPLEMENTATION, 'ussuri': _IMPLEMENTATION,
                     'victoria': _VICTORIA, 'wallaby': _VICTORIA,
                     'xena': _VICTORIA})
