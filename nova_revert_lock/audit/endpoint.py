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

RPC API history (namespace ``revert_lock``)::

    1.0 - get_status()
"""

import oslo_messaging as messaging

from nova_revert_lock import sections

#: Nova's endpoints have none, or their own ('baseapi')
NAMESPACE = 'revert_lock'
RPC_API_VERSION = '1.0'


def status_of(manager):
    """The status of this process's nova-compute, as a JSON-safe dict.

    The fields of the report activation set on the manager's class
    (``_nrl_report``; ``bugs`` as bug -> verdict) and the counters of
    :func:`nova_revert_lock.sections.snapshot`.
    """
    report = getattr(manager, '_nrl_report', None)
    status = {'host': getattr(manager, 'host', None),
              'rpc_version': RPC_API_VERSION, 'nova_version': None,
              'series': 'unknown', 'state': 'unknown', 'mixins': [],
              'missing': [], 'activated_at': None, 'bugs': {}}
    if report is not None:
        status.update({
            'nova_version': report.nova_version,
            'series': report.series,
            'state': report.state,
            'mixins': list(report.mixins),
            'missing': list(getattr(report, 'missing', ())),
            'activated_at': getattr(report, 'activated_at', None),
            'bugs': dict((bug, verdict) for bug, (verdict, _why)
                         in getattr(report, 'bugs', {}).items()),
        })
    status.update(sections.snapshot())
    if not hasattr(manager, '_nrl_tracker_for'):
        # The fix is not composed (status only): nothing observes the
        # periodic task.
        status['periodic_by_node'] = None
    return status


class StatusEndpoint(object):
    """RPC endpoint: what this nova-compute runs and how it went so far.

    It takes no lock: an audit must never wait on (or delay) a compute
    that is busy confirming resizes.
    """

    target = messaging.Target(namespace=NAMESPACE, version=RPC_API_VERSION)

    def __init__(self, manager):
        self.manager = manager

    def get_status(self, context):
        """Return :func:`status_of` the manager (a plain dict)."""
        return status_of(self.manager)


class StatusEndpointMixin(object):
    """Compute manager mixin: serve a :class:`StatusEndpoint`.

    ``Manager.__init__`` sets ``additional_endpoints`` to an empty list,
    which ``Service.start()`` reads later: append after the constructor.
    """

    def __init__(self, *args, **kwargs):
        super(StatusEndpointMixin, self).__init__(*args, **kwargs)
        self.additional_endpoints.append(StatusEndpoint(self))
