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

"""Tempest against the cloud: the devstack jobs' move tests.

The test list is the devstack jobs' own: the ``tempest_test_regex`` of
``.zuul.yaml`` is read from there, so this run and the Zuul jobs cannot
drift apart. Tempest gets its own virtualenv at the version the series
pins.
"""

import os
import re
import subprocess
import time

from cloud_lib import configs
from cloud_lib import procs

#: used when .zuul.yaml has no tempest_test_regex (a copy of the jobs')
FALLBACK_REGEX = (r'^tempest\.api\.compute\.(admin\.test_migrations|'
                  r'servers\.test_server_actions\.\w+\.test_resize)')
#: a test's id: tempest's own, or a plugin's (whitebox_tempest_plugin.)
TEST_ID = r'((?:\w+_)?tempest(?:_plugin)?\.\S+?)'
CLASS_ID = r'((?:\w+_)?tempest(?:_plugin)?\.\S+)'
MAX_MICROVERSION = {'train': '2.79', 'ussuri': '2.87', 'epoxy': '2.100'}
#: tempest's own live migration tests (libvirt computes: block
#: migrations, local storage)
LIVE_REGEX = r'^tempest\.api\.compute\.admin\.test_live_migration\.'


def job_regex(top):
    """The devstack jobs' tempest_test_regex, from .zuul.yaml."""
    try:
        with open(os.path.join(top, '.zuul.yaml')) as f:
            for line in f:
                m = re.match(r'\s*tempest_test_regex:\s*(\S.*)$', line)
                if m:
                    return m.group(1).strip().strip('\'"')
    except (IOError, OSError):
        pass
    return FALLBACK_REGEX


def ensure_venv(cloud, venv=None, plugins=(), overrides=None):
    """tempest at the series' version, under the series' pins.

    :param venv: where (default: the series' tempest virtualenv)
    :param plugins: requirements installed beside tempest
    :param overrides: {package: version} replacing the series' pins
        (a plugin that needs a newer library)
    """
    from cloud_lib import cloud as cloud_mod
    venv = venv or cloud.tempest_venv
    specs = [cloud.info['tempest']] + list(plugins)
    constraints = cloud.info['constraints']
    if overrides:
        with open(os.path.join(cloud_top(), 'constraints',
                               constraints)) as f:
            text = ''.join(
                line for line in f
                if re.split(r'[=<>!~;\s]', line, 1)[0].lower()
                not in overrides)
        text += ''.join('%s===%s\n' % kv for kv in sorted(overrides.items()))
        # NOTE: beside the virtualenv, not in it: the file must exist
        # before the virtualenv does (its digest is the stamp's).
        constraints = os.path.abspath(venv) + '-constraints.txt'
        with open(constraints, 'w') as f:
            f.write(text)
    cloud_mod.build_venv(venv, cloud.info['python'], constraints, specs,
                         ' '.join(specs))
    return venv


def cloud_top():
    from cloud_lib.cloud import TOP
    return TOP


def tempest_conf(cloud, image_id):
    # NOTE: the libvirt computes live migrate (block migrations: each has
    # its own instances path); the fake driver's do not migrate guests.
    live = getattr(cloud, 'hypervisor', 'fake') == 'libvirt'
    return '\n'.join([
        '[DEFAULT]',
        'log_file = %s' % cloud.log('tempest'),
        '',
        '[auth]',
        'admin_username = admin',
        'admin_password = %s' % cloud.password,
        'admin_project_name = admin',
        'admin_domain_name = Default',
        'use_dynamic_credentials = True',
        # NOTE: ML2 without agents or routers: the servers tempest boots
        # have no network (nova boots with none when the project has
        # none), so tempest must not try to make one per project.
        'create_isolated_networks = False',
        'tempest_roles = member',
        '',
        '[identity]',
        'uri_v3 = %s' % configs.keystone_url(cloud),
        'auth_version = v3',
        'region = %s' % configs.REGION,
        '',
        '[identity-feature-enabled]',
        'api_v2 = False',
        '',
        '[compute]',
        'image_ref = %s' % image_id,
        'image_ref_alt = %s' % image_id,
        'flavor_ref = nrl-1',
        'flavor_ref_alt = nrl-2',
        'min_compute_nodes = 2',
        'max_microversion = %s' % MAX_MICROVERSION[cloud.series],
        'build_timeout = 120',
        '',
        '[compute-feature-enabled]',
        'resize = True',
        'cold_migration = True',
        'live_migration = %s' % live,
        'block_migration_for_live_migration = %s' % live,
        'live_migrate_back_and_forth = %s' % live,
        'console_output = False',
        'change_password = False',
        'snapshot = False',
        'vnc_console = False',
        'attach_encrypted_volume = False',
        '',
        '[service_available]',
        'nova = True',
        'glance = True',
        'neutron = True',
        'cinder = False',
        'swift = False',
        '',
        '[validation]',
        'run_validation = False',
        '',
        '[image-feature-enabled]',
        'api_v1 = False',
        '',
    ])


