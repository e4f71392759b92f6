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

"""tools/cloud's orchestrator, without starting a cloud.

The cloud itself runs in the cloud-short env; these check the pieces that
decide what it starts, stops and reports: process bookkeeping, ports,
the compute configuration (the devstack plugin's writer), the test list,
and the judges of tempest's output and of the logs.
"""

import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import unittest

from ci_lint import path

sys.path.insert(0, path('tools'))

from cloud_lib import checks  # noqa: E402
from cloud_lib import cloud  # noqa: E402
from cloud_lib import configs  # noqa: E402
from cloud_lib import damage  # noqa: E402
from cloud_lib import guest  # noqa: E402
from cloud_lib import hostssh  # noqa: E402
from cloud_lib import hypervisor  # noqa: E402
from cloud_lib import kill_points  # noqa: E402
from cloud_lib import logcheck  # noqa: E402
from cloud_lib import pinning  # noqa: E402
from cloud_lib import procs  # noqa: E402
from cloud_lib import tempest  # noqa: E402
from cloud_lib import whitebox  # noqa: E402


class Base(unittest.TestCase):

    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix='nrl-cloud-test-')
        self.addCleanup(shutil.rmtree, self.tmp, True)


class TestProcesses(Base):

    def test_start_and_stop_the_whole_group(self):
        log = os.path.join(self.tmp, 'x.log')
        # a leader that forks a worker, as the oslo services do
        pid = procs.start('x', ['bash', '-c', 'sleep 60 & sleep 60'], log)
        start_id = procs.starttime(pid)
        time.sleep(0.3)
        self.assertTrue(procs.alive(pid, start_id))
        self.assertGreaterEqual(len(procs.group_members(pid)), 2)
        self.assertTrue(procs.stop(pid, start_id, timeout=10))
        self.assertFalse(procs.alive(pid, start_id))
        self.assertEqual([], procs.group_members(pid))

    def test_stop_all_at_once(self):
        entries = []
        for i, script in enumerate((
                'sleep 60 & sleep 60',
                'sleep 60 & sleep 60',
                # one that shuts down slowly: past the timeout, SIGKILL
                'trap "" TERM; sleep 60 & sleep 60')):
            pid = procs.start('x%d' % i, ['bash', '-c', script],
                              os.path.join(self.tmp, 'x%d.log' % i))
            entries.append({'pid': pid, 'start_id': procs.starttime(pid)})
        time.sleep(0.3)
        # one already gone: counted as stopped only if something was left
        gone = procs.start('y', ['true'], os.path.join(self.tmp, 'y.log'))
        entries.append({'pid': gone, 'start_id': procs.starttime(gone)})
        time.sleep(0.3)
        self.assertEqual(3, procs.stop_all(entries, timeout=2))
        for e in entries:
            self.assertFalse(procs.alive(e['pid'], e['start_id']))
            self.assertEqual([], procs.group_members(e['pid']))

    def test_a_reused_pid_is_left_alone(self):
        pid = procs.start('x', ['sleep', '60'], os.path.join(self.tmp, 'l'))
        self.addCleanup(procs.stop, pid, procs.starttime(pid))
        self.assertFalse(procs.alive(pid, 'another-start-time'))
        self.assertFalse(procs.stop(pid, 'another-start-time'))
        self.assertTrue(procs.alive(pid))

    def test_a_taken_port_is_replaced(self):
        sock = socket.socket()
        sock.bind(('127.0.0.1', 0))
        sock.listen(1)
        self.addCleanup(sock.close)
        taken = sock.getsockname()[1]
        got = procs.pick_port(taken, set())
        self.assertNotEqual(taken, got)
        self.assertTrue(procs.port_free(got))

    def test_no_port_in_the_ephemeral_range(self):
        low, high = procs.ephemeral_range()
        handed = set()
        for preferred in (0, low, high, 25000):
            got = procs.pick_port(preferred, handed)
            self.assertFalse(low <= got <= high, got)

    def test_listening_is_read_not_connected_to(self):
        sock = socket.socket()
        sock.bind(('127.0.0.1', 0))
        port = sock.getsockname()[1]
        self.assertFalse(procs.listening(port))
        sock.listen(1)
        self.assertTrue(procs.listening(port))
        sock.close()
        self.assertFalse(procs.listening(port))

    def test_a_port_is_handed_out_once(self):
        handed = set()
        first = procs.pick_port(0, handed)
        self.assertNotEqual(first, procs.pick_port(first, handed))


