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

"""Compute manager mixins, one module per concern.

This package's __init__ does not import Nova: it names, for each mixin,
the upstream functions the mixin replaces and those whose behaviour it
relies on. The guard fingerprints these, and tools/survey_fingerprints.py
surveys them in released Nova wheels without importing Nova.

The mixins themselves are found through the stevedore namespace
:data:`NAMESPACE`; each entry point names a :class:`~.base.MixinSpec`.
"""

import collections

NAMESPACE = 'nova_revert_lock.compute_mixins'

_CM = 'nova.compute.manager:ComputeManager.'
_RT = 'nova.compute.resource_tracker:ResourceTracker.'
_INSTANCE = 'nova.objects.instance:Instance.'
_XCELL = 'nova.conductor.tasks.cross_cell_migrate:'
_STATS = 'nova.compute.stats:Stats.'
_MIGRATIONS = 'nova.objects.migration:MigrationList.'
_INSTANCES = 'nova.objects.instance:InstanceList.'

Refs = collections.namedtuple('Refs', ['replaces', 'relies_on'])

#: Upstream functions per mixin name.
REFS = collections.OrderedDict([
    ('confirm', Refs(
        replaces=(_CM + '_confirm_resize',),
        relies_on=(_CM + 'confirm_resize',
                   _RT + 'drop_move_claim',
                   _RT + '_update_usage_from_migrations'))),
    # NOTE: train-eol and Ussuri 21.1.1+ moved finish_revert_resize's body,
    # which gets the instance the critical section saved, to
    # _finish_revert_resize; a function relied on that a release lacks
    # matches the surveyed releases without it (MixinSpec.check).
    ('revert', Refs(
        replaces=(_CM + 'revert_resize',),
        relies_on=(_CM + 'finish_revert_resize',
                   _CM + '_finish_revert_resize',
                   _RT + 'drop_move_claim',
                   _RT + '_update_usage_from_migrations',
                   _INSTANCE + 'revert_migration_context'))),
    # Cross-cell resize (Ussuri and later). The conductor tasks are relied
    # on for what they do around the compute calls: ConfirmResizeTask sets
    # old_flavor on the source cell instance before calling the source and
    # hard-deletes it afterwards; RevertResizeTask calls the destination
    # with the target cell migration, hard-deletes the target cell records,
    # then calls the source with the source cell migration.
    ('cross_cell_confirm', Refs(
        replaces=(_CM + '_confirm_snapshot_based_resize_at_source',),
        relies_on=(_CM + 'confirm_snapshot_based_resize_at_source',
                   _RT + 'drop_move_claim',
                   _RT + '_update_usage_from_migrations',
                   _XCELL + 'ConfirmResizeTask._cleanup_source_host',
                   _XCELL + 'ConfirmResizeTask._execute'))),
    ('cross_cell_revert', Refs(
        replaces=(_CM + '_revert_snapshot_based_resize_at_dest',
                  _CM + 'finish_revert_snapshot_based_resize_at_source',
                  _CM + '_finish_revert_snapshot_based_resize_at_source'),
        relies_on=(_CM + 'revert_snapshot_based_resize_at_dest',
                   _CM + '_set_instance_info',
                   _RT + 'drop_move_claim',
                   _RT + '_update_usage_from_migrations',
                   _INSTANCE + 'revert_migration_context',
                   _XCELL + 'RevertResizeTask._update_instance_in_source_cell',
                   _XCELL + 'RevertResizeTask._execute'))),
    # Beyond upstream: the source keeps counting a reverting instance
    # until finish_revert_resize has put it back (mixins/source_window.py).
    ('source_window', Refs(
        replaces=(_RT + '_update_available_resource',),
        relies_on=(_RT + '_pair_instances_to_migrations',
                   _RT + '_update_usage_from_migrations',
                   _RT + '_update_usage_from_migration',
                   _RT + '_update_usage_from_instance',
                   # the destination's side (Migration.get_by_id, a
                   # remotable object call, is not fingerprinted)
                   _RT + '_update_usage_from_instances',
                   _CM + 'revert_resize',
                   _CM + 'finish_revert_resize',
                   # where a resize from the node begins and ends
                   _CM + 'resize_instance',
                   _CM + 'confirm_resize',
                   # the look-up's own calls (through the conductor)
                   _MIGRATIONS + 'get_by_filters',
                   _INSTANCES + 'get_by_filters'))),
    # Bug 1944759, a sibling race: the source stashes old_flavor in the
    # save that hands the instance to the destination
    # (mixins/resize_source_flavor.py). The periodic task counts an
    # outgoing migration from old_flavor; finish_resize on the destination
    # stashes the same flavor again.
    ('resize_source_flavor', Refs(
        replaces=(_CM + '_resize_instance',),
        relies_on=(_CM + 'resize_instance',
                   _CM + '_finish_resize',
                   _RT + '_update_usage_from_migrations',
                   _RT + '_update_usage_from_migration',
                   _RT + '_get_instance_type'))),
    # Bugs 1953359 and 1952915: the destination applies the migration
    # context of an incoming resize, in memory, before the periodic task
    # counts the node's instances (mixins/incoming_migration_context.py).
    # Affected Nova's periodic body lists the instances with their
    # migration context and counts them, without saving, before it reads
    # the migrations; the mixin counts them once that list is read, as
    # upstream's fix does. finish_resize applies the context for good.
    ('incoming_migration_context', Refs(
        replaces=(_RT + '_update_usage_from_instances',
                  _RT + '_pair_instances_to_migrations'),
        relies_on=(_RT + '_update_available_resource',
                   _RT + '_update_usage_from_instance',
                   _INSTANCE + 'apply_migration_context',
                   _CM + '_finish_resize'))),
    # Bug 1896463, a sibling race: the evacuation's destination moves the
    # instance onto itself, drops the migration context and marks the
    # migration done under the tracker's lock
    # (mixins/evacuate_under_lock.py). The periodic task reads the node's
    # instances, then its in-progress migrations. (Instance's remotable
    # drop_migration_context, called too, is wrapped at run time by
    # oslo.versionedobjects: the guard cannot fingerprint it live.)
    ('evacuate_under_lock', Refs(
        replaces=(_CM + 'rebuild_instance',),
        relies_on=(_CM + '_do_rebuild_instance_with_claim',
                   _CM + '_set_migration_status',
                   _RT + 'rebuild_claim',
                   _RT + 'delete_allocation_for_evacuated_instance',
                   _RT + '_update_usage_from_migrations',
                   _INSTANCE + 'apply_migration_context'))),
    # Bug 2025480, a sibling race: the tracker keeps counting a server
    # being unshelved (SHELVED_OFFLOADED, spawning) on the host that
    # claimed it (mixins/unshelve_claim.py). _unshelve_instance sets
    # spawning before the claim and ACTIVE only after the spawn; the
    # periodic task calls the usage update with the lock held.
    ('unshelve_claim', Refs(
        replaces=(_RT + '_update_usage_from_instances',
                  _RT + '_update_usage_from_instance',
                  _STATS + 'update_stats_for_instance'),
        relies_on=(_CM + '_unshelve_instance',
                   _RT + 'instance_claim',
                   _STATS + '_extract_state_from_instance'))),
    # Bug 1894095, a sibling race no release fixes: the destination of a
    # rolled back live migration remembers, where it drops its claim, not
    # to count that migration again (mixins/live_migration_rollback.py).
    # The source's rollback calls it before clearing the task state and
    # setting its own final status.
    ('live_migration_rollback', Refs(
        replaces=(_CM + 'drop_move_claim_at_destination',
                  _RT + '_update_usage_from_migrations',
                  _RT + '_update_usage_from_migration'),
        relies_on=(_CM + '_rollback_live_migration',
                   _CM + '_get_nodename',
                   _RT + 'drop_move_claim'))),
])

