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

"""Fingerprints of upstream Nova functions, live or in released sources.

The SHA-256 of a function's significant tokens (:func:`normalize`): the
same whatever the Python version (Train runs on 3.6, current Nova on 3.11).
See doc/source/reference/architecture.rst, "The guard".
"""

import ast
import functools
import hashlib
import importlib
import inspect
import io
import linecache
import os
import textwrap
import tokenize

from nova_revert_lock.guard import fingerprint_table
from nova_revert_lock.guard import releases as nova_releases

_SKIPPED_TOKENS = frozenset(
    getattr(tokenize, name) for name in (
        'COMMENT', 'NL', 'NEWLINE', 'INDENT', 'DEDENT', 'ENCODING',
        'ENDMARKER') if hasattr(tokenize, name))
# Python 3.12 splits f-strings into several tokens; keep them as one.
_FSTRING_PARTS = frozenset(
    getattr(tokenize, name) for name in (
        'FSTRING_START', 'FSTRING_MIDDLE', 'FSTRING_END')
    if hasattr(tokenize, name))


#: Modules whose decorators the guard looks through: Nova's own (their
#: lines are fingerprinted too), oslo.concurrency's lock (Nova's
#: ``utils.synchronized``) and oslo.versionedobjects' ``remotable*``. Any
#: other ``__wrapped__`` layer was put there by someone else at run time.
KNOWN_WRAPPER_MODULES = ('nova', 'oslo_concurrency.lockutils',
                         'oslo_versionedobjects.base')


class SourceUnavailable(Exception):
    """The source of a live function cannot be read."""


class UnknownWrapper(Exception):
    """A live function is wrapped by a decorator the guard does not know."""


def normalize(source):
    """The significant tokens of a function's source, docstring left out."""
    source = textwrap.dedent(source)
    tokens = list(tokenize.generate_tokens(io.StringIO(source).readline))
    words = []
    docstring_allowed = False
    depth = 0
    previous = None
    fstring = []
    for tok in tokens:
        if tok.type in _FSTRING_PARTS:
            fstring.append(tok.string)
            if tok.type == tokenize.FSTRING_END:
                words.append(''.join(fstring))
                fstring = []
            continue
        if fstring:
            fstring.append(tok.string)
            continue
        if tok.type == tokenize.INDENT and previous == ':' and depth == 0:
            # The body's first statement: a docstring if a lone string.
            docstring_allowed = True
            continue
        if tok.type in _SKIPPED_TOKENS:
            continue
        if docstring_allowed:
            docstring_allowed = False
            if tok.type == tokenize.STRING and _is_lone_string(tokens, tok):
                continue
        if tok.string in '([{' and tok.type == tokenize.OP:
            depth += 1
        elif tok.string in ')]}' and tok.type == tokenize.OP:
            depth -= 1
        words.append(tok.string)
        previous = tok.string
    return ' '.join(words)


def _is_lone_string(tokens, tok):
    """True if ``tok`` is a string statement on its own (a docstring)."""
    index = tokens.index(tok)
    for following in tokens[index + 1:]:
        if following.type == tokenize.STRING:
            continue  # implicit concatenation
        return following.type in (tokenize.NEWLINE, tokenize.NL)
    return True


def fingerprint(source):
    """SHA-256 hex digest of the normalized source of one function."""
    return hashlib.sha256(normalize(source).encode('utf-8')).hexdigest()


def resolve(ref):
    """The live object ``'package.module:Class.attribute'`` names."""
    module_name, _, path = ref.partition(':')
    obj = importlib.import_module(module_name)
    for part in path.split('.'):
        # A class's __dict__ shows what it defines itself (a staticmethod
        # stays one, no descriptor magic); getattr for module attributes.
        namespace = getattr(obj, '__dict__', {})
        obj = namespace[part] if part in namespace else getattr(obj, part)
    return obj


def wrapper_name(func):
    """``module.qualname`` of a wrapper's own code, not of what it wraps.

    :func:`functools.wraps` copies the wrapped function's ``__module__``
    and ``__qualname__``; the wrapper's globals and code object do not lie.
    """
    code = getattr(func, '__code__', None)
    if code is None:
        cls = type(func)
        return '%s.%s' % (cls.__module__, cls.__qualname__)
    module = getattr(func, '__globals__', {}).get('__name__', '?')
    return '%s.%s' % (module, getattr(code, 'co_qualname', code.co_name))


#: Decorators without :func:`functools.wraps` that keep the function in
#: their closure: ``module.qualname`` of the wrapper -> closure variable.
#: oslo.messaging's ``expected_exceptions`` wraps compute manager RPC
#: methods (``rebuild_instance``); its line is fingerprinted, as Nova's are.
CLOSURE_WRAPPERS = {
    'oslo_messaging.rpc.server.'
    'expected_exceptions.<locals>.outer.<locals>.inner': 'func',
}