class TestUp(Base):

    def test_a_failing_component_stops_the_others(self):
        c = cloud.Cloud(os.path.join(self.tmp, 'state'))
        started = []

        def _up(mode, nova_of):
            started.append(c._start('sleeper', ['sleep', '60']))
            c._start('broken', ['bash', '-c', 'echo no config; exit 3'])
            procs.wait_for('broken', lambda: False,
                           c.state.services[-1]['pid'],
                           c.state.services[-1]['start_id'],
                           c.log('broken'), 10)

        c.ensure_venv = lambda: None
        c._up = _up
        with self.assertRaises(procs.StartError) as ctx:
            c.up()
        self.assertEqual('broken', ctx.exception.name)
        self.assertIn('no config', procs.tail(ctx.exception.log))
        self.assertFalse(procs.alive(started[0]['pid'],
                                     started[0]['start_id']))

    def test_libvirt_missing_is_named_before_anything_starts(self):
        c = cloud.Cloud(os.path.join(self.tmp, 'state'))
        c.ensure_venv = lambda: self.fail('nothing is installed first')
        saved = hypervisor.missing
        hypervisor.missing = lambda: ['libvirtd', 'virsh']
        self.addCleanup(setattr, hypervisor, 'missing', saved)
        saved_ssh = hostssh.missing
        self.addCleanup(setattr, hostssh, 'missing', saved_ssh)
        hostssh.missing = lambda: []
        with self.assertRaises(cloud.UpError) as ctx:
            c.up(hypervisor='libvirt')
        self.assertIn('needs libvirtd, virsh (', str(ctx.exception))
        self.assertIn('libvirt-daemon-system', str(ctx.exception))
        # Whatever else is missing is named in the same message.
        hostssh.missing = lambda: ['openssh-server']
        with self.assertRaises(cloud.UpError) as ctx:
            c.up(hypervisor='libvirt')
        self.assertIn('needs libvirtd, virsh and ssh between the computes',
                      str(ctx.exception))
        self.assertIn('libvirt-dev openssh-server', str(ctx.exception))
        hypervisor.missing = lambda: []
        with self.assertRaises(cloud.UpError) as ctx:
            c.up(hypervisor='libvirt')
        self.assertIn('needs ssh between the computes (Debian: apt-get '
                      'install --no-install-recommends openssh-server)',
                      str(ctx.exception))
        with self.assertRaises(cloud.UpError) as ctx:
            c.up(hypervisor='xen')
        self.assertIn('no hypervisor xen', str(ctx.exception))
        self.assertFalse(os.path.exists(c.state_dir))

    def test_second_up_says_already_up(self):
        c = cloud.Cloud(os.path.join(self.tmp, 'state'))
        c.ensure_venv = lambda: None
        c._up = lambda mode, nova_of: c._start('sleeper', ['sleep', '60'])
        c.up()
        self.addCleanup(c.down, True)
        again = cloud.Cloud(os.path.join(self.tmp, 'state'))
        with self.assertRaises(cloud.UpError) as ctx:
            again.up()
        self.assertIn('already up', str(ctx.exception))
        self.assertEqual(1, again.down(quiet=True))
        self.assertEqual([], again.state.running())


class CloudBase(Base):
    """A cloud's layout in a temporary state directory, nothing started."""

    def setUp(self):
        super(CloudBase, self).setUp()
        self.c = cloud.Cloud(os.path.join(self.tmp, 'state'))
        os.makedirs(self.c.etc)
        self.c.ports = {'rabbitmq': 5672, 'keystone': 5000, 'mariadb': 3306,
                        'nova-api': 8774}


class TestComputeConfiguration(CloudBase):

    def test_revert_lock_section_from_the_devstack_writer(self):
        text = open(self.c.write_compute_conf('h1')).read()
        self.assertIn('[revert_lock]\nenabled = True\n'
                      'on_unknown_code = fail\n', text)

    def test_no_database_and_a_fast_periodic(self):
        text = configs.compute(self.c, 'h1')
        self.assertNotIn('[database]', text)
        self.assertNotIn('connection', text)
        self.assertIn('update_resources_interval = 1', text)
        self.assertIn('host = h1', text)
        self.assertIn("compute_driver = nrl_cloud.NumaLiveMigrateDriver",
                      text)

    def test_epoxy_computes_keep_a_node_identity(self):
        c = cloud.Cloud(os.path.join(self.tmp, 'state-epoxy'), 'epoxy')
        c.ports = self.c.ports
        text = configs.compute(c, 'h1')
        self.assertIn('compute_driver = fake.FakeDriverWithoutFakeNodes',
                      text)

    def test_libvirt_computes(self):
        self.c.hypervisor = 'libvirt'
        text = configs.compute(self.c, 'h1')
        self.assertIn('compute_driver = libvirt.LibvirtDriver', text)
        self.assertIn('[libvirt]\nvirt_type = qemu\nconnection_uri = '
                      'qemu+unix:///system?socket=%s\n' % os.path.join(
                          self.c.state_dir, 'computes', 'h1', 'libvirt',
                          'run', 'libvirt-sock'), text)
        self.assertIn('[compute]\ncpu_dedicated_set = 0-1\n', text)
        # one instances path for all, each compute's own directory in
        # its namespace; the destination of a resize's copy is my_ip
        self.assertIn('instances_path = %s\n' % os.path.join(
            self.c.state_dir, 'instances'), text)
        for i, (host, _m) in enumerate(cloud.COMPUTES):
            self.assertIn('my_ip = 127.0.1.%d\n' % (i + 1),
                          configs.compute(self.c, host))
        self.assertIn('[privsep_osbrick]\nhelper_command = ', text)
        self.assertNotIn('nrl_cloud', text)
        # a live migration reaches the destination's own libvirtd
        self.assertIn('live_migration_uri = qemu+unix:///system?socket=%s\n'
                      % os.path.join(self.c.state_dir, 'computes', '%s',
                                     'libvirt', 'run', 'libvirt-sock'), text)

    def test_each_libvirt_compute_has_its_own_instances(self):
        state = os.path.join(self.tmp, 'lv')
        saved = hypervisor.glob.glob
        hypervisor.glob.glob = lambda pattern: []
        try:
            script = hypervisor.write(state, 'h1', 0, '127.0.1.1')
        finally:
            hypervisor.glob.glob = saved
        with open(script) as f:
            text = f.read()
        own = os.path.join(state, 'computes', 'h1', 'libvirt', 'instances')
        self.assertIn('mount --bind %s %s\n' % (
            own, os.path.join(state, 'instances')), text)
        self.assertTrue(os.path.isdir(own))
        self.assertEqual(['/usr/bin/nsenter', '-t', '42', '--mount'][1:],
                         hypervisor.nsenter(42)[1:])

    def test_the_computes_ssh_with_the_clouds_own_key(self):
        state = os.path.join(self.tmp, 'ssh-state')
        conf = hostssh.write_clients(state, ['127.0.1.1', '127.0.1.2'])
        with open(conf) as f:
            text = f.read()
        self.assertIn('Host 127.0.1.1 127.0.1.2\n', text)
        self.assertIn('IdentityFile %s\n' % os.path.join(
            state, 'ssh', 'id_rsa'), text)
        self.assertIn('BatchMode yes\n', text)
        for name in ('ssh', 'scp'):
            with open(os.path.join(hostssh.bindir(state), name)) as f:
                self.assertIn(' -F %s "$@"' % conf, f.read())

    def test_each_compute_reaches_the_broker_on_its_own_address(self):
        for i, (host, _m) in enumerate(cloud.COMPUTES):
            self.assertIn('transport_url = rabbit://guest:guest@127.0.1.%d:'
                          '5672/\n' % (i + 1), configs.compute(self.c, host))
        # the other services keep 127.0.0.1
        self.assertIn('transport_url = rabbit://guest:guest@127.0.0.1:5672/',
                      configs.nova(self.c))

    def test_pinned_hosts_scheduler_filters(self):
        self.c.hypervisor = 'libvirt'
        self.c.scheduler_filters = lambda: ['ComputeFilter',
                                            'NUMATopologyFilter']
        self.assertIn('[filter_scheduler]\nenabled_filters = ComputeFilter,'
                      'NUMATopologyFilter\n', configs.nova(self.c))
        # the fake driver's clouds keep Nova's defaults
        self.assertIsNone(cloud.Cloud(self.c.state_dir).scheduler_filters())

    def test_status_finds_the_cells_from_nova_conf(self):
        text = configs.nova(self.c)
        self.assertIn('[api_database]\nconnection = mysql+pymysql://', text)