#: One part of an upstream fix, as the guard recognises it from the code
#: (:mod:`nova_revert_lock.guard.recognise`): function ``ref``, or a
#: method of its class it reaches through ``self``, ``does`` (``calls``,
#: ``assigns``, ``refers``, ``decorated``) ``name``.
Does = collections.namedtuple('Does', ['ref', 'does', 'name'])

_VM_STATES = 'nova.compute.vm_states:'


def _under_lock(tracker_method, status_set):
    """The tracker half of upstream's 1879878 fixes: one critical section.

    The locked tracker method sets the migration's status and drops the
    claim through the unlocked ``_drop_move_claim``.
    """
    return (Does(_RT + tracker_method, 'decorated', 'synchronized'),
            Does(_RT + tracker_method, 'assigns', status_set),
            Does(_RT + tracker_method, 'calls', '_drop_move_claim'))


#: How the guard recognises upstream's fix from the code (distributions
#: backport without changing the version): the mixin stands aside where
#: every part holds. Anchors are entry points that upstream does not
#: rename (RPC methods, the periodic task), so that a body moved into a
#: helper or a renamed private method is still recognised. A mixin not
#: named here has no upstream fix.
FIXED_WHEN = {
    # I26b050c4 / I29d6f4a7 (Victoria, Ussuri 21.1.1): the manager calls
    # the tracker's locked status-and-drop.
    'confirm': (Does(_CM + 'confirm_resize', 'calls',
                     'drop_move_claim_at_source'),) +
    _under_lock('drop_move_claim_at_source', 'status'),
    'revert': (Does(_CM + 'revert_resize', 'calls',
                    'drop_move_claim_at_dest'),) +
    _under_lock('drop_move_claim_at_dest', 'status'),
    'cross_cell_confirm': (
        Does(_CM + 'confirm_snapshot_based_resize_at_source', 'calls',
             'drop_move_claim_at_source'),) +
    _under_lock('drop_move_claim_at_source', 'status'),
    'cross_cell_revert': (
        Does(_CM + 'revert_snapshot_based_resize_at_dest', 'calls',
             'drop_move_claim_at_dest'),) +
    _under_lock('drop_move_claim_at_dest', 'status'),
    # b841e55321: the source's resize sets old_flavor itself, in the save
    # that hands the instance over (reading it is not the fix).
    'resize_source_flavor': (
        Does(_CM + 'resize_instance', 'assigns', 'old_flavor'),),
    # 32c1044d86: the periodic body applies incoming migration contexts.
    'incoming_migration_context': (
        Does(_RT + 'update_available_resource', 'calls',
             'apply_migration_context'),),
    # 7675964af8: rebuild_instance ends in the tracker's locked
    # finish_evacuation, which sets the host and the migration's status.
    'evacuate_under_lock': (
        Does(_CM + 'rebuild_instance', 'calls', 'finish_evacuation'),
        Does(_RT + 'finish_evacuation', 'decorated', 'synchronized'),
        Does(_RT + 'finish_evacuation', 'assigns', 'host'),
        Does(_RT + 'finish_evacuation', 'assigns', 'status')),
    # f1dc4ec39b: the three places that untracked a SHELVED_OFFLOADED
    # server ask vm_states.allow_resource_removal, which keeps one being
    # spawned. All three: a partial backport still loses the claim.
    'unshelve_claim': (
        Does(_RT + '_update_usage_from_instances', 'calls',
             'allow_resource_removal'),
        Does(_RT + '_update_usage_from_instance', 'calls',
             'allow_resource_removal'),
        Does(_STATS + 'update_stats_for_instance', 'calls',
             'allow_resource_removal'),
        Does(_VM_STATES + 'allow_resource_removal', 'refers', 'SPAWNING')),
}


