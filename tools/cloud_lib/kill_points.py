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

"""Where ``tools/cloud faults --sweep`` and ``--random`` kill a compute.

Standard library only: the runner (``faults.py``) draws from it, and
so do the tests of the tools.
"""

import random


#: every step of a resize, a confirm and a revert on either host where
#: ``--random`` may kill a compute: name, the action, the host, the point
#: (``fault_hook``); a random delay after the point (the step goes on
#: meanwhile) reaches what lies between them
KILL_POINTS = (
    ('resize-dest-prep', 'resize', 'dest',
     {'point': 'dispatch', 'method': 'prep_resize'}),
    ('resize-source-resize-instance', 'resize', 'source',
     {'point': 'dispatch', 'method': 'resize_instance'}),
    ('resize-source-migrating', 'resize', 'source',
     {'point': 'status-saved', 'status': 'migrating'}),
    ('resize-source-post-migrating', 'resize', 'source',
     {'point': 'status-saved', 'status': 'post-migrating'}),
    ('resize-dest-finish', 'resize', 'dest',
     {'point': 'dispatch', 'method': 'finish_resize'}),
    ('resize-dest-finished', 'resize', 'dest',
     {'point': 'status-saved', 'status': 'finished'}),
    ('confirm-source-dispatch', 'confirm', 'source',
     {'point': 'dispatch', 'method': 'confirm_resize'}),
    ('confirm-source-saving', 'confirm', 'source',
     {'point': 'status-saving', 'status': 'confirmed'}),
    ('confirm-source-saved', 'confirm', 'source',
     {'point': 'status-saved', 'status': 'confirmed'}),
    ('revert-dest-dispatch', 'revert', 'dest',
     {'point': 'dispatch', 'method': 'revert_resize'}),
    ('revert-dest-saving', 'revert', 'dest',
     {'point': 'status-saving', 'status': 'reverted'}),
    ('revert-dest-saved', 'revert', 'dest',
     {'point': 'status-saved', 'status': 'reverted'}),
    ('revert-source-finish', 'revert', 'source',
     {'point': 'finish-revert'}),
)
#: the longest random delay after a kill point, seconds: a step of the
#: fake driver's moves takes a few tenths of a second (a libvirt one
#: longer); past it the kill finds the move over
KILL_DELAY_S = 1.0


def random_kills(seed, count):
    """``count`` kill points and delays drawn with ``seed``: repeatable.

    Half the kills come at the point itself, half after a delay up to
    KILL_DELAY_S (in hundredths of a second). The same seed gives both
    modes the same sequence.
    """
    rng = random.Random(seed)
    out = []
    for _ in range(count):
        name, action, role, spec = rng.choice(KILL_POINTS)
        delay = 0.0 if rng.random() < 0.5 else round(
            rng.uniform(0.01, KILL_DELAY_S), 2)
        spec = dict(spec, delay=delay)
        out.append(('random-%s' % name, action, role, spec, None))
    return out
