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

"""nova-compute-revert-lock starts as the installed release starts it.

Real processes (:mod:`.processes`): RabbitMQ, placement, nova-conductor,
then ``nova-compute-revert-lock`` on the fake driver, once per
concurrency model the installed release offers:

=========  ===================================  ===========================
Nova       release default                      the other model
=========  ===================================  ===========================
<= 32.x    eventlet                             (none tested)
33.x       eventlet                             threading:
                                                OS_NOVA_DISABLE_EVENTLET_
                                                PATCHING=1
34.x       threading                            eventlet: [DEFAULT]
                                                concurrency_backend
=========  ===================================  ===========================

Each start must register the service (through the conductor), run the
resource tracker's periodic task (the compute node record appears, the
periodic runs again), answer ``nova-revert-lock status``, say in its log
which concurrency model runs, and log no ERROR from ``nova_revert_lock``.
Then :mod:`.lock_probe` proves, in a process set up the same way, that the
lock read off the installed tracker excludes the periodic task. With
``[revert_lock] enabled = false`` the service starts as plain nova-compute.

``NRL_REQUIRE_RABBITMQ=1`` (the ``start-*`` tox envs) turns a missing
rabbitmq-server into a failure; otherwise these tests skip.
"""

import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import time

import testtools
from testtools import content

from nova_revert_lock import startup
from nova_revert_lock.tests.integration import processes
from nova_revert_lock.tests.integration import rabbitmq

RESULTS_ENV = 'NRL_START_RESULTS'
ERROR_FROM_US = re.compile(r' ERROR nova_revert_lock')
RUNNING = re.compile(r'nova-revert-lock: Nova \S+: concurrency set up by '
                     r'(\S+) \(release default (\w+)\); running with (\w+)')
#: the periodic task's own line (the class is ours when composed)
PERIODIC = re.compile(r'Running periodic task \w+\.update_available_resource')
RESOURCE_VIEW = 'Final resource view'
DISABLE_ENV = 'OS_NOVA_DISABLE_EVENTLET_PATCHING'


def nova_major():
    version = startup.nova_version() or '0'
    return int(version.split('.')[0])


def modes(major):
    """[(mode name, extra configuration, extra environment)], default first.

    The mode name is the concurrency model nova-compute must run with.
    """
    if major >= 34:
        return [('threading', {}, {}),
                ('eventlet', {'DEFAULT': {'concurrency_backend': 'eventlet'}},
                 {})]
    if major == 33:
        return [('eventlet', {}, {}),
                ('threading', {}, {DISABLE_ENV: '1'})]
    return [('eventlet', {}, {})]


#: activation's INFO line: what it applied (or, where upstream's fix is
#: in, that it stands aside and what it applies beyond it)
ACTIVATED = re.compile(r' INFO nova_revert_lock\.activation .*'
                       r'nova-revert-lock: (applied|Nova \S+ \(\S+\) '
                       r'already carries)')
#: nova-compute's console script as pip writes it (Nova's entry point)
NOVA_COMPUTE_SCRIPT = """#!%s
import sys
from nova.cmd.compute import main
if __name__ == '__main__':
    sys.exit(main())
"""


def kolla_override_steps():
    """The shell steps of contrib/kolla's override (tools/kolla_render.py)."""
    top = os.path.join(os.path.dirname(os.path.abspath(__file__)),
                       os.pardir, os.pardir, os.pardir)
    spec = importlib.util.spec_from_file_location(
        'kolla_render', os.path.join(top, 'tools', 'kolla_render.py'))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.footer_shell()


