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

"""What the guard tests of every mixin share."""

from oslo_config import cfg

from nova_revert_lock import activation
from nova_revert_lock import conf as nrl_conf


def evaluate(mixins=None, on_unknown_code=None):
    """What activation would do with these ``[revert_lock]`` settings.

    :param mixins: list of mixin names, or None for the default
    :param on_unknown_code: ``fail``/``warn``, or None for the default
    :returns: the :class:`~nova_revert_lock.report.ActivationReport`
    """
    conf = cfg.ConfigOpts()
    nrl_conf.register_opts(conf)
    conf([], project='nova', default_config_files=[])
    for name, value in (('mixins', mixins),
                        ('on_unknown_code', on_unknown_code)):
        if value is not None:
            conf.set_override(name, value, group='revert_lock')
    return activation.build(conf)


def composed_tracker(manager_cls):
    """The tracker subclass ``manager_cls`` composes over Nova's own."""
    from nova.compute import resource_tracker
    return manager_cls._nrl_tracker_for(resource_tracker.ResourceTracker)
