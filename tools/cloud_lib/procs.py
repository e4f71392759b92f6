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

"""Ports, processes and the state file of one cloud.

Every service runs in its own session (process group), so that stopping
it by the pid ``up`` recorded also ends the workers it forked, and
nothing else. A pid is only signalled while its command line is still
the one recorded: a pid the kernel reused is left alone.
"""

import json
import os
import signal
import socket
import subprocess
import time

STATE_FILE = 'state.json'


class StartError(Exception):
    """A component did not come up; ``name`` and ``log`` say which."""

    def __init__(self, name, reason, log=None):
        super(StartError, self).__init__('%s: %s' % (name, reason))
        self.name = name
        self.reason = reason
        self.log = log


def port_free(port):
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    # NOTE: as the servers bind: a port left in TIME_WAIT by the last run
    # is free for them, one somebody listens on is not.
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind(('127.0.0.1', port))
        return True
    except OSError:
        return False
    finally:
        sock.close()


def ephemeral_range():
    """The kernel's range for outgoing connections' local ports."""
    try:
        with open('/proc/sys/net/ipv4/ip_local_port_range') as f:
            low, high = (int(x) for x in f.read().split())
        return low, high
    except (IOError, OSError, ValueError):
        return 32768, 60999


#: where a port is looked for when the preferred one is taken
FALLBACK_PORTS = (20000, 32000)


def pick_port(preferred, taken):
    """``preferred`` when free on loopback, else another free one.

    Neither is in the kernel's ephemeral range: a port there can be given
    to any outgoing connection (there are hundreds, to the database and
    the broker) between this pick and the server's bind.

    :param taken: ports already handed out in this ``up`` (not yet bound)
    """
    low, high = ephemeral_range()

    def usable(port):
        return (port and port not in taken and not low <= port <= high
                and port_free(port))

    start, end = FALLBACK_PORTS
    candidates = [preferred] + list(range(start, end))
    for port in candidates:
        if usable(port):
            taken.add(port)
            return port
    raise StartError('ports', 'no free port in %d-%d outside the '
                     'ephemeral range %d-%d' % (start, end, low, high))


def _listening_sockets():
    """Local ports in LISTEN state, from /proc/net/tcp{,6}; None if unread.

    Read rather than connected to: a connection to a port nobody listens
    on can meet itself (TCP simultaneous open, when the kernel picks that
    same port as the client's) and look like a server that is up.
    """
    ports = set()
    read = False
    for name in ('/proc/net/tcp', '/proc/net/tcp6'):
        try:
            with open(name) as f:
                lines = f.readlines()[1:]
        except (IOError, OSError):
            continue
        read = True
        for line in lines:
            fields = line.split()
            if len(fields) > 3 and fields[3] == '0A':
                ports.add(int(fields[1].rsplit(':', 1)[1], 16))
    return ports if read else None


def listening(port, host='127.0.0.1'):
    ports = _listening_sockets()
    if ports is not None:
        return port in ports
    try:
        socket.create_connection((host, port), 1).close()
        return True
    except OSError:
        return False


def _stat(pid):
    try:
        with open('/proc/%d/stat' % pid) as f:
            return f.read().rsplit(')', 1)[1].split()
    except (IOError, OSError, IndexError):
        return None


def starttime(pid):
    """The process's start time (clock ticks since boot), or None.

    With the pid it names one process for good: a pid the kernel hands
    out again gets another start time. (The command line would not do:
    some servers exec into another program while starting.)
    """
    fields = _stat(pid)
    return fields[19] if fields else None


def alive(pid, start_id=None):
    """True if ``pid`` runs (not a zombie) and started at ``start_id``."""
    if not pid:
        return False
    fields = _stat(pid)
    if not fields or fields[0] == 'Z':
        return False
    return start_id is None or fields[19] == start_id


def start(name, argv, log, env=None, cwd=None):
    """Start ``argv`` in its own session, output appended to ``log``."""
    with open(log, 'ab') as out:
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, env=env, cwd=cwd,
                                start_new_session=True, close_fds=True)
    return proc.pid


def group_members(pgid):
    members = []
    for entry in os.listdir('/proc'):
        if not entry.isdigit():
            continue
        try:
            with open('/proc/%s/stat' % entry) as f:
                fields = f.read().rsplit(')', 1)[1].split()
        except (IOError, OSError, IndexError):
            continue
        if int(fields[2]) == pgid and fields[0] != 'Z':
            members.append(int(entry))
    return members


