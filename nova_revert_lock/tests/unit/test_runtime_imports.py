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

"""The runtime package imports no test code.

Everything under ``nova_revert_lock/`` but ``tests/`` is what a compute
host runs; neither Nova's test package (``nova.tests``) nor this
project's may be imported by it, at import time or later.
"""

import ast
import json
import os
import subprocess
import sys
import unittest

import nova_revert_lock

TEST_PACKAGES = ('nova.tests', 'nova_revert_lock.tests')

#: Run in a fresh interpreter: the test runner has imported test modules
#: already. Walks the package without importing ``tests`` (walking into a
#: package imports it), imports every other module and prints what got
#: imported.
_IMPORT_ALL = '''
import importlib
import json
import pkgutil
import sys

import nova_revert_lock


def runtime_modules(package):
    for info in pkgutil.iter_modules(package.__path__,
                                     package.__name__ + '.'):
        if info.name == 'nova_revert_lock.tests':
            continue
        yield info.name
        if info.ispkg:
            yield from runtime_modules(importlib.import_module(info.name))


names = list(runtime_modules(nova_revert_lock))
for name in names:
    importlib.import_module(name)
print(json.dumps({'modules': names, 'loaded': sorted(sys.modules)}))
'''


def _is_test_module(name):
    return any(name == p or name.startswith(p + '.') for p in TEST_PACKAGES)


def _runtime_sources():
    """(module name, path) of every runtime module, from the tree."""
    top = os.path.dirname(os.path.abspath(nova_revert_lock.__file__))
    for root, dirs, files in os.walk(top):
        rel = os.path.relpath(root, os.path.dirname(top))
        package = rel.replace(os.sep, '.')
        if package == 'nova_revert_lock.tests':
            dirs[:] = []
            continue
        dirs[:] = sorted(d for d in dirs if d != '__pycache__')
        for name in sorted(files):
            if name.endswith('.py'):
                module = package if name == '__init__.py' else (
                    package + '.' + name[:-3])
                yield module, os.path.join(root, name)


class RuntimeImportsTest(unittest.TestCase):

    def test_importing_every_module_loads_no_test_module(self):
        proc = subprocess.run(
            [sys.executable, '-c', _IMPORT_ALL],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            universal_newlines=True)
        self.assertEqual(0, proc.returncode, proc.stderr)
        result = json.loads(proc.stdout.strip().splitlines()[-1])
        expected = sorted(m for m, _p in _runtime_sources()
                          if m != 'nova_revert_lock')
        # Every module was imported: none is missed by the walk.
        self.assertEqual(expected, sorted(result['modules']))
        self.assertEqual(
            [], [m for m in result['loaded'] if _is_test_module(m)])

    def test_no_module_imports_test_code_later(self):
        # Imports inside functions run when called: look at the source.
        found = []
        for module, path in _runtime_sources():
            with open(path) as f:
                tree = ast.parse(f.read(), path)
            for node in ast.walk(tree):
                if isinstance(node, ast.Import):
                    names = [alias.name for alias in node.names]
                elif isinstance(node, ast.ImportFrom) and node.module:
                    names = [node.module] + [
                        node.module + '.' + alias.name
                        for alias in node.names]
                else:
                    continue
                found.extend('%s:%d %s' % (module, node.lineno, name)
                             for name in names if _is_test_module(name))
        self.assertEqual([], found)
