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

"""What each release series installs, on which Python.

The versions are the series' own: Nova and placement as the functional
envs pin them, the other services at their last release of the series,
everything else from the project's constraints file (constraints/).
"""

SERIES = {
    # NOTE: Train, the release upstream never fixed, at its own pins and
    # on the Python its clouds run (RHEL 8, Ubuntu 18.04: 3.6). Nova's
    # live-migration fake with NUMA is Ussuri's; Train's tracker reads
    # the same NUMA topology from the fake driver (cloud_lib/fake_drivers).
    'train': {
        'python': '3.6',
        'constraints': 'train.txt',
        'nova': '20.6.1',
        'services': ['nova==20.6.1', 'openstack-placement==2.0.1',
                     'keystone==16.0.2', 'glance==19.0.4',
                     'neutron==15.3.4'],
        'clients': ['PyMySQL', 'openstacksdk', 'python-openstackclient'],
        'tempest': 'tempest==22.1.0',
        'compute_driver': 'nrl_cloud.NumaLiveMigrateDriver',
        'live_abort': True,
        # NOTE: no [compute] cpu_dedicated_set and no PCPU resource class
        # before Ussuri: libvirt computes pin from vcpu_pin_set.
        'pcpu': False,
        # NOTE: the services' release built with patches/train (tools/cloud
        # patched --series train)
        'peers': {
            '20.6.1-patched': {'python': '3.6', 'constraints': 'train.txt',
                               'release': '20.6.1', 'patches': 'train'},
        },
    },
    'ussuri': {
        'python': '3.8',
        'constraints': 'ussuri.txt',
        'nova': '21.1.0',
        'services': ['nova==21.1.0', 'openstack-placement==3.0.1',
                     'keystone==17.0.1', 'glance==20.2.0',
                     'neutron==16.4.2'],
        'clients': ['PyMySQL', 'openstacksdk', 'python-openstackclient'],
        'tempest': 'tempest==24.0.0',
        # NOTE: Nova's fake driver that holds a live migration for up to
        # 5 s and rolls it back when it is aborted meanwhile, NUMA-aware
        # (cloud_lib/fake_drivers.py; family.py's live-abort step).
        'compute_driver': 'nrl_cloud.NumaLiveMigrateDriver',
        'live_abort': True,
        # NOTE: computes of other releases beside these services, as in a
        # cloud mid-upgrade (tools/cloud peers): their own virtualenv,
        # Nova and this project only.
        'peers': {
            '21.1.2': {'python': '3.8', 'constraints': 'ussuri.txt'},
            '20.6.1': {'python': '3.6', 'constraints': 'train.txt'},
            # NOTE: the services' release built with patches/ussuri, as
            # a distribution or an operator building from source would
            # (tools/cloud patched)
            '21.1.0-patched': {'python': '3.8', 'constraints': 'ussuri.txt',
                               'release': '21.1.0', 'patches': 'ussuri'},
        },
    },
    'epoxy': {
        'python': '3.11',
        'constraints': 'epoxy.txt',
        'nova': '31.3.1',
        'services': ['nova==31.3.1', 'openstack-placement==13.0.0',
                     'keystone==27.0.0', 'glance==30.0.0',
                     'neutron==26.0.0'],
        'clients': ['PyMySQL', 'openstacksdk', 'python-openstackclient'],
        # tempest is branchless and not in these pins: the release made
        # at the start of 2025.1.
        'tempest': 'tempest==43.0.0',
        # NOTE: from 2023.2 a compute that is not starting for the first
        # time refuses to start without its node identity file, which
        # only drivers with a stable node UUID write: the other fake
        # drivers could not be restarted (the rolling switch).
        'compute_driver': 'fake.FakeDriverWithoutFakeNodes',
        # NOTE: no fake driver keeps a node identity and can abort a live
        # migration: family.py's live-abort step does not run here.
        'live_abort': False,
    },
}
