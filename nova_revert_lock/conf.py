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

"""The ``[revert_lock]`` group, read from Nova's own configuration files."""

from oslo_config import cfg

from nova_revert_lock import fixes

GROUP = cfg.OptGroup(
    'revert_lock',
    title='nova-revert-lock',
    help='Serialise resize confirm/revert with the resource tracker '
         '(Nova bug 1879878) on Nova releases that lack the fix.')

OPTS = [
    cfg.BoolOpt(
        'enabled',
        default=True,
        help='Apply the mixins. When false, nova-compute-revert-lock runs '
             'plain nova-compute and `nova-revert-lock check` reports '
             '"disabled".'),
    cfg.ListOpt(
        'mixins',
        default=list(fixes.NAMES),
        help='Names of the compute manager mixins to apply, from the '
             'nova_revert_lock.compute_mixins entry point namespace. '
             'Default: every mixin this package ships (%s). A mixin whose '
             'fix the installed Nova already carries stands aside.'
             % ', '.join(fixes.NAMES)),
    cfg.StrOpt(
        'on_unknown_code',
        default='fail',
        choices=[
            ('fail', 'nova-compute-revert-lock exits non-zero before '
                     'nova-compute starts, saying which upstream functions '
                     'did not match.'),
            ('warn', 'nova-compute starts unpatched and an ERROR naming '
                     'the functions that did not match is logged.'),
        ],
        help='What to do when the installed Nova has code the mixins do '
             'not know (neither a known affected release nor one already '
             'fixed).'),
]


def register_opts(conf):
    """Register the group on ``conf``; safe to call more than once."""
    # NOTE: an OptGroup keeps the overrides of its options: sharing GROUP
    # would leak set_override() from one ConfigOpts into every other.
    conf.register_group(cfg.OptGroup(GROUP.name, title=GROUP.title,
                                     help=GROUP.help))
    conf.register_opts(OPTS, group=GROUP.name)


def list_opts():
    """For oslo-config-generator (``--namespace nova_revert_lock``)."""
    return [(GROUP, OPTS)]
