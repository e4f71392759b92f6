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

"""Bring the cloud up and down.

Order: MariaDB and RabbitMQ; the databases of every service, migrated in
parallel; keystone (bootstrapped, then the catalog); placement, glance
(one image), neutron; nova-conductor, nova-scheduler, nova-api (cell0
and cell1 mapped); the computes (two through nova-compute-revert-lock,
one plain, or all plain with ``--plain``); host discovery; flavors.
"""

import glob
import hashlib
import json
import os
import pwd
import shutil
import subprocess
import sys
import threading
import time

from cloud_lib import configs
from cloud_lib import hostssh
from cloud_lib import hypervisor as hv
from cloud_lib import pinning
from cloud_lib import procs
from cloud_lib.series import SERIES

TOP = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))
LIB = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PASSWORD = 'nrl-secret'
DB_USER = 'nrl'
DATABASES = ('keystone', 'glance', 'placement', 'neutron', 'nova_api',
             'nova_cell0', 'nova_cell1')
#: preferred ports (another is picked when one is taken), all below the
#: kernel's ephemeral range (32768-60999): see procs.pick_port
PORTS = {
    'mariadb': 23306, 'rabbitmq': 25672, 'rabbitmq-dist': 25673,
    'epmd': 25674, 'keystone': 25000, 'placement': 28778,
    'glance': 29292, 'neutron': 29696, 'nova-api': 28774,
}
COMPUTES = (('nrl-compute1', 'wrapper'), ('nrl-compute2', 'wrapper'),
            ('nrl-compute3', 'plain'))
MARIADB_SERVER = ('mariadbd', 'mysqld')
MARIADB_INSTALL = ('mariadb-install-db', 'mysql_install_db')
MARIADB_CLIENT = ('mariadb', 'mysql')
SBIN = ('/usr/sbin', '/usr/bin', '/usr/local/sbin', '/usr/local/bin',
        '/usr/libexec')
RABBIT_DIRS = ('/usr/sbin', '/usr/lib/rabbitmq/bin', '/usr/local/sbin')
HYPERVISORS = ('fake', 'libvirt')
#: what every service needs, stopped last (and by faults on purpose)
INFRA = ('rabbitmq', 'mariadb')
#: the bindings the libvirt driver needs, for libvirt 9.0 (Debian 12):
#: the series' pin (Ussuri's 6.1.0) does not build against it.
LIBVIRT_PYTHON = 'libvirt-python==9.0.0'


class UpError(Exception):
    pass


def pip_install(python, constraints, requirements, what, env=None):
    """pip install ``requirements`` into ``python``'s virtualenv.

    :param env: more environment for pip (a build's)
    :raises UpError: when three attempts failed
    """
    env = dict(os.environ, **(env or {}))
    env['PIP_CONSTRAINT'] = os.path.join(TOP, 'constraints', 'build.txt')
    argv = [python, '-m', 'pip', 'install', '-q', '-c', constraints]
    argv += list(requirements)
    # NOTE: pip retries a failed request only a few times, and some hundred
    # downloads and builds go on here: one bad minute of a package index
    # should not cost the whole run. A later attempt reuses what an earlier
    # one installed.
    for attempt in (1, 2, 3):
        rc = subprocess.call(argv, env=env)
        if rc == 0:
            return
        if attempt == 3:
            raise UpError('pip could not install %s into %s (exit %d, '
                          'three attempts; its output is above)'
                          % (what, os.path.dirname(os.path.dirname(python)),
                             rc))
        say('pip failed (exit %d); trying again in 30s' % rc)
        time.sleep(30)


def _which(names, dirs=SBIN):
    for name in names:
        found = shutil.which(name)
        if found:
            return found
        for d in dirs:
            path = os.path.join(d, name)
            if os.path.isfile(path) and os.access(path, os.X_OK):
                return path
    return None


def keep_logs(state_dir, suffix):
    """Copy a state dir to ``<state dir><suffix>``, for what it says.

    Logs, configuration and reports, not the databases' files, images or
    sockets. :returns: the copy's path
    """
    keep = state_dir.rstrip('/') + suffix
    shutil.rmtree(keep, True)
    shutil.copytree(state_dir, keep, symlinks=True, ignore=(
        shutil.ignore_patterns('mysql', 'mnesia', 'images', 'run')))
    return keep


def say(msg):
    sys.stdout.write('cloud: %s\n' % msg)
    sys.stdout.flush()


def build_venv(venv, python, constraints, requirements, what):
    """Create or update a virtualenv (a stamp of what it holds skips it).

    :param constraints: a file name under ``constraints/``, or an
        absolute path
    """
    stamp = os.path.join(venv, '.nrl-cloud-stamp')
    constraints = os.path.join(TOP, 'constraints', constraints)
    digest = hashlib.sha256(json.dumps(
        [requirements, open(constraints).read()]).encode()).hexdigest()
    if os.path.exists(stamp) and open(stamp).read() == digest:
        return
    if not os.path.exists(os.path.join(venv, 'bin', 'python')):
        say('creating %s (Python %s)' % (venv, python))
        subprocess.check_call([find_python(python), '-m', 'venv', venv])
    say('installing %s into %s (a few minutes)' % (what, venv))
    pip_install(os.path.join(venv, 'bin', 'python'), constraints,
                requirements, what)
    with open(stamp, 'w') as f:
        f.write(digest)


#: the scheduler filters a cloud of pinned hosts adds to Nova's defaults
PINNED_HOST_FILTERS = ('NUMATopologyFilter', 'SameHostFilter',
                       'DifferentHostFilter')


