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

"""Pinned CPUs on libvirt computes: Nova's books against the guests.

Two readings per host:

* the books: the pinned CPUs of every NUMA cell of the host's compute
  node (``compute_nodes.numa_topology``, as the resource tracker saved
  it), read from the cell database;
* the guests: the host CPUs each domain's vCPUs are pinned to
  (``<cputune><vcpupin cpuset=...>`` of its XML), read from the host's
  own libvirtd.

The books must equal the CPUs of the host's *defined* domains (a
resize's source keeps its domain, shut off, and its pinning in the
books until the confirm), and no two *running* domains of a host may
share a CPU. A double free (bug 1879878) shows as books missing CPUs a
guest still runs on; the next pinning there puts a second guest on them.
"""

import json
import os
import re
import subprocess
from urllib.parse import urlparse
import xml.etree.ElementTree as ET

ENV_URIS = 'NRL_LIBVIRT_URIS'
ENV_DB = 'NRL_CELL1_DB_URL'
#: the exceptions Nova raises on a double free or a double pin
LOG_SYMPTOMS = ('CPUUnpinningInvalid', 'CPUPinningInvalid')


def parse_cpuset(text):
    """'0-2,5' -> {0, 1, 2, 5}."""
    cpus = set()
    for part in (text or '').split(','):
        part = part.strip()
        if not part:
            continue
        if '-' in part:
            lo, hi = part.split('-', 1)
            cpus.update(range(int(lo), int(hi) + 1))
        else:
            cpus.add(int(part))
    return cpus


def domain_pins(xml):
    """The host CPUs a domain's XML pins its vCPUs to."""
    root = ET.fromstring(xml)
    cpus = set()
    for pin in root.findall('./cputune/vcpupin'):
        cpus |= parse_cpuset(pin.get('cpuset'))
    return cpus


def books_pins(numa_topology):
    """The pinned CPUs of a compute node's ``numa_topology`` column."""
    if not numa_topology:
        return set()
    data = json.loads(numa_topology)
    cells = data.get('nova_object.data', data).get('cells', [])
    cpus = set()
    for cell in cells:
        cpus.update(cell.get('nova_object.data', cell).get(
            'pinned_cpus') or [])
    return cpus


class Reader(object):
    """Reads both, for every libvirt compute of the cloud."""

    def __init__(self, uris, db_url, virsh='virsh'):
        self.uris = uris
        self.db_url = db_url
        self.virsh_bin = virsh

    @classmethod
    def from_env(cls, env=os.environ):
        """None unless the cloud's computes run libvirt."""
        if not env.get(ENV_URIS):
            return None
        return cls(json.loads(env[ENV_URIS]), env[ENV_DB])

    def instances_dir(self, host):
        """``host``'s own instances directory (hypervisor.own_instances).

        The sibling of the directory of the socket its URI names, as
        the daemon's log directory is.
        """
        m = re.search(r'socket=([^&]+)', self.uris.get(host, ''))
        if not m:
            return None
        return os.path.join(os.path.dirname(os.path.dirname(m.group(1))),
                            'instances')

    def qemu_log_tail(self, host, instance_name, lines=3):
        """The last lines of a guest's QEMU log on ``host``, or None.

        The host's libvirtd writes it under its own log directory, the
        sibling of the directory of the socket its URI names.
        """
        m = re.search(r'socket=([^&]+)', self.uris.get(host, ''))
        if not m or not instance_name:
            return None
        path = os.path.join(os.path.dirname(os.path.dirname(m.group(1))),
                            'log', 'qemu', '%s.log' % instance_name)
        try:
            with open(path) as f:
                return [line.rstrip('\n') for line in f.readlines()[-lines:]]
        except (IOError, OSError):
            return None

    def _virsh(self, host, *args):
        proc = subprocess.run(
            [self.virsh_bin, '-c', self.uris[host]] + list(args),
            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            universal_newlines=True, timeout=60)
        if proc.returncode != 0:
            raise RuntimeError('virsh %s on %s: %s' % (
                ' '.join(args), host, proc.stderr.strip()))
        return proc.stdout

    def guests(self, host):
        """{domain name: (running, pinned host CPUs)}."""
        out = {}
        running = set(self._virsh(host, 'list', '--name').split())
        for name in self._virsh(host, 'list', '--all', '--name').split():
            try:
                xml = self._virsh(host, 'dumpxml', name)
            except RuntimeError:
                continue  # undefined between the list and now
            out[name] = (name in running, domain_pins(xml))
        return out

    def books(self):
        """{host: pinned CPUs in its compute node's NUMA books}."""
        import pymysql
        u = urlparse(self.db_url)
        conn = pymysql.connect(host=u.hostname, port=u.port or 3306,
                               user=u.username, password=u.password,
                               database=u.path.lstrip('/'), charset='utf8')
        try:
            with conn.cursor() as cur:
                cur.execute('SELECT host, numa_topology FROM compute_nodes '
                            'WHERE deleted = 0')
                return {host: books_pins(topo)
                        for host, topo in cur.fetchall()}
        finally:
            conn.close()

    def reading(self):
        """{host: {'books': [...], 'guests': {name: {...}}}}."""
        books = self.books()
        out = {}
        for host in sorted(self.uris):
            out[host] = {
                'books': sorted(books.get(host, ())),
                'guests': {n: {'running': r, 'cpus': sorted(c)}
                           for n, (r, c) in self.guests(host).items()}}
        return out


def judge(reading):
    """(books problems, shared-CPU problems) of one reading.

    Books problems may be transient (a tracker saves on its periodic
    task): judge them once the books had time to settle. A CPU two
    running guests share is damage done, whenever it is read.
    """
    books, shared = [], []
    for host, r in sorted(reading.items()):
        defined = set()
        owner = {}
        for name, g in sorted(r['guests'].items()):
            defined.update(g['cpus'])
            if not g['running']:
                continue
            for cpu in g['cpus']:
                if cpu in owner:
                    shared.append('%s: CPU %d pinned by running %s and %s'
                                  % (host, cpu, owner[cpu], name))
                owner[cpu] = name
        if set(r['books']) != defined:
            books.append('%s: the books pin CPUs %s, its guests %s' % (
                host, sorted(r['books']) or '[]', sorted(defined) or '[]'))
    return books, shared


def count_symptoms(log):
    """{exception name: lines} of Nova's pinning errors in a log."""
    found = dict((s, 0) for s in LOG_SYMPTOMS)
    pattern = re.compile('|'.join(LOG_SYMPTOMS))
    try:
        with open(log, 'rb') as f:
            for line in f:
                m = pattern.search(line.decode('utf-8', 'replace'))
                if m:
                    found[m.group(0)] += 1
    except (IOError, OSError):
        pass
    return found


def main():
    """Print the judgement of one reading, as JSON.

    For the cloud's tools, which run outside the virtualenv that has the
    database driver.
    """
    reader = Reader.from_env()
    if reader is None:
        print(json.dumps(None))
        return
    books, shared = judge(reader.reading())
    print(json.dumps({'books': books, 'shared': shared}))


if __name__ == '__main__':
    main()
