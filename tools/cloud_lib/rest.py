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

"""REST clients for the cloud (runs inside the cloud's virtualenv).

keystoneauth1 only: every release's environment has it, and the calls
are the documented REST API of each service, so the same code works
whatever openstacksdk the series pins.
"""

import json
import os

from keystoneauth1 import adapter
from keystoneauth1.identity import v3
from keystoneauth1 import session as ks_session

COMPUTE_MICROVERSION = '2.53'


def load_cloud(clouds_yaml, name='nrl'):
    """The auth dict of cloud ``name``.

    clouds.yaml as tools/cloud writes it: a flat, known shape, read
    without a YAML library.
    """
    auth, current, in_auth = {}, None, False
    with open(clouds_yaml) as f:
        for line in f:
            stripped = line.strip()
            indent = len(line) - len(line.lstrip())
            if indent == 2 and stripped.endswith(':'):
                current, in_auth = stripped[:-1], False
            elif current == name and stripped == 'auth:':
                in_auth = True
            elif current == name and in_auth and indent == 6:
                key, _sep, value = stripped.partition(': ')
                auth[key] = value
            elif indent <= 4:
                in_auth = False
    return auth


def session(clouds_yaml, name='nrl'):
    auth = load_cloud(clouds_yaml, name)
    plugin = v3.Password(**auth)
    return ks_session.Session(auth=plugin)


class Clients(object):
    """Adapters for identity, compute, image, placement."""

    def __init__(self, clouds_yaml, name='nrl'):
        self.session = session(clouds_yaml, name)
        common = dict(session=self.session, region_name='RegionOne',
                      interface='public')
        self.identity = adapter.Adapter(service_type='identity', **common)
        self.compute = adapter.Adapter(
            service_type='compute',
            default_microversion=COMPUTE_MICROVERSION, **common)
        self.image = adapter.Adapter(service_type='image', **common)
        self.placement = adapter.Adapter(
            service_type='placement', default_microversion='1.14', **common)


def dump(obj):
    return json.dumps(obj, indent=2, sort_keys=True)


def env_clouds_yaml():
    return os.environ['NRL_CLOUDS_YAML']
