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

"""The guard: may a mixin replace this Nova's code?

A mixin only ever replaces code it was verified on, decided from the code
itself, never from a version string. What each mixin replaces, relies on
and was verified on is declared in :mod:`nova_revert_lock.fixes`; what
every surveyed Nova release ships, in :mod:`.fingerprint_table` (GENERATED
by ``tools/survey_fingerprints.py``). Neither imports Nova.
"""