class TestTempest(unittest.TestCase):

    def test_the_list_is_the_devstack_jobs(self):
        with open(path('.zuul.yaml')) as f:
            self.assertIn(tempest.job_regex(path()), f.read())
        regex = re.compile(tempest.job_regex(path()))
        self.assertTrue(regex.search(
            'tempest.api.compute.admin.test_migrations.MigrationsAdminTest.'
            'test_revert_cold_migration'))
        self.assertTrue(regex.search(
            'tempest.api.compute.servers.test_server_actions.'
            'ServerActionsTestJSON.test_resize_server_revert'))

    def test_parse(self):
        out = '\n'.join([
            '{0} tempest.api.compute.admin.test_migrations.MigrationsAdmin'
            'Test.test_cold_migration [12.0s] ... ok',
            '{1} tempest.api.compute.servers.test_server_actions.ServerAct'
            'ionsTestJSON.test_resize_volume_backed_server_confirm ... '
            'SKIPPED: Skipped because the volume service is not available',
            '{1} tempest.api.compute.servers.test_server_actions.ServerAct'
            'ionsTestJSON.test_resize_server_revert[id-c03aab19] [7.4s] '
            '... FAILED',
            '======', 'Totals', '======', 'Ran: 3 tests in 20.0 sec.',
            ' - Passed: 1', ' - Skipped: 1', ' - Expected Fail: 0',
            ' - Unexpected Success: 0', ' - Failed: 1'])
        r = tempest.parse(out)
        self.assertEqual((3, 1, 1, 1), (r['ran'], r['passed'],
                                        r['skipped'], r['failed']))
        self.assertEqual('Skipped because the volume service is not '
                         'available', r['skips'][0]['reason'])
        self.assertEqual(['tempest.api.compute.servers.test_server_actions.'
                          'ServerActionsTestJSON.test_resize_server_revert'],
                         r['failures'])

    def test_parse_plugin_tests(self):
        module = 'whitebox_tempest_plugin.api.compute.test_cpu_pinning.'
        out = '\n'.join([
            '{0} %sCPUPolicyTest.test_cpu_shared [0.0s] ... SKIPPED: Need '
            'one or more shared cpus per NUMA' % module,
            '{0} %sCPUPolicyTest.test_resize_pinned_server_to_unpinned '
            '[18.9s] ... ok' % module,
            '{0} setUpClass (%sNUMALiveMigrationTest) ... SKIPPED: Exactly '
            '2 compute nodes required.' % module,
            'Ran: 2 tests in 20.0 sec.', ' - Passed: 1', ' - Skipped: 1',
            ' - Failed: 0'])
        r = tempest.parse(out)
        self.assertEqual([module + 'CPUPolicyTest.test_resize_pinned_server'
                          '_to_unpinned'], r['passed_tests'])
        # the class-level skip once, without its parenthesis
        self.assertEqual([module + 'CPUPolicyTest.test_cpu_shared',
                          module + 'NUMALiveMigrationTest'],
                         [s['test'] for s in r['skips']])


