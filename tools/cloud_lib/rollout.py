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

"""``tools/cloud rollout``: contrib/ansible's rollout playbook, proven.

The playbook runs with ansible-core against the cloud's computes, one
inventory host each (local connection: the computes are processes of this
machine), switching them with the cloud's own restart as a deployment
tool's command (``nrl_switch_command``); ``check`` reads the compute's
configuration and ``status`` asks the running compute over RabbitMQ, as
on a real host. In four passes, from any cloud:

1. back out every compute: each restarted plain, ``status`` saying it no
   longer runs the extension;
2. switch, with the second compute's ``check`` refused (an extra
   configuration file with ``[revert_lock] enabled = false``): the run
   must fail at that host, the first switched, the rest untouched;
3. switch every compute: all verified by ``status``;
4. back out every compute: the cloud ends plain.

Each pass is judged on the playbook's exit code and on what runs after it
(the cloud's state and ``status --all``).
"""

import json
import os
import subprocess
import time

from cloud_lib import cloud as cloud_mod
from cloud_lib import procs

PLAYBOOK = os.path.join(cloud_mod.TOP, 'contrib', 'ansible',
                        'nova-revert-lock-rollout.yml')
#: ansible-core for the control node: 2.15/2.16 run on Python 3.10-3.12
ANSIBLE = 'ansible-core>=2.15,<2.17'
ANSIBLE_PYTHON = '3.11'
ANSIBLE_CONSTRAINTS = 'epoxy.txt'


def ensure_ansible():
    venv = os.path.join(cloud_mod.TOP, '.tox', 'cloud-ansible')
    cloud_mod.build_venv(venv, ANSIBLE_PYTHON, ANSIBLE_CONSTRAINTS,
                         [ANSIBLE], 'ansible-core')
    return venv


def write_inventory(c, path, refused=()):
    """The cloud's computes as an inventory; ``refused``: check says no."""
    refuse_conf = os.path.join(os.path.dirname(path), 'refuse.conf')
    with open(refuse_conf, 'w') as f:
        f.write('[revert_lock]\nenabled = false\n')
    cloud_cmd = os.path.join(cloud_mod.TOP, 'tools', 'cloud')
    hosts = {}
    for h in c.computes():
        host = h['host']
        conf = [c.compute_conf(host)]
        restart = '%s --state-dir %s restart-compute %s' % (
            cloud_cmd, c.state_dir, host)
        hosts[host] = {
            'ansible_connection': 'local',
            'nrl_bin_dir': os.path.dirname(c.bin('nova-revert-lock')),
            'nrl_config_files': conf,
            'nrl_check_config_files': conf + (
                [refuse_conf] if host in refused else []),
            'nrl_nova_host': host,
            'nrl_switch_command': restart + ' wrapper',
            'nrl_back_out_command': restart + ' plain',
            'nrl_status_retries': 30,
            'nrl_status_delay': 2,
        }
    with open(path, 'w') as f:
        json.dump({'nova_compute': {'hosts': hosts}}, f, indent=2,
                  sort_keys=True)
    return sorted(hosts)


def run_playbook(venv, inventory, action, log):
    argv = [os.path.join(venv, 'bin', 'ansible-playbook'), '-i', inventory,
            PLAYBOOK, '-e', 'nrl_action=%s' % action]
    env = dict(os.environ, ANSIBLE_NOCOLOR='1', ANSIBLE_HOST_KEY_CHECKING='0',
               ANSIBLE_LOCALHOST_WARNING='0',
               ANSIBLE_PYTHON_INTERPRETER=os.path.join(venv, 'bin',
                                                       'python'))
    with open(log, 'a') as out:
        out.write('\n$ %s\n' % ' '.join(argv))
        out.flush()
        rc = subprocess.call(argv, stdout=out, stderr=subprocess.STDOUT,
                             env=env, timeout=1800)
    with open(log) as f:
        return rc, f.read()


def _modes(c):
    c.state = procs.State(c.state_dir)
    return {h['host']: h['mode'] for h in c.computes()}


def rollout(c, log=None):
    """Run the four passes; returns ``(problems, record)``."""
    log = log or c.log('rollout')
    venv = ensure_ansible()
    inventory = os.path.join(c.state_dir, 'rollout-inventory.json')
    hosts = write_inventory(c, inventory)
    problems = []
    record = {'hosts': hosts, 'passes': []}

    def step(name, action, expect_rc_zero, expect_modes, refused=()):
        write_inventory(c, inventory, refused)
        started = time.monotonic()
        rc, _out = run_playbook(venv, inventory, action, log)
        modes = _modes(c)
        rec = {'pass': name, 'action': action, 'rc': rc, 'modes': modes,
               'seconds': round(time.monotonic() - started, 1)}
        record['passes'].append(rec)
        print('rollout: %s: playbook exit %d in %.0fs; computes %s' % (
            name, rc, rec['seconds'], ', '.join(
                '%s %s' % hm for hm in sorted(modes.items()))))
        if (rc == 0) != expect_rc_zero:
            problems.append('rollout %s: the playbook exited %d (see %s)'
                            % (name, rc, log))
        if modes != expect_modes:
            problems.append('rollout %s: computes %s, expected %s'
                            % (name, modes, expect_modes))

    plain = dict.fromkeys(hosts, 'plain')
    wrapper = dict.fromkeys(hosts, 'wrapper')
    step('back out all', 'back-out', True, plain)
    refused = hosts[1]
    partly = dict(plain, **{hosts[0]: 'wrapper'})
    step('switch, %s refused' % refused, 'switch', False, partly,
         refused=(refused,))
    with open(log) as f:
        if 'not switched, and the rollout stops here' not in f.read():
            problems.append('rollout: the refusal of %s was not reported '
                            'as such (see %s)' % (refused, log))
    step('switch all', 'switch', True, wrapper)
    step('back out all, again', 'back-out', True, plain)
    write_inventory(c, inventory)
    record['problems'] = problems
    return problems, record
