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

"""The services' configuration files, as text.

``c`` is the cloud's layout: ``c.etc``, ``c.venv``, ``c.state_dir``,
``c.ports`` (name -> port), ``c.db_url(name)``, ``c.transport_url``,
``c.password``. Everything listens on and talks to 127.0.0.1.
"""

import os

from cloud_lib import hypervisor

REGION = 'RegionOne'


def _ini(sections):
    out = []
    for name, options in sections:
        out.append('[%s]' % name)
        for key, value in options:
            out.append('%s = %s' % (key, value))
        out.append('')
    return '\n'.join(out)


def keystone_url(c):
    return 'http://127.0.0.1:%d/v3' % c.ports['keystone']


def authtoken(c, user):
    return ('keystone_authtoken', [
        ('www_authenticate_uri', keystone_url(c)),
        ('auth_url', keystone_url(c)),
        ('auth_type', 'password'),
        ('username', user),
        ('password', c.password),
        ('project_name', 'service'),
        ('user_domain_name', 'Default'),
        ('project_domain_name', 'Default'),
        ('region_name', REGION),
    ])


def service_auth(c, group, user='nova'):
    """A keystoneauth section for a service-to-service client."""
    return (group, [
        ('auth_type', 'password'),
        ('auth_url', keystone_url(c)),
        ('username', user),
        ('password', c.password),
        ('project_name', 'service'),
        ('user_domain_name', 'Default'),
        ('project_domain_name', 'Default'),
        ('region_name', REGION),
    ])


def keystone(c):
    keys = os.path.join(c.state_dir, 'keystone')
    return _ini([
        ('DEFAULT', [('debug', 'False')]),
        ('database', [('connection', c.db_url('keystone'))]),
        ('token', [('provider', 'fernet')]),
        ('fernet_tokens', [('key_repository',
                            os.path.join(keys, 'fernet-keys'))]),
        ('fernet_receipts', [('key_repository',
                              os.path.join(keys, 'fernet-keys'))]),
        ('credential', [('key_repository',
                         os.path.join(keys, 'credential-keys'))]),
    ])


def placement(c):
    return _ini([
        ('DEFAULT', [('debug', 'False')]),
        ('api', [('auth_strategy', 'keystone')]),
        ('placement_database', [('connection', c.db_url('placement'))]),
        authtoken(c, 'placement'),
    ])


def glance(c):
    return _ini([
        ('DEFAULT', [('debug', 'False'),
                     ('bind_host', '127.0.0.1'),
                     ('bind_port', c.ports['glance']),
                     ('workers', '1')]),
        ('database', [('connection', c.db_url('glance'))]),
        authtoken(c, 'glance'),
        ('paste_deploy', [
            ('flavor', 'keystone'),
            ('config_file', os.path.join(c.venv, 'etc', 'glance',
                                         'glance-api-paste.ini'))]),
        ('glance_store', [
            ('stores', 'file'),
            ('default_store', 'file'),
            ('filesystem_store_datadir',
             os.path.join(c.state_dir, 'glance', 'images'))]),
        ('oslo_concurrency', [('lock_path', os.path.join(
            c.state_dir, 'glance', 'lock'))]),
    ] + _glance_policy(c))


def _glance_policy(c):
    """Glance up to Train has no rules in code: its shipped policy.json.

    Without it every rule falls back to an undefined default and users
    of other projects get 403 on the public image.
    """
    path = os.path.join(c.venv, 'etc', 'glance', 'policy.json')
    if not os.path.exists(path):
        return []
    return [('oslo_policy', [('policy_file', path)])]


def neutron(c):
    return _ini([
        ('DEFAULT', [('debug', 'False'),
                     ('bind_host', '127.0.0.1'),
                     ('bind_port', c.ports['neutron']),
                     ('core_plugin', 'ml2'),
                     # NOTE: no routers, no agents: servers boot with
                     # networks "none"; nova only lists (empty) ports.
                     ('service_plugins', ''),
                     ('auth_strategy', 'keystone'),
                     ('transport_url', c.transport_url),
                     ('api_workers', '1'),
                     ('rpc_workers', '0'),
                     ('rpc_state_report_workers', '0'),
                     ('notify_nova_on_port_status_changes', 'False'),
                     ('notify_nova_on_port_data_changes', 'False'),
                     ('api_paste_config', os.path.join(
                         c.venv, 'etc', 'neutron', 'api-paste.ini')),
                     ('state_path', os.path.join(c.state_dir, 'neutron'))]),
        ('database', [('connection', c.db_url('neutron'))]),
        authtoken(c, 'neutron'),
        ('oslo_concurrency', [('lock_path', os.path.join(
            c.state_dir, 'neutron', 'lock'))]),
    ])


