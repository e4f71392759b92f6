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

"""What activation adds to nova-compute's start, in a fresh process.

Run as ``python -m tools.bench.activation_cost``; prints one
JSON line. First imports what nova-compute imports anyway
(``nova.cmd.compute`` and the compute manager that
``nova.service.Service.create()`` loads), then times what
``nova-compute-revert-lock`` adds on top: importing this package's
command and activation modules, and ``activate()`` itself, split into
stevedore loading, the guard's fingerprinting, reading the tracker's lock
and composing the classes. Modules imported by that step are counted.
"""

import json
import sys
import time


def _timed(module, name, bucket):
    """Wrap ``module.name`` to add its run time (ms) to ``bucket[name]``."""
    func = getattr(module, name)

    def timed(*args, **kwargs):
        start = time.perf_counter()
        try:
            return func(*args, **kwargs)
        finally:
            bucket[name] = bucket.get(name, 0.0) + (
                time.perf_counter() - start) * 1e3
    setattr(module, name, timed)


def measure():
    start = time.perf_counter()
    import nova.cmd.compute  # noqa: F401 - what nova-compute imports
    import nova.compute.manager  # noqa: F401 - loaded by Service.create()
    import nova.conf
    nova_ms = (time.perf_counter() - start) * 1e3
    conf = nova.conf.CONF
    conf([], project='nova', default_config_files=[])

    before = set(sys.modules)
    cpu = time.process_time()
    start = time.perf_counter()
    from nova_revert_lock import activation
    import nova_revert_lock.cmd.compute  # noqa: F401
    from nova_revert_lock import composition
    from nova_revert_lock.guard import assess
    from nova_revert_lock import locking
    from nova_revert_lock.mixins import base
    imported = time.perf_counter()
    import_ms = (imported - start) * 1e3

    parts = {}
    _timed(assess, 'load_specs', parts)
    _timed(base.MixinSpec, 'check', parts)
    _timed(locking, 'tracker_lock', parts)
    _timed(composition, 'compose', parts)
    report = activation.activate(conf)
    activate_ms = (time.perf_counter() - imported) * 1e3
    cpu_ms = (time.process_time() - cpu) * 1e3
    added = sorted(set(sys.modules) - before)
    return {
        'nova_import_ms': round(nova_ms, 2),
        'import_ms': round(import_ms, 3),
        'activate_ms': round(activate_ms, 3),
        'total_ms': round(import_ms + activate_ms, 3),
        'total_cpu_ms': round(cpu_ms, 3),
        'parts_ms': {
            'stevedore': round(parts.get('load_specs', 0.0), 3),
            'fingerprints': round(parts.get('check', 0.0), 3),
            'lock': round(parts.get('tracker_lock', 0.0), 3),
            'compose': round(parts.get('compose', 0.0), 3),
        },
        'state': str(report.state),
        'modules_added': len(added),
        'modules_added_outside': [m for m in added
                                  if not m.startswith('nova_revert_lock')],
    }


def main():
    print(json.dumps(measure()))
    return 0


if __name__ == '__main__':
    sys.exit(main())
