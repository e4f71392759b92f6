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

"""whitebox-tempest-plugin's pinning tests against the libvirt cloud.

The plugin checks behind the REST API what operators would check: the
pinning in each guest's domain XML (``sudo virsh dumpxml`` over ssh on
the guest's compute), the instance's NUMA topology in the cell
database, the CPU sets in the compute's configuration (``crudini``). Its
hosts are reached as a deployment's are:

- **ssh**: the cloud's sshd on each compute (``hostssh.py``), inside
  that compute's libvirtd namespaces (mount and UTS), listening on the
  compute's own loopback address (127.0.1.N:22, ``[whitebox]
  ctlplane_addresses``). In there the system URI is that compute's
  daemon, so the plugin's plain ``virsh`` reads the right guests; root
  logs in with the cloud's key, nothing else.
- **the database**: the plugin connects on port 3306, whatever it is
  told; a forwarder on 127.0.2.1:3306 carries its connections to the
  cloud's MariaDB.
- **the hosts' description** (``nodes_yaml``): each compute's CPU sets
  and its configuration file.

Two CPU layouts, because each host has two CPUs and the tests want
either two dedicated ones or one dedicated beside one shared:

- ``dedicated``: ``cpu_dedicated_set = 0-1`` (the cloud's own);
- ``split``: ``cpu_dedicated_set = 0``, ``cpu_shared_set = 1``: the
  resizes between pinned and unpinned flavors.

For each mode (the computes restarted as wrapper or plain) and each
layout, the tests that fit run; what cannot fit on this machine is left
out by name, with why (:data:`LEFT_OUT`), and the plugin's own skips are
reported with its reasons. The computes end as they began: their mode,
the cloud's layout.
"""

import os
import shutil
import socket
import subprocess
import threading
import time
import xml.etree.ElementTree as ET

from urllib import parse as urlparse

from cloud_lib import hostssh
from cloud_lib import hypervisor as hv
from cloud_lib import tempest

PLUGIN = 'whitebox-tempest-plugin==0.1.0'
#: its services client imports sshtunnel, which its wheel requires on
#: Python 2.7 only
EXTRA = ['sshtunnel']
#: pins of the series the plugin cannot take (it requires ddt>=1.6.0)
OVERRIDES = {'ddt': '1.6.0'}
#: what the hosts need for the plugin's commands (binary: package)
BINARIES = {'sshd': 'openssh-server', 'sudo': 'sudo', 'crudini': 'crudini',
            'numactl': 'numactl', 'nsenter': 'util-linux',
            'ssh-keygen': 'openssh-client'}
DB_ADDRESS = '127.0.2.1'
DB_PORT = 3306
MODULE = 'whitebox_tempest_plugin.api.compute.test_cpu_pinning'

#: (name, cpu_dedicated_set, cpu_shared_set, classes that run)
LAYOUTS = (
    ('dedicated', '0-1', None,
     ('CPUPolicyTest', 'CPUThreadPolicyTest', 'EmulatorThreadTest',
      'NUMARebuildTest', 'MixedCPUPolicyTest')),
    ('split', '0', '1',
     ('CPUPolicyTest', 'EmulatorThreadTest', 'MixedCPUPolicyTest')),
)

_LIVE = ('live migration: wants exactly two computes (the cloud has '
         'three) and hosts of more than two CPUs: at least two dedicated '
         'and one shared per NUMA node (test_cpu_pinning_and_emulator_'
         'threads checks the emulator threads on the shared set, '
         'NUMACPUDedicatedLiveMigrationTest skips itself without both), '
         'and hugepages (test_hugepages); the hosts here have two CPUs. '
         'tempest\'s own live migration tests (tools/cloud tempest '
         '--live) and the family\'s live-block and live-abort steps live '
         'migrate pinned servers between the libvirt computes')
_TWO_PINNED = ('boots a guest of two pinned vCPUs: the split layout has one '
               'dedicated CPU per host (it runs in the dedicated layout)')
#: {layout or None (every layout): {test or class: why it does not run}}
LEFT_OUT = {
    None: {
        'NUMALiveMigrationTest': _LIVE,
        'NUMACPUDedicatedLiveMigrationTest': _LIVE,
        'MixedCPUPolicyTestMultiNuma': (
            'wants two NUMA nodes per host: libvirt reports one cell of '
            'two CPUs here'),
        'EmulatorThreadTest.test_policy_share_cpu_shared_unset': (
            'restarts every compute twice through start and stop '
            'commands (nodes_yaml gives none), waiting out '
            'service_down_time (60 s) at each stop: about 8 minutes a '
            'run; the cloud\'s restarts are exercised by tools/cloud '
            'faults'),
    },
    'split': {
        'CPUThreadPolicyTest': _TWO_PINNED,
        'NUMARebuildTest': _TWO_PINNED,
    },
}
#: releases without hw:cpu_policy=mixed (Victoria's): {series: why}
NO_MIXED = {'train': 'hw:cpu_policy=mixed is Victoria\'s (22.0.0)',
            'ussuri': 'hw:cpu_policy=mixed is Victoria\'s (22.0.0)'}


