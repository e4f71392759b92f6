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

"""``nova-revert-lock status``: ask nova-computes whether they are protected.

Each host is asked over oslo.messaging, on the broker its nova-compute
listens on, through the status endpoint (:mod:`nova_revert_lock.rpc`).

``--host H`` (repeatable) needs only ``[DEFAULT] transport_url`` of the
cell the hosts are in. ``--all`` finds every nova-compute service as
nova-manage does: the API database's cell mappings, then each cell's
database, and asks each host on its cell's transport URL.

One row per host: reachable or not, state, Nova release, mixins and the
counters since nova-compute started. Exit codes: 0 every host reports
``patched`` or ``already-fixed``; 1 any other answer (``incomplete``: a
fix for bug 1879878 that the host's Nova needs is configured out; the
note names it), no answer, or no host found; 2 bad usage or unusable
configuration.
"""

import json
import logging
import sys
import threading
import time

EXIT_OK = 0
EXIT_NOT_PROTECTED = 1
EXIT_USAGE = 2

PROTECTED = ('patched', 'already-fixed')
#: hosts asked at the same time on one transport
MAX_PARALLEL = 16
#: grace, in seconds, on top of the reply timeout before a host still
#: waiting on its transport is given up
GRACE = 5.0
NOT_RUNNING = 'not running the extension'
#: loggers of the messaging driver and of the libraries under it
MESSAGING_LOGGERS = ('oslo_messaging', 'oslo.messaging')
QUIET_LOGGERS = MESSAGING_LOGGERS + ('kombu', 'amqp', 'oslo_db',
                                     'oslo.db')

#: keys of every row, in order (JSON and table)
ROW_KEYS = ('host', 'cell', 'reachable', 'state', 'nova_version', 'series',
            'mixins', 'activated_at', 'critical_sections', 'max_lock_hold_ms',
            'critical_section_errors', 'error')
_EXTRA_KEYS = ('rpc_version', 'missing', 'critical_sections_by_kind')


class UsageError(Exception):
    """Bad usage or unusable configuration: exit 2 with this message."""


class Target(object):
    """One nova-compute to ask.

    :ivar host: the service's host (its RPC server name)
    :ivar cell: the cell name, or None with ``--host``
    :ivar url: transport URL of its broker (None: ``[DEFAULT]``)
    """

    def __init__(self, host, cell=None, url=None):
        self.host = host
        self.cell = cell
        self.url = url


def new_row(host, cell=None, **values):
    row = dict.fromkeys(ROW_KEYS)
    row.update({'host': host, 'cell': cell, 'reachable': False,
                'mixins': []})
    row.update(values)
    return row


def row_from_status(target, status):
    row = new_row(target.host, target.cell, reachable=True)
    if not isinstance(status, dict):
        row['error'] = 'unexpected answer: %r' % (status,)
        return row
    for key in ROW_KEYS[3:-1] + _EXTRA_KEYS:
        if key in status:
            row[key] = status[key]
    if row['state'] not in PROTECTED:
        row['error'] = 'not protected: state %s' % row['state']
        if row.get('missing'):
            row['error'] += ' (missing %s)' % ', '.join(row['missing'])
    return row


def protected(row):
    return bool(row['reachable']) and row['state'] in PROTECTED


# -- configuration ----------------------------------------------------------

def _config_args(config_files):
    args = []
    for path in config_files or ():
        args.extend(['--config-file', path])
    return args


def _default_files(config_files):
    # NOTE: without --config-file, read the files nova-compute would read.
    return None if config_files is None else []


def load_host_config(config_files):
    """A ConfigOpts with the messaging options, from Nova's config files."""
    from oslo_config import cfg
    conf = cfg.ConfigOpts()
    try:
        conf(_config_args(config_files), project='nova',
             default_config_files=_default_files(config_files))
    except cfg.Error as e:
        raise UsageError('configuration: %s' % e)
    return conf


def _transport_url_set(conf):
    from oslo_config import cfg
    try:
        location = conf.get_location('transport_url')
    except (AttributeError, cfg.NoSuchOptError):
        return conf.transport_url not in (None, '', 'rabbit://')
    return location is not None and (
        location.location != cfg.Locations.opt_default)


def targets_from_hosts(conf, hosts):
    """``--host``: the hosts, on ``[DEFAULT] transport_url``."""
    import oslo_messaging as messaging
    try:
        # registers [DEFAULT] transport_url & co on conf
        messaging.TransportURL.parse(conf)
    except messaging.InvalidTransportURL as e:
        raise UsageError('[DEFAULT] transport_url is unusable: %s'
                         % _one_line(e))
    if not _transport_url_set(conf):
        raise UsageError(
            '[DEFAULT] transport_url is not set in %s: --host needs the '
            'transport URL of the computes\' cell (pass --config-file with '
            'that cell\'s nova.conf)' % _files_read(conf))
    # Loads the driver: an unknown one is a usage error now, not a row.
    # Nothing connects until a message is sent.
    make_transport(conf, None).cleanup()
    seen = []
    for host in hosts:
        if host not in seen:
            seen.append(host)
    return [Target(h) for h in seen]


