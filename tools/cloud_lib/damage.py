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

"""``tools/cloud damage``: real damage, the report, its repair, again.

1. every compute plain; the soak races confirms and reverts at natural
   timing and leaves its servers as the races left them;
2. ``nova-revert-lock damage`` on the controller's nova.conf: it must find
   the damage (every server the soak saw in ERROR, at least);
3. the fix on every compute, then each repair step the report printed,
   run as printed (``openstack``, ``nova-manage``; "restart nova-compute
   on H" restarts H through the wrapper);
4. the report again: clean, and the pinned CPUs' books equal the guests
   (libvirt computes, read from each libvirtd);
5. the same soak with the fix: the report stays clean.
"""

import json
import os
import re
import shlex
import subprocess
import time

from cloud_lib import cloud as cloud_mod
from cloud_lib import procs

#: seconds for the periodic tasks (every second here) to settle the books
SETTLE = 10


def report(c):
    """(exit code, the report as a dict or None, seconds)."""
    started = time.monotonic()
    proc = subprocess.run(
        [c.bin('nova-revert-lock'), 'damage', '--config-file',
         c.conf('nova.conf'), '--format', 'json', '--timeout', '5'],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        universal_newlines=True, timeout=900)
    try:
        result = json.loads(proc.stdout)
    except ValueError:
        result = None
    return proc.returncode, result, round(time.monotonic() - started, 1), (
        proc.stderr.strip()[-500:])


def pins(c):
    """The libvirt computes' books and guests judged, or None (fake)."""
    proc = subprocess.run(
        [c.bin('python'), os.path.join(cloud_mod.LIB, 'cloud_lib',
                                       'pinning.py')],
        env=c.venv_env(), stdout=subprocess.PIPE, universal_newlines=True,
        timeout=300)
    return json.loads(proc.stdout) if proc.returncode == 0 else {
        'books': ['pinning.py exited %d' % proc.returncode], 'shared': []}


def run_step(c, step):
    """Run one repair step as the report printed it: (rc, output)."""
    command = step.split('  #')[0].strip()
    restart = re.match(r'restart nova-compute on (\S+)', command)
    if restart:
        c.restart_compute(restart.group(1), 'wrapper')
        return 0, 'restarted %s through the wrapper' % restart.group(1)
    argv = shlex.split(command)
    if argv[0] == 'nova-manage':
        argv = [c.bin('nova-manage'), '--config-file',
                c.conf('nova.conf')] + argv[1:]
    elif argv[0] == 'nova-revert-lock':
        argv = [c.bin('nova-revert-lock')] + argv[1:] + [
            '--config-file', c.conf('nova.conf')]
    elif argv[0] == 'openstack':
        argv = [c.bin('openstack'), '--os-cloud', 'nrl'] + argv[1:]
    else:
        return 1, 'not a command this run knows: %s' % step
    proc = subprocess.run(argv, env=c.venv_env(), stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, universal_newlines=True,
                          timeout=600)
    return proc.returncode, proc.stdout.strip()[-400:]


def soak(c, state_dir, cycles, label):
    out = os.path.join(state_dir, 'soak-%s.json' % label)
    subprocess.call([c.bin('python'), os.path.join(
        cloud_mod.LIB, 'cloud_lib', 'soak.py'), '--cycles', str(cycles),
        '--out', out, '--label', label, '--keep'], env=c.venv_env(),
        timeout=3600)
    if not os.path.exists(out):
        return None
    with open(out) as f:
        return json.load(f)


def delete(c, servers):
    if servers:
        subprocess.call([c.bin('openstack'), '--os-cloud', 'nrl',
                         'server', 'delete', '--wait'] + list(servers),
                        env=c.venv_env(), timeout=600)


def _restart_all(c, state_dir, mode):
    c.state = procs.State(state_dir)
    for h in sorted(c.computes(), key=lambda h: h['host']):
        c.restart_compute(h['host'], mode)
    time.sleep(SETTLE)


def _print_report(title, rc, result, seconds):
    print('--- %s: exit %d in %.1f s' % (title, rc, seconds))
    if result is None:
        return
    for item in result['findings']:
        print('  %-20s %-13s %-36s bug %s\n      %s' % (
            item['kind'], item['host'] or '-', item['server'] or '-',
            item['bug'] or '-', item['detail']))
    for item in result['unreadable']:
        print('  NOT CHECKED %s: %s' % (item['what'], item['error']))
    for n, step in enumerate(result['repair'], 1):
        print('  repair %d. %s' % (n, step))


def run(c, state_dir, cycles):
    """The sequence of the module docstring; (problems, record)."""
    problems, rec = [], {}
    _restart_all(c, state_dir, 'plain')
    plain = soak(c, state_dir, cycles, 'damage-plain')
    if plain is None:
        return ['the plain soak did not run'], rec
    rec['plain_soak'] = {k: plain.get(k) for k in (
        'cycles', 'wrong', 'servers_in_error', 'stopped', 'kept')}
    rc, before, seconds, err = report(c)
    rec['before'] = {'rc': rc, 'seconds': seconds, 'report': before}
    _print_report('damage report after the plain soak', rc, before, seconds)
    if before is None:
        return ['the report failed: rc %d %s' % (rc, err)], rec
    found = {f['server'] for f in before['findings']}
    missed = sorted(set(plain.get('servers_in_error') or ()) - found)
    if missed:
        problems.append('servers in ERROR the report missed: %s'
                        % ', '.join(missed))
    if rc != (1 if before['findings'] else 0):
        problems.append('exit %d with %d finding(s)' % (
            rc, len(before['findings'])))

    _restart_all(c, state_dir, 'wrapper')
    rec['repair'] = []
    for step in before['repair']:
        step_rc, output = run_step(c, step)
        rec['repair'].append({'step': step, 'rc': step_rc,
                              'output': output})
        print('  ran %s: exit %d' % (step, step_rc))
        if step_rc != 0:
            problems.append('repair step failed (%d): %s: %s' % (
                step_rc, step, output))
    time.sleep(SETTLE)
    rc, after, seconds, err = report(c)
    rec['after'] = {'rc': rc, 'seconds': seconds, 'report': after,
                    'pins': pins(c)}
    _print_report('damage report after the repair', rc, after, seconds)
    if rc != 0:
        problems.append('after the repair: exit %d %s' % (rc, err))
    problems += ['after the repair: %s' % p for p in
                 (rec['after']['pins'] or {}).get('books', []) +
                 (rec['after']['pins'] or {}).get('shared', [])]
    delete(c, plain.get('kept'))

    fixed = soak(c, state_dir, cycles, 'damage-wrapper')
    if fixed is None:
        return problems + ['the soak with the fix did not run'], rec
    rec['wrapper_soak'] = {k: fixed.get(k) for k in (
        'cycles', 'wrong', 'servers_in_error', 'stopped', 'kept')}
    rc, clean, seconds, err = report(c)
    rec['wrapper'] = {'rc': rc, 'seconds': seconds, 'report': clean}
    _print_report('damage report after the soak with the fix', rc, clean,
                  seconds)
    if rc != 0:
        problems.append('with the fix: exit %d %s' % (rc, err))
    delete(c, fixed.get('kept'))
    return problems, rec