class _ControlPlaneTestCase(testtools.TestCase):
    """One control plane for every test of the class."""

    control_plane = None
    setup_error = None

    @classmethod
    def setUpClass(cls):
        super(_ControlPlaneTestCase, cls).setUpClass()
        env = dict(os.environ)
        # The release decides; only the tests ask for a model explicitly.
        env.pop(DISABLE_ENV, None)
        plane = processes.ControlPlane(env=env)
        try:
            plane.setUp()
        except rabbitmq.RabbitMQUnavailable as e:
            cls.setup_error = e
            return
        cls.control_plane = plane

    @classmethod
    def tearDownClass(cls):
        if cls.control_plane is not None:
            cls.control_plane.cleanUp()
            cls.control_plane = None
        super(_ControlPlaneTestCase, cls).tearDownClass()

    def setUp(self):
        super(_ControlPlaneTestCase, self).setUp()
        if self.setup_error is not None:
            if rabbitmq.required():
                self.fail('RabbitMQ: %s' % self.setup_error)
            self.skipTest('RabbitMQ: %s' % self.setup_error)
        self.plane = self.control_plane

    def _record(self, name, data):
        self.addDetail(name, content.text_content(
            json.dumps(data, indent=2, sort_keys=True)))
        results = os.environ.get(RESULTS_ENV)
        if results:
            os.makedirs(results, exist_ok=True)
            path = os.path.join(results, 'nova-%s.jsonl' % (
                startup.nova_version(),))
            with open(path, 'a') as f:
                f.write(json.dumps(dict(data, test=name),
                                   sort_keys=True) + '\n')


