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

"""Every nova-compute run through this package answers "am I protected?".

The composed compute manager serves :class:`StatusEndpoint` on
nova-compute's own RPC server (Nova's ``Service`` builds the server's
endpoints as ``[manager] + manager.additional_endpoints``), in its own
namespace, so it can never collide with Nova's compute RPC API.
:class:`StatusAPI` is the client ``nova-revert-lock status`` uses.

RPC API history (namespace ``revert_lock``)::

    1.0 - get_status()

Minor versions only ever add: a client sends the lowest version that
carries what it asks for, and :meth:`StatusAPI.get_status` falls back to
the base version when a host answers that it does not know the newer one.
"""

import uuid

from oslo_context import context as oslo_context
import oslo_messaging as messaging

from nova_revert_lock import stats

#: RPC namespace of the status endpoint; Nova's endpoints have none or
#: their own ('baseapi'), so the dispatcher never mixes them up.
NAMESPACE = 'revert_lock'
#: newest version the endpoint serves and the client speaks
RPC_API_VERSION = '1.0'
#: every 1.x endpoint answers this
BASE_VERSION = '1.0'
#: the topic nova-compute listens on (nova.compute.rpcapi.RPC_TOPIC)
COMPUTE_TOPIC = 'compute'
#: Nova's default control exchange (nova.rpc sets it the same way)
NOVA_EXCHANGE = 'nova'
DEFAULT_TIMEOUT = 10

_OUT_OF_NAMESPACE = ('UnsupportedVersion', 'NoSuchMethod')


class NotRunningExtension(Exception):
    """The host answered, but serves no status endpoint we can talk to."""


def status_of(manager):
    """The status of this process's nova-compute, as a plain dict.

    :param manager: the compute manager serving the endpoint
    :returns: dict with ``host``, ``rpc_version``, ``nova_version``,
        ``series``, ``state``, ``mixins``, ``missing`` (the bug 1879878
        fixes configured out on a Nova that needs them: state
        ``incomplete``), ``activated_at`` (ISO 8601 UTC
        or None) and the counters of :func:`nova_revert_lock.stats.snapshot`
        (critical sections entered, longest lock hold in ms, errors), all
        JSON-safe
    """
    report = getattr(manager, '_nrl_report', None)
    if report is None:
        from nova_revert_lock import activation
        report = activation.current_report()
    status = {
        'host': getattr(manager, 'host', None),
        'rpc_version': RPC_API_VERSION,
        'nova_version': None,
        'series': 'unknown',
        'state': 'unknown',
        'mixins': [],
        'missing': [],
        'activated_at': None,
    }
    if report is not None:
        status.update({
            'nova_version': report.nova_version,
            'series': report.series,
            'state': str(report.state),
            'mixins': list(report.mixins),
            'missing': list(getattr(report, 'missing', ())),
            'activated_at': getattr(report, 'activated_at', None),
        })
    status.update(stats.snapshot())
    return status


class StatusEndpoint(object):
    """RPC endpoint: what this nova-compute runs and how it went so far.

    Read-only, cheap, and it takes no lock: an audit must never wait on
    (or delay) a compute that is busy confirming resizes.
    """

    target = messaging.Target(namespace=NAMESPACE, version=RPC_API_VERSION)

    def __init__(self, manager):
        self.manager = manager

    def get_status(self, context):
        """Return :func:`status_of` the manager (a plain dict)."""
        return status_of(self.manager)


class StatusEndpointMixin(object):
    """Compute manager mixin: serve a :class:`StatusEndpoint`.

    ``nova.manager.Manager.__init__`` sets ``additional_endpoints`` to an
    empty list, so the endpoint is appended after the constructor ran;
    ``nova.service.Service.start()`` reads the list when it creates the
    RPC server.
    """

    def __init__(self, *args, **kwargs):
        super(StatusEndpointMixin, self).__init__(*args, **kwargs)
        self.additional_endpoints.append(StatusEndpoint(self))


class _ContextSerializer(messaging.NoOpSerializer):
    """Send a request context as the dict nova-compute expects.

    nova-compute turns the context of every message into a Nova
    ``RequestContext`` (``RequestContext.from_dict``); a complete
    oslo.context dict is what every release reads.
    """

    def serialize_context(self, context):
        if context is None:
            context = admin_context()
        if hasattr(context, 'to_dict'):
            return context.to_dict()
        return dict(context)


def admin_context():
    """A request context for an audit: admin, with its own request id."""
    return oslo_context.RequestContext(
        is_admin=True, request_id='req-' + str(uuid.uuid4()),
        overwrite=False)


