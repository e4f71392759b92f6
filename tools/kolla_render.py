#!/usr/bin/env python3
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

"""Render Kolla's nova-compute Dockerfile with our template override.

For each kolla release of :data:`RELEASES` (Train, Ussuri, 2025.1 and the
newest), installs ``kolla`` from the package index into a virtualenv of
its own (on the series' Python, within the series' upper constraints),
runs ``kolla-build --template-only`` with
``contrib/kolla/nova-revert-lock-overrides.j2`` for the image types that
release builds, and checks each rendered ``nova-compute`` Dockerfile:
``nova-revert-lock`` in the pip install of the image's Python packages,
the override's footer verbatim, after that install and before ``USER
nova``. No Docker daemon is needed: ``--template-only`` writes the
Dockerfiles and stops.

    tools/kolla_render.py [--work-dir DIR] [KOLLA_VERSION ...]

The ``kolla-render`` tox env runs it. Exit 0 when every rendering
carries the override, 1 otherwise, 2 on bad usage or a missing Python.
"""

import argparse
import collections
import os
import re
import shutil
import subprocess
import sys

TOP = os.path.abspath(os.path.join(os.path.dirname(__file__), os.pardir))
OVERRIDE = os.path.join(TOP, 'contrib', 'kolla',
                        'nova-revert-lock-overrides.j2')

#: kolla release -> (series, Python, constraints, [(base, base tag,
#: install type)]): Train and Ussuri built source and binary images
#: (CentOS, Ubuntu); install types went with Zed, and CentOS with 2023.1.
#: Train's CentOS 7 images run Nova on Python 2.7, which nova-revert-lock
#: does not support: its CentOS 8 images (base tag 8) run Python 3.6.
Release = collections.namedtuple(
    'Release', 'series python constraints images')
RELEASES = collections.OrderedDict((
    ('9.4.0', Release('train', '3.6', 'train.txt',
                      [('centos', '8', 'source'), ('centos', '8', 'binary'),
                       ('ubuntu', None, 'source')])),
    ('10.4.0', Release('ussuri', '3.8', 'ussuri.txt',
                       [('centos', None, 'source'),
                        ('centos', None, 'binary'),
                        ('ubuntu', None, 'source')])),
    ('20.6.0', Release('2025.1', '3.11', 'epoxy.txt',
                       [('rocky', None, None), ('ubuntu', None, None)])),
    ('23.0.0', Release('2026.2', '3.12', '2026.2.txt',
                       [('rocky', None, None), ('ubuntu', None, None)])),
))


class RenderError(Exception):
    pass


def find_python(version):
    """A working pythonX.Y: PATH, pyenv, the usual prefixes."""
    proc = subprocess.run(
        ['bash', '-c', '. "$1" && find_python "$2"', 'find-python',
         os.path.join(TOP, 'tools', 'lib', 'find-python.sh'), version],
        stdout=subprocess.PIPE, universal_newlines=True)
    return proc.stdout.strip() if proc.returncode == 0 else None


def footer():
    """The RUN instruction of the override's ``nova_compute_footer``."""
    with open(OVERRIDE) as f:
        text = f.read()
    block = re.search(r'{% block nova_compute_footer %}(.*?){% endblock %}',
                      text, re.S)
    if not block:
        raise RenderError('%s has no nova_compute_footer block' % OVERRIDE)
    run = block.group(1)
    return run[run.index('RUN nova_compute='):].strip()


def footer_shell():
    """The footer's shell command, as the image's ``RUN`` runs it.

    ``RUN``'s shell form goes to ``/bin/sh -c`` as written: continuation
    lines included, which a shell joins itself.
    """
    return footer()[len('RUN '):]


def ensure_venv(work, version, release):
    venv = os.path.join(work, 'kolla-%s' % version)
    kolla_build = os.path.join(venv, 'bin', 'kolla-build')
    if os.path.exists(kolla_build):
        return kolla_build
    python = find_python(release.python)
    if python is None:
        raise RenderError('kolla %s (%s) needs python%s, not found'
                          % (version, release.series, release.python))
    shutil.rmtree(venv, ignore_errors=True)
    subprocess.run([python, '-m', 'venv', venv], check=True)
    pip = [os.path.join(venv, 'bin', 'python'), '-m', 'pip', 'install',
           '--quiet', '--disable-pip-version-check']
    if release.python == '3.6':
        subprocess.run(pip + ['pip>=21.3,<22'], check=True)
    # NOTE: kolla is not in upper constraints; its dependencies (docker,
    # Jinja2, GitPython, oslo.config) are, as a deployment pins them.
    subprocess.run(pip + ['-c', os.path.join(TOP, 'constraints',
                                             release.constraints),
                          'kolla==%s' % version, 'docker'], check=True)
    return kolla_build