def fix_refs():
    """Every function a part of an upstream fix is anchored on."""
    return sorted({part.ref for parts in FIXED_WHEN.values()
                   for part in parts})


#: ``(ref, release)``: the function that came with the feature a mixin
#: fixes, and the first release that has it. Where it is absent there is
#: nothing to fix: the mixin is not applicable.
APPLIES_FROM = {
    'cross_cell_confirm': (
        _CM + 'confirm_snapshot_based_resize_at_source', '21.0.0'),
    'cross_cell_revert': (
        _CM + 'revert_snapshot_based_resize_at_dest', '21.0.0'),
}

#: Mixins that fix what upstream left open: they also apply to a Nova that
#: carries upstream's 1879878 fix, and stay out with a warning (instead of
#: refusing) where they cannot apply.
BEYOND_UPSTREAM = frozenset(['source_window'])

#: Fixes of the sibling races of bug 1879878 (bugs 1944759, 1953359,
#: 1896463 and 2025480, which upstream fixed later; bug 1894095, which no
#: release fixes, so it has no FIXED_WHEN). They stand aside where the code
#: carries upstream's fix, like the core mixins, but are admitted like the
#: mixins beyond upstream: whatever keeps one out leaves it out alone, with
#: a warning, and never costs the host the fix for bug 1879878 or the other
#: mixins.
FAMILY = frozenset(['resize_source_flavor',
                    'incoming_migration_context',
                    'evacuate_under_lock',
                    'live_migration_rollback',
                    'unshelve_claim'])