def get_transport(conf, url=None):
    """An RPC transport to the broker nova-compute listens on.

    :param conf: ConfigOpts with the ``[DEFAULT]`` and driver options (they
        are registered on it if missing)
    :param url: transport URL; default: ``[DEFAULT] transport_url``
    """
    # NOTE: Nova's computes listen on the 'nova' exchange unless
    # [DEFAULT] control_exchange says otherwise; nova.rpc makes the same
    # call before creating any transport.
    messaging.set_transport_defaults(control_exchange=NOVA_EXCHANGE)
    # NOTE: imported here, not with the module: it imports every driver
    # (kombu, amqp...), which only the client needs; nova-compute imports
    # this module at start, for the endpoint, and loads its own driver.
    from oslo_messaging import opts as om_opts
    # NOTE: newer oslo.messaging releases register some groups (e.g.
    # [oslo_messaging_metrics], read by every RPC client) on the global
    # CONF only; register every group it lists on the ConfigOpts we use.
    for group, opts in om_opts.list_opts():
        conf.register_opts(opts, group=group)
    try:
        # Not in list_opts() (oslo.messaging 16), yet read by RPCClient.
        from oslo_messaging._metrics import client as metrics_client
    except ImportError:
        pass
    else:
        conf.register_opts(metrics_client.oslo_messaging_metrics,
                           group='oslo_messaging_metrics')
    return messaging.get_rpc_transport(conf, url=url)


def is_out_of_namespace(error):
    """True if ``error`` means "no endpoint of this namespace/version".

    The dispatcher raises UnsupportedVersion (no endpoint with the
    namespace and a compatible version) or NoSuchMethod; a real broker
    hands them back as RemoteError naming the class.
    """
    if isinstance(error, (messaging.UnsupportedVersion,
                          messaging.NoSuchMethod)):
        return True
    return (isinstance(error, messaging.RemoteError) and
            error.exc_type in _OUT_OF_NAMESPACE)


def _versions_down_to_base(cap):
    """``'1.2'`` -> ``['1.2', '1.1', '1.0']`` (same major only)."""
    major, minor = (int(x) for x in cap.split('.'))
    base_major, base_minor = (int(x) for x in BASE_VERSION.split('.'))
    if major != base_major:
        return [cap]
    return ['%d.%d' % (major, m) for m in range(minor, base_minor - 1, -1)]


class StatusAPI(object):
    """Client of the status endpoint of one compute host at a time.

    Messages go to Nova's ``compute`` topic with ``server=<host>``, exactly
    where that host's nova-compute listens, in the ``revert_lock``
    namespace.

    Version negotiation: a host is first asked at the newest version this
    client speaks (``version_cap``, default :data:`RPC_API_VERSION`); if it
    answers that it does not know that version, the client steps down one
    minor version at a time to :data:`BASE_VERSION` and remembers, per
    host, the version that worked. What each call sends is decided with
    ``can_send_version`` against that cap, so a newer client still talks
    to an older endpoint. A host that knows no version at all is not
    running the extension.

    :param transport: an oslo.messaging RPC transport
    :param timeout: seconds to wait for each reply
    :param version_cap: newest version to send (default: the newest known)
    :param retry: oslo.messaging send retries (None: the driver default)
    """

    def __init__(self, transport, timeout=DEFAULT_TIMEOUT, version_cap=None,
                 retry=None):
        self.version_cap = version_cap or RPC_API_VERSION
        self.timeout = timeout
        target = messaging.Target(topic=COMPUTE_TOPIC, namespace=NAMESPACE,
                                  version=BASE_VERSION)
        # NOTE: get_rpc_client() is the constructor from oslo.messaging
        # 14 on (RPCClient() itself then warns); older releases lack it.
        make_client = getattr(messaging, 'get_rpc_client', messaging.RPCClient)
        self.client = make_client(
            transport, target, timeout=timeout, version_cap=self.version_cap,
            serializer=_ContextSerializer(), retry=retry)
        self._host_caps = {}

    def negotiated_version(self, host):
        """The version cap that worked for ``host``, or None (not asked)."""
        return self._host_caps.get(host)

    def _get_status(self, cctxt, context):
        """Send get_status at the version the cap allows.

        1.0 takes no argument. A minor version that adds one sets it here
        under ``if cctxt.can_send_version('1.N')`` and sends ``'1.N'``.
        """
        version = BASE_VERSION
        return cctxt.prepare(version=version).call(context, 'get_status')

    def get_status(self, context, host):
        """Ask ``host`` for its status.

        :param context: a request context or dict (None: an admin context)
        :returns: the endpoint's dict (:func:`status_of`)
        :raises NotRunningExtension: the host answered without the endpoint
        :raises oslo_messaging.MessagingTimeout: no answer within timeout
        """
        context = admin_context() if context is None else context
        if host in self._host_caps:
            caps = [self._host_caps[host]]
        else:
            caps = _versions_down_to_base(self.version_cap)
        last = None
        for cap in caps:
            cctxt = self.client.prepare(server=host, version_cap=cap)
            try:
                status = self._get_status(cctxt, context)
            except (messaging.UnsupportedVersion, messaging.NoSuchMethod,
                    messaging.RemoteError) as e:
                if not is_out_of_namespace(e):
                    raise
                last = e
                continue
            self._host_caps[host] = cap
            return status
        raise NotRunningExtension(
            'host %s answered but has no %s %s endpoint (%s)' % (
                host, NAMESPACE, ' or '.join(caps),
                getattr(last, 'exc_type', None) or type(last).__name__))
