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

"""The rolling switch, over REST (runs inside the cloud's virtualenv).

    python rolling.py prepare HOST STATE_JSON   two servers booted on HOST,
                                                both resized away and left
                                                in VERIFY_RESIZE
    python rolling.py finish STATE_JSON         (HOST restarted meanwhile)
                                                confirm one, revert the
                                                other, check the books

Confirm runs on the source and a revert ends there, so both cross the
restarted compute.
"""

import json
import sys

from cloud_lib import bootstrap
from cloud_lib import rest
from cloud_lib import soak as soak_mod


def _soak():
    clients = rest.Clients(rest.env_clouds_yaml())
    images = clients.image.get('/v2/images', params={
        'name': bootstrap.IMAGE_NAME}).json()['images']
    return soak_mod.Soak(clients, images[0]['id'])


def prepare(host, path):
    s = _soak()
    sids = [s.boot('nrl-rolling-%s' % k, host) for k in ('confirm',
                                                         'revert')]
    for sid in sids:
        s.wait(sid, 'ACTIVE')
    for sid in sids:
        s.c.compute.post('/servers/%s/action' % sid,
                         json={'resize': {'flavorRef': 'nrl-2'}})
    dests = [s.wait(sid, 'VERIFY_RESIZE')['OS-EXT-SRV-ATTR:host']
             for sid in sids]
    with open(path, 'w') as f:
        json.dump({'host': host, 'servers': sids, 'dests': dests}, f)
    print('rolling: %s in VERIFY_RESIZE (%s -> %s)' % (
        ', '.join(sids), host, ', '.join(dests)))


def finish(path):
    with open(path) as f:
        data = json.load(f)
    s = _soak()
    confirm, revert = data['servers']
    s.c.compute.post('/servers/%s/action' % confirm,
                     json={'confirmResize': None})
    s.c.compute.post('/servers/%s/action' % revert,
                     json={'revertResize': None})
    result = {'confirm': None, 'revert': None}
    try:
        s.wait(confirm, 'ACTIVE')
        s.wait_migration(confirm, 'confirmed')
        result['confirm'] = 'confirmed'
        s.wait(revert, 'ACTIVE')
        s.wait_migration(revert, 'reverted')
        result['revert'] = 'reverted'
        expected = {h: tuple(v) for h, v in s.base(None).items()}
        ok, hyp, plc = s.settle(expected)
        result.update({'books_right': ok, 'expected': expected,
                       'hypervisors': hyp, 'placement': plc})
        hosts = {sid: s.server(sid)['OS-EXT-SRV-ATTR:host']
                 for sid in (confirm, revert)}
        result['hosts'] = hosts
        result['placed_right'] = (hosts[confirm] == data['dests'][0] and
                                  hosts[revert] == data['host'])
    except soak_mod.CycleError as e:
        result['error'] = str(e)
    finally:
        for sid in data['servers']:
            s.c.compute.delete('/servers/%s' % sid)
    data['result'] = result
    with open(path, 'w') as f:
        json.dump(data, f, indent=2, sort_keys=True)
    good = (result.get('books_right') and result.get('placed_right') and
            not result.get('error'))
    print('rolling: confirm %s, revert %s, books %s' % (
        result['confirm'], result['revert'],
        'right' if result.get('books_right') else 'WRONG'))
    return 0 if good else 1


def cleanup(path):
    """Delete the servers ``prepare`` booted (the switch failed)."""
    with open(path) as f:
        data = json.load(f)
    s = _soak()
    for sid in data['servers']:
        s.c.compute.delete('/servers/%s' % sid)


if __name__ == '__main__':
    if sys.argv[1] == 'prepare':
        prepare(sys.argv[2], sys.argv[3])
    elif sys.argv[1] == 'cleanup':
        cleanup(sys.argv[2])
    else:
        sys.exit(finish(sys.argv[2]))
