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

"""How the installed Nova starts nova-compute, and starting it that way.

Where nova-compute sets up its concurrency model changed between releases;
importing ``nova.cmd.compute``, as the console script does, lets the
release do it as it wants (on 34.x eventlet must not have been imported
before: Nova refuses to start). :func:`recognise` checks from Nova's
source that it is a known shape. See
doc/source/cli/nova-compute-revert-lock.rst, "Start-up order".

NOTE: only the standard library may be imported here: this runs before
Nova sets up concurrency.
"""

import ast
import collections
import importlib
import importlib.util
import os
import re
import shutil
import sys

#: where concurrency is set up: on import of the ``nova.cmd`` package
#: (<= 32.x), or by ``nova/cmd/compute.py`` itself (33.x on)
PACKAGE = 'nova.cmd'
MODULE = 'nova.cmd.compute'
ENTRY_POINT = MODULE + ':main'

EVENTLET = 'eventlet'
THREADING = 'threading'

#: ``monkey_patch.patch`` as a syntax tree dumps it
_PATCH = ast.dump(ast.parse('monkey_patch.patch', mode='eval').body)

EXPECTED = (
    "concurrency set up either on import of the nova.cmd package "
    "(nova/cmd/__init__.py: 'import nova.monkey_patch' or "
    "'monkey_patch.patch()', Nova 20.x to 32.x) or by the first statement "
    "of nova/cmd/compute.py ('from nova import monkey_patch; "
    "monkey_patch.patch(...)', Nova 33.x and later), a main() taking no "
    "arguments in nova/cmd/compute.py, and the nova-compute console script "
    "running %s" % ENTRY_POINT)


class NovaNotFound(Exception):
    """No Nova is importable in this Python environment."""


class UnrecognisedEntryPoint(Exception):
    """The installed Nova starts nova-compute in a way we do not know."""


class EntryPoint(collections.namedtuple(
        'EntryPoint', 'shape default_backend path version')):
    """How the installed Nova's nova-compute sets up concurrency.

    ``shape`` is :data:`PACKAGE` or :data:`MODULE`, ``default_backend`` the
    one Nova's code asks for when nothing in the environment or
    configuration does, ``path`` the file that sets it up and ``version``
    the installed Nova release (or None).
    """


def nova_version():
    """The installed Nova's version from its metadata, importing no Nova."""
    try:
        from importlib import metadata
    except ImportError:  # Python < 3.8
        metadata = None
    try:
        if metadata is not None:
            return metadata.version('nova')
        import pkg_resources
        return pkg_resources.get_distribution('nova').version
    except Exception:  # noqa: BLE001 - any failure means "don't know"
        return None


def _console_script():
    """What the ``nova-compute`` console script runs; None if unreadable."""
    try:
        from importlib import metadata
    except ImportError:  # Python < 3.8
        metadata = None
    try:
        if metadata is None:
            import pkg_resources
            ep = pkg_resources.get_entry_info(
                'nova', 'console_scripts', 'nova-compute')
            if ep is not None:
                return '%s:%s' % (ep.module_name, '.'.join(ep.attrs))
        else:
            for ep in metadata.distribution('nova').entry_points:
                if (ep.group, ep.name) == ('console_scripts', 'nova-compute'):
                    return ep.value.replace(' ', '')
    except Exception:  # noqa: BLE001 - any failure means "don't know"
        pass
    return None


def _nova_dir():
    try:
        spec = importlib.util.find_spec('nova')
    except (ImportError, ValueError):
        spec = None
    if spec is None or not spec.submodule_search_locations:
        raise NovaNotFound(
            'Nova cannot be imported here. Install nova-revert-lock into '
            'the same Python environment as nova-compute.')
    return list(spec.submodule_search_locations)[0]


def _parse(path):
    try:
        with open(path) as f:
            return ast.parse(f.read(), path)
    except (OSError, SyntaxError, ValueError):
        return None


