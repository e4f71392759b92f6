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

"""The functional tests' hook helper, on each kind of attribute."""

import fixtures
import testtools

from nova_revert_lock.tests.functional import hooks


class Thing(object):
    def meth(self, x):
        return ('meth', type(self).__name__, x)

    @classmethod
    def cmeth(cls, x):
        return ('cmeth', cls.__name__, x)

    @staticmethod
    def smeth(x):
        return ('smeth', x)


class Child(Thing):
    pass


def func(x):
    return ('func', x)


class WrapTest(testtools.TestCase):

    def stub_out(self, old, new):
        # As Nova's test case does it.
        self.useFixture(fixtures.MonkeyPatch(old, new))

    def _wrap(self, name):
        seen = []

        def hook(original, *args, **kwargs):
            seen.append(args)
            return original(*args, **kwargs)
        hooks.wrap(self, __name__ + '.' + name, hook)
        return seen

    def test_instance_method(self):
        seen = self._wrap('Thing.meth')
        child = Child()
        self.assertEqual(('meth', 'Child', 1), child.meth(1))
        self.assertEqual([(child, 1)], seen)

    def test_classmethod(self):
        seen = self._wrap('Thing.cmeth')
        self.assertEqual(('cmeth', 'Thing', 1), Thing.cmeth(1))
        self.assertEqual(('cmeth', 'Child', 2), Child.cmeth(2))
        self.assertEqual(('cmeth', 'Child', 3), Child().cmeth(3))
        self.assertEqual([(1,), (2,), (3,)], seen)

    def test_staticmethod(self):
        seen = self._wrap('Thing.smeth')
        self.assertEqual(('smeth', 1), Thing.smeth(1))
        self.assertEqual(('smeth', 2), Thing().smeth(2))
        self.assertEqual([(1,), (2,)], seen)

    def test_module_function(self):
        seen = self._wrap('func')
        self.assertEqual(('func', 1), func(1))
        self.assertEqual([(1,)], seen)

    def test_hook_decides(self):
        hooks.wrap(self, __name__ + '.Thing.meth',
                   lambda original, thing, x: ('hooked', x))
        self.assertEqual(('hooked', 1), Thing().meth(1))

    def test_stacked_and_undone(self):
        stubs = fixtures.Fixture()
        stubs.setUp()
        case = WrapTest('test_stacked_and_undone')
        case.stub_out = lambda old, new: stubs.useFixture(
            fixtures.MonkeyPatch(old, new))
        first, second = [], []
        for seen in (first, second):
            hooks.wrap(case, __name__ + '.Thing.cmeth',
                       lambda original, *args, seen=seen: (
                           seen.append(args) or original(*args)))
        self.assertEqual(('cmeth', 'Child', 1), Child.cmeth(1))
        self.assertEqual([(1,)], first)
        self.assertEqual([(1,)], second)
        stubs.cleanUp()
        self.assertIsInstance(vars(Thing)['cmeth'], classmethod)
        self.assertEqual(('cmeth', 'Child', 2), Child.cmeth(2))
        self.assertEqual([(1,)], first)