class WhiteboxError(Exception):
    pass


def _which(name):
    return shutil.which(name) or next(
        (os.path.join(d, name) for d in ('/usr/sbin', '/usr/bin', '/sbin')
         if os.access(os.path.join(d, name), os.X_OK)), None)


def missing():
    """The packages to install for the binaries the plugin's hosts need."""
    return sorted({pkg for name, pkg in BINARIES.items() if not _which(name)})


def left_out(series, layout):
    """{test or class: why} not run in ``layout`` on ``series``."""
    out = dict(LEFT_OUT[None])
    out.update(LEFT_OUT.get(layout, {}))
    if series in NO_MIXED:
        out['MixedCPUPolicyTest'] = NO_MIXED[series]
    return out


def regex(series, layout):
    """The tempest regex of ``layout``'s classes, less what is left out."""
    classes = [c for name, _d, _s, cs in LAYOUTS if name == layout
               for c in cs]
    out = left_out(series, layout)
    classes = [c for c in classes if c not in out]
    tests = sorted(k.split('.', 1)[1] for k in out
                   if '.' in k and k.split('.')[0] in classes)
    rx = r'^%s\.(?:%s)\.' % (MODULE.replace('.', r'\.'), '|'.join(classes))
    if tests:
        rx += r'(?!(?:%s)\b)' % '|'.join(tests)
    return rx


# -- the virtualenv -----------------------------------------------------


def ensure_venv(cloud):
    """tempest at the series' version, the plugin, the series' pins."""
    return tempest.ensure_venv(
        cloud, os.path.join(os.path.dirname(cloud.tempest_venv),
                            'cloud-whitebox-%s' % cloud.series),
        [PLUGIN] + EXTRA, OVERRIDES)


# -- ssh into each compute's namespace ----------------------------------


def start_sshds(c):
    """The cloud's sshd in each compute's namespaces (hostssh.py).

    The cloud starts them with its libvirt computes; a cloud brought up
    before that had them gets them now (they stay until ``down``).
    """
    try:
        hostssh.start(c)
    except hostssh.SshError as e:
        raise WhiteboxError(str(e))
    return hostssh.keys(c.state_dir)


# -- the plugin's database connection ------------------------------------


class Forwarder(object):
    """DB_ADDRESS:DB_PORT to the cloud's MariaDB, for the run's length."""

    def __init__(self, target):
        self.target = target
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            self.sock.bind((DB_ADDRESS, DB_PORT))
        except OSError as e:
            raise WhiteboxError('cannot listen on %s:%d for the plugin\'s '
                                'database connections: %s' % (
                                    DB_ADDRESS, DB_PORT, e))
        self.sock.listen(16)
        self.done = False
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while not self.done:
            try:
                client, _ = self.sock.accept()
            except OSError:
                return
            try:
                server = socket.create_connection(self.target, timeout=10)
                server.settimeout(None)
            except OSError:
                client.close()
                continue
            for a, b in ((client, server), (server, client)):
                threading.Thread(target=self._pipe, args=(a, b),
                                 daemon=True).start()

    @staticmethod
    def _pipe(src, dst):
        try:
            while True:
                data = src.recv(65536)
                if not data:
                    break
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def close(self):
        self.done = True
        self.sock.close()


# -- the plugin's configuration ------------------------------------------


def host_topology(c, host):
    """{NUMA cell: [CPUs]} from the host's libvirt capabilities."""
    rc, out = hv.virsh(c.state_dir, host, 'capabilities')
    if rc != 0:
        raise WhiteboxError('virsh capabilities on %s: %s' % (host, out))
    cells = {}
    for cell in ET.fromstring(out).findall('./host/topology/cells/cell'):
        cells[int(cell.get('id'))] = sorted(
            int(cpu.get('id')) for cpu in cell.findall('./cpus/cpu'))
    return cells


def nodes_yaml(c, dedicated, shared):
    """The plugin's description of the hosts (YAML is a JSON superset)."""
    import json
    nodes = {}
    for comp in c.computes():
        node = {'cpu_dedicated_set': dedicated,
                'services': {
                    'libvirt': {},
                    'nova-compute': {
                        'config_path': c.compute_conf(comp['host'])}}}
        if shared:
            node['cpu_shared_set'] = shared
        nodes[comp['host']] = node
    return json.dumps(nodes, indent=2, sort_keys=True) + '\n'


