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

"""The second environment: Nova 21.1.2 (upstream's fix) for one mode.

One environment holds one Nova, so the driver, running in the one with
Nova 21.1.0, makes a second with the same interpreter, Nova 21.1.2, the
Ussuri pins (``constraints/ussuri.txt``) and Nova's functional test
requirements, plus this project (editable, so that both modes run the
same harness). A stamp file records what it was made from; the
environment is reused while the stamp matches and rebuilt otherwise.
"""

import hashlib
import json
import os
import shutil
import subprocess
import sys

UPSTREAM_NOVA = '21.1.2'
STAMP = '.nrl-bench-stamp'
#: bump to rebuild every existing environment
FORMAT = 1


def project_root():
    """The source tree the benchmark runs from (with constraints/)."""
    here = os.path.dirname(os.path.abspath(__file__))
    root = os.path.dirname(os.path.dirname(here))
    if not os.path.exists(os.path.join(root, 'constraints', 'ussuri.txt')):
        raise RuntimeError(
            'the benchmark runs from %s, which is not a source tree with '
            'constraints/: run it from a checkout, or pass '
            '--upstream-python' % root)
    return root


def requirements(root, nova_version=UPSTREAM_NOVA):
    """pip arguments for the environment, as the tox envs install it."""
    return ['-c', os.path.join(root, 'constraints', 'ussuri.txt'),
            'nova==%s' % nova_version,
            'openstack-placement>=3.0.0,<4',
            '-r', os.path.join(root, 'test-requirements.txt')]


def _stamp(root, nova_version):
    digest = hashlib.sha256()
    for name in ('constraints/ussuri.txt', 'constraints/build.txt',
                 'test-requirements.txt', 'requirements.txt', 'setup.cfg'):
        with open(os.path.join(root, name), 'rb') as f:
            digest.update(f.read())
    return json.dumps({'format': FORMAT, 'nova': nova_version,
                       'python': sys.version.split()[0],
                       'files': digest.hexdigest()}, sort_keys=True)


def _python(path):
    return os.path.join(path, 'bin', 'python')


def _runs(python):
    try:
        return subprocess.call([python, '-c', 'import nova'],
                               stderr=subprocess.DEVNULL) == 0
    except OSError:
        return False


def ensure(path, nova_version=UPSTREAM_NOVA, log=sys.stderr):
    """Return the python of an environment with ``nova_version``.

    :param path: directory of the environment; created, reused or rebuilt
    :param log: stream for progress lines
    """
    root = project_root()
    stamp = _stamp(root, nova_version)
    stamp_path = os.path.join(path, STAMP)
    python = _python(path)
    if os.path.exists(stamp_path) and _runs(python):
        with open(stamp_path) as f:
            if f.read() == stamp:
                return python
    log.write('bench: creating %s (Nova %s, Ussuri pins); a few minutes, '
              'once\n' % (path, nova_version))
    log.flush()
    if os.path.exists(path):
        shutil.rmtree(path)
    # NOTE: the interpreter this runs on, so that both modes run the same
    # Python; resolved past any venv, so that the new environment does not
    # depend on the one the driver runs in (tox may recreate that one).
    subprocess.check_call([os.path.realpath(sys.executable), '-m', 'venv',
                           path])
    env = dict(os.environ)
    # Same build-tool pins as the tox envs (see constraints/build.txt).
    env.setdefault('PIP_CONSTRAINT',
                   os.path.join(root, 'constraints', 'build.txt'))
    # NOTE: --no-compile: Python compiles what the benchmark imports on
    # first use, a small part of Nova and its dependencies; compiling
    # everything up front would take a good part of the install time.
    pip = [python, '-m', 'pip', 'install', '--quiet', '--no-compile',
           '--disable-pip-version-check']
    subprocess.check_call(pip + requirements(root, nova_version), env=env)
    subprocess.check_call(pip + ['--no-deps', '-e', root], env=env)
    with open(stamp_path, 'w') as f:
        f.write(stamp)
    return python