#: The Launchpad bug each mixin fixes, in the order reports list them.
#: ``source_window`` closes a window no bug report names (beyond
#: upstream): it is reported as a mixin, not as a bug.
BUGS = collections.OrderedDict([
    ('1879878', ('confirm', 'revert', 'cross_cell_confirm',
                 'cross_cell_revert')),
    ('1944759', ('resize_source_flavor',)),
    ('1953359', ('incoming_migration_context',)),
    ('1896463', ('evacuate_under_lock',)),
    ('1894095', ('live_migration_rollback',)),
    ('2025480', ('unshelve_claim',)),
])

#: The mixins admitted one by one (left out with a warning) rather than
#: strictly (refusing the activation): every mixin but the 1879878 fixes.
EXTRAS = BEYOND_UPSTREAM | FAMILY

#: The code each mixin's implementations were verified on, per series
#: (the key of the mixin module's implementation): surveyed release labels
#: or closed ranges of them. The guard applies an implementation only
#: where every function it replaces or relies on is code one of these
#: releases ships; code that is merely surveyed (known, but nobody has run
#: the tests on it or on identical code) is never patched.
VERIFIED = {
    'confirm': {
        'train': ('20.0.0-20.6.1', 'train-eol'),
        'ussuri': ('21.0.0-21.1.2',),
    },
    'revert': {
        'train': ('20.0.0-20.6.1', 'train-eol'),
        'ussuri': ('21.0.0-21.1.2',),
    },
    'cross_cell_confirm': {
        'ussuri': ('21.0.0-21.1.2',),
    },
    'cross_cell_revert': {
        'ussuri': ('21.0.0-21.1.2',),
    },
    'source_window': {
        'train': ('20.0.0-20.6.1', '20.6.1+patches', 'train-eol'),
        'ussuri': ('21.0.0-21.1.2', '21.1.0+patches'),
        'victoria': ('22.4.0',),
        # 25.3.0's code is 24.1.0-26.2.1's; 26.2.2's is 26.3.0's and
        # xena-eol's (fingerprint classes of the survey).
        'yoga': ('25.3.0',),
        'zed': ('26.2.2',),
        '2023.1': ('27.5.1',),
        '2025.1': ('31.3.1',),
        '2026.2': ('34.0.0',),
    },
    # Tested on 20.6.1, 21.1.0, 21.1.2, 22.3.0, 23.1.0 and 24.0.0; the
    # ranges ship the same code for every function the mixin replaces or
    # relies on (20.0.x do not: their _resize_instance differs).
    'resize_source_flavor': {
        'train': ('20.1.0-20.6.1',),
        'ussuri': ('21.0.0-21.2.4',),
        'victoria': ('22.0.0-22.3.0',),
        'wallaby': ('23.0.0-23.1.0',),
        'xena': ('24.0.0',),
    },
    # Tested on 20.6.1, 21.1.0 and 21.1.2; the ranges ship the same code
    # for every function the mixin replaces or relies on. 22.0.0 is
    # affected too, but its rebuild_instance differs and nobody ran the
    # tests on it: unknown there.
    'evacuate_under_lock': {
        'train': ('20.0.0-20.6.1',),
        'ussuri': ('21.0.0-21.1.2',),
    },
    # Tested on 20.6.1, 21.1.0, 21.1.2, 22.3.0, 23.1.0 and 24.0.0; every
    # function it replaces or relies on is the same code in all of Train
    # (train-eol included), in 21.0.0-21.2.4 (ussuri-eol carries
    # upstream's fix), in 22.0.0-22.3.0 and in 23.0.0-24.0.0 (whose
    # periodic body no longer counts orphans). From Victoria on the
    # periodic task lists 'error' migrations too, and so does the
    # Victoria variant.
    'incoming_migration_context': {
        'train': ('20.0.0-20.6.1', '20.6.1+patches', 'train-eol'),
        'ussuri': ('21.0.0-21.2.4', '21.1.0+patches'),
        'victoria': ('22.0.0-22.3.0',),
        'wallaby': ('23.0.0-23.1.0',),
        'xena': ('24.0.0',),
    },
    # Tested on 20.6.1, 21.1.0, 21.1.2, 22.3.0, 22.4.0, 23.1.0, 24.0.0
    # and 25.3.0; other releases that ship the same code for every
    # function it replaces or relies on are matched by that code (25.3.0:
    # 24.2.0 to 26.2.1, the last releases before upstream's fix).
    'unshelve_claim': {
        'train': ('20.6.1',),
        'ussuri': ('21.1.0', '21.1.2'),
        'victoria': ('22.3.0', '22.4.0'),
        'wallaby': ('23.1.0',),
        'xena': ('24.0.0',),
        'yoga': ('25.3.0',),
    },
    # Tested on 20.6.1, 21.1.0, 21.1.2, 22.3.0, 23.1.0, 24.0.0, 25.3.0,
    # 26.2.2 and 31.3.1; releases that ship the same code for every
    # function the mixin replaces or relies on count too (the support
    # matrix lists them: 25.3.0 and 26.2.2 ship the code of 24.1.1 to
    # 29.2.1, 30.0.0 and 31.0.0, Yoga to 2024.1).
    'live_migration_rollback': {
        'train': ('20.6.1',),
        'ussuri': ('21.1.0', '21.1.2'),
        'victoria': ('22.3.0',),
        'wallaby': ('23.1.0',),
        'xena': ('24.0.0',),
        'yoga': ('25.3.0',),
        'zed': ('26.2.2',),
        '2025.1': ('31.3.1',),
    },
}

#: The functions whose lock the fix must share: the periodic task that
#: rebuilds usage, and the claim drop whose body runs inside the new
#: critical sections.
LOCK_REFS = (_RT + '_update_available_resource', _RT + 'drop_move_claim')


def refs_section(name):
    """The docstring section that names the upstream functions of a mixin.

    Each mixin module ends its docstring with it, so that a reader of the
    module sees what it replaces and relies on; a unit test keeps the two
    in step.
    """
    refs = REFS[name]
    title = 'Upstream functions (``mixins.REFS[%r]``)' % name
    lines = [title, '-' * len(title), '', 'Replaces:', '']
    lines.extend('* ``%s``' % ref.split(':', 1)[1] for ref in refs.replaces)
    lines.extend(['', 'Relies on:', ''])
    lines.extend('* ``%s``' % ref.split(':', 1)[1] for ref in refs.relies_on)
    return '\n'.join(lines) + '\n'


def all_refs():
    """Every upstream function any mixin or the lock check looks at."""
    refs = list(LOCK_REFS)
    for entry in REFS.values():
        refs.extend(entry.replaces)
        refs.extend(entry.relies_on)
    return sorted(set(refs))
