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

"""Close Nova bug 1879878 on Nova releases that do not carry the fix.

Public API::

    report = nova_revert_lock.activate()   # before nova-compute starts
    nova_revert_lock.deactivate()
"""


def activate(conf=None):
    """See :func:`nova_revert_lock.activation.activate`."""
    from nova_revert_lock import activation
    return activation.activate(conf)


def deactivate():
    """See :func:`nova_revert_lock.activation.deactivate`."""
    from nova_revert_lock import activation
    return activation.deactivate()
