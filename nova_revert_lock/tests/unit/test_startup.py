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

"""Recognising how the installed Nova starts nova-compute."""

import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
from unittest import mock

import fixtures
from oslotest import base

from nova_revert_lock.guard import releases
from nova_revert_lock import startup

LICENSE = '# a comment\n'
DOC = '"""Starter script for nova-compute."""\n'
MAIN = '\n\ndef main():\n    pass\n'
#: nova/cmd/__init__.py, Nova 20.x to 31.x
PACKAGE_IMPORT = LICENSE + 'import nova.monkey_patch  # noqa\n'
#: nova/cmd/__init__.py, Nova 32.x
PACKAGE_PATCH = (LICENSE +
                 'from nova import monkey_patch\nmonkey_patch.patch()\n')
#: nova/cmd/compute.py before 33.x: concurrency is not its business
PLAIN_COMPUTE = LICENSE + DOC + 'import sys\n' + MAIN


def module_compute(call):
    """nova/cmd/compute.py, 33.x on: the patch first, on one line."""
    return (LICENSE + DOC + '# autopep8: off\n'
            'from nova import monkey_patch; %s  # noqa\n'
            '# autopep8: on\n\nimport sys\n' % call + MAIN)


class RecogniseTestCase(base.BaseTestCase):

    def _tree(self, package, compute):
        nova_dir = os.path.join(self.useFixture(fixtures.TempDir()).path,
                                'nova')
        os.makedirs(os.path.join(nova_dir, 'cmd'))
        for name, text in (('__init__.py', package),
                           ('compute.py', compute)):
            if text is not None:
                with open(os.path.join(nova_dir, 'cmd', name), 'w') as f:
                    f.write(text)
        return nova_dir

    def _recognise(self, package, compute, script=startup.ENTRY_POINT):
        return startup.recognise(self._tree(package, compute), script,
                                 '99.0.0')

    def _unrecognised(self, package, compute, script=startup.ENTRY_POINT):
        e = self.assertRaises(startup.UnrecognisedEntryPoint,
                              self._recognise, package, compute, script)
        message = str(e)
        # which release, what was expected, and that nothing started
        self.assertIn('Nova 99.0.0', message)
        self.assertIn('Expected concurrency set up', message)
        self.assertIn('Nothing was started', message)
        return message

    def test_package_import_train_to_epoxy(self):
        ep = self._recognise(PACKAGE_IMPORT, PLAIN_COMPUTE)
        self.assertEqual((startup.PACKAGE, startup.EVENTLET),
                         (ep.shape, ep.default_backend))
        self.assertTrue(ep.path.endswith(os.path.join('cmd',
                                                      '__init__.py')))

    def test_package_patch_2025_2(self):
        ep = self._recognise(PACKAGE_PATCH, PLAIN_COMPUTE)
        self.assertEqual((startup.PACKAGE, startup.EVENTLET),
                         (ep.shape, ep.default_backend))

    def test_module_patch_2026_1(self):
        ep = self._recognise(LICENSE, module_compute('monkey_patch.patch()'))
        self.assertEqual((startup.MODULE, startup.EVENTLET),
                         (ep.shape, ep.default_backend))
        self.assertTrue(ep.path.endswith('compute.py'))

    def test_module_patch_threading_2026_2(self):
        for call in ("monkey_patch.patch(backend='threading')",
                     "monkey_patch.patch('threading')"):
            ep = self._recognise(LICENSE, module_compute(call))
            self.assertEqual((startup.MODULE, startup.THREADING),
                             (ep.shape, ep.default_backend))

    def test_no_concurrency_set_up(self):
        message = self._unrecognised(LICENSE, PLAIN_COMPUTE)
        self.assertIn('neither', message)

    def test_patch_not_first_in_module(self):
        compute = (LICENSE + 'import os\nfrom nova import monkey_patch\n'
                   'monkey_patch.patch()\n' + MAIN)
        self._unrecognised(LICENSE, compute)

    def test_unknown_backend(self):
        for call in ("monkey_patch.patch(backend=DEFAULT)",
                     "monkey_patch.patch(backend='asyncio')",
                     "monkey_patch.patch(mode='threading')"):
            self._unrecognised(LICENSE, module_compute(call))

    def test_both_places(self):
        self._unrecognised(PACKAGE_PATCH,
                           module_compute('monkey_patch.patch()'))

    def test_main_missing_or_taking_arguments(self):
        for compute in (PACKAGE_IMPORT,
                        PLAIN_COMPUTE.replace('main()', 'main(argv)')):
            message = self._unrecognised(PACKAGE_IMPORT, compute)
            self.assertIn('main()', message)

    def test_console_script_elsewhere(self):
        message = self._unrecognised(PACKAGE_IMPORT, PLAIN_COMPUTE,
                                     script='nova.cmd.compute_ng:main')
        self.assertIn('nova.cmd.compute_ng:main', message)

    def test_console_script_unknown_is_judged_on_source(self):
        ep = self._recognise(PACKAGE_IMPORT, PLAIN_COMPUTE, script=None)
        self.assertEqual(startup.PACKAGE, ep.shape)

    def test_source_missing(self):
        message = self._unrecognised(PACKAGE_IMPORT, None)
        self.assertIn('cannot read', message)

    def test_no_nova(self):
        with mock.patch('importlib.util.find_spec', return_value=None):
            e = self.assertRaises(startup.NovaNotFound, startup.recognise)
        self.assertIn('same Python environment', str(e))