def closure_wrapped(func):
    """The function a :data:`CLOSURE_WRAPPERS` wrapper wraps, or None."""
    name = '%s.%s' % (getattr(func, '__module__', None),
                      getattr(func, '__qualname__', None))
    var = CLOSURE_WRAPPERS.get(name)
    if var is None or not inspect.isfunction(func):
        return None
    return inspect.getclosurevars(func).nonlocals.get(var)


def unwrap(func, strict=True):
    """The function a live callable wraps, through known decorators only.

    :param strict: False to look through any decorator, stopping at a loop
    :raises UnknownWrapper: at a ``__wrapped__`` layer not of
        :data:`KNOWN_WRAPPER_MODULES`, or a loop
    """
    func = getattr(func, '__func__', func)
    seen = set()
    while True:
        inner = closure_wrapped(func)
        if inner is None:
            if not hasattr(func, '__wrapped__'):
                return func
            name = wrapper_name(func)
            if strict and not any(name.startswith(module + '.')
                                  for module in KNOWN_WRAPPER_MODULES):
                raise UnknownWrapper(
                    'wrapped at run time by %s, which is not a decorator '
                    'the guard knows (only those of %s are looked through)'
                    % (name, ' and '.join(KNOWN_WRAPPER_MODULES)))
            inner = func.__wrapped__
        seen.add(id(func))
        if id(inner) in seen:
            if strict:
                raise UnknownWrapper('__wrapped__ chain loops at %s'
                                     % wrapper_name(inner))
            return func
        func = inner if strict else getattr(inner, '__func__', inner)


def innermost(func):
    """Under every decorator, known or not: to read code, not to replace."""
    return unwrap(func, strict=False)


def live_source(func):
    """Source of a live function as written, through known decorators.

    :raises SourceUnavailable: no Python source (mocks, builtins, no ``.py``)
    """
    func = unwrap(func)
    try:
        return inspect.getsource(func)
    except (TypeError, OSError, IOError) as e:
        raise SourceUnavailable(str(e))


#: id(code object) -> (code object, fingerprint), for this process
_LIVE = {}


def live_fingerprint(ref):
    """Fingerprint of the live function that ``ref`` names.

    Tokenizing is most of the guard's cost at nova-compute's start, so the
    exact source text is first looked up in the survey's ``SOURCE_DIGESTS``.
    """
    func = unwrap(resolve(ref))
    code = getattr(func, '__code__', None)
    if code is None:
        return fingerprint(live_source(func))
    hit = _LIVE.get(id(code))
    if hit is not None and hit[0] is code:
        return hit[1]
    digest = None
    text = quick_source(func)
    if text is not None:
        known = getattr(fingerprint_table, 'SOURCE_DIGESTS', {}).get(ref, {})
        digest = known.get(source_digest(text))
    if digest is None:
        digest = fingerprint(live_source(func))
    _LIVE[id(code)] = (code, digest)
    return digest


def source_digest(text):
    """SHA-256 of a function's exact source text (the survey's shortcut)."""
    return hashlib.sha256(text.encode('utf-8')).hexdigest()


def _indent(line):
    return len(line) - len(line.lstrip())


def quick_source(func):
    """A plain function's source text, found without tokenizing, or None.

    From its first decorator to the last code line of its body: the text
    the survey takes (:func:`sources_in_source`) for a function laid out
    as Nova's are; any other layout only costs the tokenizing path.
    """
    code = func.__code__
    lines = linecache.getlines(code.co_filename,
                               getattr(func, '__globals__', None))
    first = code.co_firstlineno - 1
    if not 0 <= first < len(lines):
        return None
    indent = _indent(lines[first])
    seen_def = False
    last = first
    for number in range(first, len(lines)):
        line = lines[number]
        stripped = line.strip()
        if not stripped or stripped.startswith('#'):
            continue
        is_def = stripped.startswith(('def ', 'async def '))
        if number > first and _indent(line) <= indent and (
                seen_def or not (is_def or stripped.startswith('@'))):
            break
        seen_def = seen_def or is_def
        last = number
    return ''.join(lines[first:last + 1])


