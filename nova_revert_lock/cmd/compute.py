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

An operator changes the service's command line from ``nova-compute`` to
``nova-compute-revert-lock`` and nothing else: the same arguments and
configuration files are read, the mixins are activated, and Nova's own
``nova.cmd.compute.main()`` runs.
"""

import sys

EXIT_REFUSED = 3
EXIT_CONFIG = 2


def _parse_config(argv):
    """Parse Nova's configuration as nova-compute will parse it."""
    # NOTE: importing nova.cmd monkey patches eventlet, which must happen
    # before anything else is imported, exactly as in nova-compute.
    import nova.cmd  # noqa: F401
    import nova.conf  # noqa: F401 - registers Nova's options on CONF
    from nova import config
    from oslo_log import log as logging

    from nova_revert_lock import conf as nrl_conf

    CONF = nova.conf.CONF
    nrl_conf.register_opts(CONF)
    # No RPC and no database yet: nova.cmd.compute.main() parses again
    # and sets those up itself.
    config.parse_args(argv, configure_db=False, init_rpc=False)
    logging.setup(CONF, 'nova')
    return CONF


def prepare(argv):
    """Parse configuration and activate; return an exit code or None.

    None means: run nova-compute now.
    """
    from oslo_config import cfg
    try:
        CONF = _parse_config(argv)
    except cfg.Error as e:
        sys.stderr.write('nova-compute-revert-lock: configuration: %s\n' % e)
        return EXIT_CONFIG
    except ImportError as e:
        sys.stderr.write(
            'nova-compute-revert-lock: Nova cannot be imported here (%s). '
            'Install nova-revert-lock into the same Python environment as '
            'nova-compute.\n' % e)
        return EXIT_CONFIG
    from oslo_log import log as logging

    from nova_revert_lock import activation
    from nova_revert_lock import exception
    LOG = logging.getLogger(__name__)
    try:
        report = activation.activate(CONF)
    except exception.RevertLockError as e:
        LOG.error('nova-revert-lock: %s', e)
        sys.stderr.write('nova-compute-revert-lock: %s\n' % e)
        return EXIT_CONFIG
    if report.state == activation.REFUSED:
        message = activation.describe_refusal(report)
        if CONF.revert_lock.on_unknown_code == 'fail':
            LOG.error('%s', message)
            sys.stderr.write('nova-compute-revert-lock: %s\n' % message)
            return EXIT_REFUSED
        LOG.error('Starting nova-compute WITHOUT the fix for bug 1879878 '
                  '([revert_lock] on_unknown_code = warn): %s', message)
    return None


def main(argv=None):
    argv = sys.argv if argv is None else argv
    code = prepare(argv)
    if code is not None:
        return code
    from nova.cmd import compute
    from nova import conf as nova_conf
    # NOTE: nova-compute's main() parses the command line again and
    # registers its logging options first; hand it the configuration in
    # the state it expects (options registered, arguments not parsed).
    nova_conf.CONF.clear()
    return compute.main()


if __name__ == '__main__':
    sys.exit(main())
