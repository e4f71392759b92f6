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

"""The client of the status endpoint (:mod:`.endpoint`)."""

import uuid

from oslo_context import context as oslo_context
import oslo_messaging as messaging

from nova_revert_lock.audit import endpoint

#: the topic nova-compute listens on (nova.compute.rpcapi.RPC_TOPIC)
COMPUTE_TOPIC = 'compute'
#: Nova's default control exchange (nova.rpc sets it the same way)
NOVA_EXCHANGE = 'nova'
DEFAULT_TIMEOUT = 10

_OUT_OF_NAMESPACE = ('UnsupportedVersion', 'NoSuchMethod')


class NotRunningExtension(Exception):
    """The host answered, but serves no status endpoint we can talk to."""


class _ContextSerializer(messaging.NoOpSerializer):
    """Send a complete oslo.context dict, as every Nova release reads it.

    nova-compute turns it into a ``RequestContext`` (``from_dict``).
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

    The messaging options are registered on ``conf`` if missing; ``url``
    defaults to ``[DEFAULT] transport_url``.
    """
    # NOTE: as nova.rpc does: computes listen on the 'nova' exchange unless
    # [DEFAULT] control_exchange says otherwise.
    messaging.set_transport_defaults(control_exchange=NOVA_EXCHANGE)
    # NOTE: imported here: it imports every driver (kombu, amqp...), which
    # only the client needs.
    from oslo_messaging import opts as om_opts
    # NOTE: newer oslo.messaging registers some groups read by every RPC
    # client ([oslo_messaging_metrics]) on the global CONF only.
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

    A real broker hands the dispatcher's error back as a RemoteError.
    """
    if isinstance(error, (messaging.UnsupportedVersion,
                          messaging.NoSuchMethod)):
        return True
    return (isinstance(error, messaging.RemoteError) and
            error.exc_type in _OUT_OF_NAMESPACE)


class StatusAPI(object):
    """Client of the status endpoint, on Nova's ``compute`` topic.

    A host that answers without the endpoint (a plain nova-compute: its
    dispatcher says ``UnsupportedVersion``) is not running the extension.

    :param timeout: seconds to wait for each reply
    :param version_cap: newest version to send (default: the newest
        known); a later minor version's method is sent only when
        ``can_send_version`` allows it, as Nova's RPC clients do
    :param retry: oslo.messaging send retries (None: the driver default)
    """

    def __init__(self, transport, timeout=DEFAULT_TIMEOUT, version_cap=None,
                 retry=None):
        self.timeout = timeout
        target = messaging.Target(topic=COMPUTE_TOPIC,
                                  namespace=endpoint.NAMESPACE,
                                  version=endpoint.RPC_API_VERSION)
        # NOTE: get_rpc_client() is the constructor from oslo.messaging
        # 14 on (RPCClient() itself then warns); older releases lack it.
        make_client = getattr(messaging, 'get_rpc_client', messaging.RPCClient)
        self.client = make_client(
            transport, target, timeout=timeout,
            version_cap=version_cap or endpoint.RPC_API_VERSION,
            serializer=_ContextSerializer(), retry=retry)

    def get_status(self, context, host):
        """Ask ``host`` for its :func:`.endpoint.status_of`.

        :param context: a request context or dict (None: an admin context)
        :raises NotRunningExtension: the host answered without the endpoint
        :raises oslo_messaging.MessagingTimeout: no answer within timeout
        """
        context = admin_context() if context is None else context
        cctxt = self.client.prepare(server=host)
        try:
            return cctxt.call(context, 'get_status')
        except (messaging.UnsupportedVersion, messaging.NoSuchMethod,
                messaging.RemoteError) as e:
            if not is_out_of_namespace(e):
                raise
            raise NotRunningExtension(
                'host %s answered but has no %s %s endpoint (%s)' % (
                    host, endpoint.NAMESPACE, endpoint.RPC_API_VERSION,
                    getattr(e, 'exc_type', None) or type(e).__name__))
