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

"""The devstack plugin: shell checks, and its phases against stubs.

devstack sources a plugin's ``settings`` and then, at each phase, its
``plugin.sh`` with the phase as arguments, in a shell that has devstack's
functions. The harness below does the same with stand-ins for those
functions that record their calls instead of changing the machine, and
a stand-in ``nova-revert-lock`` command whose ``check`` reports the state
a test asks for.
"""

import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
import unittest

from ci_lint import path

SCRIPTS = ('devstack/plugin.sh', 'devstack/settings',
           'devstack/lib/revert-lock-conf')

HARNESS = textwrap.dedent('''\
    # Stand-ins for the devstack functions the plugin uses.
    record() { echo "$*" >> "$RECORD"; }
    die() { shift; record "die $*"; exit 1; }
    iniset() { record "iniset $*"; }
    inidelete() { record "inidelete $*"; }
    pip_install() { record "pip_install $*"; }
    pip_uninstall() { record "pip_uninstall $*"; }
    setup_develop() { record "setup_develop $*"; }
    setup_install() { record "setup_install $*"; }
    run_process() { record "run_process $1|$2|$3"; }
    stop_process() { record "stop_process $*"; }
    echo_summary() { :; }
    enable_service() {
        local s
        for s in "$@"; do ENABLED_SERVICES="$ENABLED_SERVICES,$s"; done
    }
    disable_service() {
        local s
        for s in "$@"; do
            ENABLED_SERVICES=$(echo ",$ENABLED_SERVICES," |
                sed -e "s/,$s,/,/g" -e 's/^,//' -e 's/,$//')
        done
    }
    is_service_enabled() {
        local s
        for s in "$@"; do
            [[ ",$ENABLED_SERVICES," == *",$s,"* ]] && return 0
        done
        return 1
    }
    trueorfalse() {
        local default=$1
        local value=${!2:-$default}
        case "$value" in
            1|yes|Yes|YES|true|True|TRUE|on|On|ON) echo True ;;
            0|no|No|NO|false|False|FALSE|off|Off|OFF) echo False ;;
            *) echo "$default" ;;
        esac
    }

    set -o errexit
    # What devstack's disable_service in local.conf would do, after the
    # plugin's settings enabled its service.
    source "$TOP/devstack/settings"
    for s in $DISABLE_AFTER_SETTINGS; do disable_service $s; done
    record "settings-sourced"
    source "$TOP/devstack/plugin.sh" "$@"
    record "xtrace-after $(set +o | grep xtrace)"
    ''')

# The stand-in for the installed console script: answers `check` with the
# state in $FAKE_CHECK_STATE, as the real one does (JSON or a table).
FAKE_CLI = textwrap.dedent('''\
    #!/bin/bash
    echo "nova-revert-lock $*" >> "$RECORD"
    case "$FAKE_CHECK_STATE" in
        patched|already-fixed) code=0 ;;
        garbage) echo 'Traceback (most recent call last):'; exit 1 ;;
        *) code=1 ;;
    esac
    if [[ " $* " == *" --format json "* ]]; then
        echo "{\\"state\\": \\"$FAKE_CHECK_STATE\\", \\"problems\\": []}"
    else
        echo "State:     $FAKE_CHECK_STATE"
    fi
    exit $code
    ''')


class PluginRun(object):
    def __init__(self, returncode, calls, output):
        self.returncode = returncode
        self.calls = calls
        self.output = output

    def named(self, prefix):
        return [c for c in self.calls if c.startswith(prefix)]


class TestShell(unittest.TestCase):

    def test_bash_syntax(self):
        for script in SCRIPTS:
            subprocess.check_call(['bash', '-n', path(script)])

    def test_bashate(self):
        bashate = os.path.join(os.path.dirname(sys.executable), 'bashate')
        if not os.path.exists(bashate):
            bashate = shutil.which('bashate')
        self.assertTrue(bashate, 'bashate is not installed')
        # E005 (no #!): settings is sourced, never executed.
        proc = subprocess.run(
            [bashate, '-v', '--error', 'E001,E002,E003,E004,E006,E010,'
             'E011,E012,E020,E040,E041,E042,E043,E044',
             path('devstack/plugin.sh'),
             path('devstack/lib/revert-lock-conf')],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
            universal_newlines=True)
        self.assertEqual(0, proc.returncode, proc.stdout)
        self.assertNotIn('warning', proc.stdout, proc.stdout)
        proc = subprocess.run(
            [bashate, '-v', '--ignore', 'E005', path('devstack/settings')],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
            universal_newlines=True)
        self.assertEqual(0, proc.returncode, proc.stdout)