def ml2(c):
    return _ini([
        # NOTE: vlan is not used (no ranges, servers boot with networks
        # "none"), but its start-up sync is the only thing in this ML2
        # that queries the database before neutron-server forks its API
        # worker. That first query configures SQLAlchemy's mappers, which
        # add the backrefs other models declare on Port; neutron 26's
        # get_ports reads Port.port_forwardings (a backref of the port
        # forwarding model) before it queries, so in a worker whose
        # first request is a port listing it fails with "type object
        # 'Port' has no attribute 'port_forwardings'" (a 500 to
        # nova-api) until any other request has queried the database.
        # Neutron's default type drivers include vlan.
        ('ml2', [('type_drivers', 'flat,local,vlan'),
                 ('tenant_network_types', 'local'),
                 ('mechanism_drivers', ''),
                 ('extension_drivers', 'port_security')]),
        ('ml2_type_flat', [('flat_networks', '*')]),
    ])


def _nova_common(c, host, state, transport_url=None):
    return [
        ('debug', 'False'),
        ('host', host),
        ('transport_url', transport_url or c.transport_url),
        ('my_ip', '127.0.0.1'),
        ('state_path', state),
    ]


#: Compute RPC capped at what the oldest compute understands, as
#: deployments set it for an upgrade (Nova's default is no cap): a cloud
#: with a compute of the previous series (tools/cloud peers) talks to it
#: at its version. With computes of one release the cap is that release's.
UPGRADE_LEVELS = ('upgrade_levels', [('compute', 'auto')])


def _filter_scheduler(c):
    filters = c.scheduler_filters()
    return [('filter_scheduler', [('enabled_filters', ','.join(filters))])
            ] if filters else []


def nova(c):
    """API, conductor, scheduler, nova-manage and the fleet audit."""
    state = os.path.join(c.state_dir, 'nova')
    return _ini([
        ('DEFAULT', _nova_common(c, 'nrl-controller', state) + [
            ('enabled_apis', 'osapi_compute'),
            ('osapi_compute_listen', '127.0.0.1'),
            ('osapi_compute_listen_port', c.ports['nova-api']),
            ('osapi_compute_workers', '1'),
        ]),
        ('api', [('auth_strategy', 'keystone')]),
        ('wsgi', [('api_paste_config', os.path.join(
            c.venv, 'etc', 'nova', 'api-paste.ini'))]),
        ('api_database', [('connection', c.db_url('nova_api'))]),
        ('database', [('connection', c.db_url('nova_cell1'))]),
        UPGRADE_LEVELS,
        ('conductor', [('workers', '1')]),
        ('scheduler', [('workers', '1'),
                       ('discover_hosts_in_cells_interval', '-1')]),
    ] + _filter_scheduler(c) + [
        authtoken(c, 'nova'),
        service_auth(c, 'placement'),
        service_auth(c, 'neutron'),
        ('glance', [('region_name', REGION)]),
        ('vnc', [('enabled', 'False')]),
        ('oslo_concurrency', [('lock_path', os.path.join(state, 'lock'))]),
        UPGRADE_LEVELS,
    ])


#: the host CPUs a libvirt compute gives pinned guests: the machine's
#: two (each compute's libvirtd reports the same ones; the books are per
#: compute node)
DEDICATED_CPUS = '0-1'


