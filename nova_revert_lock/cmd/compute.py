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

"""nova-compute-revert-lock: nova-compute, with the fix activated.

It takes nova-compute's arguments and configuration files, and:

1. recognises how the installed Nova starts nova-compute
   (:mod:`nova_revert_lock.startup`), exiting on a shape it does not know;
2. imports ``nova.cmd.compute`` first, as the console script does, so
   that the release itself sets up concurrency;
3. parses the configuration, activates, and runs that module's ``main()``.

NOTE: import nothing of oslo or eventlet at module level: this module is
imported before step 2.
"""

import sys

from nova_revert_lock import report as nrl_report
from nova_revert_lock import startup

EXIT_REFUSED = 3
EXIT_CONFIG = 2
EXIT_UNRECOGNISED = 4

PROG = 'nova-compute-revert-lock'


def _fail(message, code):
    """Tell the operator why on stderr; return the exit code."""
    sys.stderr.write('%s: %s\n' % (PROG, message))
    return code


def start_concurrency():
    """Steps 1 and 2: ``(entry_point, module)``, or ``(exit code, None)``."""
    try:
        entry_point = startup.recognise()
    except startup.NovaNotFound as e:
        return _fail(e, EXIT_CONFIG), None
    except startup.UnrecognisedEntryPoint as e:
        return _fail(e, EXIT_UNRECOGNISED), None
    return entry_point, startup.import_entry_module()


def _parse_config(argv):
    """Parse Nova's configuration as nova-compute will parse it."""
    import nova.conf  # noqa: F401 - registers Nova's options on CONF
    from nova import config
    from oslo_log import log as logging

    from nova_revert_lock import conf as nrl_conf

    CONF = nova.conf.CONF
    nrl_conf.register_opts(CONF)
    # No RPC and no database yet: nova.cmd.compute.main() sets them up.
    config.parse_args(argv, configure_db=False, init_rpc=False)
    logging.setup(CONF, 'nova')
    return CONF


def prepare(argv, entry_point=None):
    """Parse the configuration and activate: an exit code, or None to run.

    Call only after :func:`start_concurrency`.
    """
    from oslo_config import cfg
    try:
        CONF = _parse_config(argv)
    except cfg.Error as e:
        return _fail('configuration: %s' % e, EXIT_CONFIG)
    except ImportError as e:
        return _fail('Nova cannot be imported here (%s). Install '
                     'nova-revert-lock into the same Python environment as '
                     'nova-compute.' % e, EXIT_CONFIG)
    from oslo_log import log as logging

    from nova_revert_lock import activation
    from nova_revert_lock import exception
    LOG = logging.getLogger(__name__)
    if entry_point is not None:
        LOG.info('nova-revert-lock: Nova %(version)s: concurrency set up by '
                 '%(shape)s (release default %(default_backend)s); running '
                 'with %(running)s',
                 dict(entry_point._asdict(),
                      running=startup.running_backend()))
    try:
        report = activation.activate(CONF)
    except exception.RevertLockError as e:
        LOG.error('nova-revert-lock: %s', e)
        return _fail(e, EXIT_CONFIG)
    if report.state == nrl_report.REFUSED:
        message = activation.describe_refusal(report)
        if CONF.revert_lock.on_unknown_code == 'fail':
            LOG.error('%s', message)
            return _fail(message, EXIT_REFUSED)
        LOG.error('Starting nova-compute WITHOUT the fix for bug 1879878 '
                  '([revert_lock] on_unknown_code = warn): %s', message)
    return None


def main(argv=None):
    """Run nova-compute with the fix activated.

    NOTE: Nova reads ``sys.argv`` itself (its ``main()``, and from 34.x the
    concurrency set-up on import); ``argv`` is for tests.
    """
    argv = sys.argv if argv is None else argv
    entry_point, compute = start_concurrency()
    if compute is None:
        return entry_point
    code = prepare(argv, entry_point)
    if code is not None:
        return code
    from nova import conf as nova_conf
    # NOTE: nova-compute's main() parses the command line again and
    # registers its logging options first; hand it the configuration in
    # the state it expects (options registered, arguments not parsed).
    nova_conf.CONF.clear()
    return compute.main()


if __name__ == '__main__':
    sys.exit(main())
