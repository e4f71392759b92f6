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

"""Serve one WSGI application on loopback, a thread per request.

Runs inside the cloud's virtualenv, for the services that ship only a
WSGI application (keystone, placement)::

    python wsgi_server.py --port 5000 \
        keystone.server.wsgi:initialize_public_application

The factory is called once; its configuration comes from the service's
own environment variables (``OS_KEYSTONE_CONFIG_FILES``,
``OS_PLACEMENT_CONFIG_DIR``). A thread per request, not one thread for
all: keystone validates tokens for the other services while they call
it, and tempest runs with more than one client.
"""

import argparse
import importlib
import socketserver
import sys
from wsgiref import simple_server


class _Server(socketserver.ThreadingMixIn, simple_server.WSGIServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 64


class _Handler(simple_server.WSGIRequestHandler):

    def log_message(self, fmt, *args):
        sys.stderr.write('%s - %s\n' % (self.address_string(), fmt % args))

    def address_string(self):
        return self.client_address[0]


def load(spec):
    module, _sep, name = spec.partition(':')
    factory = getattr(importlib.import_module(module), name)
    return factory()


def main(argv=None):
    parser = argparse.ArgumentParser()
    parser.add_argument('--host', default='127.0.0.1')
    parser.add_argument('--port', type=int, required=True)
    parser.add_argument('factory', help='module:callable returning the app')
    args = parser.parse_args(argv)
    # NOTE: the factories parse sys.argv with oslo.config: leave them none
    # of ours.
    sys.argv = sys.argv[:1]
    app = load(args.factory)
    server = simple_server.make_server(args.host, args.port, app,
                                       server_class=_Server,
                                       handler_class=_Handler)
    sys.stderr.write('serving %s on %s:%d\n'
                     % (args.factory, args.host, args.port))
    sys.stderr.flush()
    server.serve_forever()


if __name__ == '__main__':
    main()