def _files_read(conf):
    files = list(getattr(conf, 'config_file', None) or [])
    return ', '.join(files) if files else 'no configuration file'


def load_nova_config(config_files):
    """Nova's global CONF, parsed from Nova's config files; DB configured.

    :raises UsageError: unparsable files, or no ``[api_database]
        connection``
    """
    try:
        import nova.conf
        from nova import config
        from nova import objects
    except ImportError as e:
        raise UsageError(
            '--all needs Nova importable here (%s): run it in the Python '
            'environment of a Nova service, or name hosts with --host' % e)
    from oslo_config import cfg
    objects.register_all()
    CONF = nova.conf.CONF
    try:
        config.parse_args(['nova-revert-lock'] + _config_args(config_files),
                          default_config_files=_default_files(config_files),
                          configure_db=False, init_rpc=False)
    except cfg.Error as e:
        raise UsageError('configuration: %s' % e)
    if not CONF.api_database.connection:
        raise UsageError(
            '--all needs [api_database] connection (Nova\'s API database, '
            'where the cell mappings are), and %s does not set it'
            % _files_read(CONF))
    # NOTE: an audit reports a database it cannot reach, it does not wait
    # minutes for it: one attempt each (oslo.db retries 10 times, 10 s
    # apart, by default).
    for group in ('database', 'api_database'):
        CONF.set_override('max_retries', 0, group=group)
    _configure_databases(CONF)
    import oslo_messaging as messaging
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

    Up to Wallaby one module configures both the main and the API
    database; later releases split it into nova.db.main and nova.db.api.
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


def targets_from_cells(conf):
    """``--all``: every nova-compute service of every cell.

    :returns: (targets, rows) where rows are error rows for cells whose
        database could not be read
    """
    from nova import context as nova_context
    from nova import objects
    from oslo_db import exception as db_exc

    ctxt = nova_context.get_admin_context()
    try:
        cells = objects.CellMappingList.get_all(ctxt)
    except db_exc.DBError as e:
        raise UsageError('cannot read the cell mappings from '
                         '[api_database] connection: %s' % _one_line(e))
    except (ValueError, KeyError) as e:
        # a templated transport_url or database_connection Nova cannot
        # fill in from this configuration
        raise UsageError('cannot read the cell mappings: %s'
                         % _one_line(e))
    targets, rows = [], []
    for cell in cells:
        if cell.is_cell0():
            continue  # instances that failed to build; no computes
        name = cell.name or cell.uuid
        try:
            with nova_context.target_cell(ctxt, cell) as cctxt:
                services = objects.ServiceList.get_by_binary(
                    cctxt, 'nova-compute', include_disabled=True)
        except Exception as e:  # noqa: BLE001 - a row, not a traceback
            rows.append(new_row(None, name, error='cell database '
                                'unreachable: %s' % _one_line(e)))
            continue
        try:
            url = cell.transport_url
        except Exception as e:  # noqa: BLE001 - a row, not a traceback
            rows.append(new_row(None, name, error='cell transport_url '
                                'unusable: %s' % _one_line(e)))
            continue
        for service in sorted(services, key=lambda s: s.host):
            targets.append(Target(service.host, name, url))
    return targets, rows


# -- asking the hosts -------------------------------------------------------

class _TransportErrors(logging.Handler):
    """Remember what the messaging driver last complained about.

    oslo.messaging's drivers retry a broker they cannot reach and only
    log why; that reason is what an unreachable row should say.
    """

    def __init__(self):
        super(_TransportErrors, self).__init__(logging.WARNING)
        self.last = None

    def emit(self, record):
        try:
            self.last = record.getMessage()
        except Exception:  # noqa: BLE001 - never break logging
            pass


def _one_line(error):
    text = str(error).strip().splitlines()
    text = text[0] if text else ''
    name = type(error).__name__
    return '%s: %s' % (name, text) if text else name


def make_transport(conf, url):
    """An RPC transport; bad URLs are usage errors naming the option."""
    import oslo_messaging as messaging

    from nova_revert_lock import rpc
    where = 'the cell mapping\'s transport_url' if url else (
        '[DEFAULT] transport_url')
    try:
        return rpc.get_transport(conf, url)
    except (messaging.InvalidTransportURL,
            messaging.DriverLoadFailure) as e:
        raise UsageError('%s is unusable: %s' % (where, _one_line(e)))


