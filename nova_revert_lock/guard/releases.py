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

"""Nova releases and series, and what is installed in this process."""

#: Nova major version -> OpenStack series name.
SERIES = {
    19: 'stein', 20: 'train', 21: 'ussuri', 22: 'victoria', 23: 'wallaby',
    24: 'xena', 25: 'yoga', 26: 'zed',
    27: '2023.1', 28: '2023.2', 29: '2024.1', 30: '2024.2',
    31: '2025.1', 32: '2025.2', 33: '2026.1', 34: '2026.2',
}
#: OpenStack series name -> Nova major version.
MAJORS = {name: major for major, name in SERIES.items()}


#: the suffix of a branch tip tagged when its series reached end of life
#: (``train-eol``): code no release names, which operators run all the same
EOL_SUFFIX = '-eol'


def eol_major(label):
    """Nova major version of a ``<series>-eol`` branch tip, or None."""
    label = str(label)
    if not label.endswith(EOL_SUFFIX):
        return None
    return MAJORS.get(label[:-len(EOL_SUFFIX)])


def is_release(label):
    """True for a release, False for a patched build or a branch tip."""
    return eol_major(label) is None and '+' not in label


def series_of(release):
    """Series name of a Nova release or ``<series>-eol`` tip, or 'unknown'."""
    major = eol_major(release)
    if major is None:
        try:
            major = int(str(release).split('.')[0])
        except ValueError:
            return 'unknown'
    return SERIES.get(major, 'unknown')


def installed_nova_version():
    """Version string of the Nova importable here, or None.

    From the distribution metadata, through pbr as Nova itself does.
    """
    try:
        from nova import version
        return version.version_string()
    except Exception:  # noqa: BLE001 - any failure means "don't know"
        return None