class TestWhitebox(unittest.TestCase):

    MODULE = 'whitebox_tempest_plugin.api.compute.test_cpu_pinning.'

    def test_what_each_layout_runs(self):
        dedicated = re.compile(whitebox.regex('ussuri', 'dedicated'))
        split = re.compile(whitebox.regex('ussuri', 'split'))
        epoxy_split = re.compile(whitebox.regex('epoxy', 'split'))
        for test, d, s in (
                ('CPUPolicyTest.test_cpu_dedicated', True, True),
                ('CPUPolicyTest.test_resize_pinned_server_to_unpinned[id-1]',
                 True, True),
                ('CPUThreadPolicyTest.test_threads_isolate', True, False),
                ('NUMARebuildTest.test_in_place_rebuild', True, False),
                ('EmulatorThreadTest.test_policy_isolate', True, True),
                ('EmulatorThreadTest.test_policy_share_cpu_shared_unset',
                 False, False),
                ('NUMALiveMigrationTest.test_cpu_pinning_and_emulator_'
                 'threads', False, False),
                ('MixedCPUPolicyTest.test_shared_pinned_and_unpinned_guest',
                 False, False)):
            self.assertEqual(d, bool(dedicated.search(self.MODULE + test)),
                             test)
            self.assertEqual(s, bool(split.search(self.MODULE + test)),
                             test)
        # hw:cpu_policy=mixed from Victoria on
        self.assertTrue(epoxy_split.search(
            self.MODULE + 'MixedCPUPolicyTest.test_shared_pinned_and_'
            'unpinned_guest'))
        self.assertIn('MixedCPUPolicyTest',
                      whitebox.left_out('ussuri', 'split'))

    def _result(self, **kw):
        r = {'mode': 'wrapper', 'layout': 'split', 'rc': 0, 'failures': [],
             'passed': 2, 'pinning_errors': {}, 'sections_by_kind':
             {'confirm': 2},
             'passed_tests': [self.MODULE + 'CPUPolicyTest.test_resize_'
                              'pinned_server_to_unpinned'],
             'mixins_applied': {'h1': ['confirm', 'revert']}}
        r.update(kw)
        return r

    def test_judged_with_the_extension_only(self):
        self.assertEqual([], whitebox.judge([self._result()]))
        bad = self._result(rc=1, failures=[self.MODULE + 'X.test_y'],
                           pinning_errors={'h1': {'CPUPinningInvalid': 2}})
        problems = whitebox.judge([bad])
        self.assertEqual(2, len(problems))
        self.assertIn('X.test_y', problems[0])
        self.assertIn('h1 logged CPUPinningInvalid 2', problems[1])
        # plain computes are the baseline: reported, not judged
        self.assertEqual([], whitebox.judge([dict(bad, mode='plain')]))

    def test_a_resize_must_run_the_mixin(self):
        problems = whitebox.judge([self._result(sections_by_kind={})])
        self.assertIn('no compute ran a confirm section', problems[0])
        # a Nova already fixed: the extension stands aside
        self.assertEqual([], whitebox.judge([self._result(
            sections_by_kind={}, mixins_applied={})]))
        self.assertIn('passed no test', whitebox.judge(
            [self._result(passed=0, passed_tests=[])])[0])

    def test_bad_input_is_refused_before_anything_changes(self):
        tmp = tempfile.mkdtemp()
        self.addCleanup(shutil.rmtree, tmp)
        c = cloud.Cloud(os.path.join(tmp, 'state'))
        self.assertRaisesRegex(whitebox.WhiteboxError, 'hypervisor libvirt',
                               whitebox.run, c)
        c.hypervisor = 'libvirt'
        self.assertRaisesRegex(whitebox.WhiteboxError, 'not foo',
                               whitebox.run, c, ['foo'])
        saved = whitebox._which
        whitebox._which = lambda name: None if name == 'sshd' else name
        try:
            self.assertRaisesRegex(
                whitebox.WhiteboxError, r'missing on this host: sshd '
                r'\(apt-get install --no-install-recommends openssh-server',
                whitebox.run, c)
        finally:
            whitebox._which = saved
        train = cloud.Cloud(os.path.join(tmp, 'train'), 'train')
        train.hypervisor = 'libvirt'
        self.assertRaisesRegex(whitebox.WhiteboxError, 'vcpu_pin_set',
                               whitebox.run, train)

    def test_the_plugin_reaches_each_compute_on_its_own_address(self):
        text = hostssh.sshd_config('/s/ssh', 'h1', '127.0.1.1')
        self.assertIn('ListenAddress 127.0.1.1:22\n', text)
        self.assertIn('AuthorizedKeysFile /s/ssh/id_rsa.pub\n', text)
        self.assertIn('PasswordAuthentication no\n', text)


PROBE = [
    '2026-12-01 13:28:55.424 5590 ERROR oslo_messaging.rpc.server [-] '
    'Exception during message handling: oslo_messaging.rpc.dispatcher.'
    'UnsupportedVersion: Endpoint does not support RPC version 1.0. '
    'Attempted method: get_status',
    '2026-12-01 13:28:55.424 5590 ERROR oslo_messaging.rpc.server '
    'Traceback (most recent call last):',
    '2026-12-01 13:28:55.424 5590 ERROR oslo_messaging.rpc.server   '
    'raise UnsupportedVersion(version, method=method)',
]


class TestPartition(CloudBase):

    def setUp(self):
        super(TestPartition, self).setUp()
        self.c.state = procs.State(self.c.state_dir)
        self.host = cloud.COMPUTES[1][0]
        self.calls = []

    def fake_iptables(self, present):
        def run(*args):
            self.calls.append(args)
            ok = args[0] != '-C' or args[1:] in present
            if args[0] == '-A':
                present.append(args[1:])
            elif args[0] == '-D':
                present.remove(args[1:])
            return subprocess.CompletedProcess(args, 0 if ok else 1, '', '')
        self.c._iptables = run

    def test_rules_drop_both_directions_of_that_compute_only(self):
        rules = self.c._partition_rules(self.host)
        self.assertEqual(2, len(rules))
        self.assertIn(['-d', '127.0.1.2', '--dport', '5672'],
                      [r[3:7] for r in rules])
        self.assertIn(['-s', '127.0.1.2', '--sport', '5672'],
                      [r[3:7] for r in rules])
        self.assertTrue(all(r[-2:] == ['-j', 'DROP'] for r in rules))

    def test_not_a_compute_refused(self):
        self.assertRaises(cloud.UpError, self.c._partition_rules,
                          'nrl-controller')

    def test_a_compute_on_the_shared_address_is_refused(self):
        # a cloud brought up before the computes had their own address
        with open(self.c.compute_conf(self.host), 'w') as f:
            f.write('transport_url = %s\n' % self.c.transport_url)
        present = []
        self.fake_iptables(present)
        with self.assertRaises(cloud.UpError) as e:
            self.c.cut_off(self.host)
        self.assertIn('bring it up again', str(e.exception))
        self.assertEqual([], present)

    def test_cut_recorded_healed_and_healed_by_down(self):
        self.c.write_compute_conf(self.host)
        present = []
        self.fake_iptables(present)
        self.c.cut_off(self.host)
        self.c.cut_off(self.host)  # twice: the rules once
        self.assertEqual(2, len(present))
        self.assertEqual([self.host], procs.State(
            self.c.state_dir).data['cut_off'])
        self.assertTrue(self.c.reconnect(self.host))
        self.assertEqual([], present)
        self.assertFalse(self.c.reconnect(self.host))
        self.c.cut_off(self.host)
        self.c.down(quiet=True)
        self.assertEqual([], present)

    def test_no_iptables_is_a_clear_error(self):
        with mock_which(None), self.assertRaises(cloud.UpError) as e:
            self.c._iptables('-L')
        self.assertIn('iptables is not installed', str(e.exception))


