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

"""A compute RPC server, in its own process, for the integration tests.

It serves what ``nova.service.Service.start()`` serves for nova-compute,
on the same topic and server name, through Nova's own serializer and
access policy: the manager, Nova's ``BaseRPCAPI``, then the manager's
``additional_endpoints``. The manager is a stub standing for Nova's
``ComputeManager`` (a real one needs a hypervisor and databases); in
``extension`` mode its class is composed with the real
:class:`~nova_revert_lock.audit.endpoint.StatusEndpointMixin`, as
activation composes the real manager, and carries the real activation
report of the Nova installed here. In ``plain`` mode it is plain
nova-compute: no status endpoint.

``--host`` may be repeated: one process then stands for many computes,
each with its own manager and its own RPC server (its own connection to
the broker, as every nova-compute has), so that a fleet of hundreds fits
on one machine (``tools/fleet_scale.py``).

Usage::

    python -m nova_revert_lock.tests.integration.status_server \\
        --url rabbit://... --host HOST [--host HOST...] \\
        --mode extension|plain [--sections N] [--failed-sections N]

Prints ``READY <host>`` for every host once all its servers consume;
exits on SIGTERM, or when the process that started it goes away.
"""

# NOTE: as nova-compute: eventlet is patched before anything else.
import nova.cmd  # noqa: F401,I100

import argparse  # noqa: I100
import os
import signal
import sys

import eventlet
from oslo_config import cfg
import oslo_messaging as messaging
from oslo_messaging.rpc import dispatcher
from oslo_utils import timeutils

from nova import baserpc
from nova import objects
from nova.objects import base as objects_base
from nova import rpc as nova_rpc

from nova_revert_lock import activation
from nova_revert_lock.audit import client
from nova_revert_lock.audit import endpoint
from nova_revert_lock import sections


class StubComputeManager(object):
    """What ``Service.start()`` reads from a compute manager, no more."""

    target = messaging.Target(version='5.11')

    def __init__(self, host):
        self.host = host
        self.service_name = 'compute'
        # as nova.manager.Manager.__init__
        self.additional_endpoints = []

    def get_console_topic(self, context):
        return 'compute'


def manager_class(mode):
    if mode == 'plain':
        return StubComputeManager
    report = activation.build(cfg.ConfigOpts())
    report.activated_at = timeutils.utcnow().isoformat() + 'Z'
    return type('RevertLockComputeManager',
                (endpoint.StatusEndpointMixin, StubComputeManager),
                {'_nrl_report': report})


def run_sections(count, failed):
    for i in range(count):
        try:
            with sections.counted('confirm'):
                eventlet.sleep(0.002)
                if i < failed:
                    raise RuntimeError('failed on purpose')
        except RuntimeError:
            pass


def serve(transport, manager_cls, host):
    """Start what ``Service.start()`` starts for ``host``; return it."""
    manager = manager_cls(host)
    endpoints = [manager, baserpc.BaseRPCAPI(manager.service_name, None)]
    endpoints.extend(manager.additional_endpoints)
    server = messaging.get_rpc_server(
        transport, messaging.Target(topic=client.COMPUTE_TOPIC,
                                    server=host),
        endpoints, executor='eventlet',
        serializer=nova_rpc.RequestContextSerializer(
            objects_base.NovaObjectSerializer()),
        access_policy=dispatcher.DefaultRPCAccessPolicy)
    server.start()
    return server


def main(argv=None):
    parser = argparse.ArgumentParser()
    parser.add_argument('--url', required=True)
    parser.add_argument('--host', required=True, action='append',
                        dest='hosts')
    parser.add_argument('--mode', choices=('extension', 'plain'),
                        required=True)
    parser.add_argument('--sections', type=int, default=0)
    parser.add_argument('--failed-sections', type=int, default=0)
    args = parser.parse_args(argv)

    objects.register_all()
    run_sections(args.sections, args.failed_sections)
    conf = cfg.ConfigOpts()
    conf([])
    transport = client.get_transport(conf, args.url)
    # NOTE: one class for all: activation.build() reads Nova's code.
    cls = manager_class(args.mode)
    servers = [serve(transport, cls, host) for host in args.hosts]
    for host in args.hosts:
        print('READY %s' % host, flush=True)

    stopping = []
    signal.signal(signal.SIGTERM, lambda *a: stopping.append(True))
    parent = os.getppid()
    while not stopping and os.getppid() == parent:
        eventlet.sleep(0.2)
    for server in servers:
        server.stop()
    for server in servers:
        server.wait()
    transport.cleanup()
    return 0


if __name__ == '__main__':
    sys.exit(main())
