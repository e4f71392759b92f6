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

"""Recognise upstream's fix for a bug from what the code does.

The parts of a fix's ``fixed_when`` are looked for from stable anchors
through ``self.<method>`` helpers (21.1.1 split ``finish_revert_resize``
in two), on the live Nova and on the survey's source texts alike, so that
nova-compute and the support matrix agree. See
doc/source/reference/guard.rst, "How a fix is recognised".
"""

import ast
import textwrap

from nova_revert_lock.guard import fingerprints

#: How many ``self.<method>`` levels below an anchor a part is looked for:
#: two reach a body moved into a helper and that helper's own helpers;
#: deeper, the search starts finding unrelated code of the class.
MAX_DEPTH = 2

ACTIONS = ('calls', 'assigns', 'refers', 'decorated')


class LiveSources(object):
    """Function source texts of the Nova imported in this process."""

    def source(self, ref, exact=False):
        """The source text of the live function ``ref``, or None.

        Through every decorator: standing aside on a fix changes nothing,
        so a wrapper added at run time must not hide the fix.

        :param exact: read it as :func:`inspect.getsource` does, not with
            the cheaper :func:`~.fingerprints.quick_source`
        """
        try:
            func = fingerprints.innermost(fingerprints.resolve(ref))
            if not exact and getattr(func, '__code__', None) is not None:
                text = fingerprints.quick_source(func)
                if text is not None:
                    return text
            return fingerprints.live_source(func)
        except (ImportError, AttributeError, KeyError, TypeError,
                fingerprints.SourceUnavailable,
                fingerprints.UnknownWrapper):
            return None

    def exists(self, ref):
        try:
            fingerprints.resolve(ref)
        except (ImportError, AttributeError, KeyError):
            return False
        return True


class TextSources(object):
    """Function source texts found in module source texts, for the survey.

    :param modules: dict module name -> the module's source text
    """

    def __init__(self, modules):
        self._functions = {
            module: fingerprints.sources_in_source(text, None)
            for module, text in modules.items()}

    def exists(self, ref):
        return self.source(ref) is not None

    def source(self, ref, exact=False):
        module, _, path = ref.partition(':')
        return self._functions.get(module, {}).get(path)


def _parse(text):
    """The ``FunctionDef`` of one function's source text, or None."""
    try:
        tree = ast.parse(textwrap.dedent(text))
    except SyntaxError:
        return None
    functions = (ast.FunctionDef, ast.AsyncFunctionDef)
    return next((node for node in tree.body if isinstance(node, functions)),
                None)


def _callee_name(func):
    if isinstance(func, ast.Attribute):
        return func.attr
    if isinstance(func, ast.Name):
        return func.id
    return None


def _assigned_attributes(node):
    """Attribute names an assignment statement assigns (``x.name = ...``)."""
    if isinstance(node, ast.Assign):
        targets = list(node.targets)
    elif isinstance(node, (ast.AugAssign, ast.AnnAssign)):
        targets = [node.target]
    else:
        return []
    names = []
    while targets:
        target = targets.pop()
        if isinstance(target, (ast.Tuple, ast.List)):
            targets.extend(target.elts)
        elif isinstance(target, ast.Attribute):
            names.append(target.attr)
    return names


class _Summary(object):
    """What one function does, nested functions included, in one walk.

    Names called, attributes assigned, names used in code (not in strings),
    decorators called (``@name(...)``), and ``self.<name>`` in order.
    """

    def __init__(self, func_node):
        self.calls = set()
        self.assigns = set()
        self.refers = set()
        self.decorators = set(
            _callee_name(d.func) for d in func_node.decorator_list
            if isinstance(d, ast.Call))
        self.self_methods = []
        for node in ast.walk(func_node):
            if isinstance(node, ast.Call):
                self.calls.add(_callee_name(node.func))
            elif isinstance(node, ast.Name):
                self.refers.add(node.id)
            elif isinstance(node, ast.Attribute):
                self.refers.add(node.attr)
                if (isinstance(node.value, ast.Name) and
                        node.value.id == 'self' and
                        node.attr not in self.self_methods):
                    self.self_methods.append(node.attr)
            self.assigns.update(_assigned_attributes(node))

    def does(self, action, name):
        return name in {'decorated': self.decorators, 'calls': self.calls,
                        'assigns': self.assigns}.get(action, self.refers)


class Recogniser(object):
    """Decides parts and fixes on :class:`LiveSources` or TextSources."""

    def __init__(self, sources):
        self.sources = sources
        self._nodes = {}

    def _node(self, ref):
        """The :class:`_Summary` of function ``ref``, or None."""
        if ref not in self._nodes:
            text = self.sources.source(ref)
            node = None if text is None else _parse(text)
            if node is None and text is not None:
                # NOTE: the quick text ends early on a signature whose
                # closing parenthesis sits at the def's indentation.
                text = self.sources.source(ref, exact=True)
                node = None if text is None else _parse(text)
            self._nodes[ref] = None if node is None else _Summary(node)
        return self._nodes[ref]

    def holds(self, part):
        """True if the part's action is found from its anchor."""
        if part.does not in ACTIONS:
            raise ValueError('unknown action %r in %r' % (part.does, part))
        node = self._node(part.ref)
        if node is None:
            return False
        if part.does == 'decorated':
            return node.does(part.does, part.name)
        module, _, path = part.ref.partition(':')
        owner = path.rpartition('.')[0]
        seen = set([part.ref])
        level = [node]
        for depth in range(MAX_DEPTH + 1):
            following = []
            for current in level:
                if current.does(part.does, part.name):
                    return True
                if not owner or depth == MAX_DEPTH:
                    continue
                for name in current.self_methods:
                    ref = '%s:%s.%s' % (module, owner, name)
                    if ref in seen:
                        continue
                    seen.add(ref)
                    helper = self._node(ref)
                    if helper is not None:
                        following.append(helper)
            level = following
        return False

    def fixed(self, parts):
        """True if every part holds (and there is at least one).

        Cheap questions first (anchors exist, then decorators): on a Nova
        without the fix they usually end it before any helper is read.
        """
        if not parts or not all(self.sources.exists(p.ref) for p in parts):
            return False
        ordered = sorted(parts, key=lambda p: p.does != 'decorated')
        return all(self.holds(p) for p in ordered)


def fixed_live(parts):
    """True if the Nova imported here carries the fix made of ``parts``."""
    return Recogniser(LiveSources()).fixed(parts)
