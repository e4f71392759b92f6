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
   timing and leaves its servers as the races left them; then, on libvirt
   computes, a boot on a revert's source while the source window is open
   (``window_race.py``) until two guests share a CPU;
2. ``nova-revert-lock damage`` on the controller's nova.conf: it must find
   the damage (every server the soak saw in ERROR, the shared CPU);
3. the fix on every compute, and the report again: now the status
   endpoints answer, so the node whose periodic task the shared CPU
   breaks is reported too (``periodic-failing``);
4. each repair step that report printed, run as printed (``openstack``,
   ``nova-manage``; "restart nova-compute on H" restarts H through the
   wrapper);
5. the report again: clean, and the pinned CPUs' books equal the guests
   (libvirt computes, read from each libvirtd);
6. the same soak and window race with the fix: the report stays clean.
"""

import json
import os
import re
import shlex
import subprocess
import time

from cloud_lib import cloud as cloud_mod
from cloud_lib import procs

SHARED_PCPU = 'shared-pcpu'
PERIODIC_FAILING = 'periodic-failing'

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


#: soak servers: a third host stays empty for the window race's source
SOAK_SERVERS = 2


def _script(c, name, args, out):
    """Run one of the cloud's drivers in its virtualenv; its summary."""
    if os.path.exists(out):
        os.unlink(out)
    subprocess.call([c.bin('python'), os.path.join(
        cloud_mod.LIB, 'cloud_lib', name)] + args + ['--out', out],
        env=c.venv_env(), timeout=3600)
    if not os.path.exists(out):
        return None
    with open(out) as f:
        return json.load(f)


def soak(c, state_dir, cycles, label):
    return _script(c, 'soak.py', [
        '--cycles', str(cycles), '--servers', str(SOAK_SERVERS),
        '--label', label, '--keep'],
        os.path.join(state_dir, 'soak-%s.json' % label))


#: seconds after a revert request to boot on its source if no reading
#: has shown the window by then: on this machine the destination's half
#: of a revert (TCG guests) ends 2.5 to 5 s after the request, and a
#: boot's claim comes 1 to 2 s after the boot's
BOOT_AT = (2.5, 3.0, 3.5, 4.0)


def window_race(c, state_dir, attempts, label, boot_at=BOOT_AT):
    return _script(c, 'window_race.py', [
        '--attempts', str(attempts), '--label', label, '--keep',
        '--boot-at', ','.join(str(x) for x in boot_at)],
        os.path.join(state_dir, 'window-%s.json' % label))


def boot_times(race):
    """When the plain window race booted, for the same load with the fix."""
    return [r['boot_after_revert_s'] for r in (race or {}).get(
        'records', ()) if r.get('booted')] or list(BOOT_AT)


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


def _judge_report(problems, title, rc, result, must_find=()):
    """The report against what the races are known to have done."""
    if result is None:
        problems.append('%s: the report failed (exit %d)' % (title, rc))
        return
    found = [(f['kind'], f['server']) for f in result['findings']]
    for kind, servers in must_find:
        if not [1 for k, s in found if s in servers and kind in (None, k)]:
            problems.append('%s: the report missed %s of %s' % (
                title, kind or 'every finding', ' or '.join(servers)))
    if rc != (1 if result['findings'] else 0):
        problems.append('%s: exit %d with %d finding(s)' % (
            title, rc, len(result['findings'])))


def _report_into(c, rec, key, title):
    rc, result, seconds, err = report(c)
    rec[key] = {'rc': rc, 'seconds': seconds, 'report': result,
                'stderr': err}
    _print_report(title, rc, result, seconds)
    return rc, result


def _summary(result, keys):
    return None if result is None else {k: result.get(k) for k in keys}


SOAK_KEYS = ('cycles', 'wrong', 'servers_in_error', 'stopped', 'kept')
RACE_KEYS = ('attempts', 'window_read', 'booted', 'booted_in_window', 'hits',
             'errors', 'kept', 'source')