def stop(pid, start_id, timeout=30):
    """SIGTERM the session ``pid`` leads, then SIGKILL what is left.

    :returns: True if something was stopped
    """
    if not alive(pid, start_id):
        fields = _stat(pid)
        if fields and fields[0] != 'Z':
            return False  # the pid is another process's now
        # NOTE: the leader is gone (or a zombie); workers it forked may
        # still be in its group, which nobody else can have joined.
        if group_members(pid):
            _signal_group(pid, signal.SIGKILL)
            _reap(pid)
            return True
        return False
    _signal_group(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not group_members(pid):
            return True
        _reap(pid)
        time.sleep(0.2)
    _signal_group(pid, signal.SIGKILL)
    time.sleep(0.5)
    _reap(pid)
    return True


def stop_all(entries, timeout=30):
    """:func:`stop` for many processes at once: one wait, not one each.

    Every live one gets SIGTERM at once; what is left after ``timeout``
    gets SIGKILL. Ones already gone are handled by :func:`stop`.

    :returns: how many were stopped
    """
    live = [e for e in entries if alive(e['pid'], e['start_id'])]
    stopped = sum(1 for e in entries if e not in live and
                  stop(e['pid'], e['start_id']))
    for e in live:
        _signal_group(e['pid'], signal.SIGTERM)
    deadline = time.monotonic() + timeout
    waiting = list(live)
    while waiting and time.monotonic() < deadline:
        for e in list(waiting):
            _reap(e['pid'])
            if not group_members(e['pid']):
                waiting.remove(e)
        if waiting:
            time.sleep(0.2)
    for e in waiting:
        _signal_group(e['pid'], signal.SIGKILL)
    if waiting:
        time.sleep(0.5)
        for e in waiting:
            _reap(e['pid'])
    return stopped + len(live)


def _signal_group(pgid, sig):
    try:
        os.killpg(pgid, sig)
    except OSError:
        pass


def _reap(pid):
    try:
        os.waitpid(pid, os.WNOHANG)
    except OSError:
        pass


def wait_for(name, check, pid, start_id, log, timeout):
    """Poll ``check()`` until true; fail if the process dies or time ends."""
    deadline = time.monotonic() + timeout
    while True:
        # NOTE: up only while the process that was started is alive: the
        # check may be met by another one (a server left from elsewhere).
        if check() and (pid is None or alive(pid, start_id)):
            return
        if pid is not None and not alive(pid, start_id):
            _reap(pid)
            raise StartError(name, 'exited before it was up', log)
        if time.monotonic() > deadline:
            raise StartError(name, 'not up after %ds' % timeout, log)
        time.sleep(0.3)


def tail(path, lines=25):
    try:
        with open(path, 'rb') as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - 64 * 1024))
            text = f.read().decode('utf-8', 'replace')
    except (IOError, OSError):
        return '(no log at %s)' % path
    return '\n'.join(text.splitlines()[-lines:])


def run(argv, log, env=None, timeout=600, name=None):
    """Run a set-up command to completion, output appended to ``log``."""
    with open(log, 'ab') as out:
        out.write(('\n$ %s\n' % ' '.join(argv)).encode())
        out.flush()
        try:
            rc = subprocess.call(argv, stdout=out, stderr=subprocess.STDOUT,
                                 stdin=subprocess.DEVNULL, env=env,
                                 timeout=timeout)
        except subprocess.TimeoutExpired:
            raise StartError(name or argv[0], 'timed out after %ds: %s'
                             % (timeout, ' '.join(argv)), log)
    if rc != 0:
        raise StartError(name or os.path.basename(argv[0]),
                         'exit %d: %s' % (rc, ' '.join(argv)), log)


class State(object):
    """state.json in the state directory: what ``up`` started."""

    def __init__(self, state_dir):
        self.path = os.path.join(state_dir, STATE_FILE)
        self.data = {}
        if os.path.exists(self.path):
            with open(self.path) as f:
                self.data = json.load(f)

    def save(self):
        tmp = self.path + '.tmp'
        with open(tmp, 'w') as f:
            json.dump(self.data, f, indent=2, sort_keys=True)
        os.rename(tmp, self.path)

    @property
    def services(self):
        return self.data.setdefault('services', [])

    def running(self):
        return [s for s in self.services
                if s.get('pid') and alive(s['pid'], s.get('start_id'))]