class mock_which(object):
    """cloud's lookups of a command find ``value``."""

    def __init__(self, value):
        self.value = value

    def __enter__(self):
        self.saved = cloud.shutil.which, cloud._which
        cloud.shutil.which = lambda *a, **k: self.value
        cloud._which = lambda *a, **k: self.value
        return self

    def __exit__(self, *exc):
        cloud.shutil.which, cloud._which = self.saved


class TestFaultJudgement(unittest.TestCase):

    def run_record(self, mode, **kw):
        r = {'scenario': 's', 'mode': mode, 'books_wrong': False,
             'negative': [], 'leaked': [], 'missing': False,
             'stuck_migrations': [], 'stuck_server': False,
             'server_in_error': False, 'next_move_ok': True,
             'server_usable': True, 'repair': []}
        r.update(kw)
        return r

    def judge(self, wrapper, plain):
        return checks.judge_faults({
            'wrapper': checks._fault_counts([wrapper]),
            'plain': checks._fault_counts([plain])})

    def repaired(self, mode, ok=True, **kw):
        after = {'after_repair_books_wrong': False,
                 'after_repair_books_judged': True,
                 'after_repair_leaked': [], 'after_repair_held_by_stuck': [],
                 'after_repair_missing': False,
                 'after_repair_stuck_server': not ok,
                 'after_repair_server_in_error': False,
                 'after_repair_negative': []}
        after.update(kw)
        return self.run_record(
            mode, leaked=['m'], stuck_server=True,
            repair=['openstack server set --state active ' + 'x' * 36,
                    'nova-manage placement audit --delete'], **after)

    def test_the_same_repaired_leak_in_both_modes_passes(self):
        self.assertEqual([], self.judge(self.repaired('wrapper'),
                                        self.repaired('plain')))
        row = checks._fault_counts([self.repaired('wrapper')])['s']
        self.assertEqual(['openstack server set --state active',
                          'nova-manage placement audit --delete'],
                         row['repair'])

    def test_what_the_cloud_held_before_a_run_is_not_the_runs(self):
        carried = ['an allocation on h of ' + 'm' * 36 + ', not a server']
        wrapper = self.run_record('wrapper', carried_in=carried)
        self.assertEqual([], self.judge(wrapper, self.run_record('plain')))
        self.assertEqual(carried,
                         checks._fault_counts([wrapper])['s']['carried_in'])

    def test_a_repair_that_does_not_set_it_right_fails(self):
        problems = self.judge(self.repaired('wrapper', ok=False),
                              self.repaired('plain', ok=False))
        self.assertIn('s: the extension left repair_failed (1)', problems)

    def test_worse_than_plain_fails(self):
        problems = self.judge(self.repaired('wrapper'),
                              self.run_record('plain'))
        self.assertIn('s: leaked worse with the extension (1 of 1 runs) '
                      'than plain (0 of 1)', problems)

    def test_wrong_books_or_a_server_that_does_not_move_fail(self):
        for kw in ({'books_wrong': True}, {'server_usable': False},
                   {'negative': [{'host': 'h', 'reading': [-1, 0]}]},
                   {'next_move_ok': False}):
            problems = self.judge(self.run_record('wrapper', **kw),
                                  self.run_record('plain', **kw))
            self.assertTrue(problems, kw)

    def test_plain_alone_showing_the_bug_passes(self):
        self.assertEqual([], self.judge(
            self.run_record('wrapper'), self.run_record(
                'plain', negative=[{'host': 'h', 'reading': [-1, -256]}])))

    def test_a_kill_may_leave_books_wrong_until_the_repair(self):
        for name, wrong in (('s', True), ('random-resize-dest-prep', False),
                            ('kill-resize-dest-prep', False)):
            wrapper = self.run_record('wrapper', books_wrong=True)
            plain = self.run_record('plain', books_wrong=True)
            wrapper['scenario'] = plain['scenario'] = name
            problems = self.judge(wrapper, plain)
            self.assertEqual(wrong, bool(problems), (name, problems))
        # Not where plain Nova leaves them right.
        wrapper = self.run_record('wrapper', books_wrong=True)
        plain = self.run_record('plain')
        wrapper['scenario'] = plain['scenario'] = 'random-x'
        self.assertEqual(['random-x: books_wrong worse with the extension '
                          '(1 of 1 runs) than plain (0 of 1)'],
                         self.judge(wrapper, plain))

    def test_not_run_fails(self):
        problems = self.judge({'scenario': 's', 'mode': 'wrapper',
                               'not_run': 'no iptables'},
                              self.run_record('plain'))
        self.assertTrue(any('no iptables' in p for p in problems), problems)


class TestKillPoints(unittest.TestCase):

    def test_the_same_seed_draws_the_same_kills(self):
        self.assertEqual(kill_points.random_kills(7, 20),
                         kill_points.random_kills(7, 20))
        self.assertNotEqual(kill_points.random_kills(7, 20),
                            kill_points.random_kills(8, 20))

    def test_every_kill_is_a_point_the_hook_knows(self):
        points = ('status-saving', 'status-saved', 'finish-revert',
                  'dispatch')
        kills = kill_points.random_kills(1, 200)
        self.assertEqual({'random-%s' % k[0] for k in
                          kill_points.KILL_POINTS}, {k[0] for k in kills})
        for name, action, role, spec, outage in kills:
            self.assertIn(action, ('resize', 'confirm', 'revert'))
            self.assertIn(role, ('source', 'dest'))
            self.assertIn(spec['point'], points)
            self.assertIsNone(outage)
            self.assertTrue(0 <= spec['delay'] <= kill_points.KILL_DELAY_S)
        self.assertTrue(any(k[3]['delay'] == 0 for k in kills))
        self.assertTrue(any(k[3]['delay'] > 0 for k in kills))

    def test_a_delayed_kill_lets_the_step_go_on(self):
        tmp = tempfile.mkdtemp()
        self.addCleanup(shutil.rmtree, tmp)
        code = ('import sys, time; sys.path.insert(0, %r); '
                'from cloud_lib import fault_hook; '
                'h = fault_hook.Hook(%r); '
                'h.fire({"point": "p", "delay": 0.5}, "x"); '
                'print("went on", flush=True); time.sleep(30)'
                % (path('tools'), tmp))
        proc = subprocess.run([sys.executable, '-c', code],
                              stdout=subprocess.PIPE,
                              universal_newlines=True, timeout=60)
        self.assertEqual(-9, proc.returncode)
        self.assertEqual('went on\n', proc.stdout)
        self.assertTrue(os.path.exists(os.path.join(tmp, 'fault.fired')))


