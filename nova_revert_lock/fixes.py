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

"""What each fix is: one declaration per mixin, importing no Nova.

The defaults, tables, matrices and ``tools/survey_fingerprints.py`` (which
reads it without Nova) derive from :data:`FIXES`; see "Where things are"
in doc/source/reference/architecture.rst. Each fix is an entry point of
:data:`NAMESPACE` in ``setup.cfg`` (a unit test keeps the two equal).
"""

import collections

#: the stevedore namespace of the mixins (``setup.cfg``)
NAMESPACE = 'nova_revert_lock.compute_mixins'

#: A fix of bug 1879878 itself: where it cannot apply the activation is
#: refused, since a host with half of it is not protected.
CORE = 'core'
#: Fixes what upstream left open, also on a Nova with upstream's fix.
BEYOND_UPSTREAM = 'beyond-upstream'
#: Fixes a sibling race of bug 1879878.
FAMILY = 'family'
#: Extras (every kind but CORE) are admitted one by one: whatever keeps
#: one out leaves it out alone, with a warning.
KINDS = (CORE, BEYOND_UPSTREAM, FAMILY)

_CM = 'nova.compute.manager:ComputeManager.'
_RT = 'nova.compute.resource_tracker:ResourceTracker.'
_INSTANCE = 'nova.objects.instance:Instance.'
_XCELL = 'nova.conductor.tasks.cross_cell_migrate:'
_STATS = 'nova.compute.stats:Stats.'
_MIGRATIONS = 'nova.objects.migration:MigrationList.'
_INSTANCES = 'nova.objects.instance:InstanceList.'
_VM_STATES = 'nova.compute.vm_states:'

#: One part of an upstream fix (:mod:`nova_revert_lock.guard.recognise`):
#: function ``ref``, or a method of its class it reaches through ``self``,
#: ``does`` (``calls``, ``assigns``, ``refers``, ``decorated``) ``name``.
Does = collections.namedtuple('Does', ['ref', 'does', 'name'])

#: One fix. See :func:`declare` for the fields.
Fix = collections.namedtuple('Fix', [
    'name', 'summary', 'kind', 'bugs', 'upstream', 'replaces', 'relies_on',
    'fixed_when', 'applies_from', 'verified'])


def declare(name, summary, kind, replaces, relies_on=(), bugs=(),
            upstream=None, fixed_when=(), applies_from=None, verified=None):
    """One :class:`Fix`.

    :param name: the entry point name, used in ``[revert_lock] mixins``
    :param summary: one line for ``nova-revert-lock check``
    :param kind: one of :data:`KINDS`
    :param replaces: the upstream functions the mixin overrides (must exist)
    :param relies_on: the upstream functions whose behaviour it relies on
        (fingerprinted too; absent where surveyed releases lack it)
    :param bugs: the Launchpad bugs it fixes (none: beyond upstream)
    :param upstream: upstream's fix (commit or Change-Id), or None
    :param fixed_when: the parts of upstream's fix (:class:`Does`); where
        all hold, the mixin stands aside. Anchors are entry points upstream
        does not rename, so that a body moved into a helper is recognised.
    :param applies_from: ``(ref, release)``: the function that came with
        the feature fixed, and its first release; without it, not applicable
    :param verified: {series: (release labels or closed ranges of them)}:
        the code each series' implementation was verified on, and the only
        code the guard applies it to.
    """
    assert kind in KINDS, kind
    return Fix(name, summary, kind, tuple(bugs), upstream, tuple(replaces),
               tuple(relies_on), tuple(fixed_when), applies_from,
               dict(verified or {}))


def _calls_under_lock(entry, tracker_method):
    """Upstream's 1879878 fix: ``entry`` calls locked ``tracker_method``."""
    return (Does(entry, 'calls', tracker_method),
            Does(_RT + tracker_method, 'decorated', 'synchronized'),
            Does(_RT + tracker_method, 'assigns', 'status'),
            Does(_RT + tracker_method, 'calls', '_drop_move_claim'))


_1879878 = dict(kind=CORE, bugs=('1879878',),
                upstream='I26b050c4 (Victoria), I29d6f4a7 (Ussuri 21.1.1)')