def render(kolla_build, work, version, base, base_tag, install_type):
    out = os.path.join(work, 'render', '%s-%s%s-%s' % (
        version, base, base_tag or '', install_type or 'source'))
    shutil.rmtree(out, ignore_errors=True)
    os.makedirs(out)
    args = [kolla_build, '--template-only', '--work-dir', out,
            '--template-override', OVERRIDE, '--base', base]
    if base_tag:
        args += ['--base-tag', base_tag]
    if install_type:
        args += ['--type', install_type]
    args.append('^nova-compute$')
    proc = subprocess.run(args, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, universal_newlines=True,
                          cwd=out)
    if proc.returncode != 0:
        raise RenderError('kolla-build %s (%s %s) exited %d:\n%s' % (
            version, base, install_type or '', proc.returncode,
            proc.stdout[-3000:]))
    for root, _dirs, files in os.walk(out):
        if (os.path.basename(root) == 'nova-compute' and
                'Dockerfile' in files):
            return os.path.join(root, 'Dockerfile')
    raise RenderError('kolla-build %s (%s %s) rendered no nova-compute '
                      'Dockerfile in %s' % (version, base, install_type,
                                            out))


def judge(dockerfile):
    """What is wrong with a rendered Dockerfile: a list, empty if right."""
    with open(dockerfile) as f:
        text = f.read()
    problems = []
    if re.search(r'python2(\.\d)? -m pip', text):
        problems.append('the image\'s Python is 2.x')
    run = footer()
    at_footer = text.find(run)
    if at_footer < 0:
        problems.append('the override\'s footer is not in it')
    pip = [m for m in re.finditer(r'-m pip [^\n]*install[^\n]*', text)
           if 'nova-revert-lock' in m.group(0)]
    if not pip:
        problems.append('nova-revert-lock is in no pip install')
    elif at_footer >= 0 and pip[0].start() > at_footer:
        problems.append('the footer comes before nova-revert-lock\'s '
                        'install')
    user = text.rfind('USER nova')
    if user < 0 or (at_footer >= 0 and user < at_footer):
        problems.append('the footer does not run before USER nova')
    return problems


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('--work-dir', default=os.path.join(
        TOP, '.tox', 'kolla-render'))
    parser.add_argument('versions', nargs='*', metavar='KOLLA_VERSION',
                        help='default: %s' % ' '.join(RELEASES))
    args = parser.parse_args(argv)
    unknown = [v for v in args.versions if v not in RELEASES]
    if unknown:
        parser.error('unknown kolla release(s) %s; known: %s' % (
            ', '.join(unknown), ', '.join(RELEASES)))
    work = os.path.abspath(args.work_dir)
    os.makedirs(work, exist_ok=True)
    failures = 0
    for version in args.versions or list(RELEASES):
        release = RELEASES[version]
        try:
            kolla_build = ensure_venv(work, version, release)
        except (RenderError, subprocess.CalledProcessError) as e:
            print('kolla-render: kolla %s: %s' % (version, e))
            failures += 1
            continue
        for base, base_tag, install_type in release.images:
            what = 'kolla %s (%s) %s%s %s' % (
                version, release.series, base,
                ' ' + base_tag if base_tag else '', install_type or 'source')
            try:
                dockerfile = render(kolla_build, work, version, base,
                                    base_tag, install_type)
                problems = judge(dockerfile)
            except RenderError as e:
                problems = [str(e)]
                dockerfile = None
            if problems:
                failures += 1
                print('kolla-render: FAIL %s: %s'
                      % (what, '; '.join(problems)))
            else:
                print('kolla-render: ok   %s: %s' % (
                    what, os.path.relpath(dockerfile, TOP)))
    if failures:
        print('kolla-render: %d failure(s)' % failures)
        return 1
    print('kolla-render: every rendering carries the override')
    return 0


if __name__ == '__main__':
    sys.exit(main())
