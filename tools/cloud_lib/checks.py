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

"""What runs against an up cloud: tempest, the soak, the audit, the
rolling switch, the log check; and ``short``, all of them in a row."""

import json
import os
import sys

from cloud_lib import cloud as cloud_mod
from cloud_lib import tempest


def _up_cloud(args):
    c = cloud_mod.Cloud(args.state_dir)
    if not c.state or not c.state.running():
        sys.stderr.write('cloud: no cloud up in %s (tools/cloud up)\n'
                         % c.state_dir)
        sys.exit(1)
    return c


def _report(args, name, data):
    path = os.path.join(args.state_dir, '%s.json' % name)
    with open(path, 'w') as f:
        json.dump(data, f, indent=2, sort_keys=True)
    return path


def print_tempest(result):
    print('tempest: ran %s, passed %s, skipped %s, failed %s in %ss'
          % (result['ran'], result['passed'], result['skipped'],
             result['failed'], result['seconds']))
    for s in result['skips']:
        print('  skipped %s: %s' % (s['test'], s['reason']))
    for f in result['failures']:
        print('  FAILED %s' % f)


def cmd_tempest(args):
    c = _up_cloud(args)
    result = tempest.run(c, regex=args.regex, concurrency=args.concurrency)
    result['mode'] = _mode(c)
    _report(args, 'tempest-%s' % result['mode'], result)
    print_tempest(result)
    return 0 if result['rc'] == 0 and not result['failures'] and (
        result['passed']) else 1


def _mode(c):
    modes = {h['mode'] for h in c.computes()}
    return 'plain' if modes == {'plain'} else 'mixed'


def add_parsers(sub):
    t = sub.add_parser('tempest', help="the devstack jobs' move tests")
    t.add_argument('--regex', help='default: the tempest_test_regex of '
                                   '.zuul.yaml')
    t.add_argument('--concurrency', type=int, default=2)
    t.set_defaults(func=cmd_tempest)
