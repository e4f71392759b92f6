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

"""Serve placement's own WSGI application on loopback, for start tests.

    OS_PLACEMENT_CONFIG_DIR=DIR python .../placement_server.py PORT

``placement.wsgi.init_application()`` reads ``DIR/placement.conf`` as
placement-api does under any WSGI server; the standard library's server,
one thread per request, is enough for a few computes.
"""

import socketserver
import sys
from wsgiref import simple_server


class _ThreadingServer(socketserver.ThreadingMixIn,
                       simple_server.WSGIServer):
    daemon_threads = True


class _QuietHandler(simple_server.WSGIRequestHandler):
    def log_message(self, *args):
        pass


def main(argv=None):
    argv = sys.argv if argv is None else argv
    port = int(argv[1])
    from placement import wsgi
    application = wsgi.init_application()
    server = simple_server.make_server(
        '127.0.0.1', port, application, server_class=_ThreadingServer,
        handler_class=_QuietHandler)
    server.serve_forever()


if __name__ == '__main__':
    sys.exit(main())