class Cloud(object):

    def __init__(self, state_dir, series='ussuri', venv=None,
                 tempest_venv=None):
        self.state_dir = os.path.abspath(state_dir)
        self.state = procs.State(self.state_dir) if os.path.isdir(
            self.state_dir) else None
        data = self.state.data if self.state else {}
        self.series = data.get('series', series)
        self.info = SERIES[self.series]
        self.hypervisor = data.get('hypervisor', 'fake')
        self.venv = data.get('venv') or venv or os.path.join(
            TOP, '.tox', 'cloud-%s' % self.series)
        self.tempest_venv = tempest_venv or os.path.join(
            TOP, '.tox', 'cloud-tempest-%s' % self.series)
        self.ports = dict(data.get('ports', {}))
        self.password = PASSWORD
        self.etc = os.path.join(self.state_dir, 'etc')
        self.logs = os.path.join(self.state_dir, 'logs')
        self.run_dir = os.path.join(self.state_dir, 'run')

    # -- layout ---------------------------------------------------------

    @property
    def transport_url(self):
        return 'rabbit://guest:guest@127.0.0.1:%d/' % self.ports['rabbitmq']

    def broker_address(self, host):
        """The loopback address ``host`` reaches the broker on.

        Each compute its own (127.0.1.N, the broker listens on all of
        them), the other services 127.0.0.1: so one compute can be cut
        off from the broker (:meth:`cut_off`) and no one else.
        """
        names = [h for h, _m in COMPUTES]
        if host in names:
            return '127.0.1.%d' % (names.index(host) + 1)
        return '127.0.0.1'

    def compute_transport_url(self, host):
        return 'rabbit://guest:guest@%s:%d/' % (self.broker_address(host),
                                                self.ports['rabbitmq'])

    def db_url(self, name):
        return 'mysql+pymysql://%s:%s@127.0.0.1:%d/%s?charset=utf8' % (
            DB_USER, PASSWORD, self.ports['mariadb'], name)

    def conf(self, name):
        return os.path.join(self.etc, name)

    def log(self, name):
        return os.path.join(self.logs, '%s.log' % name)

    def bin(self, name):
        return os.path.join(self.venv, 'bin', name)

    @property
    def clouds_yaml(self):
        return self.conf('clouds.yaml')

    @property
    def socket(self):
        return os.path.join(self.run_dir, 'mysqld.sock')

    def venv_env(self, **extra):
        env = dict(os.environ)
        env['PYTHONPATH'] = LIB
        env['NRL_CLOUDS_YAML'] = self.clouds_yaml
        env['NRL_CLOUD_PASSWORD'] = PASSWORD
        env['OS_CLIENT_CONFIG_FILE'] = self.clouds_yaml
        if self.hypervisor == 'libvirt' and self.ports:
            # NOTE: the soak reads the pinned CPUs of both books, Nova's
            # and libvirt's (cloud_lib/pinning.py)
            env[pinning.ENV_URIS] = json.dumps(dict(
                (h, hv.uri(self.state_dir, h)) for h, _m in COMPUTES))
            env[pinning.ENV_DB] = self.db_url('nova_cell1')
        env.update(extra)
        return env

    # -- the virtualenv -------------------------------------------------

    def requirements(self):
        return (self.info['services'] + self.info['clients'] +
                ['-e', TOP])

    @staticmethod
    def write_driver_alias(venv):
        """Write the ``.pth`` that makes ``nova.virt.nrl_cloud`` ours.

        See ``cloud_lib.driver_alias``. Rewritten on every ``up``, so
        that it names this checkout's ``tools/``.
        """
        found = glob.glob(os.path.join(venv, 'lib', 'python*',
                                       'site-packages'))
        if not found:
            raise UpError('no site-packages in %s' % venv)
        with open(os.path.join(found[0], 'nrl-cloud-driver.pth'), 'w') as f:
            f.write('%s\nimport cloud_lib.driver_alias\n' % LIB)

    def ensure_venv(self):
        """Create or update the services' virtualenv (a stamp skips it)."""
        build_venv(self.venv, self.info['python'],
                   self.info['constraints'], self.requirements(),
                   'the %s services' % self.series)
        self.write_driver_alias(self.venv)

    # -- computes of another Nova release (a cloud mid-upgrade) ----------

    def peer_venv(self, nova):
        """The virtualenv of computes that run Nova ``nova``."""
        if nova in (None, self.info['nova']):
            return self.venv
        if nova not in self.info.get('peers', {}):
            raise UpError('no compute of Nova %s beside the %s services '
                          '(known: %s)' % (nova, self.series, ', '.join(
                              sorted(self.info.get('peers', {})))))
        return os.path.join(TOP, '.tox', 'cloud-compute-nova-%s' % nova)

    def ensure_libvirt_python(self):
        """The libvirt bindings in the services' virtualenv."""
        python = self.bin('python')
        if subprocess.call([python, '-c', 'import libvirt'],
                           stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL) == 0:
            return
        say('installing %s into %s (builds against the system\'s '
            'libvirt: needs libvirt-dev, pkg-config and a C compiler)'
            % (LIBVIRT_PYTHON, self.venv))
        # NOTE: not under the series' constraints, which pin another
        # version; the build needs pip's wheel-less legacy path only.
        if subprocess.call([python, '-m', 'pip', 'install', '-q',
                            LIBVIRT_PYTHON]) != 0:
            raise UpError('pip could not install %s into %s (its output is '
                          'above; Debian: apt-get install libvirt-dev '
                          'pkg-config gcc)' % (LIBVIRT_PYTHON, self.venv))

    def ensure_peer_venv(self, nova):
        """Nova ``nova`` and this project, for a compute of that release."""
        venv = self.peer_venv(nova)
        if venv != self.venv:
            peer = self.info['peers'][nova]
            if peer.get('patches'):
                self.build_patched_venv(venv, nova, peer)
            else:
                build_venv(venv, peer['python'], peer['constraints'],
                           ['nova==%s' % nova, '-e', TOP],
                           'Nova %s for a compute' % nova)
            self.write_driver_alias(venv)
        return venv

    def build_patched_venv(self, venv, nova, peer):
        """Nova built from its sdist with a series of ``patches/``.

        The tree is made by ``tools/verify-patches --prepare`` (the sdist
        checked against the series' sha256, every patch applied with no
        offset and no fuzz) and installed as a packager would: pbr takes
        the release from ``PBR_VERSION``, not from a git history.
        """
        series = peer['patches']
        files = os.path.join(TOP, 'patches', series)
        names = [n for n in open(os.path.join(files, 'series')).read(
        ).split() if n.endswith('.patch')]
        inputs = hashlib.sha256(b''.join(
            open(os.path.join(files, n), 'rb').read()
            for n in ['series'] + names)).hexdigest()
        release = peer['release']
        # NOTE: a tree per content of the series: changed patches make a
        # new tree, and the stamp below a new install.
        trees = venv + '-src'
        where = os.path.join(trees, inputs[:16])
        tree = os.path.join(where, 'nova-%s' % release)
        if not os.path.isdir(tree):
            shutil.rmtree(trees, ignore_errors=True)
            say('preparing Nova %s with patches/%s (tools/verify-patches '
                '--prepare)' % (release, series))
            proc = subprocess.run(
                ['bash', os.path.join(TOP, 'tools', 'verify-patches'),
                 '--prepare', series, where],
                stdout=subprocess.PIPE, universal_newlines=True)
            if proc.returncode != 0:
                raise UpError('patches/%s does not make a Nova tree (exit '
                              '%d; the output is above)' % (
                                  series, proc.returncode))
            tree = proc.stdout.strip().splitlines()[-1]
        constraints = os.path.join(TOP, 'constraints', peer['constraints'])
        stamp = os.path.join(venv, '.nrl-cloud-stamp')
        digest = hashlib.sha256(json.dumps(
            [inputs, release, open(constraints).read()]).encode()
        ).hexdigest()
        if os.path.exists(stamp) and open(stamp).read() == digest:
            return
        python = os.path.join(venv, 'bin', 'python')
        if not os.path.exists(python):
            say('creating %s (Python %s)' % (venv, peer['python']))
            subprocess.check_call([find_python(peer['python']), '-m', 'venv',
                                   venv])
        what = 'Nova %s with patches/%s for a compute' % (release, series)
        say('installing %s into %s (a few minutes)' % (what, venv))
        # NOTE: the release's dependencies first, from the index, as its
        # published build has them; then the patched tree in its place.
        # PBR_VERSION names the version of every pbr project a pip run
        # builds from source: that run builds Nova alone.
        pip_install(python, constraints, ['nova==%s' % release, '-e', TOP],
                    what)
        pip_install(python, constraints,
                    ['--no-deps', '--force-reinstall', tree], what,
                    env={'PBR_VERSION': release, 'SKIP_GIT_SDIST': '1',
                         'SKIP_GENERATE_AUTHORS': '1',
                         'SKIP_WRITE_GIT_CHANGELOG': '1'})
        with open(stamp, 'w') as f:
            f.write(digest)

    # -- processes ------------------------------------------------------

    def _record(self, name, pid, argv0, port=None, **extra):
        entry = {'name': name, 'pid': pid, 'argv0': argv0, 'port': port,
                 'log': self.log(name), 'start_id': procs.starttime(pid)}
        entry.update(extra)
        self.state.services.append(entry)
        self.state.save()
        return entry

    def _start(self, name, argv, port=None, env=None, **extra):
        pid = procs.start(name, argv, self.log(name), env=env)
        return self._record(name, pid, argv[0], port, **extra)

    def _wait_port(self, entry, timeout=120):
        procs.wait_for(entry['name'], lambda: procs.listening(entry['port']),
                       entry['pid'], entry['start_id'], entry['log'], timeout)

    # -- MariaDB --------------------------------------------------------

    def _mariadb(self):
        server = _which(MARIADB_SERVER)
        install = _which(MARIADB_INSTALL)
        client = _which(MARIADB_CLIENT)
        if not (server and install and client):
            raise procs.StartError(
                'mariadb', 'mariadb-server is not installed (Debian: '
                'apt-get install mariadb-server; tools/run-tests cloud-short '
                'installs it)')
        datadir = os.path.join(self.state_dir, 'mysql')
        log = self.log('mariadb')
        user = ['--user=%s' % pwd.getpwuid(os.geteuid()).pw_name]
        procs.run([install, '--no-defaults', '--datadir=%s' % datadir,
                   '--auth-root-authentication-method=socket',
                   '--skip-test-db'] + user, log, name='mariadb', timeout=180)
        self._start_mariadb(server)
        sql = ["CREATE USER IF NOT EXISTS '%s'@'127.0.0.1' IDENTIFIED BY "
               "'%s'" % (DB_USER, PASSWORD)]
        for db in DATABASES:
            sql.append('CREATE DATABASE IF NOT EXISTS %s CHARACTER SET '
                       'utf8' % db)
            sql.append("GRANT ALL ON %s.* TO '%s'@'127.0.0.1'"
                       % (db, DB_USER))
        self.sql(';\n'.join(sql) + ';')

    def _start_mariadb(self, server):
        datadir = os.path.join(self.state_dir, 'mysql')
        user = ['--user=%s' % pwd.getpwuid(os.geteuid()).pw_name]
        argv = [server, '--no-defaults', '--datadir=%s' % datadir,
                '--socket=%s' % self.socket,
                '--port=%d' % self.ports['mariadb'],
                '--bind-address=127.0.0.1',
                '--pid-file=%s' % os.path.join(self.run_dir, 'mysqld.pid'),
                '--skip-name-resolve', '--skip-log-bin',
                '--max-connections=1000',
                '--innodb-buffer-pool-size=256M',
                '--innodb-flush-log-at-trx-commit=2',
                '--character-set-server=utf8mb4'] + user
        entry = self._start('mariadb', argv, self.ports['mariadb'])
        self._wait_port(entry, 60)

    def sql(self, text):
        """Run SQL as the server's root over its private socket."""
        client = _which(MARIADB_CLIENT)
        proc = subprocess.run(
            [client, '--no-defaults', '--socket=%s' % self.socket,
             '-u', 'root', '--batch', '--skip-column-names'],
            input=text, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            universal_newlines=True, timeout=60)
        if proc.returncode != 0:
            raise procs.StartError('mariadb', 'SQL failed: %s'
                                   % proc.stderr.strip(), self.log('mariadb'))
        return proc.stdout

    # -- RabbitMQ -------------------------------------------------------

    def _rabbit_env(self):
        base = os.path.join(self.state_dir, 'rabbitmq')
        env = dict(os.environ)
        env.update({
            'RABBITMQ_NODENAME': self.state.data['rabbit_node'],
            'RABBITMQ_NODE_IP_ADDRESS': '127.0.0.1',
            'RABBITMQ_NODE_PORT': str(self.ports['rabbitmq']),
            'RABBITMQ_DIST_PORT': str(self.ports['rabbitmq-dist']),
            'RABBITMQ_MNESIA_BASE': os.path.join(base, 'mnesia'),
            'RABBITMQ_LOG_BASE': os.path.join(base, 'log'),
            'RABBITMQ_ENABLED_PLUGINS_FILE': os.path.join(
                base, 'enabled_plugins'),
            'RABBITMQ_FEATURE_FLAGS_FILE': os.path.join(base,
                                                        'feature_flags'),
            'RABBITMQ_CONFIG_FILE': os.path.join(base, 'rabbitmq.conf'),
            'RABBITMQ_ADVANCED_CONFIG_FILE': os.path.join(
                base, 'advanced.config'),
            'RABBITMQ_CONF_ENV_FILE': os.path.join(base, 'rabbitmq-env.conf'),
            'RABBITMQ_PID_FILE': os.path.join(base, 'rabbitmq.pid'),
            # NOTE: a private epmd on its own port: stopping it cannot
            # take another Erlang node's names with it.
            'ERL_EPMD_PORT': str(self.ports['epmd']),
            'ERL_EPMD_ADDRESS': '127.0.0.1',
        })
        if os.geteuid() != 0:
            env['HOME'] = base
        return env

    def _rabbitmq(self):
        server = _which(('rabbitmq-server',), RABBIT_DIRS)
        ctl = _which(('rabbitmqctl',), RABBIT_DIRS)
        if not server or not ctl:
            raise procs.StartError(
                'rabbitmq', 'rabbitmq-server is not installed (Debian: '
                'apt-get install rabbitmq-server)')
        base = os.path.join(self.state_dir, 'rabbitmq')
        for d in ('mnesia', 'log'):
            os.makedirs(os.path.join(base, d), exist_ok=True)
        files = {
            'enabled_plugins': '[].\n', 'rabbitmq-env.conf': '',
            'advanced.config': '[].\n',
            'rabbitmq.conf': (
                'listeners.tcp.1 = 127.0.0.1:%d\n'
                '%s'
                'loopback_users.guest = true\n'
                'log.console = true\nlog.console.level = warning\n'
                'log.file.level = info\n'
                'disk_free_limit.absolute = 10MB\n'
                % (self.ports['rabbitmq'], ''.join(
                    'listeners.tcp.%d = %s:%d\n' % (
                        i + 2, self.broker_address(h),
                        self.ports['rabbitmq'])
                    for i, (h, _m) in enumerate(COMPUTES)))),
        }
        for name, text in files.items():
            with open(os.path.join(base, name), 'w') as f:
                f.write(text)
        if os.geteuid() == 0:
            user = pwd.getpwnam('rabbitmq')
            for root, dirs, names in os.walk(base):
                for p in [root] + [os.path.join(root, n)
                                   for n in dirs + names]:
                    os.chown(p, user.pw_uid, user.pw_gid)
        env = self._rabbit_env()
        entry = self._start('rabbitmq', [server], self.ports['rabbitmq'],
                            env=env, ctl=ctl)
        self._wait_port(entry, 90)
        rc = subprocess.call([ctl, '-n', env['RABBITMQ_NODENAME'],
                              'await_startup'], env=env, timeout=90,
                             stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL)
        if rc != 0:
            raise procs.StartError('rabbitmq', 'await_startup failed',
                                   entry['log'])

    def _stop_rabbitmq(self, entry):
        env = self._rabbit_env()
        if procs.alive(entry['pid'], entry['start_id']):
            try:
                subprocess.call([entry['ctl'], '-n', env['RABBITMQ_NODENAME'],
                                 'stop'], env=env, timeout=60,
                                stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL)
            except subprocess.TimeoutExpired:
                pass
        procs.stop(entry['pid'], entry['start_id'])
        epmd = shutil.which('epmd') or _which(('epmd',), (
            '/usr/bin', '/usr/lib/erlang/bin'))
        if epmd:
            subprocess.call([epmd, '-port', str(self.ports['epmd']), '-kill'],
                            env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, timeout=30)

    # -- the broker and the database as faults ---------------------------

    def stop_infra(self, name):
        """Stop the broker or the database the services use (a fault).

        :returns: how many processes were stopped (0: it was not running)
        """
        if name not in INFRA:
            raise UpError('%s is not one of %s' % (name, ', '.join(INFRA)))
        stopped = 0
        for entry in [e for e in self.state.services if e['name'] == name]:
            if name == 'rabbitmq':
                self._stop_rabbitmq(entry)
                stopped += 1
            elif procs.stop(entry['pid'], entry['start_id']):
                stopped += 1
            self.state.services.remove(entry)
        self.state.save()
        return stopped

    def start_infra(self, name):
        """Start again what :meth:`stop_infra` stopped, on its data."""
        if name not in INFRA:
            raise UpError('%s is not one of %s' % (name, ', '.join(INFRA)))
        if any(e['name'] == name for e in self.state.running()):
            return False
        if name == 'rabbitmq':
            self._rabbitmq()
        else:
            self._start_mariadb(_which(MARIADB_SERVER))
        return True

    # -- a compute cut off from the broker (a fault) ---------------------

    def _partition_rules(self, host):
        """Drop every packet between ``host``'s address and the broker."""
        addr, port = self.broker_address(host), str(self.ports['rabbitmq'])
        if addr == '127.0.0.1':
            raise UpError('%s is not one of the computes (%s)' % (
                host, ', '.join(h for h, _m in COMPUTES)))
        tag = ['-m', 'comment', '--comment', 'nrl-cloud %s %s' % (
            self.state_dir, host)]
        return [
            ['OUTPUT', '-p', 'tcp', '-d', addr, '--dport', port] + tag +
            ['-j', 'DROP'],
            ['OUTPUT', '-p', 'tcp', '-s', addr, '--sport', port] + tag +
            ['-j', 'DROP'],
        ]

    def _iptables(self, *args):
        iptables = shutil.which('iptables') or _which(('iptables',), SBIN)
        if not iptables:
            raise UpError('iptables is not installed (Debian: apt-get '
                          'install iptables): cannot cut a compute off')
        return subprocess.run([iptables, '-w'] + list(args),
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              universal_newlines=True, timeout=60)

    def cut_off(self, host):
        """Cut ``host`` off from the broker: its packets are dropped.

        As a network partition does: established connections hang (the
        client finds out by its heartbeat), new ones time out. Nothing
        else of the compute's changes (the API services, the database
        of the others). :meth:`reconnect` (or ``down``) undoes it.
        """
        rules = self._partition_rules(host)
        try:
            with open(self.compute_conf(host)) as f:
                own = self.compute_transport_url(host) in f.read()
        except (IOError, OSError):
            own = False
        if not own:
            raise UpError('%s does not reach the broker on its own address '
                          '(%s): a cloud brought up before computes had '
                          'one; bring it up again' % (
                              host, self.broker_address(host)))
        cut = self.state.data.setdefault('cut_off', [])
        for rule in rules:
            if self._iptables('-C', *rule).returncode != 0:
                proc = self._iptables('-A', *rule)
                if proc.returncode != 0:
                    self.reconnect(host)
                    raise UpError('iptables refused the rule: %s'
                                  % proc.stderr.strip())
        if host not in cut:
            cut.append(host)
            self.state.save()

    def reconnect(self, host):
        """Undo :meth:`cut_off`; True if ``host`` was cut off."""
        removed = False
        for rule in self._partition_rules(host):
            while self._iptables('-C', *rule).returncode == 0:
                self._iptables('-D', *rule)
                removed = True
        cut = self.state.data.get('cut_off', []) if self.state else []
        if host in cut:
            cut.remove(host)
            self.state.save()
        return removed

    # -- set-up commands --------------------------------------------------

    def _chains(self):
        k = ['--config-file', self.conf('keystone.conf')]
        me = pwd.getpwuid(os.geteuid()).pw_name
        import grp
        group = grp.getgrgid(os.getegid()).gr_name
        n = ['--config-file', self.conf('nova.conf')]
        neutron = ['--config-file', self.conf('neutron.conf'),
                   '--config-file', self.conf('ml2_conf.ini')]
        return [
            ('keystone', [
                [self.bin('keystone-manage')] + k + ['db_sync'],
                [self.bin('keystone-manage')] + k + [
                    'fernet_setup', '--keystone-user', me,
                    '--keystone-group', group],
                [self.bin('keystone-manage')] + k + [
                    'credential_setup', '--keystone-user', me,
                    '--keystone-group', group],
                [self.bin('keystone-manage')] + k + [
                    'bootstrap', '--bootstrap-password', PASSWORD,
                    '--bootstrap-username', 'admin',
                    '--bootstrap-project-name', 'admin',
                    '--bootstrap-role-name', 'admin',
                    '--bootstrap-service-name', 'keystone',
                    '--bootstrap-region-id', configs.REGION,
                    '--bootstrap-admin-url', configs.keystone_url(self),
                    '--bootstrap-public-url', configs.keystone_url(self),
                    '--bootstrap-internal-url', configs.keystone_url(self)],
            ]),
            ('placement', [[self.bin('placement-manage'), '--config-file',
                            self.conf('placement.conf'), 'db', 'sync']]),
            ('glance', [[self.bin('glance-manage'), '--config-file',
                         self.conf('glance-api.conf'), 'db_sync']]),
            ('neutron', [[self.bin('neutron-db-manage')] + neutron +
                         ['upgrade', 'heads']]),
            ('nova', [
                [self.bin('nova-manage')] + n + ['api_db', 'sync'],
                [self.bin('nova-manage')] + n + [
                    'cell_v2', 'map_cell0', '--database_connection',
                    self.db_url('nova_cell0')],
                [self.bin('nova-manage')] + n + [
                    'cell_v2', 'create_cell', '--name', 'cell1',
                    '--database_connection', self.db_url('nova_cell1'),
                    '--transport-url', self.transport_url],
                [self.bin('nova-manage')] + n + ['db', 'sync'],
            ]),
        ]

    def _run_chains(self):
        """The database migrations of every service, in parallel."""
        errors = []

        def chain(name, commands):
            try:
                for argv in commands:
                    procs.run(argv, self.log('%s-setup' % name),
                              name='%s set-up' % name, timeout=900)
            except procs.StartError as e:
                errors.append(e)

        threads = [threading.Thread(target=chain, args=c)
                   for c in self._chains()]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        if errors:
            raise errors[0]

    def _venv_python(self, name, *args, **kw):
        argv = [self.bin('python'), os.path.join(LIB, 'cloud_lib',
                                                 'bootstrap.py')] + list(args)
        log = self.log('bootstrap')
        with open(log, 'ab') as out:
            out.write(('\n$ bootstrap %s\n' % ' '.join(args)).encode())
            out.flush()
            proc = subprocess.run(argv, stdout=subprocess.PIPE, stderr=out,
                                  env=self.venv_env(), timeout=kw.get(
                                      'timeout', 300))
        if proc.returncode != 0:
            dead = self._dead_services()
            if dead:
                # NOTE: the service's own log says why; the bootstrap's
                # says only that it was refused.
                raise procs.StartError(dead[0]['name'], 'exited before '
                                       'bootstrap %s (which failed; its log: '
                                       '%s)' % (args[0], log), dead[0]['log'])
            raise procs.StartError(name, 'bootstrap %s failed' % args[0], log)
        return proc.stdout.decode().strip()

    def _dead_services(self):
        return [s for s in self.state.services
                if s.get('pid') and not procs.alive(s['pid'],
                                                    s.get('start_id'))]

    # -- up ---------------------------------------------------------------

    def write_configs(self):
        files = {
            'keystone.conf': configs.keystone(self),
            'placement.conf': configs.placement(self),
            'glance-api.conf': configs.glance(self),
            'neutron.conf': configs.neutron(self),
            'ml2_conf.ini': configs.ml2(self),
            'nova.conf': configs.nova(self),
            'clouds.yaml': configs.clouds_yaml(self),
        }
        for name, text in files.items():
            with open(self.conf(name), 'w') as f:
                f.write(text)
        for d in ('keystone', 'glance/images', 'glance/lock', 'neutron/lock',
                  'nova/lock'):
            os.makedirs(os.path.join(self.state_dir, d), exist_ok=True)

    def scheduler_filters(self):
        """The scheduler's filters on libvirt computes (None otherwise).

        Nova's defaults, and those operators of pinned hosts enable (NUMA
        fitting, the same_host and different_host hints). Read once from
        the Nova installed (the defaults differ between releases) and
        kept in the state: tempest's configuration must name the same.
        """
        if self.hypervisor != 'libvirt':
            return None
        if self.state and self.state.data.get('scheduler_filters'):
            return self.state.data['scheduler_filters']
        proc = subprocess.run([self.bin('python'), '-c', (
            'from nova.conf import scheduler\n'
            'for _group, opts in scheduler.list_opts().items():\n'
            '    for o in opts:\n'
            '        if o.name == "enabled_filters":\n'
            '            print(",".join(o.default))\n')],
            stdout=subprocess.PIPE, universal_newlines=True, check=True)
        found = proc.stdout.split()
        if len(found) != 1:
            raise UpError('cannot read the scheduler filters of Nova in %s'
                          % self.venv)
        filters = found[0].split(',')
        filters += [f for f in PINNED_HOST_FILTERS if f not in filters]
        if self.state:
            self.state.data['scheduler_filters'] = filters
            self.state.save()
        return filters

    def compute_conf(self, host):
        return self.conf('nova-cpu-%s.conf' % host)

    def write_compute_conf(self, host):
        """The compute's file, [revert_lock] from the devstack code path."""
        path = self.compute_conf(host)
        with open(path, 'w') as f:
            f.write(configs.compute(self, host))
        os.makedirs(os.path.join(self.state_dir, 'computes', host, 'lock'),
                    exist_ok=True)
        env = dict(os.environ)
        env.setdefault('NOVA_REVERT_LOCK_ENABLED', 'True')
        env.setdefault('NOVA_REVERT_LOCK_ON_UNKNOWN_CODE', 'fail')
        env.setdefault('NOVA_REVERT_LOCK_MIXINS', '')
        env['PYTHON'] = sys.executable
        subprocess.check_call(
            ['bash', '-c', 'set -eu; source "$1"; '
             'nova_revert_lock_write_conf "$2"', 'revert-lock-conf',
             os.path.join(TOP, 'devstack', 'lib', 'revert-lock-conf'),
             path], env=env)
        return path

    def check(self, host, nova=None):
        """``nova-revert-lock check`` on a compute's file; its state."""
        proc = subprocess.run(
            [os.path.join(self.peer_venv(nova), 'bin', 'nova-revert-lock'),
             'check', '--config-file',
             self.compute_conf(host), '--format', 'json'],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=120,
            universal_newlines=True)
        with open(self.log('check-%s' % host), 'w') as f:
            f.write(proc.stdout)
        try:
            state = json.loads(proc.stdout).get('state')
        except ValueError:
            state = None
        if proc.returncode != 0 or state not in ('patched', 'already-fixed'):
            raise procs.StartError('nova-revert-lock check (%s)' % host,
                                   'state %s, exit %d' % (
                                       state, proc.returncode),
                                   self.log('check-%s' % host))
        return state

    def image_command(self, nova=None):
        """``nova-compute`` as an image built with contrib/kolla's override.

        The override's own shell steps (as ``tools/kolla_render.py`` reads
        them from the template) run on copies of the virtualenv's console
        scripts, whose interpreter is the virtualenv's: what they leave
        named ``nova-compute`` is what Kolla's and TripleO's containers
        would start. Made once per Nova release of the cloud.
        """
        import kolla_render
        release = nova or self.info['nova']
        venv_bin = os.path.join(self.peer_venv(nova), 'bin')
        bindir = os.path.join(self.state_dir, 'image', release, 'bin')
        command = os.path.join(bindir, 'nova-compute')
        if os.path.exists(command + '.nova'):
            return command
        shutil.rmtree(bindir, ignore_errors=True)
        os.makedirs(bindir)
        for name in ('nova-compute', 'nova-compute-revert-lock',
                     'nova-revert-lock'):
            shutil.copy2(os.path.join(venv_bin, name), bindir)
        env = dict(os.environ, PATH=bindir + os.pathsep + os.environ['PATH'])
        procs.run(['/bin/sh', '-c', kolla_render.footer_shell()],
                  self.log('image-%s' % release), env=env,
                  name='image steps (contrib/kolla)')
        return command

    def start_compute(self, host, mode, log_suffix='', nova=None,
                      image=False):
        """Start one compute as ``mode`` (wrapper or plain).

        :param image: a wrapper started as ``nova-compute``, the image's
            console script replaced (:meth:`image_command`)
        """
        name = 'nova-compute-%s' % host
        binary = ('nova-compute-revert-lock' if mode == 'wrapper'
                  else 'nova-compute')
        venv_bin = os.path.join(self.peer_venv(nova), 'bin')
        command = os.path.join(venv_bin, binary)
        if image:
            if mode != 'wrapper':
                raise procs.StartError(name, 'an image-style nova-compute '
                                       'starts the wrapper only', None)
            command = self.image_command(nova)
        # NOTE: both modes through the same lock tracer (traced_compute):
        # the soak reports what each section holds the tracker's lock for.
        argv = [os.path.join(venv_bin, 'python'),
                os.path.join(LIB, 'cloud_lib', 'traced_compute.py'),
                self.lock_trace(host), command,
                '--config-file', self.compute_conf(host)]
        log = self.log(name + log_suffix)
        env = None
        if self.hypervisor == 'libvirt':
            # NOTE: in its libvirtd's mount namespace, where the
            # instances path is this compute's own (hypervisor.py), with
            # the cloud's ssh and scp first (a resize copies the disks).
            daemon = [e for e in self.state.services
                      if e.get('libvirt_host') == host and
                      procs.alive(e['pid'], e['start_id'])]
            if not daemon:
                raise procs.StartError(name, 'its libvirtd does not run',
                                       None)
            argv = hv.nsenter(daemon[0]['pid']) + argv
            env = dict(os.environ, PATH=os.pathsep.join(
                [hostssh.bindir(self.state_dir), os.environ['PATH']]))
        pid = procs.start(name, argv, log, env=env)
        entry = {'name': name, 'pid': pid, 'argv0': command,
                 'port': None, 'log': log,
                 'start_id': procs.starttime(pid), 'host': host,
                 'mode': mode, 'nova': nova or self.info['nova']}
        if image:
            entry['command'] = 'image'
        self.state.services.append(entry)
        self.state.save()
        return entry

    def lock_trace(self, host):
        """The file a compute's lock tracer appends its sections to."""
        return os.path.join(self.state_dir, 'computes', host,
                            'locktrace.jsonl')

    def computes(self):
        return [{'host': s['host'], 'mode': s['mode'],
                 'nova': s.get('nova') or self.info['nova'],
                 'hypervisor': self.hypervisor,
                 'libvirt_uri': hv.uri(self.state_dir, s['host'])
                 if self.hypervisor == 'libvirt' else None}
                for s in self.state.services if s.get('host')]

    def up(self, mode='mixed', nova_of=None, hypervisor='fake'):
        """Start the cloud.

        :param nova_of: {host: Nova release} for computes that start on
            another release than the services' (one of the series'
            peers): a compute can start on an older release only if it
            never ran a newer one (Nova refuses it: ServiceTooOld)
        :param hypervisor: ``fake`` (the series' fake driver) or
            ``libvirt`` (a libvirtd per compute, QEMU, dedicated CPUs)
        """
        if self.state and self.state.running():
            raise UpError('the cloud in %s is already up (%d processes); '
                          'tools/cloud down first' % (
                              self.state_dir, len(self.state.running())))
        if hypervisor not in HYPERVISORS:
            raise UpError('no hypervisor %s (known: %s)' % (
                hypervisor, ', '.join(HYPERVISORS)))
        if hypervisor == 'libvirt':
            if nova_of:
                raise UpError('computes of other releases run on the fake '
                              'driver only')
            # NOTE: everything missing named at once: one install.
            needs, packages = [], []
            lacking = hv.missing()
            if lacking:
                needs.append(', '.join(lacking))
                packages += [hv.PACKAGES, 'libvirt-dev']
            if hostssh.missing():
                needs.append('ssh between the computes')
                packages += hostssh.missing()
            if needs:
                raise UpError('--hypervisor libvirt needs %s (Debian: '
                              'apt-get install --no-install-recommends %s)'
                              % (' and '.join(needs), ' '.join(packages)))
        if self.state and self.state.data.get('hypervisor') == 'libvirt':
            # NOTE: a cloud that was not taken down (a crash): its guests
            # and their QEMUs go before its files do.
            for h, _m in COMPUTES:
                hv.clean(self.state_dir, h)
        self.hypervisor = hypervisor
        self.ensure_venv()
        if hypervisor == 'libvirt':
            self.ensure_libvirt_python()
        if os.path.isdir(self.state_dir):
            if self.state and not self.state.data.get('up_seconds'):
                # NOTE: the last up failed: what says why is kept beside
                # (logs and configuration), not wiped by this one.
                keep = keep_logs(self.state_dir, '-failed-up')
                say('the last up failed: its logs are in %s' % keep)
            shutil.rmtree(self.state_dir)
        for d in (self.etc, self.logs, self.run_dir):
            os.makedirs(d)
        self.state = procs.State(self.state_dir)
        taken = set()
        self.ports = {name: procs.pick_port(port, taken)
                      for name, port in sorted(PORTS.items())}
        self.state.data.update({
            'series': self.series, 'venv': self.venv, 'ports': self.ports,
            'rabbit_node': 'nrl-cloud-%d@localhost' % self.ports['rabbitmq'],
            'services': [], 'started_at': time.time(),
            'nova_version': self.info['nova'], 'mode': mode,
            'hypervisor': hypervisor})
        self.state.save()
        started = time.monotonic()
        try:
            self._up(mode, nova_of or {})
        except procs.StartError:
            self.down(quiet=True)
            raise
        except BaseException:
            self.down(quiet=True)
            raise
        self.state.data['up_seconds'] = round(time.monotonic() - started, 1)
        self.state.save()
        say('up in %.0fs: %s' % (self.state.data['up_seconds'],
                                 self.state_dir))

    def _up(self, mode, nova_of):
        say('MariaDB on 127.0.0.1:%d' % self.ports['mariadb'])
        self._mariadb()
        say('RabbitMQ on 127.0.0.1:%d' % self.ports['rabbitmq'])
        self._rabbitmq()
        self.write_configs()
        say('migrating the databases (keystone, placement, glance, '
            'neutron, nova cells)')
        self._run_chains()
        env = dict(os.environ)
        env['OS_KEYSTONE_CONFIG_FILES'] = self.conf('keystone.conf')
        server = os.path.join(LIB, 'cloud_lib', 'wsgi_server.py')
        entry = self._start('keystone', [
            self.bin('python'), server, '--port', str(self.ports['keystone']),
            'keystone.server.wsgi:initialize_public_application'],
            self.ports['keystone'], env=env)
        self._wait_port(entry)
        say('keystone on 127.0.0.1:%d' % self.ports['keystone'])
        self._venv_python('keystone', 'identity', json.dumps(self.ports))
        env = dict(os.environ)
        env['OS_PLACEMENT_CONFIG_DIR'] = self.etc
        waits = [self._start('placement', [
            self.bin('python'), server, '--port',
            str(self.ports['placement']), 'placement.wsgi:init_application'],
            self.ports['placement'], env=env)]
        waits.append(self._start('glance', [
            self.bin('glance-api'), '--config-file',
            self.conf('glance-api.conf')], self.ports['glance']))
        waits.append(self._start('neutron', [
            self.bin('neutron-server'), '--config-file',
            self.conf('neutron.conf'), '--config-file',
            self.conf('ml2_conf.ini')], self.ports['neutron']))
        n = ['--config-file', self.conf('nova.conf')]
        self._start('nova-conductor', [self.bin('nova-conductor')] + n)
        self._start('nova-scheduler', [self.bin('nova-scheduler')] + n)
        waits.append(self._start('nova-api', [self.bin('nova-api')] + n,
                                 self.ports['nova-api']))
        for entry in waits:
            self._wait_port(entry, 180)
            say('%s on 127.0.0.1:%d' % (entry['name'], entry['port']))
        self._venv_python('glance', 'image')
        modes = [(h, m if mode == 'mixed' else mode) for h, m in COMPUTES]
        if self.hypervisor == 'libvirt':
            for i, (host, _m) in enumerate(modes):
                self.start_libvirtd(host, i)
            try:
                for entry in hostssh.start(self):
                    say('%s on %s:22' % (entry['name'], self.broker_address(
                        entry['ssh_host'])))
            except hostssh.SshError as e:
                raise UpError(str(e))
        for host, mode in modes:
            self.ensure_peer_venv(nova_of.get(host))
            self.write_compute_conf(host)
            if mode == 'wrapper':
                say('nova-revert-lock check %s: %s' % (
                    host, self.check(host, nova_of.get(host))))
        # NOTE: computes on another release first: Nova refuses a compute
        # older than every compute already registered (ServiceTooOld), as
        # in an upgrade, where the old computes were there first.
        older = [(h, m) for h, m in modes if h in nova_of]
        for group in (older, [hm for hm in modes if hm not in older]):
            for host, mode in group:
                self.start_compute(host, mode, nova=nova_of.get(host))
            if group:
                self._wait_computes([h for h, _m in group])
        self._venv_python('nova', 'flavors', self.hypervisor)
        say('computes: %s' % ', '.join(
            '%s (%s%s)' % (h, m, ', Nova %s' % nova_of[h]
                           if h in nova_of else '') for h, m in modes))

    def start_libvirtd(self, host, index):
        hv.write(self.state_dir, host, index, self.broker_address(host))
        name = 'libvirtd-%s' % host
        try:
            pid = hv.start(self.state_dir, host, self.log(name))
        except procs.StartError as e:
            # NOTE: the daemon's own log says why, its output seldom does
            raise procs.StartError(name, '%s; its log: %s' % (
                e.reason, hv.tail(self.state_dir, host)), e.log)
        self._record(name, pid, 'libvirtd', libvirt_host=host)
        say('%s on %s' % (name, hv.uri(self.state_dir, host)))

    def _wait_computes(self, hosts, timeout=180):
        deadline = time.monotonic() + timeout
        while True:
            for s in self.state.services:
                if s.get('host') and not procs.alive(s['pid'], s['start_id']):
                    raise procs.StartError(s['name'], 'exited before it '
                                           'was up', s['log'])
            rows = self.sql('SELECT host FROM nova_cell1.compute_nodes '
                            'WHERE deleted = 0').split()
            if set(hosts) <= set(rows):
                break
            if time.monotonic() > deadline:
                missing = sorted(set(hosts) - set(rows))
                name = 'nova-compute-%s' % missing[0]
                raise procs.StartError(name, 'no compute node after %ds'
                                       % timeout, self.log(name))
            time.sleep(1)
        procs.run([self.bin('nova-manage'), '--config-file',
                   self.conf('nova.conf'), 'cell_v2', 'discover_hosts'],
                  self.log('nova-setup'), name='discover_hosts')
        self._venv_python('nova', 'wait-hypervisors', str(len(
            [s for s in self.state.services if s.get('host')])))

    def stop_compute(self, host):
        """Stop one compute by its pid; its log is kept for the check."""
        retired = self.state.data.setdefault('retired', [])
        for s in list(self.state.services):
            if s.get('host') == host:
                procs.stop(s['pid'], s['start_id'])
                self.state.services.remove(s)
                retired.append(s)
        self.state.save()

    def restart_compute(self, host, mode, nova=None, image=False):
        """Stop one compute (if it runs); start it again as ``mode``.

        :param nova: the Nova release it runs from then on (one of the
            series' ``peers``: a cloud mid-upgrade), or the services'
        :param image: start the wrapper as an image's ``nova-compute``
            (:meth:`image_command`)
        """
        self.ensure_peer_venv(nova)
        self.stop_compute(host)
        retired = self.state.data['retired']
        if mode == 'wrapper':
            self.check(host, nova)
        # NOTE: a log per process, so that what the host logged as plain
        # and as wrapper can be judged apart.
        entry = self.start_compute(host, mode, '-%d' % len(retired), nova,
                                   image=image)
        # NOTE: up again when its RPC server answers: Nova starts it
        # after init_host, so from then on confirm and revert casts to
        # the host are consumed by the new process. The wrapper answers
        # `status`; a plain compute answers it with UnsupportedVersion.
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            if not procs.alive(entry['pid'], entry['start_id']):
                raise procs.StartError(entry['name'], 'exited', entry['log'])
            proc = subprocess.run(
                [self.bin('nova-revert-lock'), 'status', '--host', host,
                 '--config-file', self.conf('nova.conf'), '--timeout', '3',
                 '--format', 'json'], stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL, universal_newlines=True,
                timeout=60)
            try:
                row = json.loads(proc.stdout)[0]
            except (ValueError, IndexError):
                row = {}
            if row.get('reachable'):
                return entry
            time.sleep(1)
        raise procs.StartError(entry['name'], 'no RPC answer within 120s',
                               entry['log'])

    # -- down -------------------------------------------------------------

    def down(self, quiet=False):
        # NOTE: from the file: another command (the rolling switch) may
        # have restarted a compute since this object read it.
        if os.path.exists(os.path.join(self.state_dir, procs.STATE_FILE)):
            self.state = procs.State(self.state_dir)
        # NOTE: first: a compute left cut off from the broker (a fault
        # run stopped half-way) must not outlive the cloud.
        for host in list(self.state.data.get('cut_off', []) if self.state
                         else []):
            self.reconnect(host)
        if not self.state:
            if not quiet:
                say('nothing to stop in %s' % self.state_dir)
            return 0
        # NOTE: the OpenStack services at once (each may take seconds to
        # shut down gracefully; none needs another to do so), then the
        # broker and the database they used.
        infra = INFRA
        started = time.monotonic()
        stopped = procs.stop_all([
            e for e in self.state.services
            if e['name'] not in infra and not e.get('libvirt_host')])
        # NOTE: the computes are gone: nothing acts on the guests now.
        # Each daemon destroys its own, then stops; QEMUs it left (the
        # daemon killed before) are killed by the pid file it wrote.
        daemons = [e for e in self.state.services if e.get('libvirt_host')]
        for e in daemons:
            removed = hv.clean(self.state_dir, e['libvirt_host'])
            if removed and not quiet:
                say('%s: destroyed %s' % (e['name'], ', '.join(removed)))
        stopped += procs.stop_all(daemons)
        for entry in reversed(self.state.services):
            if entry['name'] == 'rabbitmq':
                self._stop_rabbitmq(entry)
                stopped += 1
            elif entry['name'] in infra and procs.stop(
                    entry['pid'], entry['start_id']):
                stopped += 1
        left = self.state.running()
        if not quiet:
            say('stopped %d processes in %.0fs' % (
                stopped, time.monotonic() - started))
        if left:
            raise UpError('still running: %s' % ', '.join(
                '%s (%d)' % (s['name'], s['pid']) for s in left))
        return stopped

    # -- status -------------------------------------------------------------

    def status(self):
        running = {id(s) for s in self.state.running()} if self.state else ()
        services = []
        for s in (self.state.services if self.state else []):
            services.append({'name': s['name'], 'pid': s['pid'],
                             'port': s.get('port'), 'log': s['log'],
                             'running': id(s) in running})
        return {
            'state_dir': self.state_dir,
            'mode': self.state.data.get('mode') if self.state else None,
            'series': self.series,
            'clouds_yaml': self.clouds_yaml,
            'nova_conf': self.conf('nova.conf'),
            'nova_version': self.info['nova'],
            'venv': self.venv,
            'services': services,
            'computes': self.computes() if self.state else [],
        }


def find_python(version):
    proc = subprocess.run(
        ['bash', '-c', '. "$1"; find_python "$2"', 'find-python',
         os.path.join(TOP, 'tools', 'lib', 'find-python.sh'), version],
        stdout=subprocess.PIPE, universal_newlines=True)
    if proc.returncode != 0:
        raise UpError('no Python %s found (PATH, pyenv, /usr/local/bin, '
                      '/usr/bin)' % version)
    return proc.stdout.strip()