class InstalledNovaTestCase(base.BaseTestCase):
    """The Nova installed in this environment is recognised as expected."""

    def test_shape_of_installed_release(self):
        version = releases.installed_nova_version()
        ep = startup.recognise()
        # NOTE: a Nova built between releases (train-eol, from git) has a
        # pbr development version in its metadata (20.6.2.dev65), of which
        # Nova's version_string() gives the release part only (20.6.2).
        self.assertEqual(version, ep.version.split('.dev')[0])
        major = int(version.split('.')[0])
        if major <= 32:
            expected = (startup.PACKAGE, startup.EVENTLET)
        elif major == 33:
            expected = (startup.MODULE, startup.EVENTLET)
        else:
            expected = (startup.MODULE, startup.THREADING)
        self.assertEqual(expected, (ep.shape, ep.default_backend))

    def test_console_script(self):
        self.assertIn(startup._console_script(), (startup.ENTRY_POINT, None))

    def test_running_backend(self):
        with mock.patch.dict(sys.modules):
            sys.modules.pop('eventlet', None)
            self.assertEqual(startup.THREADING, startup.running_backend())
        unpatched = mock.Mock()
        unpatched.patcher.is_monkey_patched.return_value = False
        with mock.patch.dict(sys.modules, {'eventlet': unpatched}):
            self.assertEqual(startup.THREADING, startup.running_backend())
        unpatched.patcher.is_monkey_patched.return_value = True
        with mock.patch.dict(sys.modules, {'eventlet': unpatched}):
            self.assertEqual(startup.EVENTLET, startup.running_backend())


PIP_SCRIPT = """#!%(python)s
# -*- coding: utf-8 -*-
import re
import sys
from %(module)s import main
if __name__ == '__main__':
    sys.argv[0] = re.sub(r'(-script\\.pyw|\\.exe)?$', '', sys.argv[0])
    sys.exit(main())
"""

SETUPTOOLS_SCRIPT = """#!/usr/bin/python3
# EASY-INSTALL-ENTRY-SCRIPT: '%(dist)s==1.0','console_scripts','%(name)s'
__requires__ = '%(dist)s==1.0'
import sys
from pkg_resources import load_entry_point

if __name__ == '__main__':
    sys.exit(
        load_entry_point('%(dist)s==1.0', 'console_scripts', '%(name)s')()
    )
"""