class TestConfWriterOutsideDevstack(unittest.TestCase):
    """tools/cloud sources the writer without devstack's iniset."""

    def write(self, initial, **env):
        tmp = tempfile.mkdtemp(prefix='nrl-conf-')
        self.addCleanup(shutil.rmtree, tmp)
        conf = os.path.join(tmp, 'nova-cpu.conf')
        if initial is not None:
            with open(conf, 'w') as f:
                f.write(initial)
        environ = {'PATH': os.environ['PATH'], 'PYTHON': sys.executable,
                   'NOVA_REVERT_LOCK_ENABLED': 'True',
                   'NOVA_REVERT_LOCK_ON_UNKNOWN_CODE': 'fail',
                   'NOVA_REVERT_LOCK_MIXINS': ''}
        environ.update(env)
        subprocess.check_call(
            ['bash', '-c', 'set -eu; source "$1"; '
             'nova_revert_lock_write_conf "$2"', 'writer',
             path('devstack/lib/revert-lock-conf'), conf], env=environ)
        with open(conf) as f:
            return f.read()

    def test_new_file(self):
        self.assertEqual(
            '\n[revert_lock]\nenabled = True\non_unknown_code = fail\n',
            self.write(None))

    def test_existing_sections_are_kept_and_values_replaced(self):
        text = self.write('[DEFAULT]\nhost = a\n[revert_lock]\n'
                          'enabled = False\n[oslo_concurrency]\nx = 1\n',
                          NOVA_REVERT_LOCK_MIXINS='confirm,revert')
        self.assertEqual(
            '[DEFAULT]\nhost = a\n[revert_lock]\nenabled = True\n'
            'on_unknown_code = fail\nmixins = confirm,revert\n'
            '[oslo_concurrency]\nx = 1\n', text)


