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

"""The cloud's contents, over REST (runs inside the cloud's virtualenv).

    python bootstrap.py identity PORTS_JSON   service users, demo project,
                                              the catalog
    python bootstrap.py image                 one small raw image, and
                                              the guest that dirties its
                                              memory (guest.py)
    python bootstrap.py flavors               the two flavors moves use
    python bootstrap.py wait-hypervisors N    until N hypervisors are up

clouds.yaml comes from ``NRL_CLOUDS_YAML``. Each step is idempotent.
"""

import json
import sys
import time

from cloud_lib import guest
from cloud_lib import rest

PASSWORD_ENV = 'NRL_CLOUD_PASSWORD'
SERVICE_USERS = ('nova', 'glance', 'placement', 'neutron')
CATALOG = (
    ('nova', 'compute', 'nova-api', '/v2.1'),
    ('glance', 'image', 'glance', ''),
    ('placement', 'placement', 'placement', ''),
    ('neutron', 'network', 'neutron', ''),
)
IMAGE_NAME = 'nrl-image'
#: (id, name, vcpus, ram MB, disk GB): resizes go between the first two
FLAVORS = (('nrl-1', 'nrl.small', 1, 256, 1),
           ('nrl-2', 'nrl.medium', 2, 512, 1))
#: on libvirt computes: the same ids, pinned. A compute has two
#: dedicated CPUs and each holds a server: an incoming resize has one
#: free, so both flavors have one vCPU (the claim, the pinning and its
#: release are the same for one CPU as for two).
PINNED_FLAVORS = (('nrl-1', 'nrl.pinned.small', 1, 128, 1),
                  ('nrl-2', 'nrl.pinned.medium', 1, 192, 1))
PINNED = {'hw:cpu_policy': 'dedicated'}


def _one(items, name):
    for item in items:
        if item['name'] == name:
            return item
    return None


def _ensure(identity, kind, name, body):
    plural = kind + 's'
    found = _one(identity.get('/%s' % plural, params={'name': name}
                              ).json()[plural], name)
    if found:
        return found
    return identity.post('/%s' % plural, json={kind: body}).json()[kind]


def identity(ports):
    import os
    password = os.environ[PASSWORD_ENV]
    c = rest.Clients(rest.env_clouds_yaml())
    idn = c.identity
    roles = {r['name']: r['id'] for r in idn.get('/roles').json()['roles']}
    member = roles.get('member') or _ensure(idn, 'role', 'member',
                                            {'name': 'member'})['id']
    service = _ensure(idn, 'project', 'service',
                      {'name': 'service', 'domain_id': 'default'})
    demo = _ensure(idn, 'project', 'demo',
                   {'name': 'demo', 'domain_id': 'default'})
    for name in SERVICE_USERS:
        user = _ensure(idn, 'user', name,
                       {'name': name, 'password': password,
                        'domain_id': 'default'})
        idn.put('/projects/%s/users/%s/roles/%s'
                % (service['id'], user['id'], roles['admin']))
    user = _ensure(idn, 'user', 'demo',
                   {'name': 'demo', 'password': password,
                    'domain_id': 'default',
                    'default_project_id': demo['id']})
    idn.put('/projects/%s/users/%s/roles/%s'
            % (demo['id'], user['id'], member))
    for name, stype, port_name, path in CATALOG:
        svc = _ensure(idn, 'service', name, {'name': name, 'type': stype})
        url = 'http://127.0.0.1:%d%s' % (ports[port_name], path)
        have = idn.get('/endpoints', params={'service_id': svc['id']}
                       ).json()['endpoints']
        for interface in ('public', 'internal'):
            if not any(e['interface'] == interface for e in have):
                idn.post('/endpoints', json={'endpoint': {
                    'service_id': svc['id'], 'interface': interface,
                    'url': url, 'region_id': 'RegionOne'}})


def image():
    c = rest.Clients(rest.env_clouds_yaml())
    # NOTE: the fake driver never reads the first; a few KB make a real
    # upload. The second boots on libvirt computes (family's aborts).
    ids = [_image(c, name, data) for name, data in (
        (IMAGE_NAME, b'\0' * 4096),
        (guest.DIRTY_IMAGE_NAME, guest.image_bytes()))]
    print(ids[0])


def _image(c, name, data):
    images = c.image.get('/v2/images', params={'name': name}
                         ).json()['images']
    active = [i for i in images if i['status'] == 'active']
    if active:
        return active[0]['id']
    img = c.image.post('/v2/images', json={
        'name': name, 'disk_format': 'raw',
        'container_format': 'bare', 'visibility': 'public'}).json()
    c.image.put('/v2/images/%s/file' % img['id'], data=data,
                headers={'Content-Type': 'application/octet-stream'})
    return img['id']


def flavors(hypervisor='fake'):
    c = rest.Clients(rest.env_clouds_yaml())
    have = {f['id'] for f in c.compute.get('/flavors').json()['flavors']}
    pinned = hypervisor == 'libvirt'
    for fid, name, vcpus, ram, disk in (PINNED_FLAVORS if pinned
                                        else FLAVORS):
        if fid not in have:
            c.compute.post('/flavors', json={'flavor': {
                'id': fid, 'name': name, 'vcpus': vcpus, 'ram': ram,
                'disk': disk}})
            if pinned:
                c.compute.post('/flavors/%s/os-extra_specs' % fid,
                               json={'extra_specs': PINNED})


def wait_hypervisors(count, timeout=120):
    c = rest.Clients(rest.env_clouds_yaml())
    deadline = time.monotonic() + timeout
    while True:
        hyps = c.compute.get('/os-hypervisors/detail').json()['hypervisors']
        up = [h for h in hyps if h['state'] == 'up']
        rps = c.placement.get('/resource_providers').json()[
            'resource_providers']
        if len(up) >= count and len(rps) >= count:
            print(json.dumps(sorted(h['hypervisor_hostname'] for h in up)))
            return
        if time.monotonic() > deadline:
            sys.exit('only %d hypervisors up, %d resource providers after '
                     '%ds' % (len(up), len(rps), timeout))
        time.sleep(1)


def main(argv):
    step = argv[0]
    if step == 'identity':
        identity(json.loads(argv[1]))
    elif step == 'image':
        image()
    elif step == 'flavors':
        flavors(*argv[1:2])
    elif step == 'wait-hypervisors':
        wait_hypervisors(int(argv[1]))
    else:
        sys.exit('unknown step %s' % step)


if __name__ == '__main__':
    main(sys.argv[1:])