class TestLogCheck(Base):

    def log(self, name, lines):
        p = os.path.join(self.tmp, name)
        with open(p, 'w') as f:
            f.write('\n'.join(lines) + '\n')
        return p

    def services(self, wrapper_lines, plain_lines):
        return [
            {'name': 'w', 'host': 'h1', 'mode': 'wrapper',
             'log': self.log('w.log', wrapper_lines)},
            {'name': 'p', 'host': 'h3', 'mode': 'plain',
             'log': self.log('p.log', plain_lines)},
        ]

    def test_probe_errors_are_counted_apart(self):
        ok, report = logcheck.check(self.services([], PROBE))
        self.assertTrue(ok, report)
        plain = [v for v in report['computes'] if v['mode'] == 'plain'][0]
        self.assertEqual((3, 3, 0), (plain['errors'], plain['probe_errors'],
                                     plain['other_errors']))

    def test_injected_failures_are_counted_apart(self):
        # the live-block step's destination failure, as the source logs it
        made = [
            '2026-12-07 01:04:23.926 13086 ERROR nova.compute.manager [-] '
            '[instance: df48fd38] Pre live migration failed at '
            'nrl-compute2: nova.exception_Remote.DestinationDiskExists_'
            'Remote: The supplied disk path (/x) already exists',
            '2026-12-07 01:04:23.926 13086 ERROR nova.compute.manager '
            '[instance: df48fd38] Traceback (most recent call last):']
        other = ('2026-12-07 01:05:00.000 13086 ERROR nova.compute.manager '
                 '[-] boom')
        ok, report = logcheck.check(self.services(made, []))
        self.assertTrue(ok, report)
        wrapper = [v for v in report['computes'] if v['mode'] == 'wrapper'][0]
        self.assertEqual((2, 0, 2, 0), (
            wrapper['errors'], wrapper['probe_errors'],
            wrapper['injected_errors'], wrapper['other_errors']))
        ok, report = logcheck.check(self.services(made + [other], []))
        self.assertFalse(ok)
        self.assertIn('ran the wrapper and logged 1', report['problems'][0])

    def test_aborted_jobs_are_counted_apart(self):
        # the abort steps' failure, as the source's libvirt driver logs it
        made = [
            '2026-12-07 04:04:58.905 19639 ERROR nova.virt.libvirt.driver '
            '[-] [instance: 67cec8cf] Live Migration failure: operation '
            'aborted: job \'migration out\' canceled by client: '
            'libvirt.libvirtError: operation aborted',
            # and when libvirt reports the aborted job failed
            '2026-12-07 04:27:17.035 6356 ERROR nova.virt.libvirt.driver '
            '[-] [instance: 327d0849] Migration operation has aborted',
            '2026-12-07 04:27:18.843 6356 ERROR nova.virt.libvirt.driver '
            '[-] [instance: 327d0849] Live Migration failure: operation '
            'failed: job \'migration out\' failed: Unable to write to '
            'socket: Broken pipe']
        ok, report = logcheck.check(self.services(made, []))
        self.assertTrue(ok, report)
        wrapper = [v for v in report['computes'] if v['mode'] == 'wrapper'][0]
        self.assertEqual((3, 3, 0), (
            wrapper['errors'], wrapper['injected_errors'],
            wrapper['other_errors']))

    def test_our_errors_fail(self):
        ok, report = logcheck.check(self.services([
            '2026-12-01 13:00:00.000 1 ERROR nova_revert_lock.activation '
            '[-] something'], []))
        self.assertFalse(ok)
        self.assertIn('nova_revert_lock', report['problems'][0])

    def test_ours_in_a_directory(self):
        self.log('a.log', ['2026-12-01 13:00:00.000 1 ERROR nova.compute.'
                           'manager [-] a fault made this'])
        self.assertEqual([], logcheck.ours_in(self.tmp))
        self.log('b.log', ['2026-12-01 13:00:00.000 1 ERROR nova_revert_lock'
                           '.locking [-] ours'])
        problems = logcheck.ours_in(self.tmp)
        self.assertEqual(1, len(problems))
        self.assertIn('b.log: 1 ERROR/CRITICAL lines', problems[0])

    def test_more_wrapper_errors_than_plain_fail(self):
        err = ('2026-12-01 13:00:00.000 1 ERROR nova.compute.manager [-] '
               'boom')
        ok, report = logcheck.check(self.services([err, err], PROBE + [err]))
        self.assertFalse(ok)
        self.assertIn('ran the wrapper and logged 2', report['problems'][0])
        ok, report = logcheck.check(self.services([err], PROBE + [err]))
        self.assertTrue(ok, report)


class TestGuest(unittest.TestCase):
    """The guest that dirties its memory: its bytes are its listing."""

    def test_a_boot_sector(self):
        sector = guest.boot_sector()
        self.assertEqual(512, len(sector))
        self.assertEqual(b'\x55\xaa', sector[510:])
        image = guest.image_bytes()
        self.assertEqual(4096, len(image))
        self.assertEqual(sector, image[:512])

    @unittest.skipUnless(shutil.which('as') and shutil.which('ld'),
                         'GNU as and ld (binutils) assemble the listing')
    def test_the_bytes_are_the_listing_assembled(self):
        doc = guest.__doc__
        listing = doc[doc.index('.code16'):].splitlines()
        source = '\n'.join(line.split('#')[0].strip()
                           for line in listing) + '\n'
        tmp = tempfile.mkdtemp()
        self.addCleanup(shutil.rmtree, tmp)
        with open(os.path.join(tmp, 'g.S'), 'w') as f:
            f.write(source)
        subprocess.check_call(['as', '--32', '-o', 'g.o', 'g.S'], cwd=tmp)
        subprocess.check_call(['ld', '-m', 'elf_i386', '-Ttext', '0x7c00',
                               '--oformat', 'binary', '-o', 'g.bin',
                               'g.o'], cwd=tmp)
        with open(os.path.join(tmp, 'g.bin'), 'rb') as f:
            self.assertEqual(f.read(), guest.boot_sector())