_TRAIN_USSURI = {
    'train': ('20.0.0-20.6.1', 'train-eol'),
    'ussuri': ('21.0.0-21.1.2',),
}

FIXES = collections.OrderedDict((fix.name, fix) for fix in (
    declare(
        'confirm',
        'confirm (source): status, claim drop and migration context under '
        'COMPUTE_RESOURCE_SEMAPHORE',
        replaces=(_CM + '_confirm_resize',),
        relies_on=(_CM + 'confirm_resize',
                   _RT + 'drop_move_claim',
                   _RT + '_update_usage_from_migrations'),
        fixed_when=_calls_under_lock(_CM + 'confirm_resize',
                                     'drop_move_claim_at_source'),
        verified=_TRAIN_USSURI, **_1879878),
    # _finish_revert_resize: finish_revert_resize's body, train-eol, 21.1.1+
    declare(
        'revert',
        'revert (destination): status, claim drop and migration context '
        'under COMPUTE_RESOURCE_SEMAPHORE',
        replaces=(_CM + 'revert_resize',),
        relies_on=(_CM + 'finish_revert_resize',
                   _CM + '_finish_revert_resize',
                   _RT + 'drop_move_claim',
                   _RT + '_update_usage_from_migrations',
                   _INSTANCE + 'revert_migration_context'),
        fixed_when=_calls_under_lock(_CM + 'revert_resize',
                                     'drop_move_claim_at_dest'),
        verified=_TRAIN_USSURI, **_1879878),
    # Cross-cell: relied on, the conductor tasks around the compute calls.
    declare(
        'cross_cell_confirm',
        'cross-cell confirm (source cell): status, claim drop and '
        'migration context under COMPUTE_RESOURCE_SEMAPHORE',
        replaces=(_CM + '_confirm_snapshot_based_resize_at_source',),
        relies_on=(_CM + 'confirm_snapshot_based_resize_at_source',
                   _RT + 'drop_move_claim',
                   _RT + '_update_usage_from_migrations',
                   _XCELL + 'ConfirmResizeTask._cleanup_source_host',
                   _XCELL + 'ConfirmResizeTask._execute'),
        fixed_when=_calls_under_lock(
            _CM + 'confirm_snapshot_based_resize_at_source',
            'drop_move_claim_at_source'),
        applies_from=(_CM + 'confirm_snapshot_based_resize_at_source',
                      '21.0.0'),
        verified={'ussuri': ('21.0.0-21.1.2',)}, **_1879878),
    declare(
        'cross_cell_revert',
        'cross-cell revert (target cell): status, claim drop and migration '
        'context under COMPUTE_RESOURCE_SEMAPHORE; stashed flavors kept '
        'until the source is done',
        replaces=(_CM + '_revert_snapshot_based_resize_at_dest',
                  _CM + 'finish_revert_snapshot_based_resize_at_source',
                  _CM + '_finish_revert_snapshot_based_resize_at_source'),
        relies_on=(_CM + 'revert_snapshot_based_resize_at_dest',
                   _CM + '_set_instance_info',
                   _RT + 'drop_move_claim',
                   _RT + '_update_usage_from_migrations',
                   _INSTANCE + 'revert_migration_context',
                   _XCELL + 'RevertResizeTask._update_instance_in_source_cell',
                   _XCELL + 'RevertResizeTask._execute'),
        fixed_when=_calls_under_lock(
            _CM + 'revert_snapshot_based_resize_at_dest',
            'drop_move_claim_at_dest'),
        applies_from=(_CM + 'revert_snapshot_based_resize_at_dest',
                      '21.0.0'),
        verified={'ussuri': ('21.0.0-21.1.2',)}, **_1879878),
    declare(
        'source_window',
        'revert: count the instance on the source, not on the destination, '
        'until finish_revert_resize has brought it back (beyond upstream)',
        BEYOND_UPSTREAM,
        replaces=(_RT + '_update_available_resource',),
        relies_on=(_RT + '_pair_instances_to_migrations',
                   _RT + '_update_usage_from_migrations',
                   _RT + '_update_usage_from_migration',
                   _RT + '_update_usage_from_instance',
                   # destination side (Migration.get_by_id: not fingerprinted)
                   _RT + '_update_usage_from_instances',
                   _CM + 'revert_resize',
                   _CM + 'finish_revert_resize',
                   # where a resize from the node begins and ends
                   _CM + 'resize_instance',
                   _CM + 'confirm_resize',
                   # the look-up's own calls (through the conductor)
                   _MIGRATIONS + 'get_by_filters',
                   _INSTANCES + 'get_by_filters'),
        # No release closes the window; the stable series of patches/
        # (2025.1 on) do, without a service version change: the source's
        # periodic task looks up the migrations reverted away from it and
        # the destination remembers, in the critical section of the drop,
        # the claims its reverts gave back.
        fixed_when=(
            Does(_RT + '_update_available_resource', 'calls',
                 '_add_reverted_migrations'),
            Does(_RT + 'drop_move_claim_at_dest', 'refers',
                 'reverted_move_claims'),
            Does(_RT + '_update_usage_from_instances', 'refers',
                 'reverted_move_claims')),
        verified={
            'train': ('20.0.0-20.6.1', '20.6.1+patches', 'train-eol'),
            'ussuri': ('21.0.0-21.1.2', '21.1.0+patches', '21.2.4+patches'),
            'victoria': ('22.4.0',),
            # 25.3.0's code is 24.1.0-26.2.1's; 26.2.2's is 26.3.0's and
            # xena-eol's (fingerprint classes of the survey).
            'yoga': ('25.3.0',),
            'zed': ('26.2.2',),
            '2023.1': ('27.5.1',),
            '2025.1': ('31.3.1',),
            '2026.2': ('34.0.0',),
        }),
    declare(
        'resize_source_flavor',
        'resize (source): stash old_flavor in the save that moves the '
        'instance to the destination (bug 1944759)',
        FAMILY, bugs=('1944759',), upstream='b841e55321',
        replaces=(_CM + '_resize_instance',),
        relies_on=(_CM + 'resize_instance',
                   _CM + '_finish_resize',
                   _RT + '_update_usage_from_migrations',
                   _RT + '_update_usage_from_migration',
                   _RT + '_get_instance_type'),
        # The source's resize sets old_flavor itself, in the save that
        # hands the instance over (reading it is not the fix).
        fixed_when=(Does(_CM + 'resize_instance', 'assigns', 'old_flavor'),),
        # Tested on 20.6.1, 21.1.0, 21.1.2, 22.3.0, 23.1.0 and 24.0.0; the
        # ranges ship the same code (20.0.x's _resize_instance differs).
        verified={
            'train': ('20.1.0-20.6.1',),
            'ussuri': ('21.0.0-21.2.4',),
            'victoria': ('22.0.0-22.3.0',),
            'wallaby': ('23.0.0-23.1.0',),
            'xena': ('24.0.0',),
        }),
    declare(
        'incoming_migration_context',
        'resize (destination): count an incoming instance with its '
        'migration context applied (bugs 1953359, 1952915)',
        FAMILY, bugs=('1953359',), upstream='32c1044d86',
        replaces=(_RT + '_update_usage_from_instances',
                  _RT + '_pair_instances_to_migrations'),
        relies_on=(_RT + '_update_available_resource',
                   _RT + '_update_usage_from_instance',
                   _INSTANCE + 'apply_migration_context',
                   _CM + '_finish_resize'),
        fixed_when=(Does(_RT + 'update_available_resource', 'calls',
                         'apply_migration_context'),),
        # Tested on 20.6.1, 21.1.0, 21.1.2, 22.3.0, 23.1.0 and 24.0.0; the
        # ranges ship the same code.
        verified={
            'train': ('20.0.0-20.6.1', '20.6.1+patches', 'train-eol'),
            'ussuri': ('21.0.0-21.2.4', '21.1.0+patches'),
            'victoria': ('22.0.0-22.3.0',),
            'wallaby': ('23.0.0-23.1.0',),
            'xena': ('24.0.0',),
        }),
    # (Instance.drop_migration_context, called too, is wrapped at run time
    # by oslo.versionedobjects: the guard cannot fingerprint it live.)
    declare(
        'evacuate_under_lock',
        'evacuate (destination): host, node, migration context and status '
        'under COMPUTE_RESOURCE_SEMAPHORE (bug 1896463)',
        FAMILY, bugs=('1896463',), upstream='7675964af8',
        replaces=(_CM + 'rebuild_instance',),
        relies_on=(_CM + '_do_rebuild_instance_with_claim',
                   _CM + '_set_migration_status',
                   _RT + 'rebuild_claim',
                   _RT + 'delete_allocation_for_evacuated_instance',
                   _RT + '_update_usage_from_migrations',
                   _INSTANCE + 'apply_migration_context'),
        # rebuild_instance ends in the tracker's locked finish_evacuation,
        # which sets the host and the migration's status.
        fixed_when=(
            Does(_CM + 'rebuild_instance', 'calls', 'finish_evacuation'),
            Does(_RT + 'finish_evacuation', 'decorated', 'synchronized'),
            Does(_RT + 'finish_evacuation', 'assigns', 'host'),
            Does(_RT + 'finish_evacuation', 'assigns', 'status')),
        # Tested on 20.6.1, 21.1.0 and 21.1.2; the ranges ship the same
        # code. 22.0.0's rebuild_instance differs, untested: unknown there.
        verified={
            'train': ('20.0.0-20.6.1',),
            'ussuri': ('21.0.0-21.1.2',),
        }),
    declare(
        'live_migration_rollback',
        'live migration rollback (destination): the dropped claim stays '
        'uncounted, under COMPUTE_RESOURCE_SEMAPHORE, and the instance '
        'keeps its own NUMA topology (bug 1894095)',
        FAMILY, bugs=('1894095',),
        replaces=(_CM + 'drop_move_claim_at_destination',
                  _CM + 'rollback_live_migration_at_destination',
                  _RT + '_update_usage_from_migrations',
                  _RT + '_update_usage_from_migration'),
        relies_on=(_CM + '_rollback_live_migration',
                   _CM + '_get_nodename',
                   _RT + 'drop_move_claim',
                   _INSTANCE + 'apply_migration_context'),
        # No release carries it; patches/ does (train, ussuri,
        # ussuri-21.2.4, the stable series from 2025.1 on, master 0002):
        # the destination drops the claim in a locked tracker method that
        # skips an untracked migration and remembers the dropped claim,
        # which the periodic task leaves uncounted. The series from Ussuri
        # on also carry the source's half (the save back, and since
        # master 0006 the drop's wait for the rollback); it is not part
        # of what is recognised: Train's series has no wait (its source
        # drops the claim before it casts the rollback), and a
        # build of an earlier series, without the wait, is taken as
        # fixed all the same.
        fixed_when=(
            Does(_CM + 'drop_move_claim_at_destination', 'calls',
                 'drop_live_migration_claim_at_dest'),
            Does(_RT + 'drop_live_migration_claim_at_dest', 'decorated',
                 'synchronized'),
            Does(_RT + 'drop_live_migration_claim_at_dest', 'refers',
                 'dropped_live_migration_claims'),
            Does(_RT + 'drop_live_migration_claim_at_dest', 'refers',
                 'tracked_migrations'),
            Does(_RT + 'drop_live_migration_claim_at_dest', 'calls',
                 '_drop_move_claim'),
            Does(_RT + '_update_usage_from_migrations', 'refers',
                 'dropped_live_migration_claims')),
        # Tested on each; identical code counts too (see support matrix).
        verified={
            'train': ('20.6.1',),
            'ussuri': ('21.1.0', '21.1.2'),
            'victoria': ('22.3.0',),
            'wallaby': ('23.1.0',),
            'xena': ('24.0.0',),
            'yoga': ('25.3.0',),
            'zed': ('26.2.2',),
            '2025.1': ('31.3.1',),
            # 34.0.0 splits rollback_live_migration_at_destination (the
            # work moves to _do_rollback_live_migration_at_destination):
            # the wrapper's save back comes after both.
            '2026.2': ('34.0.0',),
        }),
    declare(
        'live_migration_abort_queued',
        'live migration abort (source): a queued migration cancelled '
        'gives back its allocation, dest port bindings and task state '
        '(bugs 1949808, 1960412)',
        FAMILY, bugs=('1949808',), upstream='219520d9ce',
        replaces=(_CM + 'live_migration_abort',),
        relies_on=(_CM + '_revert_allocation',
                   _CM + '_set_migration_status',
                   _CM + '_notify_live_migrate_abort_end'),
        # The cancelled branch gives the allocation back, tears the
        # destination's port bindings down and resets the task state.
        fixed_when=(
            Does(_CM + 'live_migration_abort', 'calls',
                 '_revert_allocation'),
            Does(_CM + 'live_migration_abort', 'calls',
                 'setup_networks_on_host'),
            Does(_CM + 'live_migration_abort', 'assigns', 'task_state')),
        # Tested on 20.6.1 and 21.1.0; 20.0.0 to 24.1.0 and the train,
        # ussuri and victoria eol tips ship the same code.
        verified={
            'train': ('20.6.1',),
            'ussuri': ('21.1.0',),
        }),
    declare(
        'unshelve_claim',
        'unshelve (destination): keep tracking the server while it spawns '
        '(bug 2025480)',
        FAMILY, bugs=('2025480',), upstream='f1dc4ec39b',
        replaces=(_RT + '_update_usage_from_instances',
                  _RT + '_update_usage_from_instance',
                  _STATS + 'update_stats_for_instance'),
        relies_on=(_CM + '_unshelve_instance',
                   _RT + 'instance_claim',
                   _STATS + '_extract_state_from_instance'),
        # All three places ask allow_resource_removal, which keeps a server
        # being spawned: a partial backport still loses the claim.
        fixed_when=(
            Does(_RT + '_update_usage_from_instances', 'calls',
                 'allow_resource_removal'),
            Does(_RT + '_update_usage_from_instance', 'calls',
                 'allow_resource_removal'),
            Does(_STATS + 'update_stats_for_instance', 'calls',
                 'allow_resource_removal'),
            Does(_VM_STATES + 'allow_resource_removal', 'refers',
                 'SPAWNING')),
        # Tested on 20.6.1, 21.1.0, 21.1.2, 22.3.0, 22.4.0, 23.1.0, 24.0.0
        # and 25.3.0 (whose code 24.2.0 to 26.2.1 ship too).
        verified={
            'train': ('20.6.1',),
            'ussuri': ('21.1.0', '21.1.2'),
            'victoria': ('22.3.0', '22.4.0'),
            'wallaby': ('23.1.0',),
            'xena': ('24.0.0',),
            'yoga': ('25.3.0',),
        }),
))