def parse(output):
    """Counts and the skipped tests (with why) from tempest's output."""
    counts = {}
    for key, label in (('ran', r'Ran: (\d+)'), ('passed', r'- Passed: (\d+)'),
                       ('skipped', r'- Skipped: (\d+)'),
                       ('failed', r'- Failed: (\d+)')):
        m = re.search(label, output)
        counts[key] = int(m.group(1)) if m else None
    skips, failures, passed = [], [], []
    for line in output.splitlines():
        if 'setUpClass (' in line:
            continue
        m = re.search(TEST_ID + r'(\[[^\]]*\])?(?: \[[\d.]+s\])? '
                      r'\.\.\. SKIPPED: (.*)$', line)
        if m:
            skips.append({'test': m.group(1), 'reason': m.group(3).strip()})
        m = re.search(TEST_ID + r'(\[[^\]]*\])? \[[\d.]+s\] \.\.\. '
                      r'FAILED', line)
        if m:
            failures.append(m.group(1))
        m = re.search(TEST_ID + r'(\[[^\]]*\])? \[[\d.]+s\] \.\.\. ok$',
                      line)
        if m:
            passed.append(m.group(1))
    # a class-level skip shows as setUpClass
    for line in output.splitlines():
        m = re.search(r'setUpClass \(' + CLASS_ID + r'\) \.\.\. '
                      r'SKIPPED: (.*)$', line)
        if m:
            skips.append({'test': m.group(1), 'reason': m.group(2).strip()})
    counts['skips'] = skips
    counts['failures'] = failures
    counts['passed_tests'] = passed
    return counts


def _workspace(venv, workspace):
    """A tempest workspace, without ``tempest init``.

    ``tempest init`` registers every workspace by name in the user's
    ``~/.tempest/workspace.yaml``, and refuses a second one of the same
    name: a directory with ``.stestr.conf`` and ``etc/tempest.conf`` is
    all ``tempest run`` needs.
    """
    os.makedirs(os.path.join(workspace, 'etc'), exist_ok=True)
    proc = subprocess.run(
        [os.path.join(venv, 'bin', 'python'), '-c',
         'import os, tempest; print(os.path.dirname(tempest.__file__))'],
        stdout=subprocess.PIPE, universal_newlines=True, check=True)
    package = proc.stdout.strip()
    with open(os.path.join(workspace, '.stestr.conf'), 'w') as f:
        f.write('[DEFAULT]\ntest_path=%s\ntop_dir=%s\n' % (
            os.path.join(package, 'test_discover'),
            os.path.dirname(package)))


def run(cloud, regex=None, concurrency=2, timeout=1800, venv=None,
        name='tempest', extra_conf=''):
    """Run the move tests; return the parsed result (and the log).

    :param venv: a tempest virtualenv with plugins (the series' plain
        tempest by default)
    :param name: the workspace's and the run log's name
    :param extra_conf: text appended to tempest.conf (a plugin's sections)
    """
    venv = venv or ensure_venv(cloud)
    image_id = cloud._venv_python('glance', 'image')
    workspace = os.path.join(cloud.state_dir, name)
    tempest = os.path.join(venv, 'bin', 'tempest')
    _workspace(venv, workspace)
    with open(os.path.join(workspace, 'etc', 'tempest.conf'), 'w') as f:
        f.write(tempest_conf(cloud, image_id) + extra_conf)
    regex = regex or job_regex(cloud_top())
    log = cloud.log('%s-run' % name)
    started = time.monotonic()
    with open(log, 'w') as out:
        try:
            env = dict(os.environ)
            env['TEMPEST_CONFIG_DIR'] = os.path.join(workspace, 'etc')
            rc = subprocess.call(
                [tempest, 'run', '--regex', regex, '--concurrency',
                 str(concurrency)], cwd=workspace, stdout=out, env=env,
                stderr=subprocess.STDOUT, timeout=timeout)
        except subprocess.TimeoutExpired:
            rc = 'timeout'
    with open(log) as f:
        output = f.read()
    result = parse(output)
    result.update({'rc': rc, 'regex': regex, 'log': log,
                   'seconds': round(time.monotonic() - started, 1)})
    if rc != 0 and not result['failures']:
        result['failures'] = ['tempest exited %s; see %s (last lines: %s)'
                              % (rc, log, procs.tail(log, 5))]
    return result
