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

"""A libvirtd per compute, for ``tools/cloud up --hypervisor libvirt``.

Each compute host gets its own libvirt daemon, QEMU under TCG
(``virt_type = qemu``: ``/dev/kvm`` is root's alone in a container), in
its own mount and UTS namespaces: the host's directories bound over
``/etc/libvirt``, ``/run/libvirt``, ``/var/lib/libvirt``,
``/var/cache/libvirt`` and ``/var/log/libvirt``, and the compute's name
as the hostname, which libvirt reports and Nova names the node after
(two daemons with one name would be one resource provider). Its socket
is in the host's state directory, where nova-compute finds it
(``connection_uri``).

Storage is local to each compute, as on clouds without shared storage:
every compute names one instances path (Nova copies a disk to the same
path on the other host), and in each compute's namespace that path is
the compute's own directory (:func:`own_instances`) bound over it. The
compute's nova-compute and sshd run in the daemon's mount namespace
(:func:`nsenter`), so the driver, QEMU and a resize's copy over ssh
all see that compute's disks and no other's; a live migration is a
block migration. The daemon runs in the foreground as the leader of
its own session, stopped by pid like every other service; the guests
are destroyed and undefined before it stops, and any QEMU left (a daemon
killed first) is killed by the pid file libvirt wrote for it.
"""

import glob
import os
import shutil
import signal
import subprocess
import uuid

from cloud_lib import procs

PACKAGES = 'libvirt-daemon-system libvirt-clients qemu-system-x86 qemu-utils'
BINARIES = {'libvirtd': ('/usr/sbin', '/usr/bin'),
            'virsh': ('/usr/bin',),
            'qemu-system-x86_64': ('/usr/bin',),
            'qemu-img': ('/usr/bin',),
            'unshare': ('/usr/bin', '/bin'),
            'nsenter': ('/usr/bin', '/bin')}
#: the daemon's directories, bound over the system's in its namespace
DIRS = (('etc', '/etc/libvirt'), ('run', '/run/libvirt'),
        ('lib', '/var/lib/libvirt'), ('cache', '/var/cache/libvirt'),
        ('log', '/var/log/libvirt'))


def _which(name):
    found = shutil.which(name)
    if found:
        return found
    for d in BINARIES[name]:
        path = os.path.join(d, name)
        if os.access(path, os.X_OK):
            return path
    return None


def missing():
    """The binaries this needs that are not installed."""
    return [name for name in sorted(BINARIES) if not _which(name)]


def base(state_dir, host):
    return os.path.join(state_dir, 'computes', host, 'libvirt')


def instances(state_dir):
    """The instances path every compute names (``instances_path``)."""
    return os.path.join(state_dir, 'instances')


def own_instances(state_dir, host):
    """What ``instances(state_dir)`` is in ``host``'s namespace."""
    return os.path.join(base(state_dir, host), 'instances')


def nsenter(pid):
    """The argv prefix that runs a command in a daemon's namespace.

    The mount namespace only: the compute's own instances, nothing else
    of the daemon's (its hostname is not the command's business).
    """
    return [_which('nsenter'), '-t', str(pid), '--mount']


def socket_path(state_dir, host):
    return os.path.join(base(state_dir, host), 'run', 'libvirt-sock')


def uri(state_dir, host):
    return 'qemu+unix:///system?socket=%s' % socket_path(state_dir, host)


def virsh(state_dir, host, *args, **kw):
    """``virsh -c <the host's URI> args``: (exit code, output)."""
    proc = subprocess.run(
        [_which('virsh'), '-c', uri(state_dir, host)] + list(args),
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        universal_newlines=True, timeout=kw.get('timeout', 60))
    return proc.returncode, proc.stdout


