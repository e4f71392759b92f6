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

"""One benchmark mode in one process, on Nova's in-process services.

Started by the driver as::

    python -m tools.bench.harness MODE

in the environment holding the Nova release the mode needs. It starts
Nova's own functional services (API, conductor, scheduler, placement
fixture, two computes on the fake driver, sqlite) through
:class:`~nova_revert_lock.tests.functional.base.RaceMixin`, says ``ready``
and then serves the driver, one JSON line each way: ``run`` a block of
cycles, hand over the ``samples``, start the loaded hosts of the periodic
task's scenarios (``periodic_setup``, see :mod:`.periodic`) and time one
``periodic`` task on one of them, ``quit``.

The cycles are :mod:`.cycle_driver`, the books check :mod:`.books`, the lock
tracer :mod:`.locktrace`; this module is the process around them.
"""

import json
import os
import sys
import time

from tools.bench import cycle_driver


def _case_class(mode, options, channel):
    from nova.tests.functional import integrated_helpers

    from nova_revert_lock.tests.functional import base

    class BenchCase(base.ExtensionFixtureMixin, base.RaceMixin,
                    integrated_helpers.ProviderUsageBaseTestCase):
        extension = mode in ('extension', cycle_driver.UPSTREAM_EXT)

        def runTest(self):
            bench = cycle_driver.Bench(
                self, mode, options['hammer_sleep'],
                options['probe_interval'], options['trigger'])
            bench.boot()
            channel.serve(self, bench)

    return BenchCase


class Channel(object):
    """JSON lines with the driver, on the process's original stdio."""

    def __init__(self, mode):
        self.mode = mode
        # NOTE: Nova's fixtures and logging may write to stdout; give them
        # stderr and keep the original stdout for the driver alone.
        self.out = os.fdopen(os.dup(1), 'w', 1)
        os.dup2(2, 1)
        self.inp = sys.stdin

    def send(self, **message):
        self.out.write(json.dumps(message) + '\n')
        self.out.flush()

    def receive(self):
        line = self.inp.readline()
        return json.loads(line) if line else {'cmd': 'quit'}

    def serve(self, case, bench):
        from nova_revert_lock.guard import releases
        report = case.activation_report
        # What the extension would do here, whether or not it is active:
        # 'patched' means this Nova is affected, 'already-fixed' fixed.
        nova_state = bench.nova_state
        self.send(ready=True, mode=self.mode,
                  nova_version=releases.installed_nova_version(),
                  nova_state=nova_state,
                  activation=str(report.state) if report else None,
                  python=sys.version.split()[0])
        while True:
            message = self.receive()
            cmd = message.get('cmd')
            if cmd == 'run':
                cpu, wall = time.process_time(), time.perf_counter()
                records = bench.run_block(message['kind'],
                                          message['count'])
                self.send(records=records,
                          cpu_s=time.process_time() - cpu,
                          wall_s=time.perf_counter() - wall)
            elif cmd == 'samples':
                self.send(samples=bench.samples())
            elif cmd == 'periodic_setup':
                self.send(**bench.periodic_setup(message['scenarios']))
            elif cmd == 'periodic':
                self.send(**bench.periodic_run(
                    message['scenario'], message.get('nova_tracker', False),
                    message.get('collect', False)))
            else:
                self.send(bye=True)
                return


def main(argv=None):
    import argparse
    import unittest

    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('mode', choices=cycle_driver.PERIODIC_MODES)
    parser.add_argument('--hammer-sleep', type=float, default=0.002)
    parser.add_argument('--probe-interval', type=float, default=0.02)
    parser.add_argument('--no-trigger', dest='trigger',
                        action='store_false')
    args = parser.parse_args(argv)
    channel = Channel(args.mode)
    options = {'hammer_sleep': args.hammer_sleep,
               'probe_interval': args.probe_interval,
               'trigger': args.trigger}
    case = _case_class(args.mode, options, channel)()
    with open(os.devnull, 'w') as devnull:
        result = unittest.TextTestRunner(stream=devnull, verbosity=0).run(
            case)
    if not result.wasSuccessful():
        traces = [trace for _t, trace in result.errors + result.failures]
        for trace in traces:
            sys.stderr.write(trace)
        channel.send(failed=True, error=traces[-1].splitlines()[-1]
                     if traces else 'unknown')
        return 1
    return 0


if __name__ == '__main__':
    sys.exit(main())