def _races(c, state_dir, cycles, attempts, label, boot_at=BOOT_AT):
    """The soak, then (libvirt) the window race: (soak, race, kept)."""
    done = soak(c, state_dir, cycles, 'damage-%s' % label)
    race = None
    if done is not None and c.hypervisor == 'libvirt':
        race = window_race(c, state_dir, attempts, 'damage-%s' % label,
                           boot_at)
    kept = list((done or {}).get('kept') or ()) + list(
        (race or {}).get('kept') or ())
    return done, race, kept


def run(c, state_dir, cycles, attempts=20):
    """The sequence of the module docstring; (problems, record)."""
    problems, rec = [], {}
    _restart_all(c, state_dir, 'plain')
    plain, race, kept = _races(c, state_dir, cycles, attempts, 'plain')
    rec['plain_soak'] = _summary(plain, SOAK_KEYS)
    rec['plain_window_race'] = _summary(race, RACE_KEYS)
    if plain is None:
        return ['the plain soak did not run'], rec
    #: (kind or None for any, the servers one of which it names)
    must_find = [(None, (sid,))
                 for sid in plain.get('servers_in_error') or ()]
    if c.hypervisor == 'libvirt':
        if race is None:
            return ['the plain window race did not run'], rec
        if not race['hits']:
            problems.append('the window race shared no CPU in %d attempts '
                            'on plain computes (the canary)'
                            % race['attempts'])
        else:
            must_find.append((SHARED_PCPU, tuple(race['kept'])))
        # NOTE: a revert the race put in ERROR (bug 1879878 on the
        # destination) is damage the report must name too
        must_find += [(None, (r['server'],)) for r in race['records']
                      if 'in ERROR' in (r['error'] or '')]
    rc, before = _report_into(c, rec, 'before',
                              'damage report after the plain races')
    _judge_report(problems, 'before the fix', rc, before, must_find)

    # NOTE: the operator's order: the fix first (status --all), then
    # the report again; the fixed hosts' status endpoints now tell which
    # periodic task fails.
    _restart_all(c, state_dir, 'wrapper')
    rc, fixed = _report_into(c, rec, 'fixed',
                             'damage report with the fix on, before repair')
    _judge_report(problems, 'with the fix on', rc, fixed, must_find)
    if race and race['hits'] and fixed is not None and not [
            f for f in fixed['findings'] if f['kind'] == PERIODIC_FAILING
            and f['host'] == race['source']]:
        problems.append('with the fix on: no periodic-failing on %s, whose '
                        'guests share a CPU' % race['source'])
    steps = (fixed or before or {}).get('repair') or []
    rec['repair'] = []
    for step in steps:
        step_rc, output = run_step(c, step)
        rec['repair'].append({'step': step, 'rc': step_rc,
                              'output': output})
        print('  ran %s: exit %d' % (step, step_rc))
        if step_rc != 0:
            problems.append('repair step failed (%d): %s: %s' % (
                step_rc, step, output))
    time.sleep(SETTLE)
    rc, after = _report_into(c, rec, 'after',
                             'damage report after the repair')
    rec['after']['pins'] = pins(c)
    if rc != 0:
        problems.append('after the repair: exit %d %s' % (
            rc, rec['after']['stderr']))
    problems += ['after the repair: %s' % p for p in
                 (rec['after']['pins'] or {}).get('books', []) +
                 (rec['after']['pins'] or {}).get('shared', [])]
    delete(c, kept)

    # NOTE: the same load: the boots go out when the plain run's did
    fixed_soak, fixed_race, kept = _races(c, state_dir, cycles, attempts,
                                          'wrapper', boot_times(race))
    rec['wrapper_soak'] = _summary(fixed_soak, SOAK_KEYS)
    rec['wrapper_window_race'] = _summary(fixed_race, RACE_KEYS)
    if fixed_soak is None:
        return problems + ['the soak with the fix did not run'], rec
    if fixed_race is not None and fixed_race['hits']:
        problems.append('with the fix: the window race shared a CPU')
    rc, clean = _report_into(c, rec, 'wrapper',
                             'damage report after the races with the fix')
    if rc != 0:
        problems.append('with the fix: exit %d %s' % (
            rc, rec['wrapper']['stderr']))
    delete(c, kept)
    return problems, rec
