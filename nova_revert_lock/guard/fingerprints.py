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

"""Fingerprints of upstream Nova functions.

A fingerprint is the SHA-256 of a function's *normalized* source: its
decorators, signature and body as a stream of Python tokens, without
comments, blank lines, indentation or docstrings. Two functions with the
same fingerprint therefore do the same thing whatever their comments say,
and any change of code, however small, changes the fingerprint.

The same normalization runs on two inputs:

* the live function objects of the Nova imported in this process
  (:func:`live_fingerprint`), which is what the guard checks before it
  replaces or relies on anything;
* the source files of released Nova wheels (:func:`fingerprints_in_source`),
  which is what ``tools/survey_fingerprints.py`` uses to build
  :mod:`nova_revert_lock.guard.fingerprint_table`.

Both only use :mod:`tokenize`, so the result does not depend on the Python
version that computes it (Train runs on 3.6, current Nova on 3.11).

Tokenizing is most of the guard's cost at nova-compute's start, so live
functions take a shortcut first: the SHA-256 of their exact source text
(found from the code object's first line and the indentation, without
tokenizing) is looked up in the survey's ``SOURCE_DIGESTS``, which maps
the exact texts of surveyed releases to their fingerprints. Only a text
the survey has not seen is tokenized. Each live function is fingerprinted
once per process.
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
#: lines are part of the source fingerprinted, so a changed decorator is
#: changed code), oslo.concurrency's lock wrapper, which Nova's
#: ``utils.synchronized`` is, and oslo.versionedobjects' ``remotable`` /
#: ``remotable_classmethod``, which send an object method to the
#: conductor in a real nova-compute (the methods the mixins call). Any
#: other layer in a function's ``__wrapped__`` chain was put there by
#: someone else at run time.
KNOWN_WRAPPER_MODULES = ('nova', 'oslo_concurrency.lockutils',
                         'oslo_versionedobjects.base')


class SourceUnavailable(Exception):
    """The source of a live function cannot be read."""


class UnknownWrapper(Exception):
    """A live function is wrapped by a decorator the guard does not know.

    Its fingerprint would be the wrapped function's, and a mixin replacing
    it would drop the wrapper without a word.
    """


def normalize(source):
    """Return the normalized token text of one function's source.

    :param source: source text of a single (possibly decorated) function,
        at any indentation.
    :returns: str, the significant tokens separated by single spaces, the
        docstring left out.
    """
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
            # The first statement of the body: a docstring if it is a
            # lone string.
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
    """Return the live object a reference names.

    :param ref: ``'package.module:Class.attribute'``
    :raises ImportError, AttributeError: if it does not exist.
    """
    module_name, _, path = ref.partition(':')
    obj = importlib.import_module(module_name)
    for part in path.split('.'):
        # Use the class __dict__ so that we see what the class itself
        # defines (a staticmethod stays a staticmethod, no descriptor
        # magic), falling back to getattr for module attributes.
        namespace = getattr(obj, '__dict__', {})
        obj = namespace[part] if part in namespace else getattr(obj, part)
    return obj


def wrapper_name(func):
    """``module.qualname`` of the code of a wrapper (not of what it wraps).

    :func:`functools.wraps` copies the wrapped function's ``__module__``
    and ``__qualname__`` onto the wrapper; the wrapper's own globals and
    code object still tell where it was defined.
    """
    code = getattr(func, '__code__', None)
    if code is None:
        cls = type(func)
        return '%s.%s' % (cls.__module__, cls.__qualname__)
    module = getattr(func, '__globals__', {}).get('__name__', '?')
    return '%s.%s' % (module, getattr(code, 'co_qualname', code.co_name))


def _known_wrapper(func):
    name = wrapper_name(func)
    return any(name.startswith(module + '.')
               for module in KNOWN_WRAPPER_MODULES)


#: Decorators that keep the function they wrap only in their closure (no
#: :func:`functools.wraps`, so no ``__wrapped__``), as ``module.qualname``
#: of their wrapper -> name of the closure variable holding the function.
#: oslo.messaging's ``expected_exceptions`` wraps RPC endpoint methods of
#: Nova's compute manager (``rebuild_instance``); its line is part of the
#: source fingerprinted, like Nova's own decorators.
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


def inner_function(func):
    """The next layer of a decorated function, or None if it is the last.

    Follows ``__wrapped__`` (whatever set it) and the closure wrappers of
    :data:`CLOSURE_WRAPPERS`.
    """
    func = getattr(func, '__func__', func)
    inner = getattr(func, '__wrapped__', None)
    if inner is not None:
        return inner
    return closure_wrapped(func)


def innermost(func):
    """The function under every layer of decorators (:func:`inner_function`).

    Unlike :func:`unwrap`, it looks through any wrapper: for questions
    about what upstream's code does, not for replacing it.
    """
    func = getattr(func, '__func__', func)
    seen = set()
    inner = inner_function(func)
    while inner is not None and id(inner) not in seen:
        seen.add(id(func))
        func = getattr(inner, '__func__', inner)
        inner = inner_function(func)
    return func


def unwrap(func):
    """The function a live callable wraps, through known decorators only.

    :raises UnknownWrapper: naming the first layer of the ``__wrapped__``
        chain that is not a decorator of :data:`KNOWN_WRAPPER_MODULES`
        (the closure wrappers of :data:`CLOSURE_WRAPPERS` are looked
        through too)
    """
    func = getattr(func, '__func__', func)
    seen = set()
    while True:
        inner = closure_wrapped(func)
        if inner is None:
            if not hasattr(func, '__wrapped__'):
                return func
            if not _known_wrapper(func):
                raise UnknownWrapper(
                    'wrapped at run time by %s, which is not a decorator '
                    'the guard knows (only those of %s are looked through)'
                    % (wrapper_name(func),
                       ' and '.join(KNOWN_WRAPPER_MODULES)))
            inner = func.__wrapped__
        if id(func) in seen:
            raise UnknownWrapper('__wrapped__ chain loops at %s'
                                 % wrapper_name(func))
        seen.add(id(func))
        func = inner


def live_source(func):
    """Source of a live function, decorators included.

    Decorators of Nova and oslo.concurrency that use
    :func:`functools.wraps` are looked through, so a method decorated by
    ``utils.synchronized`` or ``wrap_exception`` gives the source of the
    method as written, decorator lines included.

    :raises SourceUnavailable: for objects without Python source (mocks,
        builtins, modules shipped without ``.py`` files).
    :raises UnknownWrapper: if another decorator wraps it (:func:`unwrap`)
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

    :raises ImportError, AttributeError, KeyError: no such function
    :raises SourceUnavailable: no Python source to read
    :raises UnknownWrapper: wrapped by a decorator the guard does not know
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
    """The source text of a plain function, found without tokenizing.

    From the code object's first line (its first decorator) to the last
    line of code before a line indented no deeper than the ``def``,
    trailing blank and comment lines left out: the text the survey takes
    (:func:`sources_in_source`) for any function laid out as Nova's are.
    A function laid out otherwise gives a text the survey has not seen,
    which only costs the tokenizing path.

    :returns: str, or None if the lines cannot be read
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


def fingerprints_in_source(source, refs):
    """Fingerprint functions found in a module's source text.

    Used by the survey tool on released Nova files. Works on every
    supported Python (3.6 has no ``end_lineno``: see :func:`_node_end`).

    :param source: the module's source text
    :param refs: iterable of ``'Class.method'`` paths within that module
    :returns: dict mapping each path found to its fingerprint
    """
    return {path: fingerprint(text)
            for path, text in sources_in_source(source, refs).items()}


def sources_in_source(source, refs):
    """The exact source text of functions found in a module's source.

    From the first decorator (or ``def``) line to the last line of the
    function, as :func:`quick_source` finds it on a live function.

    :param source: the module's source text
    :param refs: iterable of ``'Class.method'`` paths within that module,
        or ``'function'`` for a function of the module itself; None for
        every function and method of the module
    :returns: dict mapping each path found to its text
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
        first = min([node.lineno] +
                    [d.lineno for d in node.decorator_list])
        end = _node_end(node, lines, first)
        found[path] = ''.join(lines[first - 1:end])
    return found


