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

"""ssh between the libvirt computes, as on clouds with local storage.

A resize or cold migration between computes that do not share the
instances path copies the disks over ssh (Nova's libvirt driver:
``ssh <destination's my_ip> mkdir``, ``scp``), and whitebox-tempest-plugin
reads each guest over ssh. So each libvirt compute runs an sshd in its
libvirtd's mount and UTS namespaces (where the instances path is that
compute's own directory and the system URI its own daemon), on the
compute's own loopback address (127.0.1.N:22, its ``my_ip``). Root logs
in with a key made for the cloud (``ssh/`` in the state directory),
nothing else.

nova-compute finds ``ssh`` and ``scp`` first in ``ssh/bin``: wrappers
that give the system's clients the cloud's own configuration (its key,
its known hosts, batch mode), so neither root's home nor the system's
ssh configuration is touched.
"""

import os
import shutil
import socket
import subprocess

from cloud_lib import procs

#: binary: Debian package
BINARIES = {'sshd': 'openssh-server', 'ssh': 'openssh-client',
            'scp': 'openssh-client', 'ssh-keygen': 'openssh-client',
            'nsenter': 'util-linux'}
SBIN = ('/usr/sbin', '/usr/bin', '/sbin', '/bin')


class SshError(Exception):
    pass


def _which(name):
    found = shutil.which(name)
    if found:
        return found
    for d in SBIN:
        path = os.path.join(d, name)
        if os.access(path, os.X_OK):
            return path
    return None


def missing():
    """The Debian packages of the binaries that are not installed."""
    return sorted({p for name, p in BINARIES.items() if not _which(name)})


def top(state_dir):
    return os.path.join(state_dir, 'ssh')


def bindir(state_dir):
    """Where nova-compute finds ``ssh`` and ``scp`` first."""
    return os.path.join(top(state_dir), 'bin')


def keys(state_dir):
    """The cloud's client key (made once); its path.

    RSA in PEM: the paramiko of the older series (whitebox's client)
    reads no other.
    """
    d = top(state_dir)
    os.makedirs(d, exist_ok=True)
    for name, argv in (('id_rsa', ['-t', 'rsa', '-b', '2048', '-m', 'PEM']),
                       ('ssh_host_ed25519_key', ['-t', 'ed25519'])):
        path = os.path.join(d, name)
        if not os.path.exists(path):
            subprocess.check_call([_which('ssh-keygen'), '-q', '-N', '',
                                   '-C', 'nrl-cloud', '-f', path] + argv)
    return os.path.join(d, 'id_rsa')


def sshd_config(d, host, address):
    return '\n'.join([
        'ListenAddress %s:22' % address,
        'HostKey %s' % os.path.join(d, 'ssh_host_ed25519_key'),
        'PidFile %s' % os.path.join(d, 'sshd-%s.pid' % host),
        'AuthorizedKeysFile %s' % os.path.join(d, 'id_rsa.pub'),
        # NOTE: the state directory is not root's home: its modes are
        # the run's, not ssh's.
        'StrictModes no',
        'PermitRootLogin prohibit-password',
        'PubkeyAuthentication yes',
        # NOTE: paramiko before 2.9 signs with ssh-rsa (SHA-1) only
        'PubkeyAcceptedAlgorithms +ssh-rsa',
        'PasswordAuthentication no',
        'KbdInteractiveAuthentication no',
        'UsePAM no',
        'UseDNS no',
        'PrintMotd no',
        # NOTE: scp speaks sftp (OpenSSH 9)
        'Subsystem sftp internal-sftp',
        '',
    ])


def client_config(d, addresses):
    return '\n'.join([
        'Host %s' % ' '.join(addresses),
        '    User root',
        '    IdentityFile %s' % os.path.join(d, 'id_rsa'),
        '    IdentitiesOnly yes',
        # NOTE: the host key is made with the cloud, and the addresses
        # are this machine's own loopback ones
        '    StrictHostKeyChecking no',
        '    UserKnownHostsFile %s' % os.path.join(d, 'known_hosts'),
        '    BatchMode yes',
        '    LogLevel ERROR',
        '',
    ])


def write_clients(state_dir, addresses):
    """The ``ssh`` and ``scp`` wrappers nova-compute runs."""
    d = top(state_dir)
    os.makedirs(d, exist_ok=True)
    conf = os.path.join(d, 'ssh_config')
    with open(conf, 'w') as f:
        f.write(client_config(d, addresses))
    os.makedirs(bindir(state_dir), exist_ok=True)
    for name in ('ssh', 'scp'):
        path = os.path.join(bindir(state_dir), name)
        with open(path, 'w') as f:
            f.write('#!/bin/sh\nexec %s -F %s "$@"\n' % (_which(name), conf))
        os.chmod(path, 0o755)
    return conf


def listening(address, port=22):
    def check():
        s = socket.socket()
        s.settimeout(1)
        try:
            s.connect((address, port))
            return True
        except OSError:
            return False
        finally:
            s.close()
    return check


def start(c):
    """An sshd in each libvirt compute's namespaces (those not running).

    :returns: the entries of the sshds started
    :raises SshError: a binary is missing, a compute has no libvirtd, or
        something else listens on a compute's address
    """
    lacking = missing()
    if lacking:
        raise SshError('missing on this host: %s (apt-get install '
                       '--no-install-recommends %s)' % (
                           ', '.join(n for n, p in sorted(BINARIES.items())
                                     if p in lacking), ' '.join(lacking)))
    d = top(c.state_dir)
    keys(c.state_dir)
    os.makedirs('/run/sshd', exist_ok=True)
    daemons = {e['libvirt_host']: e for e in c.state.services
               if e.get('libvirt_host')}
    running = {e['ssh_host'] for e in c.state.services
               if e.get('ssh_host') and procs.alive(e['pid'],
                                                    e['start_id'])}
    write_clients(c.state_dir, sorted(c.broker_address(h) for h in daemons))
    entries = []
    for host in sorted(daemons):
        if host in running:
            continue
        daemon = daemons[host]
        if not procs.alive(daemon['pid'], daemon['start_id']):
            raise SshError('%s has no libvirtd running' % host)
        address = c.broker_address(host)
        if listening(address)():
            raise SshError('something already listens on %s:22' % address)
        conf = os.path.join(d, 'sshd-%s.conf' % host)
        with open(conf, 'w') as f:
            f.write(sshd_config(d, host, address))
        name = 'sshd-%s' % host
        log = c.log(name)
        pid = procs.start(name, [
            _which('nsenter'), '-t', str(daemon['pid']), '--mount', '--uts',
            _which('sshd'), '-D', '-e', '-f', conf], log)
        entry = {'name': name, 'pid': pid, 'start_id': procs.starttime(pid),
                 'port': 22, 'log': log, 'ssh_host': host}
        # NOTE: in the state at once: `tools/cloud down` stops it if the
        # command that started it dies.
        c.state.services.append(entry)
        c.state.save()
        entries.append(entry)
        procs.wait_for(name, listening(address), pid, entry['start_id'],
                       log, 30)
    return entries