def _cpus(spec):
    if not spec:
        return 0
    a, _, b = spec.partition('-')
    return int(b or a) - int(a) + 1


def plugin_conf(c, top, key, layout, dedicated, shared, topology):
    db = urlparse.urlparse(c.db_url('nova_cell1'))
    cells = ', '.join('%d: [%s]' % (n, ', '.join(str(x) for x in cpus))
                      for n, cpus in sorted(topology.items()))
    addresses = ','.join('%s:%s' % (comp['host'],
                                    c.broker_address(comp['host']))
                         for comp in c.computes())
    return '\n'.join([
        '',
        '[whitebox]',
        'nodes_yaml = %s' % os.path.join(top, 'nodes-%s.yaml' % layout),
        'ctlplane_ssh_username = root',
        'ctlplane_ssh_private_key_path = %s' % key,
        'ctlplane_addresses = %s' % addresses,
        'containers = False',
        'max_compute_nodes = %d' % len(c.computes()),
        'flavor_volume_size = 1',
        'flavor_ram_size = 64',
        '',
        '[whitebox-database]',
        'host = %s' % DB_ADDRESS,
        'user = %s' % db.username,
        'password = %s' % db.password,
        'nova_cell1_db_name = %s' % db.path.lstrip('/'),
        '',
        '[whitebox-hardware]',
        'cpu_topology = %s' % cells,
        'dedicated_cpus_per_numa = %d' % _cpus(dedicated),
        'shared_cpus_per_numa = %d' % _cpus(shared),
        '',
        '[whitebox-nova-compute]',
        'log_query_command = zgrep',
        '',
        '[compute-feature-enabled]',
        # NOTE: the filters the libvirt cloud's scheduler runs
        # (configs.SCHEDULER_FILTERS): the plugin reads them from here
        'scheduler_enabled_filters = %s' % ','.join(c.scheduler_filters()),
        '',
    ])


# -- the run -------------------------------------------------------------


def set_layout(c, dedicated, shared, modes=None):
    """Write the CPU sets into every compute's file.

    Each compute whose sets or mode change restarts once, in its mode.
    :param modes: {host: mode} to restart in (default: as each runs)
    :returns: the hosts restarted
    """
    crudini = _which('crudini')
    restarted = []
    for comp in c.computes():
        host = comp['host']
        conf = c.compute_conf(host)
        mode = (modes or {}).get(host, comp['mode'])

        def get(opt):
            p = subprocess.run([crudini, '--get', conf, 'compute', opt],
                               stdout=subprocess.PIPE,
                               stderr=subprocess.DEVNULL,
                               universal_newlines=True)
            return p.stdout.strip() if p.returncode == 0 else None

        same = (get('cpu_dedicated_set'), get('cpu_shared_set')) == (
            dedicated, shared)
        if same and mode == comp['mode']:
            continue
        if not same:
            subprocess.check_call([crudini, '--set', conf, 'compute',
                                   'cpu_dedicated_set', dedicated])
            if shared:
                subprocess.check_call([crudini, '--set', conf, 'compute',
                                       'cpu_shared_set', shared])
            else:
                subprocess.check_call([crudini, '--del', conf, 'compute',
                                       'cpu_shared_set'])
        c.restart_compute(host, mode)
        restarted.append(host)
    return restarted