def probe_broker(conf, url, timeout):
    """Can we log in to the broker? None if so (or cannot tell), else why.

    Only ``rabbit://`` URLs without TLS are probed; oslo.messaging itself
    would retry an unreachable broker forever instead of failing a call.
    """
    import oslo_messaging as messaging
    try:
        parsed = messaging.TransportURL.parse(conf, url)
    except messaging.InvalidTransportURL:
        return None
    if parsed.transport != 'rabbit':
        return None
    try:
        if conf.oslo_messaging_rabbit.ssl:
            return None
    except Exception:  # noqa: BLE001 - option names vary by release
        return None
    import kombu
    reasons = []
    for host in parsed.hosts or [messaging.TransportHost()]:
        address = '%s:%s' % (host.hostname or 'localhost', host.port or 5672)
        connection = kombu.Connection(
            hostname=host.hostname or 'localhost', port=host.port or 5672,
            userid=host.username or 'guest',
            password=host.password or 'guest',
            virtual_host=parsed.virtual_host or '/', transport='pyamqp',
            connect_timeout=timeout)
        try:
            connection.connect()
            return None
        except Exception as e:  # noqa: BLE001 - the reason is the answer
            reasons.append('%s: %s' % (address, _one_line(e)))
        finally:
            try:
                connection.release()
            except Exception:  # noqa: BLE001
                pass
    return 'broker unreachable (%s)' % '; '.join(reasons)


class _Answers(object):
    """Rows the asking threads deliver, until the caller stops waiting."""

    def __init__(self, count):
        self._lock = threading.Lock()
        self._rows = [None] * count
        self._closed = False

    def deliver(self, index, row):
        with self._lock:
            if not self._closed:
                self._rows[index] = row

    def close(self):
        """Stop taking rows (late ones are dropped); return them."""
        with self._lock:
            self._closed = True
            return list(self._rows)


def _answer(api, target):
    """Ask one host; return its row."""
    import oslo_messaging as messaging

    from nova_revert_lock import rpc
    try:
        status = api.get_status(None, target.host)
    except rpc.NotRunningExtension as e:
        return new_row(target.host, target.cell, reachable=True,
                       error='%s (%s)' % (NOT_RUNNING, e))
    except messaging.MessagingTimeout:
        return new_row(
            target.host, target.cell,
            error='no answer within %gs (nova-compute down, not on this '
                  'broker, or no such host)' % api.timeout)
    except Exception as e:  # noqa: BLE001 - a row, not a traceback
        return new_row(target.host, target.cell,
                       error='transport error: %s' % _one_line(e))
    return row_from_status(target, status)


def _ask(api, target, answers, index, slots):
    with slots:
        answers.deliver(index, _answer(api, target))