class TestPluginPhases(unittest.TestCase):

    NOVA_CPU_CONF = '/etc/nova/nova-cpu.conf'

    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix='nrl-devstack-')
        self.addCleanup(shutil.rmtree, self.tmp)
        self.bin = os.path.join(self.tmp, 'bin')
        os.mkdir(self.bin)
        cli = os.path.join(self.bin, 'nova-revert-lock')
        with open(cli, 'w') as f:
            f.write(FAKE_CLI)
        os.chmod(cli, 0o755)
        self.harness = os.path.join(self.tmp, 'harness.sh')
        with open(self.harness, 'w') as f:
            f.write(HARNESS)

    def run_phase(self, *phase, **env):
        record = os.path.join(self.tmp, 'record')
        if os.path.exists(record):
            os.unlink(record)
        environ = {
            'PATH': os.environ['PATH'],
            'HOME': self.tmp,
            'TOP': path(),
            'RECORD': record,
            'DEST': '/opt/stack',
            'LOGDIR': os.path.join(self.tmp, 'logs'),
            'NOVA_BIN_DIR': self.bin,
            'NOVA_CPU_CONF': self.NOVA_CPU_CONF,
            'NOVA_FAKE_CONF': '/etc/nova/nova-fake.conf',
            'NUMBER_FAKE_NOVA_COMPUTE': '1',
            'VIRT_DRIVER': 'libvirt',
            'LIBVIRT_GROUP': 'libvirt',
            'PYTHON': sys.executable,
            'ENABLED_SERVICES': 'n-cpu,placement-client',
            'FAKE_CHECK_STATE': 'patched',
            'DISABLE_AFTER_SETTINGS': '',
        }
        environ.update(env)
        proc = subprocess.run(
            ['bash', self.harness] + list(phase), env=environ,
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
            universal_newlines=True)
        calls = []
        if os.path.exists(record):
            with open(record) as f:
                calls = f.read().splitlines()
        self.assertIn('settings-sourced', calls, proc.stdout)
        return PluginRun(proc.returncode, calls, proc.stdout)

    def effects(self, run):
        """Calls that change something (not the bookkeeping)."""
        return [c for c in run.calls
                if c != 'settings-sourced' and
                not c.startswith('xtrace-after')]

    def wrapper_command(self, *extra):
        return ' '.join(
            [os.path.join(self.bin, 'nova-compute-revert-lock'),
             '--config-file', self.NOVA_CPU_CONF] + list(extra))

    def test_pre_install_and_post_config_do_nothing(self):
        for phase in (('stack', 'pre-install'), ('stack', 'post-config'),
                      ('stack', 'test-config')):
            run = self.run_phase(*phase)
            self.assertEqual(0, run.returncode, run.output)
            self.assertEqual([], self.effects(run), phase)

    def test_install_develops_the_package_into_novas_environment(self):
        run = self.run_phase('stack', 'install')
        self.assertEqual(0, run.returncode, run.output)
        self.assertEqual(['setup_develop /opt/stack/nova-revert-lock'],
                         self.effects(run))

    def test_extra_configures_checks_and_restarts_n_cpu(self):
        run = self.run_phase('stack', 'extra')
        self.assertEqual(0, run.returncode, run.output)
        conf = self.NOVA_CPU_CONF
        self.assertEqual([
            'iniset %s revert_lock enabled True' % conf,
            'iniset %s revert_lock on_unknown_code fail' % conf,
            'nova-revert-lock check --config-file %s' % conf,
            'nova-revert-lock check --config-file %s --format json' % conf,
            'stop_process n-cpu',
            'run_process n-cpu|%s|libvirt' % self.wrapper_command(),
        ], self.effects(run))
        with open(os.path.join(self.tmp, 'logs',
                               'nova-revert-lock-check.txt')) as f:
            self.assertIn('patched', f.read())

    def test_extra_fails_the_stack_when_check_refuses(self):
        run = self.run_phase('stack', 'extra', FAKE_CHECK_STATE='refused')
        self.assertNotEqual(0, run.returncode)
        self.assertEqual(1, len(run.named('die ')), run.calls)
        self.assertIn('refused', run.named('die ')[0])
        # n-cpu was not restarted through the wrapper
        self.assertEqual([], run.named('run_process'))
        self.assertEqual([], run.named('stop_process'))

    def test_extra_fails_the_stack_without_a_report(self):
        run = self.run_phase('stack', 'extra', FAKE_CHECK_STATE='garbage')
        self.assertNotEqual(0, run.returncode)
        self.assertEqual(1, len(run.named('die ')), run.calls)
        self.assertEqual([], run.named('run_process'))

    def test_already_fixed_is_accepted(self):
        run = self.run_phase('stack', 'extra',
                             FAKE_CHECK_STATE='already-fixed')
        self.assertEqual(0, run.returncode, run.output)
        self.assertEqual(1, len(run.named('run_process n-cpu|')))

    def test_expected_state_is_enforced(self):
        run = self.run_phase('stack', 'extra',
                             FAKE_CHECK_STATE='already-fixed',
                             NOVA_REVERT_LOCK_EXPECT_STATE='patched')
        self.assertNotEqual(0, run.returncode)
        self.assertIn('expected patched, got already-fixed',
                      run.named('die ')[0])
        run = self.run_phase('stack', 'extra',
                             NOVA_REVERT_LOCK_EXPECT_STATE='patched')
        self.assertEqual(0, run.returncode, run.output)

    def test_disabled_is_written_and_not_fatal(self):
        run = self.run_phase('stack', 'extra', FAKE_CHECK_STATE='disabled',
                             NOVA_REVERT_LOCK_ENABLED='false')
        self.assertEqual(0, run.returncode, run.output)
        self.assertIn('iniset %s revert_lock enabled False'
                      % self.NOVA_CPU_CONF, run.calls)
        self.assertEqual([], run.named('die '))

    def test_options_from_localrc(self):
        run = self.run_phase('stack', 'extra',
                             NOVA_REVERT_LOCK_MIXINS='confirm,revert',
                             NOVA_REVERT_LOCK_ON_UNKNOWN_CODE='warn')
        self.assertEqual(0, run.returncode, run.output)
        conf = self.NOVA_CPU_CONF
        self.assertIn('iniset %s revert_lock mixins confirm,revert' % conf,
                      run.calls)
        self.assertIn('iniset %s revert_lock on_unknown_code warn' % conf,
                      run.calls)

    def test_fake_driver_restarts_each_fake_compute(self):
        run = self.run_phase('stack', 'extra', VIRT_DRIVER='fake',
                             NUMBER_FAKE_NOVA_COMPUTE='2')
        self.assertEqual(0, run.returncode, run.output)
        self.assertEqual([
            'run_process n-cpu-1|%s|' % self.wrapper_command(
                '--config-file', '/etc/nova/nova-fake.conf-1'),
            'run_process n-cpu-2|%s|' % self.wrapper_command(
                '--config-file', '/etc/nova/nova-fake.conf-2'),
        ], run.named('run_process'))
        self.assertEqual(['stop_process n-cpu-1', 'stop_process n-cpu-2'],
                         run.named('stop_process'))

    def test_node_without_n_cpu_is_left_alone(self):
        run = self.run_phase('stack', 'extra',
                             ENABLED_SERVICES='n-api,n-sch,placement-api')
        self.assertEqual(0, run.returncode, run.output)
        self.assertEqual([], self.effects(run))

    def test_disabled_service_is_left_alone(self):
        for phase in (('stack', 'install'), ('stack', 'extra'),
                      ('clean',)):
            run = self.run_phase(*phase,
                                 DISABLE_AFTER_SETTINGS='nova-revert-lock')
            self.assertEqual(0, run.returncode, run.output)
            self.assertEqual([], self.effects(run), phase)

    def test_unstack_leaves_n_cpu_to_devstack(self):
        run = self.run_phase('unstack')
        self.assertEqual(0, run.returncode, run.output)
        self.assertEqual([], self.effects(run))

    def test_clean_uninstalls(self):
        run = self.run_phase('clean')
        self.assertEqual(0, run.returncode, run.output)
        self.assertEqual(['pip_uninstall nova-revert-lock'],
                         self.effects(run))

    def test_xtrace_is_restored(self):
        run = self.run_phase('stack', 'install')
        self.assertIn('xtrace-after set +o xtrace', run.calls)