def _string(node):
    """The value of a string literal node, or None."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if sys.version_info < (3, 8) and isinstance(node, ast.Str):
        return node.s
    return None


def _body(tree):
    """Module statements, without the docstring."""
    return tree.body[1:] if ast.get_docstring(tree) is not None else tree.body


def _imports_monkey_patch(node):
    """``import nova.monkey_patch`` or ``from nova import monkey_patch``."""
    if isinstance(node, ast.Import):
        return any(a.name == 'nova.monkey_patch' and a.asname is None
                   for a in node.names)
    if isinstance(node, ast.ImportFrom):
        return (node.module == 'nova' and node.level == 0 and
                any(a.name == 'monkey_patch' and a.asname is None
                    for a in node.names))
    return False


def _patch_call(node):
    """The ``monkey_patch.patch(...)`` call a statement is, or None."""
    if (isinstance(node, ast.Expr) and isinstance(node.value, ast.Call) and
            ast.dump(node.value.func) == _PATCH):
        return node.value
    return None


def _backend_of(call):
    """The backend a ``patch()`` call asks for, or None if not a literal."""
    if any(kw.arg != 'backend' for kw in call.keywords):
        return None
    given = call.args + [kw.value for kw in call.keywords]
    if not given:
        return EVENTLET  # patch()'s own default
    backend = _string(given[0]) if len(given) == 1 else None
    return backend if backend in (EVENTLET, THREADING) else None


def _package_shape(tree):
    """The default backend if nova/cmd/__init__.py sets concurrency up."""
    body = _body(tree)
    for i, node in enumerate(body):
        if not _imports_monkey_patch(node):
            continue
        if isinstance(node, ast.Import):
            # nova.monkey_patch patches on import (<= 31.x)
            return EVENTLET
        if i + 1 < len(body) and _patch_call(body[i + 1]) is not None:
            return _backend_of(_patch_call(body[i + 1]))
    return None


def _module_shape(tree):
    """The default backend if compute.py sets concurrency up first."""
    body = _body(tree)
    if len(body) < 2 or not _imports_monkey_patch(body[0]):
        return None
    call = _patch_call(body[1])
    return None if call is None else _backend_of(call)


def _has_main(tree):
    for node in _body(tree):
        if isinstance(node, ast.FunctionDef) and node.name == 'main':
            a = node.args
            return not (a.args or getattr(a, 'posonlyargs', None) or
                        a.vararg or a.kwonlyargs or a.kwarg)
    return False


def recognise(nova_dir=None, console_script=None, version=None):
    """The :class:`EntryPoint` of the installed Nova; import nothing.

    By default Nova is found without importing it, its console script and
    version read from its metadata. Raises :exc:`NovaNotFound` or
    :exc:`UnrecognisedEntryPoint` (saying what was expected).
    """
    if nova_dir is None:
        nova_dir = _nova_dir()
        console_script = _console_script()
        version = nova_version()
    package_path = os.path.join(nova_dir, 'cmd', '__init__.py')
    module_path = os.path.join(nova_dir, 'cmd', 'compute.py')
    package = _parse(package_path)
    module = _parse(module_path)

    def unrecognised(found):
        return UnrecognisedEntryPoint(
            'nova-compute of Nova %s is started in a way this version of '
            'nova-revert-lock does not know: %s. Expected %s. Nothing was '
            'started: upgrade nova-revert-lock, or run nova-compute.'
            % (version or '(version unknown)', found, EXPECTED))

    if console_script is not None and console_script != ENTRY_POINT:
        raise unrecognised('the nova-compute console script runs %s'
                           % console_script)
    if package is None or module is None:
        raise unrecognised('cannot read the source of %s' % (
            package_path if package is None else module_path))
    in_package = _package_shape(package)
    in_module = _module_shape(module)
    if not _has_main(module):
        raise unrecognised('%s has no main() taking no arguments'
                           % module_path)
    if in_package and in_module:
        raise unrecognised('both %s and %s set up concurrency'
                           % (package_path, module_path))
    if in_package:
        return EntryPoint(PACKAGE, in_package, package_path, version)
    if in_module:
        return EntryPoint(MODULE, in_module, module_path, version)
    raise unrecognised('neither %s nor %s sets up concurrency in a known '
                       'way' % (package_path, module_path))


#: what the ``nova-compute`` command starts (:func:`nova_compute_command`)
STARTS_FIX = 'nova-revert-lock'
STARTS_NOVA = 'nova'
STARTS_UNKNOWN = 'unknown'
#: the module of ``nova-compute-revert-lock``'s console script
WRAPPER_MODULE = 'nova_revert_lock.cmd.compute'

_SCRIPT_IMPORT = re.compile(
    r'^\s*from\s+([\w.]+)\s+import\s+main\b', re.MULTILINE)
_LOAD_ENTRY_POINT = re.compile(
    r"load_entry_point\(\s*['\"](nova-revert-lock|nova)[=<>!~\s'\"]")


def nova_compute_command(path=None):
    """Where the ``nova-compute`` command is and what it starts.

    A deployment tool runs ``nova-compute`` by name (Kolla's and TripleO's
    container definitions, a distribution's unit): the first one on
    ``PATH``, else the one beside this Python (a virtualenv not on
    ``PATH``). An image whose ``nova-compute`` was replaced by this
    package's console script starts the fix whatever the tool renders.
    The file is read, never run: a console script names the module whose
    ``main()`` it calls (pip, pbr), or the distribution whose entry point
    it loads (older setuptools).

    :param path: the file to read instead of looking ``nova-compute`` up
    :returns: ``(path, starts)``: ``path`` None when there is none,
        ``starts`` one of :data:`STARTS_FIX`, :data:`STARTS_NOVA`,
        :data:`STARTS_UNKNOWN` (not a console script we know), or None
    """
    if path is None:
        path = shutil.which('nova-compute')
        if path is None:
            beside = os.path.join(os.path.dirname(sys.executable),
                                  'nova-compute')
            path = beside if os.path.isfile(beside) else None
    if path is None:
        return None, None
    try:
        with open(path, 'rb') as f:
            text = f.read(16384).decode('utf-8', 'replace')
    except (IOError, OSError):
        return path, STARTS_UNKNOWN
    found = _SCRIPT_IMPORT.search(text)
    if found:
        module = found.group(1)
        if module == WRAPPER_MODULE:
            return path, STARTS_FIX
        if module == MODULE:
            return path, STARTS_NOVA
        return path, STARTS_UNKNOWN
    found = _LOAD_ENTRY_POINT.search(text)
    if found:
        return path, (STARTS_FIX if found.group(1) == 'nova-revert-lock'
                      else STARTS_NOVA)
    return path, STARTS_UNKNOWN


def import_entry_module():
    """Import ``nova.cmd.compute``, letting the release set up concurrency."""
    return importlib.import_module(MODULE)


def running_backend():
    """The concurrency model this process runs: eventlet or threading.

    Eventlet counts only if it patched the standard library: 32.x and 33.x
    import it even when they do not patch.
    """
    try:
        patched = sys.modules['eventlet'].patcher.is_monkey_patched('thread')
    except Exception:  # noqa: BLE001 - not imported (KeyError), or broken
        patched = False
    return EVENTLET if patched else THREADING