def compute(c, host):
    """A compute's own file: no database (it goes through the conductor)."""
    state = os.path.join(c.state_dir, 'computes', host)
    sections = [
        # NOTE: the broker on the compute's own address: one compute can
        # be cut off from it alone (tools/cloud partition).
        ('DEFAULT', _nova_common(c, host, state,
                                 c.compute_transport_url(host)) + [
            ('compute_driver', c.info['compute_driver']),
            ('instances_path', os.path.join(state, 'instances')),
            # NOTE: the periodic that races confirm and revert, as often
            # as Nova lets it run.
            ('update_resources_interval', '1'),
            ('reserved_host_memory_mb', '0'),
            ('reserved_host_disk_mb', '0'),
            ('heal_instance_info_cache_interval', '-1'),
        ]),
        service_auth(c, 'placement'),
        service_auth(c, 'neutron'),
        ('glance', [('region_name', REGION)]),
        ('vnc', [('enabled', 'False')]),
        ('oslo_concurrency', [('lock_path', os.path.join(state, 'lock'))]),
        UPGRADE_LEVELS,
    ]
    if getattr(c, 'hypervisor', 'fake') == 'libvirt':
        sections = libvirt_compute(c, host, sections)
    return _ini(sections)


def libvirt_compute(c, host, sections):
    """A libvirt compute: its own libvirtd, QEMU, dedicated CPUs."""
    sections = dict(sections)
    default = dict(sections['DEFAULT'])
    default.update({
        'compute_driver': 'libvirt.LibvirtDriver',
        # NOTE: one path for every compute, each compute's own
        # directory in its namespace (hypervisor.py): local storage. The
        # driver copies a resized server's disks to the same path on the
        # destination's my_ip over ssh (hostssh.py), and a live
        # migration copies them over NBD (a block migration).
        'instances_path': hypervisor.instances(c.state_dir),
        'my_ip': c.broker_address(host),
        # NOTE: the guests have no operating system to answer ACPI: a
        # clean shutdown (a resize powers the guest off) would wait the
        # default 60 s for nothing.
        'shutdown_timeout': '0',
    })
    sections['DEFAULT'] = sorted(default.items())
    sections['libvirt'] = [
        ('virt_type', 'qemu'),
        ('connection_uri', hypervisor.uri(c.state_dir, host)),
        # NOTE: TCG runs host-model too; no CPU of its own to match
        ('cpu_mode', 'host-model'),
        # NOTE: a live migration reaches the destination's libvirtd on
        # its own socket (Nova puts the destination's name for the %s);
        # the memory and the disks go to the destination's QEMU at its
        # migration_address (hypervisor.write).
        ('live_migration_uri', hypervisor.uri(c.state_dir, '%s')),
        # NOTE: MiB/s, as clouds cap it so that migrations leave the
        # network to the guests. The guests here are idle but the one
        # whose memory is dirtied on purpose (guest.py): its migration
        # must not converge before the family aborts it, and on two
        # CPUs an uncapped loopback copy can starve its vCPU into
        # converging. Idle guests' zero pages and the disks' few
        # allocated clusters copy in about as long as before.
        ('live_migration_bandwidth', '64'),
    ]
    if c.info.get('pcpu', True):
        sections['compute'] = [('cpu_dedicated_set', DEDICATED_CPUS)]
    else:
        # NOTE: Train has no cpu_dedicated_set (nor PCPU in placement):
        # pinned guests take their CPUs from vcpu_pin_set and are
        # allocated VCPU.
        default['vcpu_pin_set'] = DEDICATED_CPUS
        sections['DEFAULT'] = sorted(default.items())
    # NOTE: root already: the privileged helpers without sudo and
    # rootwrap (the driver's file and mount steps run through Nova's;
    # os-brick's connector, which pre_live_migration builds, through its
    # own: its default, sudo nova-rootwrap, fails the live migration
    # with FailedToDropPrivileges).
    helper = os.path.join(c.venv, 'bin', 'privsep-helper')
    for context in ('nova_sys_admin', 'privsep_osbrick'):
        sections[context] = [('helper_command', helper)]
    return list(sections.items())


def clouds_yaml(c):
    return '\n'.join([
        'clouds:',
        '  nrl:',
        '    auth:',
        '      auth_url: %s' % keystone_url(c),
        '      username: admin',
        '      password: %s' % c.password,
        '      project_name: admin',
        '      user_domain_name: Default',
        '      project_domain_name: Default',
        '    region_name: %s' % REGION,
        '    identity_api_version: 3',
        '  nrl-demo:',
        '    auth:',
        '      auth_url: %s' % keystone_url(c),
        '      username: demo',
        '      password: %s' % c.password,
        '      project_name: demo',
        '      user_domain_name: Default',
        '      project_domain_name: Default',
        '    region_name: %s' % REGION,
        '    identity_api_version: 3',
        '',
    ])