def sources_in_source(source, refs):
    """{path: exact source text} of functions in a module's source text.

    :param refs: ``'Class.method'`` (or ``'function'``) paths within the
        module; None for every function and method of the module
    """
    tree = ast.parse(source)
    lines = source.splitlines(True)
    wanted = None if refs is None else set(refs)
    found = {}
    functions = (ast.FunctionDef, ast.AsyncFunctionDef)
    candidates = []
    for top in tree.body:
        if isinstance(top, functions):
            candidates.append((top.name, top))
        elif isinstance(top, ast.ClassDef):
            candidates.extend(('%s.%s' % (top.name, node.name), node)
                              for node in top.body
                              if isinstance(node, functions))
    for path, node in candidates:
        if wanted is not None and path not in wanted:
            continue
        first = min([node.lineno] + [d.lineno for d in node.decorator_list])
        end = getattr(node, 'end_lineno', None)
        if end is None:
            # Python < 3.8 (Train's 3.6) has no end_lineno: take the block
            # as inspect.getsource does, which ends on the same line.
            end = first - 1 + len(inspect.getblock(lines[first - 1:]))
        found[path] = ''.join(lines[first - 1:end])
    return found


class FunctionCheck(object):
    """The result of checking one function against the table.

    ``releases`` ship exactly this code (none: unknown), or lack it too if
    ``absent`` (missing, and that is accepted); ``error`` says why there is
    no fingerprint (missing, no source).
    """

    def __init__(self, ref, fingerprint=None, releases=frozenset(),
                 error=None, absent=False):
        self.ref = ref
        self.fingerprint = fingerprint
        self.releases = frozenset(releases)
        self.error = error
        self.absent = absent

    @property
    def known(self):
        return bool(self.releases)

    def describe(self):
        if self.error:
            return '%s: %s' % (self.ref, self.error)
        found_in = ', '.join(sorted_releases(self.releases))
        if self.absent:
            return '%s: absent, as in Nova %s' % (self.ref, found_in)
        if self.known:
            return '%s: matches Nova %s' % (self.ref, found_in)
        return '%s: unknown code (fingerprint %s)' % (
            self.ref, self.fingerprint[:12])

    def to_dict(self):
        return {
            'function': self.ref,
            'fingerprint': self.fingerprint,
            'releases': sorted_releases(self.releases),
            'error': self.error,
            'absent': self.absent,
        }


def check_digest(ref, digest, table, absent_ok=False,
                 where='the installed Nova'):
    """Check the fingerprint ``digest`` of ``ref`` (None: absent) in table.

    :param absent_ok: for a function a later release of a series added,
        relied on only where it exists. If absent, it is known in the
        surveyed releases lacking it too (so a release still matches as a
        whole); otherwise, or if none lacks it, absence is an error.
    :param where: the Nova ``ref`` is looked for in, for that error
    """
    if digest is not None:
        return FunctionCheck(ref, digest, table.get(ref, {}).get(digest, ()))
    if absent_ok and ref in table:
        # Every surveyed release is surveyed for every function of the
        # table: one listed for another function but not for ref lacks it.
        without = set()
        for by_digest in table.values():
            for found_in in by_digest.values():
                without.update(found_in)
        without.difference_update(*table[ref].values())
        if without:
            return FunctionCheck(ref, releases=without, absent=True)
    return FunctionCheck(ref, error='not found in %s' % where)


def check(ref, table=None, absent_ok=False):
    """Check the live function ``ref`` against the fingerprint table."""
    table = fingerprint_table.FINGERPRINTS if table is None else table
    try:
        digest = live_fingerprint(ref)
    except (ImportError, AttributeError, KeyError):
        digest = None
    except SourceUnavailable as e:
        return FunctionCheck(ref, error='source unavailable (%s)' % e)
    except UnknownWrapper as e:
        return FunctionCheck(ref, error=str(e))
    return check_digest(ref, digest, table, absent_ok)


@functools.lru_cache(maxsize=None)
def release_key(release):
    """Sort key (tuple of ints) for Nova release labels such as ``'21.1.0'``.

    ``'20.6.1+patches'`` sorts right after that release; a branch tip
    ``<series>-eol`` after every release of its series. Cached: the guard
    compares the table's labels thousands of times while nova-compute starts.
    """
    major = nova_releases.eol_major(release)
    if major is not None:
        return (major, 1 << 30)
    version, _, local = release.partition('+')
    parts = [int(part) if part.isdigit() else -1
             for part in version.split('.')]
    return tuple(parts + ([1] if local else []))


def patch_series_digest(directory):
    """SHA-256 of a patch series: its ``series`` file and each patch in it.

    The table records it per patched build surveyed, so that a change to
    ``patches/`` without a new survey is noticed.
    """
    digest = hashlib.sha256()
    with open(os.path.join(directory, 'series'), 'rb') as f:
        series = f.read()
    digest.update(series)
    for line in series.decode('utf-8').splitlines():
        name = line.strip()
        if name and not name.startswith('#'):
            with open(os.path.join(directory, name), 'rb') as f:
                digest.update(name.encode('utf-8') + b'\0' + f.read())
    return digest.hexdigest()


def sorted_releases(releases):
    return sorted(releases, key=release_key)