class TestPinning(Base):

    XML = """<domain type='qemu'><name>instance-00000001</name>
      <cputune><vcpupin vcpu='0' cpuset='1'/><vcpupin vcpu='1' cpuset='0'/>
      <emulatorpin cpuset='0-1'/></cputune></domain>"""

    def test_readings(self):
        self.assertEqual({0, 1, 2, 5}, pinning.parse_cpuset('0-2,5'))
        self.assertEqual(set(), pinning.parse_cpuset(''))
        self.assertEqual({0, 1}, pinning.domain_pins(self.XML))
        self.assertEqual(set(), pinning.domain_pins('<domain/>'))
        topo = ('{"nova_object.name": "NUMATopology", "nova_object.data": '
                '{"cells": [{"nova_object.data": {"id": 0, "pinned_cpus": '
                '[1]}}, {"nova_object.data": {"id": 1, "pinned_cpus": '
                '[]}}]}}')
        self.assertEqual({1}, pinning.books_pins(topo))
        self.assertEqual(set(), pinning.books_pins(None))

    def test_judge(self):
        def guest(running, cpus):
            return {'running': running, 'cpus': cpus}

        right = {'h1': {'books': [0, 1], 'guests': {
            'a': guest(True, [0]), 'b': guest(False, [1])}}}
        self.assertEqual(([], []), pinning.judge(right))
        # a double free: the books lost a CPU a guest runs on, and the
        # next pinning there put a second guest on it
        wrong = {'h1': {'books': [1], 'guests': {
            'a': guest(True, [0]), 'c': guest(True, [0])}}}
        books, shared = pinning.judge(wrong)
        self.assertEqual(['h1: the books pin CPUs [1], its guests [0]'],
                         books)
        self.assertEqual(['h1: CPU 0 pinned by running a and c'], shared)

    def test_log_symptoms(self):
        log = os.path.join(self.tmp, 'c.log')
        with open(log, 'w') as f:
            f.write('2026-12-01 13:00:00.000 1 ERROR nova.compute.manager '
                    '[-] CPUUnpinningInvalid: CPU set to unpin [1] must be '
                    'a subset of pinned CPU set []\n')
        self.assertEqual({'CPUUnpinningInvalid': 1, 'CPUPinningInvalid': 0},
                         pinning.count_symptoms(log))
        ok, report = logcheck.check([{'name': 'w', 'host': 'h1',
                                      'mode': 'wrapper', 'log': log}])
        self.assertFalse(ok)
        self.assertIn("logged Nova's pinning errors: CPUUnpinningInvalid 1 "
                      'lines', report['problems'][0])
        ok, report = logcheck.check([{'name': 'p', 'host': 'h1',
                                      'mode': 'plain', 'log': log}])
        self.assertTrue(ok, report)


class TestFamily(Base):

    def test_mixin_lines_counted_over_running_and_retired_computes(self):
        line = ('2026-12-01 13:00:00.000 1 INFO nova_revert_lock.mixins.%s '
                '[req-1] [instance: x] something\n')
        logs = []
        for name, mixins in (('a', ['evacuate_under_lock'] * 2),
                             ('b', ['unshelve_claim']),
                             ('c', ['evacuate_under_lock'])):
            p = os.path.join(self.tmp, name + '.log')
            with open(p, 'w') as f:
                f.write('2026-12-01 13:00:00.000 1 INFO nova_revert_lock.'
                        'activation [-] applied\n')
                f.write(''.join(line % m for m in mixins))
            logs.append(p)

        class State(object):
            services = [{'host': 'h1', 'log': logs[0]},
                        {'name': 'nova-api', 'log': logs[1]}]
            data = {'retired': [{'host': 'h2', 'log': logs[2]},
                                {'host': 'h3', 'log': '/nonexistent'}]}

        class Cloud(object):
            state = State()

        self.assertEqual({'evacuate_under_lock': 3},
                         checks.mixin_log_lines(Cloud()))

    def test_judge(self):
        self.assertEqual([], checks.judge_family({
            'shelve': {'wrong': False, 'error': None}}))
        self.assertEqual(
            ['family evacuate: no report', 'family live-abort: boom',
             'family shelve: books wrong'],
            checks.judge_family({
                'shelve': {'wrong': True, 'error': None},
                'live-abort': {'wrong': True, 'error': 'boom'},
                'evacuate': None}))

    def test_the_mixins_path_must_have_run_where_it_applies(self):
        rec = {'wrong': False, 'error': None, 'dest': 'h2',
               'dest_mixins': ['evacuate_under_lock'], 'sections_by_kind': {}}
        self.assertEqual(
            ['family evacuate: evacuate_under_lock applies on h2, which ran '
             'no evacuate_under_lock section'],
            checks.judge_family({'evacuate': rec}))
        rec['sections_by_kind'] = {'evacuate_under_lock': 1}
        self.assertEqual([], checks.judge_family({'evacuate': rec}))
        # A plain destination, or one where upstream's fix stands in.
        rec.update(sections_by_kind={}, dest_mixins=[])
        self.assertEqual([], checks.judge_family({'evacuate': rec}))

    def test_the_queued_abort_is_a_canary_on_a_plain_source(self):
        fixed = {'wrong': False, 'error': None,
                 'source_mixins': ['live_migration_abort_queued']}
        self.assertEqual([], checks.judge_family(
            {'live-abort-queued': fixed}))
        self.assertEqual(['family live-abort-queued: boom'],
                         checks.judge_family({'live-abort-queued': dict(
                             fixed, wrong=True, error='boom')}))
        # A plain source leaves the bug: that is the step's canary.
        plain = {'wrong': True, 'error': 'bug 1949808', 'source_mixins': []}
        self.assertEqual([], checks.judge_family(
            {'live-abort-queued': plain}, 'plain'))
        self.assertEqual(
            ['family live-abort-queued: a plain source did not leave bug '
             '1949808 (the step did not take its path)'],
            checks.judge_family({'live-abort-queued': dict(
                plain, wrong=False, error=None)}))
        # Upstream's fix (24.1.1, 25.0.0): a source without the mixin
        # must end the abort right, as any other step.
        for fixed_in in ('24.1.1', '25.0.0', '31.3.1'):
            self.assertEqual([], checks.judge_family({
                'live-abort-queued': dict(plain, wrong=False, error=None,
                                          source_nova=fixed_in)}))
            self.assertEqual(['family live-abort-queued: bug 1949808'],
                             checks.judge_family({'live-abort-queued': dict(
                                 plain, source_nova=fixed_in)}))
        for affected in ('20.6.1', '21.1.2', '23.2.0', '24.1.0', None):
            self.assertTrue(checks.lacks_queued_abort_fix(affected))

    def test_pinning_errors_count_against_the_fix_only(self):
        rec = {'wrong': False, 'error': None,
               'pinning_symptoms': {'h2': {'CPUPinningInvalid': 2}}}
        self.assertEqual([], checks.judge_family({'migrate-incoming': rec},
                                                 'plain'))
        self.assertEqual(
            ["family migrate-incoming: pinning errors with the fix: "
             "{'h2': {'CPUPinningInvalid': 2}}"],
            checks.judge_family({'migrate-incoming': rec}, 'wrapper'))