def ask_hosts(conf, url, targets, timeout):
    """Ask every target on one transport; one row each, in order.

    Bounded time: hosts are asked in parallel (:data:`MAX_PARALLEL` at a
    time); a host still waiting on its transport after every round of
    ``timeout`` (plus :data:`GRACE`) is reported unreachable.
    """
    from nova_revert_lock import rpc
    try:
        transport = make_transport(conf, url)
    except UsageError as e:
        if url is None:
            raise
        return [new_row(t.host, t.cell, error=str(e)) for t in targets]
    # NOTE: after the transport exists: creating it registers the driver's
    # options (TLS...) the probe reads. It does not connect yet.
    reason = probe_broker(conf, url, timeout)
    if reason:
        transport.cleanup()
        return [new_row(t.host, t.cell, error=reason) for t in targets]
    api = rpc.StatusAPI(transport, timeout=timeout, retry=0)
    errors = _TransportErrors()
    for name in MESSAGING_LOGGERS:
        logging.getLogger(name).addHandler(errors)
    answers = _Answers(len(targets))
    slots = threading.BoundedSemaphore(MAX_PARALLEL)
    threads = []
    try:
        for i, target in enumerate(targets):
            thread = threading.Thread(
                target=_ask, args=(api, target, answers, i, slots),
                name='nrl-status-%s' % target.host)
            # NOTE: a thread stuck in a driver that keeps retrying must
            # not keep the command from exiting.
            thread.daemon = True
            thread.start()
            threads.append(thread)
        rounds = -(-len(targets) // MAX_PARALLEL)
        deadline = time.monotonic() + rounds * timeout + GRACE
        for thread in threads:
            thread.join(max(0.0, deadline - time.monotonic()))
    finally:
        for name in MESSAGING_LOGGERS:
            logging.getLogger(name).removeHandler(errors)
    rows = answers.close()
    stuck = False
    for i, target in enumerate(targets):
        if rows[i] is None:
            stuck = True
            rows[i] = new_row(target.host, target.cell, error=(
                'no answer within %gs; the transport kept retrying: %s' % (
                    timeout, errors.last or 'no reason given')))
    if not stuck:
        transport.cleanup()
    return rows


def query(conf, targets, timeout):
    """Rows for ``targets``, grouped by transport URL, in target order."""
    by_url = {}
    for target in targets:
        by_url.setdefault(target.url, []).append(target)
    rows = {}
    for url, group in by_url.items():
        for target, row in zip(group, ask_hosts(conf, url, group, timeout)):
            rows[id(target)] = row
    return [rows[id(t)] for t in targets]


# -- output -----------------------------------------------------------------

def _cell(value):
    if value is None or value == []:
        return '-'
    if isinstance(value, bool):
        return 'yes' if value else 'NO'
    if isinstance(value, list):
        return ','.join(str(v) for v in value)
    return str(value)


def format_table(rows):
    with_cells = any(r['cell'] for r in rows)
    columns = [('HOST', 'host')]
    if with_cells:
        columns.append(('CELL', 'cell'))
    columns += [('REACHABLE', 'reachable'), ('STATE', 'state'),
                ('NOVA', 'nova_version'), ('SERIES', 'series'),
                ('MIXINS', 'mixins'), ('SECTIONS', 'critical_sections'),
                ('MAX HOLD MS', 'max_lock_hold_ms'),
                ('ERRORS', 'critical_section_errors'), ('NOTE', 'error')]
    table = [[title for title, _key in columns]]
    for row in rows:
        table.append([_cell(row[key]) for _title, key in columns])
    widths = [max(len(line[i]) for line in table)
              for i in range(len(columns))]
    out = []
    for line in table:
        out.append('  '.join(v.ljust(w) for v, w in zip(line, widths))
                   .rstrip())
    return '\n'.join(out)


def summary(rows):
    good = sum(1 for r in rows if protected(r))
    return '%d of %d host(s) protected' % (good, len(rows))


# -- the command ------------------------------------------------------------

def _positive_seconds(text):
    import argparse
    try:
        value = float(text)
    except ValueError:
        value = -1
    if not value > 0:
        raise argparse.ArgumentTypeError('must be a number of seconds > 0, '
                                         'not %r' % text)
    return value


def add_parser(subparsers):
    """Register ``status`` on the ``nova-revert-lock`` subparsers."""
    parser = subparsers.add_parser(
        'status',
        help='ask nova-computes over RPC whether they run the fix',
        description='Ask each nova-compute, over oslo.messaging, whether '
                    'it runs nova-revert-lock and in which state. Exit 0 '
                    'only if every host is patched or already fixed.')
    parser.add_argument('--config-file', action='append', metavar='PATH',
                        help='Nova configuration file (repeatable; default: '
                             'the files nova-compute would find). --host '
                             'needs [DEFAULT] transport_url, --all '
                             '[api_database] connection')
    which = parser.add_mutually_exclusive_group(required=True)
    which.add_argument('--host', action='append', dest='hosts',
                       metavar='HOST',
                       help='a compute host to ask (repeatable)')
    which.add_argument('--all', action='store_true',
                       help='every nova-compute service in every cell')
    parser.add_argument('--timeout', type=_positive_seconds, default=10.0,
                        metavar='SECONDS',
                        help='seconds to wait for each host (default 10)')
    parser.add_argument('--format', choices=('table', 'json'),
                        default='table')
    parser.set_defaults(func=cmd_status)
    return parser


def _quiet_logging():
    # NOTE: the rows carry the reasons; driver retries and tracebacks on
    # stderr would only bury them. The messaging loggers keep their
    # warnings for _TransportErrors, which reads them.
    logging.basicConfig(level=logging.ERROR, stream=sys.stderr)
    for name in QUIET_LOGGERS:
        logger = logging.getLogger(name)
        logger.propagate = False
        if name in MESSAGING_LOGGERS:
            logger.setLevel(logging.WARNING)
        else:
            logger.setLevel(logging.CRITICAL + 1)


def run(args):
    """Rows for the parsed arguments.

    :raises UsageError: for exit code 2
    """
    if args.all:
        conf = load_nova_config(args.config_file)
        targets, rows = targets_from_cells(conf)
    else:
        conf = load_host_config(args.config_file)
        targets, rows = targets_from_hosts(conf, args.hosts), []
    return rows + query(conf, targets, args.timeout)


def cmd_status(args):
    _quiet_logging()
    try:
        rows = run(args)
    except UsageError as e:
        sys.stderr.write('nova-revert-lock status: %s\n' % e)
        return EXIT_USAGE
    if args.format == 'json':
        print(json.dumps(rows, indent=2, sort_keys=True))
    else:
        print(format_table(rows) if rows else 'no nova-compute found')
        print(summary(rows))
    if not rows:
        sys.stderr.write('nova-revert-lock status: no nova-compute service '
                         'found\n')
        return EXIT_NOT_PROTECTED
    return EXIT_OK if all(protected(r) for r in rows) else EXIT_NOT_PROTECTED