def _node_end(node, lines, first):
    """Line number of the last line of a function definition.

    Python 3.8+ records it in the AST. Before, find the end of the block
    from the tokens as :func:`inspect.getsource` does: the last logical
    line before the body's indentation ends, which is the same line.

    :param node: the ``FunctionDef`` node
    :param lines: the module's source lines
    :param first: line number of its first decorator (or ``def``)
    """
    end = getattr(node, 'end_lineno', None)
    if end is not None:
        return end
    return first - 1 + len(inspect.getblock(lines[first - 1:]))


class FunctionCheck(object):
    """The result of checking one live function against the table.

    :ivar ref: the reference checked (``module:Class.attr``)
    :ivar fingerprint: the live fingerprint, or None
    :ivar releases: frozenset of Nova releases that ship exactly this code
        (empty if unknown); for an absent function, the surveyed releases
        that do not have it either
    :ivar error: why there is no fingerprint (missing, no source), or None
    :ivar absent: True if the function is not in the installed Nova and
        the check accepted that (see :func:`check`)
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
        if self.absent:
            return '%s: absent, as in Nova %s' % (
                self.ref, ', '.join(sorted_releases(self.releases)))
        if self.known:
            return '%s: matches Nova %s' % (
                self.ref, ', '.join(sorted_releases(self.releases)))
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


def surveyed_without(ref, table):
    """The surveyed releases that do not have ``ref`` at all.

    Every release a survey lists is surveyed for every function of the
    table, so a release listed for some function and not for ``ref`` is
    one whose source has no ``ref``.

    :returns: frozenset of release labels; empty if ``ref`` was never
        surveyed
    """
    if ref not in table:
        return frozenset()
    surveyed = set()
    for by_digest in table.values():
        for found_in in by_digest.values():
            surveyed.update(found_in)
    for found_in in table[ref].values():
        surveyed.difference_update(found_in)
    return frozenset(surveyed)


def check(ref, table=None, absent_ok=False):
    """Check the live function ``ref`` against the fingerprint table.

    :param absent_ok: True for a function that a later release of a series
        added and that only needs to be checked where it exists (a mixin
        relies on its code there). Absent from the installed Nova, it is
        then known in the surveyed releases that lack it too, so that the
        guard still matches a release as a whole; without ``absent_ok``, or
        if no surveyed release lacks it, an absent function is an error.
    """
    table = fingerprint_table.FINGERPRINTS if table is None else table
    try:
        digest = live_fingerprint(ref)
    except (ImportError, AttributeError, KeyError):
        without = surveyed_without(ref, table) if absent_ok else None
        if without:
            return FunctionCheck(ref, releases=without, absent=True)
        return FunctionCheck(ref, error='not found in the installed Nova')
    except SourceUnavailable as e:
        return FunctionCheck(ref, error='source unavailable (%s)' % e)
    except UnknownWrapper as e:
        return FunctionCheck(ref, error=str(e))
    known = table.get(ref, {}).get(digest, ())
    return FunctionCheck(ref, digest, known)


@functools.lru_cache(maxsize=None)
def release_key(release):
    """Sort key for Nova release strings such as ``'21.1.0'``.

    A label with a local part (``'20.6.1+patches'``: that release with
    this project's patch series applied) sorts right after its release;
    a branch tip ``<series>-eol`` after every release of its series.

    Cached: the guard compares the table's hundred-odd labels thousands
    of times while nova-compute starts.

    :returns: tuple of ints
    """
    major = nova_releases.eol_major(release)
    if major is not None:
        return (major, 1 << 30)
    version, _, local = release.partition('+')
    parts = []
    for part in version.split('.'):
        parts.append(int(part) if part.isdigit() else -1)
    return tuple(parts + ([1] if local else []))


def patch_series_digest(directory):
    """SHA-256 of a patch series: its ``series`` file and each patch in it.

    The fingerprint table records it for every patched build it surveyed,
    so that a change to ``patches/`` without a new survey is noticed.
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