class DamageJudgementTest(unittest.TestCase):

    def _report(self, *findings):
        return {'findings': [{'kind': k, 'server': s} for k, s in findings]}

    def test_the_report_must_name_what_the_races_did(self):
        problems = []
        result = self._report(('shared-pcpu', 'b'), ('server-in-error', 'e'))
        damage._judge_report(problems, 'before', 1, result, [
            (None, ('e',)), ('shared-pcpu', ('a', 'b'))])
        self.assertEqual([], problems)
        damage._judge_report(problems, 'before', 1, result, [
            ('shared-pcpu', ('e',)), (None, ('x',))])
        self.assertEqual(['before: the report missed shared-pcpu of e',
                          'before: the report missed every finding of x'],
                         problems)

    def test_exit_code_follows_the_findings(self):
        problems = []
        damage._judge_report(problems, 'after', 1, self._report(), [])
        damage._judge_report(problems, 'after', 0,
                             self._report(('stale-migration', 's')), [])
        damage._judge_report(problems, 'after', 3, None, [])
        self.assertEqual(['after: exit 1 with 0 finding(s)',
                          'after: exit 0 with 1 finding(s)',
                          'after: the report failed (exit 3)'], problems)

    def test_the_fixed_run_boots_when_the_plain_one_did(self):
        race = {'records': [{'booted': 'y', 'boot_after_revert_s': 3.1},
                            {'booted': None}]}
        self.assertEqual([3.1], damage.boot_times(race))
        self.assertEqual(list(damage.BOOT_AT), damage.boot_times(None))


class TestCommandLine(unittest.TestCase):

    def test_help(self):
        out = subprocess.check_output(
            ['bash', path('tools', 'cloud'), '--help'],
            universal_newlines=True)
        for command in ('up', 'down', 'status', 'logs', 'tempest', 'soak',
                        'audit', 'rolling', 'check-logs', 'short', 'full'):
            self.assertIn(command, out)

    def test_status_without_a_cloud(self):
        tmp = tempfile.mkdtemp()
        self.addCleanup(shutil.rmtree, tmp)
        proc = subprocess.run(
            ['bash', path('tools', 'cloud'), '--state-dir', tmp, 'status',
             '--format', 'json'], stdout=subprocess.PIPE,
            universal_newlines=True)
        self.assertEqual(3, proc.returncode)
        import json
        data = json.loads(proc.stdout)
        for key in ('state_dir', 'clouds_yaml', 'nova_conf', 'nova_version',
                    'services', 'computes'):
            self.assertIn(key, data)


class DamageRepairStepsTest(unittest.TestCase):
    """The cloud runs each repair step exactly as the report prints it."""

    class FakeCloud(object):
        def __init__(self):
            self.restarted = []

        def bin(self, name):
            return '/venv/bin/' + name

        def conf(self, name):
            return '/etc/' + name

        def venv_env(self):
            return {}

        def restart_compute(self, host, mode):
            self.restarted.append((host, mode))

    def run_step(self, step):
        c = self.FakeCloud()
        ran = []

        def fake_run(argv, **kwargs):
            ran.append(argv)
            return subprocess.CompletedProcess(argv, 0, 'ok')

        real, subprocess.run = subprocess.run, fake_run
        try:
            rc = damage.run_step(c, step)[0]
        finally:
            subprocess.run = real
        return rc, ran, c.restarted

    def test_commands(self):
        self.assertEqual(
            (0, [['/venv/bin/nova-manage', '--config-file', '/etc/nova.conf',
                  'placement', 'audit', '--verbose', '--delete']], []),
            self.run_step('nova-manage placement audit --verbose --delete'))
        self.assertEqual(
            (0, [['/venv/bin/openstack', '--os-cloud', 'nrl', 'server',
                  'resize', 'confirm', 'S']], []),
            self.run_step('openstack server resize confirm S  # or: '
                          'openstack server resize revert S'))
        self.assertEqual(
            (0, [], [('cmp1', 'wrapper')]),
            self.run_step('restart nova-compute on cmp1 once the servers '
                          'sharing its CPUs are moved'))

    def test_unknown_step_fails(self):
        self.assertEqual(1, self.run_step('rm -rf /var/lib/nova')[0])