class StartTestCase(_ControlPlaneTestCase):

    def _start(self, host, extra, env, expect_backend, enabled=True,
               command='nova-compute-revert-lock'):
        started = time.monotonic()
        extra = dict(extra)
        extra.setdefault('DEFAULT', {})
        extra['DEFAULT'] = dict(extra['DEFAULT'],
                                graceful_shutdown_timeout='5')
        if not enabled:
            extra['revert_lock'] = {'enabled': 'false'}
        process, conf = self.plane.start_compute(host, extra, env,
                                                 command=command)
        self.addCleanup(process.stop)
        self.addOnException(lambda exc_info: self.addDetail(
            '%s.log' % host, content.text_content(process.tail(200))))
        timings = {}

        def mark(name):
            timings[name] = round(time.monotonic() - started, 1)

        processes.wait_for(
            lambda: self.plane.service_row('nova-compute', host),
            processes.START_TIMEOUT, 'the nova-compute service of %s' % host,
            process=process)
        mark('service_registered')
        node = processes.wait_for(
            lambda: self.plane.compute_node_row(host),
            processes.START_TIMEOUT, 'the compute node of %s' % host,
            process=process)
        mark('compute_node')
        processes.wait_for(
            lambda: (PERIODIC.search(process.log()) and
                     process.log().count(RESOURCE_VIEW) >= 2),
            processes.START_TIMEOUT, 'the periodic task on %s' % host,
            process=process)
        mark('periodic_ran')
        code, rows, out = processes.revert_lock_status(conf, host)
        mark('status_answered')
        log = process.log()
        self.assertTrue(process.alive(), process.tail())
        process.stop()
        mark('stopped')

        errors = [line for line in log.splitlines()
                  if ERROR_FROM_US.search(line)]
        self.assertEqual([], errors)
        self.assertIsNotNone(rows, out)
        self.assertEqual(1, len(rows), out)
        row = rows[0]
        self.assertTrue(row['reachable'], out)
        running = RUNNING.search(log)
        result = {'host': host, 'nova_version': startup.nova_version(),
                  'python': sys.version.split()[0],
                  'expected_backend': expect_backend,
                  'status_exit': code, 'status_state': row['state'],
                  'compute_node': list(node[:3]),
                  'timings': timings,
                  'control_plane_timings': self.plane.timings}
        if running:
            result.update(entry_point=running.group(1),
                          release_default=running.group(2),
                          running=running.group(3))
        self._record(host, result)
        self.assertIsNotNone(running, 'no concurrency line in the log')
        self.assertEqual(expect_backend, running.group(3))
        return code, row, log, conf

    def _lock_probe(self, conf, env, expect_backend):
        proc = subprocess.run(
            [sys.executable, processes.script('lock_probe.py'),
             '--config-file', conf],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            universal_newlines=True, timeout=processes.COMMAND_TIMEOUT,
            env=dict(self.plane.base_env, **env), cwd=self.plane.base)
        self.assertEqual(0, proc.returncode, proc.stdout + proc.stderr)
        result = json.loads(proc.stdout.strip().splitlines()[-1])
        self._record('lock-probe-%s' % expect_backend, result)
        self.assertNotIn('error', result)
        self.assertEqual(expect_backend, result['backend'])
        self.assertFalse(result['entered_while_held'], result)
        self.assertTrue(result['entered_after_release'], result)
        if result['canary_entered_while_held'] is not True:
            self.assertIn('unavailable', str(
                result['canary_entered_while_held']))
        return result

    def _mode(self, index):
        available = modes(nova_major())
        if index >= len(available):
            self.skipTest('Nova %s runs nova-compute with eventlet only'
                          % startup.nova_version())
        return available[index]

    def _test_mode(self, index):
        backend, extra, env = self._mode(index)
        host = 'start-%s' % backend
        code, row, _log, conf = self._start(host, extra, env, backend)
        check = processes.revert_lock_check(conf)
        self.assertIn(check['state'], ('patched', 'already-fixed'))
        self.assertEqual(check['state'], row['state'])
        self.assertEqual(0, code)
        self._lock_probe(conf, env, backend)

    def test_release_default(self):
        self._test_mode(0)

    def test_other_concurrency_model(self):
        self._test_mode(1)

    def test_image_nova_compute_command(self):
        """An image whose nova-compute was replaced by the wrapper.

        Kolla's and TripleO's container definitions run ``nova-compute``
        by name; ``contrib/kolla``'s override replaces that console
        script in the image. Its footer's own shell steps are run on a
        copy of this environment's scripts (their interpreter is this
        virtualenv's), then ``nova-compute`` is started by that name.
        """
        backend, extra, env = self._mode(0)
        bindir = self.plane.path('image-bin')
        os.makedirs(bindir)
        for name in ('nova-compute', 'nova-compute-revert-lock',
                     'nova-revert-lock'):
            if os.path.exists(processes.bin_path(name)):
                shutil.copy2(processes.bin_path(name), bindir)
            else:
                # NOTE: a distribution's Nova beside this virtualenv
                # (debian-zed) has its console scripts elsewhere, or none:
                # the one pip writes for Nova's entry point, as an image's.
                self.assertEqual('nova-compute', name)
                with open(os.path.join(bindir, name), 'w') as f:
                    f.write(NOVA_COMPUTE_SCRIPT % sys.executable)
                os.chmod(os.path.join(bindir, name), 0o755)
        env = dict(env, PATH=bindir + os.pathsep + os.environ['PATH'])
        image_env = dict(self.plane.base_env, **env)
        steps = subprocess.run(
            ['/bin/sh', '-c', kolla_override_steps()], env=image_env,
            cwd=self.plane.base, stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT, universal_newlines=True,
            timeout=processes.COMMAND_TIMEOUT)
        self.assertEqual(0, steps.returncode, steps.stdout)
        self.assertIn('starts nova-compute-revert-lock', steps.stdout)
        nova_compute = os.path.join(bindir, 'nova-compute')
        self.assertTrue(os.path.exists(nova_compute + '.nova'))

        code, row, log, conf = self._start('start-image', extra, env,
                                           backend, command=nova_compute)
        # applied, or standing aside on a Nova with upstream's fix
        self.assertRegex(log, ACTIVATED)
        self.assertEqual(0, code)
        self.assertIn(row['state'], ('patched', 'already-fixed'))
        check = subprocess.run(
            ['nova-revert-lock', 'check', '--config-file', conf,
             '--format', 'json', '--command-starts-fix'], env=image_env,
            stdout=subprocess.PIPE, universal_newlines=True,
            timeout=processes.COMMAND_TIMEOUT)
        self.assertEqual(0, check.returncode, check.stdout)
        self.assertEqual({'path': nova_compute, 'starts': 'nova-revert-lock'},
                         json.loads(check.stdout)['command'])

    def test_disabled_starts_plain(self):
        backend, extra, env = self._mode(0)
        code, row, log, _conf = self._start('start-disabled', extra, env,
                                            backend, enabled=False)
        self.assertIn('disabled by [revert_lock] enabled', log)
        self.assertNotIn('RevertLockComputeManager', log)
        self.assertEqual(1, code)
        self.assertNotIn(row['state'], ('patched', 'already-fixed'))
