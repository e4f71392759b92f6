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

"""Which nova-computes to ask, and on which broker.

``--host H`` (repeatable) needs only ``[DEFAULT] transport_url`` of the
cell the hosts are in. ``--all`` finds every nova-compute service as
nova-manage does: the API database's cell mappings, then each cell's
database; each host is asked on its cell's transport URL.
"""

import collections

from oslo_config import cfg
import oslo_messaging as messaging

from nova_revert_lock import audit
from nova_revert_lock.audit import client
from nova_revert_lock.audit import rows as audit_rows
from nova_revert_lock.cmd import common

UsageError = audit.UsageError


class Target(object):
    """One nova-compute to ask.

    ``cell`` is None with ``--host``; ``url`` None means ``[DEFAULT]``.
    """

    def __init__(self, host, cell=None, url=None):
        self.host = host
        self.cell = cell
        self.url = url


def load_host_config(config_files):
    """A ConfigOpts with the messaging options, from Nova's config files."""
    conf = cfg.ConfigOpts()
    try:
        conf(common.config_args(config_files), project='nova',
             default_config_files=common.default_files(config_files))
    except cfg.Error as e:
        raise UsageError('configuration: %s' % e)
    return conf


def _transport_url_set(conf):
    try:
        location = conf.get_location('transport_url')
    except (AttributeError, cfg.NoSuchOptError):
        return conf.transport_url not in (None, '', 'rabbit://')
    return location is not None and (
        location.location != cfg.Locations.opt_default)


def targets_from_hosts(conf, hosts):
    """``--host``: the hosts, on ``[DEFAULT] transport_url``."""
    try:
        # registers [DEFAULT] transport_url & co on conf
        messaging.TransportURL.parse(conf)
    except messaging.InvalidTransportURL as e:
        raise UsageError('[DEFAULT] transport_url is unusable: %s'
                         % audit_rows.one_line(e))
    if not _transport_url_set(conf):
        raise UsageError(
            '[DEFAULT] transport_url is not set in %s: --host needs the '
            'transport URL of the computes\' cell (pass --config-file with '
            'that cell\'s nova.conf)' % _files_read(conf))
    # Loads the driver (an unknown one is a usage error now, not a row);
    # nothing connects until a message is sent.
    make_transport(conf, None).cleanup()
    return [Target(h) for h in collections.OrderedDict.fromkeys(hosts)]


def _files_read(conf):
    files = list(getattr(conf, 'config_file', None) or [])
    return ', '.join(files) if files else 'no configuration file'


def load_nova_config(config_files):
    """Nova's global CONF, parsed from Nova's config files; DB configured."""
    try:
        import nova.conf
        from nova import config
        from nova import objects
    except ImportError as e:
        raise UsageError(
            '--all needs Nova importable here (%s): run it in the Python '
            'environment of a Nova service, or name hosts with --host' % e)
    objects.register_all()
    CONF = nova.conf.CONF
    try:
        config.parse_args(
            ['nova-revert-lock'] + common.config_args(config_files),
            default_config_files=common.default_files(config_files),
            configure_db=False, init_rpc=False)
    except cfg.Error as e:
        raise UsageError('configuration: %s' % e)
    if not CONF.api_database.connection:
        raise UsageError(
            '--all needs [api_database] connection (Nova\'s API database, '
            'where the cell mappings are), and %s does not set it'
            % _files_read(CONF))
    # NOTE: an audit reports a database it cannot reach rather than wait
    # minutes for it (oslo.db retries 10 times, 10 s apart, by default).
    for group in ('database', 'api_database'):
        CONF.set_override('max_retries', 0, group=group)
    _configure_databases(CONF)
    try:
        # NOTE: registers [DEFAULT] transport_url, which CellMapping reads
        # to fill in templated transport URLs; nova.rpc.init() would too,
        # but it also sets up Nova's global transport and notifiers.
        messaging.TransportURL.parse(CONF)
    except messaging.InvalidTransportURL:
        pass  # only cells with a templated URL need it; they say so
    return CONF


def _configure_databases(conf):
    """Point Nova's DB API at the configured databases.

    Up to Wallaby one module configures both; later releases split it.
    """
    try:
        from nova.db.sqlalchemy import api as sqlalchemy_api
    except ImportError:
        from nova.db.api import api as api_db_api
        from nova.db.main import api as main_db_api
        main_db_api.configure(conf)
        api_db_api.configure(conf)
    else:
        sqlalchemy_api.configure(conf)


def targets_from_cells(conf, read_cell=None):
    """``--all``: (targets, error rows of the cells that cannot be read).

    :param read_cell: ``read_cell(name, cctxt)`` returns a cell's compute
        services, ``cctxt`` targeting its database (default: just read
        them); whatever it raises makes that cell's error row.
    """
    from nova import context as nova_context
    from nova import objects
    from oslo_db import exception as db_exc

    ctxt = nova_context.get_admin_context()
    try:
        cells = objects.CellMappingList.get_all(ctxt)
    except (db_exc.DBError, ValueError, KeyError) as e:
        # KeyError, ValueError: a templated transport_url or
        # database_connection Nova cannot fill in from this configuration
        raise UsageError('cannot read the cell mappings from '
                         '[api_database] connection: %s'
                         % audit_rows.one_line(e))
    read_cell = read_cell or (lambda _name, cctxt: (
        objects.ServiceList.get_by_binary(cctxt, 'nova-compute',
                                          include_disabled=True)))
    targets, rows = [], []
    for cell in cells:
        if cell.is_cell0():
            continue  # instances that failed to build; no computes
        name = cell.name or cell.uuid
        try:
            with nova_context.target_cell(ctxt, cell) as cctxt:
                services = read_cell(name, cctxt)
        except Exception as e:  # noqa: BLE001 - a row, not a traceback
            rows.append(audit_rows.new_row(
                None, name, error='cell database unreachable: %s'
                % audit_rows.one_line(e)))
            continue
        try:
            url = cell.transport_url
        except Exception as e:  # noqa: BLE001 - a row, not a traceback
            rows.append(audit_rows.new_row(
                None, name, error='cell transport_url unusable: %s'
                % audit_rows.one_line(e)))
            continue
        for service in sorted(services, key=lambda s: s.host):
            targets.append(Target(service.host, name, url))
    return targets, rows


def make_transport(conf, url):
    """An RPC transport; bad URLs are usage errors naming the option."""

    where = 'the cell mapping\'s transport_url' if url else (
        '[DEFAULT] transport_url')
    try:
        return client.get_transport(conf, url)
    except (messaging.InvalidTransportURL,
            messaging.DriverLoadFailure) as e:
        raise UsageError('%s is unusable: %s'
                         % (where, audit_rows.one_line(e)))