def write(state_dir, host, index, address):
    """The daemon's directories and configuration for ``host``.

    :param index: the compute's number, for its own port ranges
    :param address: the compute's own loopback address, where its QEMU
        takes an incoming live migration
    """
    top = base(state_dir, host)
    for name, _system in DIRS:
        os.makedirs(os.path.join(top, name), exist_ok=True)
    binds = [(os.path.join(top, name), system) for name, system in DIRS]
    binds.append((own_instances(state_dir, host), instances(state_dir)))
    os.makedirs(own_instances(state_dir, host), exist_ok=True)
    os.makedirs(instances(state_dir), exist_ok=True)
    etc = os.path.join(top, 'etc')
    for path in glob.glob('/etc/libvirt/*'):
        # NOTE: the package's own files (nwfilter, qemu templates) as
        # they are; the two this daemon reads are written below.
        dest = os.path.join(etc, os.path.basename(path))
        if os.path.isdir(path):
            if not os.path.exists(dest):
                shutil.copytree(path, dest, symlinks=True)
        elif not os.path.exists(dest):
            shutil.copy2(path, dest)
    # NOTE: the capability probe of QEMU takes seconds per daemon; the
    # system's cache, where one exists, spares it.
    cache = os.path.join(top, 'cache')
    if os.path.isdir('/var/cache/libvirt/qemu') and not os.path.exists(
            os.path.join(cache, 'qemu')):
        shutil.copytree('/var/cache/libvirt/qemu', os.path.join(cache,
                                                                'qemu'))
    with open(os.path.join(etc, 'libvirtd.conf'), 'w') as f:
        f.write('\n'.join([
            'unix_sock_dir = "%s"' % os.path.join(top, 'run'),
            'unix_sock_group = "root"',
            'unix_sock_ro_perms = "0770"',
            'unix_sock_rw_perms = "0770"',
            'auth_unix_ro = "none"',
            'auth_unix_rw = "none"',
            'host_uuid = "%s"' % uuid.uuid5(uuid.NAMESPACE_DNS, host),
            'log_outputs = "3:file:%s"' % os.path.join(top, 'log',
                                                       'libvirtd.log'),
            '']))
    first = 15900 + 100 * index
    migration = 49200 + 16 * index
    with open(os.path.join(etc, 'qemu.conf'), 'w') as f:
        f.write('\n'.join([
            'user = "root"',
            'group = "root"',
            # NOTE: two daemons would put same-named guests in one
            # cgroup: the second guest of a name would not start.
            'cgroup_controllers = [ ]',
            # NOTE: no virtlogd: QEMU writes its own log files.
            'stdio_handler = "file"',
            'vnc_listen = "127.0.0.1"',
            'remote_display_port_min = %d' % first,
            'remote_display_port_max = %d' % (first + 99),
            'remote_websocket_port_min = %d' % (first + 5700),
            'remote_websocket_port_max = %d' % (first + 5799),
            'migration_port_min = %d' % migration,
            'migration_port_max = %d' % (migration + 15),
            # NOTE: a live migration's memory goes to the destination's
            # QEMU at this address (its own hostname resolves nowhere;
            # libvirt refuses 127.0.0.1 as "the local machine")
            'migration_address = "%s"' % address,
            'migration_host = "%s"' % address,
            '']))
    script = os.path.join(top, 'start.sh')
    with open(script, 'w') as f:
        f.write('\n'.join(
            ['set -eu', 'hostname %s' % host] +
            ['mkdir -p %s && mount --bind %s %s' % (path, own, path)
             for own, path in binds] +
            # NOTE: its own pid file: the default, /run/libvirtd.pid, is
            # not under the directories bound, and a second daemon
            # could not take it.
            ['exec %s -f /etc/libvirt/libvirtd.conf -p %s' % (
                _which('libvirtd'), os.path.join(top, 'run', 'libvirtd.pid')),
             '']))
    return script


def start(state_dir, host, log, timeout=120):
    """Start ``host``'s libvirtd; wait until it answers as ``host``.

    :returns: its pid
    :raises procs.StartError: it exited, or did not answer in time
    """
    script = os.path.join(base(state_dir, host), 'start.sh')
    pid = procs.start('libvirtd-%s' % host, [
        _which('unshare'), '--mount', '--uts', '--propagation', 'private',
        'bash', script], log)
    start_id = procs.starttime(pid)

    def answers():
        if not os.path.exists(socket_path(state_dir, host)):
            return False
        rc, out = virsh(state_dir, host, 'hostname', timeout=30)
        return rc == 0 and out.strip() == host

    procs.wait_for('libvirtd-%s' % host, answers, pid, start_id, log,
                   timeout)
    return pid


def guests(state_dir, host):
    """The names of the daemon's domains, running or not."""
    rc, out = virsh(state_dir, host, 'list', '--all', '--name')
    return [n for n in out.split() if n] if rc == 0 else []


def clean(state_dir, host):
    """Destroy and undefine the guests; kill any QEMU libvirt left.

    :returns: the names of the domains it removed
    """
    names = []
    if os.path.exists(socket_path(state_dir, host)):
        names = guests(state_dir, host)
        for name in names:
            virsh(state_dir, host, 'destroy', name)
            virsh(state_dir, host, 'undefine', name, '--nvram')
    # NOTE: the daemon may be gone already (killed): its QEMUs are not
    # its children once started, and would live on.
    for pidfile in glob.glob(os.path.join(base(state_dir, host), 'run',
                                          'qemu', '*.pid')):
        try:
            with open(pidfile) as f:
                pid = int(f.read().strip() or 0)
        except (IOError, ValueError):
            continue
        if pid and procs.alive(pid):
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
    return names


def tail(state_dir, host):
    """The last lines of the daemon's own log."""
    return procs.tail(os.path.join(base(state_dir, host), 'log',
                                   'libvirtd.log'))
