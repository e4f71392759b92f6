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

"""Run a hook around a Nova function, then (or not) the original.

Imports nothing from Nova: the benchmark uses it too.
"""

import importlib


def _resolve(target):
    """(owner, attribute name) for a dotted path, as ``stub_out`` takes."""
    parts = target.split('.')
    for i in range(len(parts) - 1, 0, -1):
        try:
            owner = importlib.import_module('.'.join(parts[:i]))
        except ImportError:
            continue
        for name in parts[i:-1]:
            owner = getattr(owner, name)
        return owner, parts[-1]
    raise ImportError('cannot resolve %s' % target)


def _raw(owner, name):
    """The attribute as stored, so that a descriptor shows what it is."""
    if isinstance(owner, type):
        for klass in owner.__mro__:
            if name in vars(klass):
                return vars(klass)[name]
    return getattr(owner, name)


def wrap(test, target, hook):
    """Stub ``target`` so that calling it calls ``hook(original, ...)``.

    :param test: the test case; its ``stub_out`` installs the stub and
        puts the original back when the test ends
    :param target: dotted path of a module function or of a method, as
        ``stub_out`` takes it, e.g. ``'nova.objects.Migration.save'``
    :param hook: callable(original, *args, **kwargs), called with the
        arguments of each call; it runs whatever it must and returns what
        the call returns, usually ``original(*args, **kwargs)``
    :returns: the original, as the hook receives it

    The hook sees a call as the caller made it, whatever kind of
    attribute ``target`` is:

    - an instance method: ``args`` start with the instance (``self``) and
      ``original`` is the plain function, so ``original(*args)`` works;
    - a classmethod: ``args`` do not include the class and ``original``
      is the classmethod bound to the class it was called on. NOTE:
      newer fixtures (``MonkeyPatch``, under ``stub_out``) keep a stubbed
      classmethod a classmethod, older ones set the stub as given; the
      stub is a classmethod here, which both install as it is;
    - a staticmethod or a module function: ``args`` as given and
      ``original`` the function.

    The original is the attribute as it is when ``wrap`` runs: a hook
    wrapped on top of another stub calls that stub.
    """
    owner, name = _resolve(target)
    raw = _raw(owner, name)
    if isinstance(raw, classmethod):
        def stub(cls, *args, **kwargs):
            return hook(raw.__get__(None, cls), *args, **kwargs)
        original = getattr(owner, name)
        new = classmethod(stub)
    else:
        if isinstance(raw, staticmethod):
            original = raw.__func__
        else:
            original = getattr(owner, name)

        def stub(*args, **kwargs):
            return hook(original, *args, **kwargs)
        new = staticmethod(stub) if isinstance(raw, staticmethod) else stub
    stub.__name__ = name
    test.stub_out(target, new)
    return original