#: Every fix, in application order: ``[revert_lock] mixins``' default.
NAMES = tuple(FIXES)

#: The Launchpad bug -> the mixins that fix it, in the order reports list
#: them (``source_window`` fixes no reported bug).
BUGS = collections.OrderedDict()
for _fix in FIXES.values():
    for _bug in _fix.bugs:
        BUGS[_bug] = BUGS.get(_bug, ()) + (_fix.name,)
del _fix, _bug

#: The functions whose lock the fix must share: the periodic task, and
#: the claim drop whose body runs inside the new critical sections.
LOCK_REFS = (_RT + '_update_available_resource', _RT + 'drop_move_claim')


def is_extra(name):
    """True if ``name`` is admitted alone (every kind but :data:`CORE`)."""
    fix = FIXES.get(name)
    return fix is not None and fix.kind != CORE


def of_kind(kind):
    """The names of the fixes of ``kind``, in application order."""
    return tuple(name for name, fix in FIXES.items() if fix.kind == kind)


def fix_refs():
    """Every function a part of an upstream fix is anchored on."""
    return sorted({part.ref for fix in FIXES.values()
                   for part in fix.fixed_when})


def all_refs():
    """Every upstream function any mixin or the lock check looks at."""
    refs = set(LOCK_REFS)
    for fix in FIXES.values():
        refs.update(fix.replaces + fix.relies_on)
    return sorted(refs)
