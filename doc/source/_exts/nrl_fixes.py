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

"""``.. nrl-fixes::``: the tables of fixes, from their declarations.

``.. nrl-fixes::`` lists :data:`nova_revert_lock.fixes.FIXES` (which
imports no Nova); ``.. nrl-fixes:: bugs`` lists the bugs, their mixins and
the releases that brought upstream's fix (from the fingerprint table's
``FIXED``), so that the docs never list a fix by hand.
"""

from docutils import nodes
from docutils.parsers.rst import Directive
from docutils import statemachine

from nova_revert_lock import fixes
from nova_revert_lock.guard import fingerprint_table

KINDS = {fixes.CORE: 'bug 1879878',
         fixes.BEYOND_UPSTREAM: 'beyond upstream',
         fixes.FAMILY: 'sibling race'}


def _bug_link(bug):
    if bug == '1879878':
        return ('`1879878 <https://bugs.launchpad.net/nova/+bug/1879878>`__')
    return ':doc:`/bugs/%s`' % bug


def fixed_in(names):
    """The first release of each series carrying upstream's fix.

    A release carries it when the table finds every part of the fix of
    every mixin ``names`` (branch tips and patched builds are left out);
    the list stops at the first series that has it from its ``.0``.
    """
    labels = None
    for name in names:
        found = set(fingerprint_table.FIXED.get(name, ()))
        labels = found if labels is None else labels & found
    first = {}
    for label in labels or ():
        if '+' in label or '-' in label:
            continue
        key = tuple(int(p) for p in label.split('.'))
        first[key[0]] = min(first.get(key[0], key), key)
    out = []
    for key in sorted(first.values()):
        out.append('.'.join(str(p) for p in key))
        if key[1:] == (0, 0):
            break
    return ', '.join(out) or 'none'


def bug_rows():
    """One row per bug (and the fixes beyond upstream), in order."""
    for bug, names in fixes.BUGS.items():
        yield (_bug_link(bug), ', '.join('``%s``' % n for n in names),
               fixed_in(names))
    for name in fixes.of_kind(fixes.BEYOND_UPSTREAM):
        yield ('(none)', '``%s``' % name, 'none (beyond upstream)')


def rows():
    """One row per fix, in application order."""
    for fix in fixes.FIXES.values():
        bugs = ', '.join(_bug_link(bug) for bug in fix.bugs) or '(none)'
        yield ('``%s``' % fix.name, KINDS[fix.kind], bugs,
               fix.upstream or 'none', fix.summary)


class FixesTable(Directive):

    optional_arguments = 1

    def run(self):
        if self.arguments == ['bugs']:
            header, table = ('bug', 'mixins', "upstream's fix"), bug_rows()
        else:
            header, table = ('``[revert_lock] mixins``', 'kind', 'bugs',
                             'upstream fix', 'what it does'), rows()
        lines = ['.. list-table::', '   :header-rows: 1', '',
                 '   * - %s' % header[0]]
        lines.extend('     - %s' % cell for cell in header[1:])
        for row in table:
            lines.append('   * - %s' % row[0])
            lines.extend('     - %s' % cell for cell in row[1:])
        node = statemachine.StringList(lines, source='nova_revert_lock.fixes')
        section = nodes.section()
        section.document = self.state.document
        self.state.nested_parse(node, self.content_offset, section)
        return section.children


def setup(app):
    app.add_directive('nrl-fixes', FixesTable)
    return {'parallel_read_safe': True, 'parallel_write_safe': True}