class NovaComputeCommandTestCase(base.BaseTestCase):
    """What the ``nova-compute`` command starts, read from its file."""

    def setUp(self):
        super(NovaComputeCommandTestCase, self).setUp()
        self.bindir = self.useFixture(fixtures.TempDir()).path

    def _write(self, text, name='nova-compute'):
        path = os.path.join(self.bindir, name)
        with open(path, 'w') as f:
            f.write(text)
        os.chmod(path, 0o755)
        return path

    def _on_path(self):
        self.useFixture(fixtures.EnvironmentVariable(
            'PATH', self.bindir + os.pathsep + os.environ.get('PATH', '')))

    def test_pip_scripts(self):
        for module, starts in (
                ('nova_revert_lock.cmd.compute', startup.STARTS_FIX),
                ('nova.cmd.compute', startup.STARTS_NOVA),
                ('nova.cmd.api', startup.STARTS_UNKNOWN)):
            path = self._write(PIP_SCRIPT % dict(python=sys.executable,
                                                 module=module))
            self.assertEqual((path, starts),
                             startup.nova_compute_command(path))

    def test_setuptools_scripts(self):
        for dist, name, starts in (
                ('nova-revert-lock', 'nova-compute-revert-lock',
                 startup.STARTS_FIX),
                ('nova', 'nova-compute', startup.STARTS_NOVA)):
            path = self._write(SETUPTOOLS_SCRIPT % dict(dist=dist, name=name))
            self.assertEqual((path, starts),
                             startup.nova_compute_command(path))

    def test_not_a_console_script(self):
        path = self._write('#!/bin/sh\nexec /opt/nova/bin/nova-compute "$@"\n')
        self.assertEqual((path, startup.STARTS_UNKNOWN),
                         startup.nova_compute_command(path))
        unreadable = os.path.join(self.bindir, 'missing')
        self.assertEqual((unreadable, startup.STARTS_UNKNOWN),
                         startup.nova_compute_command(unreadable))

    def test_first_on_path(self):
        path = self._write(PIP_SCRIPT % dict(
            python=sys.executable, module='nova_revert_lock.cmd.compute'))
        self._on_path()
        self.assertEqual((path, startup.STARTS_FIX),
                         startup.nova_compute_command())

    def test_beside_python_when_not_on_path(self):
        self.useFixture(fixtures.EnvironmentVariable('PATH', '/nonexistent'))
        path = self._write(PIP_SCRIPT % dict(python=sys.executable,
                                             module='nova.cmd.compute'))
        with mock.patch.object(sys, 'executable',
                               os.path.join(self.bindir, 'python3')):
            self.assertEqual((path, startup.STARTS_NOVA),
                             startup.nova_compute_command())
        with mock.patch.object(sys, 'executable', '/nonexistent/python3'):
            self.assertEqual((None, None), startup.nova_compute_command())


class WrapperImportTestCase(base.BaseTestCase):
    """The wrapper imports nothing of Nova, oslo or eventlet before Nova."""

    def _python(self, code, env=None):
        return subprocess.run(
            [sys.executable, '-c', textwrap.dedent(code)],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            universal_newlines=True, timeout=120,
            env=dict(os.environ, **(env or {})))

    def test_importing_the_wrapper_is_cheap(self):
        proc = self._python('''
            import sys
            import nova_revert_lock
            from nova_revert_lock.cmd import compute
            early = sorted(m for m in sys.modules
                           if m.split('.')[0] in ('nova', 'eventlet')
                           or m.startswith('oslo'))
            print(early)
            ''')
        self.assertEqual(0, proc.returncode, proc.stderr)
        self.assertEqual('[]', proc.stdout.strip())

    def test_unrecognised_entry_point_starts_nothing(self):
        root = tempfile.mkdtemp()
        self.addCleanup(shutil.rmtree, root, True)
        marker = os.path.join(root, 'imported')
        os.makedirs(os.path.join(root, 'nova', 'cmd'))
        for name, text in (
                ('nova/__init__.py', ''),
                ('nova/cmd/__init__.py', LICENSE),
                ('nova/cmd/compute.py',
                 'open(%r, "w").close()\n' % marker + MAIN)):
            with open(os.path.join(root, name), 'w') as f:
                f.write(text)
        proc = self._python('''
            import sys
            from nova_revert_lock.cmd import compute
            sys.exit(compute.main(['nova-compute']))
            ''', env={'PYTHONPATH': os.pathsep.join(
                [root] + [p for p in sys.path if p])})
        self.assertEqual(4, proc.returncode, proc.stderr)
        self.assertIn('nova-compute-revert-lock: nova-compute of Nova',
                      proc.stderr)
        self.assertIn('Expected concurrency set up', proc.stderr)
        self.assertFalse(os.path.exists(marker))
