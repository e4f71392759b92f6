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

"""Nova code the guard has never seen, made from the installed Nova's.

A later release or a distribution's build changes Nova's modules in ways
the survey cannot know: a body moved into a new helper, a private method
renamed, a partial backport. These helpers make such code from the real
source of the installed Nova, as a copy of one of its modules with the
changes applied, imported under another name, so that a test can put its
class where the guard looks (``fixtures.MonkeyPatch``) and ask the guard.
Nova's own files are never touched.
"""

import importlib
import importlib.util
import inspect
import os
import re
import sys
import textwrap

import fixtures

from nova_revert_lock.guard import fingerprints


class FutureModule(fixtures.Fixture):
    """A changed copy of a Nova module, its class put in Nova's place.

    :param module: the Nova module to copy (``nova.compute.manager``)
    :param cls: the class of it to replace (``ComputeManager``)
    :param changes: callables ``text -> text`` applied in order to the
        module's source text
    """

    _count = 0

    def __init__(self, module, cls, changes):
        super(FutureModule, self).__init__()
        self.module_name = module
        self.cls = cls
        self.changes = changes

    def _setUp(self):
        original = importlib.import_module(self.module_name)
        with open(inspect.getsourcefile(original)) as f:
            text = f.read()
        for change in self.changes:
            changed = change(text)
            if changed == text:
                raise AssertionError('%r changed nothing in %s'
                                     % (change, self.module_name))
            text = changed
        FutureModule._count += 1
        package, _, tail = self.module_name.rpartition('.')
        # NOTE: named inside Nova's package, as the changed module of a
        # later release would be (the guard looks through the decorators
        # of nova.* modules only); the file lives in a temporary
        # directory, never in Nova's.
        name = '%s._nrl_future_%s_%d' % (package, tail, FutureModule._count)
        directory = self.useFixture(fixtures.TempDir()).path
        path = os.path.join(directory, name.rsplit('.', 1)[1] + '.py')
        with open(path, 'w') as f:
            f.write(text)
        spec = importlib.util.spec_from_file_location(name, path)
        self.module = importlib.util.module_from_spec(spec)
        sys.modules[name] = self.module
        self.addCleanup(sys.modules.pop, name, None)
        spec.loader.exec_module(self.module)
        self.useFixture(fixtures.MonkeyPatch(
            '%s.%s' % (self.module_name, self.cls),
            getattr(self.module, self.cls)))


def _method_text(text, path):
    found = fingerprints.sources_in_source(text, [path]).get(path)
    if found is None:
        raise AssertionError('no %s in the module' % path)
    return found


def move_into_helper(path, helper):
    """The method's body moves into ``helper``; the method calls it.

    The original method, decorators and all, is renamed ``helper``; a
    new method of the old name, undecorated, does nothing but call it,
    as upstream did with ``finish_revert_resize`` in 21.1.1.
    """
    name = path.rsplit('.', 1)[1]

    def change(text):
        old = _method_text(text, path)
        renamed = re.sub(r'\bdef %s\(' % re.escape(name), 'def %s(' % helper,
                         old, count=1)
        indent = re.match(r'\s*', old).group(0)
        caller = textwrap.indent(textwrap.dedent('''
            def %s(self, *args, **kwargs):
                return self.%s(*args, **kwargs)
            ''' % (name, helper)), indent)
        return text.replace(old, renamed + caller, 1)

    change.__name__ = 'move_into_helper(%s)' % path
    return change


def rename(old_name, new_name):
    """A private method renamed everywhere in the module."""
    def change(text):
        return re.sub(r'\b%s\b' % re.escape(old_name), new_name, text)

    change.__name__ = 'rename(%s)' % old_name
    return change


def wrap_with(path, prologue):
    """The method renamed ``<name>_orig``; a new one runs ``prologue``.

    :param prologue: statements (source, ``self``, ``context`` and
        ``instance`` in scope) run before the original is called
    """
    name = path.rsplit('.', 1)[1]

    def change(text):
        old = _method_text(text, path)
        renamed = re.sub(r'\bdef %s\(' % re.escape(name),
                         'def %s_orig(' % name, old, count=1)
        indent = re.match(r'\s*', old).group(0)
        body = textwrap.indent(textwrap.dedent(prologue), ' ' * 4)
        caller = textwrap.indent(
            'def %s(self, context, instance, *args, **kwargs):\n%s\n'
            '    return self.%s_orig(context, instance, *args, **kwargs)\n'
            % (name, body.rstrip(), name), indent)
        return text.replace(old, renamed + '\n' + caller, 1)

    change.__name__ = 'wrap_with(%s)' % path
    return change


def replace_in(path, old_code, new_code):
    """``old_code`` replaced by ``new_code`` within one method."""
    def change(text):
        method = _method_text(text, path)
        if old_code not in method:
            return text
        return text.replace(method, method.replace(old_code, new_code), 1)

    change.__name__ = 'replace_in(%s)' % path
    return change
