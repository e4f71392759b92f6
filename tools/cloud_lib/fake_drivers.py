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

"""The cloud's compute driver: Nova's live-migrating fake, NUMA-aware.

Nova loads ``compute_driver`` from under ``nova.virt`` only; the cloud's
virtualenv carries a ``.pth`` file (see :mod:`cloud_lib.driver_alias`)
that makes ``nova.virt.nrl_cloud`` this module. Nova's own files are not
touched.

``NumaLiveMigrateDriver`` is Nova's ``fake.FakeLiveMigrateDriver`` (a
live migration is held for up to 5 s and, when aborted meanwhile, ends
with the rollback) whose two ends also say that they support NUMA-aware
live migration, as the libvirt driver does from Train on. The
destination then claims the server's resources for the live migration
(a migration context, ``live_migration_claim``), and the rollback drops
that claim with ``drop_move_claim_at_destination``: the path of bug
1894095, which ``live_migration_rollback`` replaces.

A live migration asked for as a block migration (``block_migration:
true`` from the API) is one between computes that share no storage, as
in a cloud of local disks: the source then has the destination clean up
after a rollback (``rollback_live_migration_at_destination``, cast
before the claim is dropped), which a migration on shared storage skips.
Nothing is copied; only Nova's bookkeeping follows the storage.
"""

from nova.virt import fake


class NumaLiveMigrateDriver(fake.FakeLiveMigrateDriver):

    def check_can_live_migrate_destination(self, *args, **kwargs):
        data = super(NumaLiveMigrateDriver,
                     self).check_can_live_migrate_destination(*args,
                                                              **kwargs)
        if 'dst_supports_numa_live_migration' in data.fields:
            data.dst_supports_numa_live_migration = True
        if data.obj_attr_is_set('block_migration') and data.block_migration:
            data.is_shared_instance_path = False
            data.is_shared_block_storage = False
        return data

    def check_can_live_migrate_source(self, context, instance,
                                      dest_check_data,
                                      block_device_info=None):
        data = super(NumaLiveMigrateDriver,
                     self).check_can_live_migrate_source(
            context, instance, dest_check_data, block_device_info)
        if ('dst_supports_numa_live_migration' in data and
                data.dst_supports_numa_live_migration):
            data.src_supports_numa_live_migration = True
        return data