def run(c, modes=('wrapper', 'plain'), concurrency=1):
    """Every layout under every mode; the results, in order.

    :returns: [{'mode', 'layout', 'left_out', tempest's counts...}]
    """
    from cloud_lib import checks
    from cloud_lib import cloud as cloud_mod
    if c.hypervisor != 'libvirt':
        raise WhiteboxError('the plugin checks libvirt guests: bring the '
                            'cloud up with --hypervisor libvirt')
    if not c.info.get('pcpu', True):
        raise WhiteboxError(
            '%s has no cpu_dedicated_set: its pinned and unpinned guests '
            'share vcpu_pin_set, so neither layout exists there' % c.series)
    unknown = [m for m in modes if m not in ('wrapper', 'plain')]
    if unknown or not modes:
        raise WhiteboxError('modes are wrapper and plain, not %s' % (
            ', '.join(unknown) or 'none'))
    lacking = missing()
    if lacking:
        raise WhiteboxError('missing on this host: %s (apt-get install '
                            '--no-install-recommends %s)' % (
                                ', '.join(n for n, p in sorted(
                                    BINARIES.items()) if p in lacking),
                                ' '.join(lacking)))
    venv = ensure_venv(c)
    top = os.path.join(c.state_dir, 'whitebox')
    os.makedirs(top, exist_ok=True)
    before = {comp['host']: comp['mode'] for comp in c.computes()}
    topology = host_topology(c, c.computes()[0]['host'])
    db = urlparse.urlparse(c.db_url('nova_cell1'))
    results = []
    forwarder = Forwarder((db.hostname, db.port))
    try:
        key = start_sshds(c)
        for mode in modes:
            for layout, dedicated, shared, _classes in LAYOUTS:
                cloud_mod.say('whitebox: %s computes, %s layout' % (
                    mode, layout))
                set_layout(c, dedicated, shared,
                           {host: mode for host in before})
                with open(os.path.join(top, 'nodes-%s.yaml' % layout),
                          'w') as f:
                    f.write(nodes_yaml(c, dedicated, shared))
                started = time.monotonic()
                symptoms = checks.pinning_symptoms(c)
                sections, applied = checks.sections_by_kind(c)
                result = tempest.run(
                    c, regex=regex(c.series, layout),
                    concurrency=concurrency, venv=venv,
                    name='whitebox-%s-%s' % (mode, layout),
                    extra_conf=plugin_conf(c, top, key, layout, dedicated,
                                           shared, topology))
                result.update({
                    'mode': mode, 'layout': layout,
                    'cpu_dedicated_set': dedicated,
                    'cpu_shared_set': shared,
                    'left_out': left_out(c.series, layout),
                    'pinning_errors': _new(symptoms,
                                           checks.pinning_symptoms(c)),
                    # NOTE: the extension's own counters: what its mixins
                    # ran under the tracker's lock during the tests
                    'sections_by_kind': _new({'': sections}, {
                        '': checks.sections_by_kind(c)[0]}).get('', {}),
                    # NOTE: none on a Nova already fixed (the extension
                    # stands aside there)
                    'mixins_applied': applied,
                    'wall_seconds': round(time.monotonic() - started, 1)})
                results.append(result)
                print_result(result)
    finally:
        forwarder.close()
        # NOTE: as they were: the cloud's layout, each compute's mode
        set_layout(c, LAYOUTS[0][1], LAYOUTS[0][2], before)
    return results


def _new(before, after):
    """{host: {symptom: lines}} logged between two readings."""
    out = {}
    for host, found in after.items():
        for name, n in found.items():
            more = n - before.get(host, {}).get(name, 0)
            if more > 0:
                out.setdefault(host, {})[name] = more
    return out


def judge(results):
    """The problems of a run; none is a pass.

    With the extension every run passes, no compute logs a pinning
    error, and where it applied its confirm mixin (not on a Nova already
    fixed) a passed resize ran a confirm section. Plain computes are the
    baseline: what they do is reported, not judged (the resizes may meet
    bug 1879878 there).
    """
    problems = []
    for r in results:
        if r['mode'] != 'wrapper':
            continue
        what = 'whitebox (wrapper computes, %s layout)' % r['layout']
        if r['rc'] != 0 or r['failures']:
            problems.append('%s failed: %s' % (what, ', '.join(
                f.replace(MODULE + '.', '') for f in r['failures'])))
        if not r['passed']:
            problems.append('%s passed no test' % what)
        resized = [t for t in r.get('passed_tests', [])
                   if '.test_resize_' in t]
        confirm = any('confirm' in mixins
                      for mixins in r.get('mixins_applied', {}).values())
        if resized and confirm and not r['sections_by_kind'].get(
                'confirm'):
            problems.append('%s: %d resize test(s) passed and no compute '
                            'ran a confirm section' % (what, len(resized)))
        for host, found in sorted(r['pinning_errors'].items()):
            problems.append('%s: %s logged %s' % (what, host, ', '.join(
                '%s %d' % kv for kv in sorted(found.items()))))
    return problems


def print_result(r):
    print('whitebox %s/%s: ran %s, passed %s, skipped %s, failed %s in %ss'
          % (r['mode'], r['layout'], r['ran'], r['passed'], r['skipped'],
             r['failed'], r['seconds']))
    for s in r['skips']:
        print('  skipped %s: %s' % (s['test'].replace(MODULE + '.', ''),
                                    s['reason']))
    for f in r['failures']:
        print('  FAILED %s' % f.replace(MODULE + '.', ''))
    print('  critical sections: %s' % (', '.join(
        '%s %d' % kv for kv in sorted(r['sections_by_kind'].items()))
        or 'none'))
    for host, found in sorted(r['pinning_errors'].items()):
        print('  %s logged %s' % (host, ', '.join(
            '%s %d' % kv for kv in sorted(found.items()))))


def table(results):
    """The counts side by side: one line per mode and layout."""
    lines = ['%-8s %-10s %4s %6s %7s %6s %8s' % (
        'mode', 'layout', 'ran', 'passed', 'skipped', 'failed', 'seconds')]
    for r in results:
        lines.append('%-8s %-10s %4s %6s %7s %6s %8s' % (
            r['mode'], r['layout'], r['ran'], r['passed'], r['skipped'],
            r['failed'], r['seconds']))
    return lines
