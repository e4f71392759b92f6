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

"""Check .zuul.yaml against this repository and known upstream names."""

import configparser
import fnmatch
import os
import re
import subprocess
import unittest

import yaml

from ci_lint import path

#: Upstream jobs this project may build on: name -> (defined in, kind).
#: ``kind`` says whose tox.ini the job's ``tox_envlist`` names: ``tox``
#: (this repository's) or ``tempest`` (tempest's own), and the default
#: env where the job sets one.
UPSTREAM_JOBS = {
    'tox': ('zuul/zuul-jobs', 'tox', None),
    'openstack-tox': ('openstack/openstack-zuul-jobs', 'tox', None),
    'openstack-tox-pep8': ('openstack/openstack-zuul-jobs', 'tox', 'pep8'),
    'openstack-tox-docs': ('openstack/openstack-zuul-jobs', 'tox', 'docs'),
    'build-openstack-releasenotes': (
        'openstack/openstack-zuul-jobs', 'tox', 'releasenotes'),
    'devstack': ('openstack/devstack', 'devstack', None),
    'devstack-multinode': ('openstack/devstack', 'devstack', None),
    'devstack-tempest': ('openstack/tempest', 'tempest', 'smoke'),
    'tempest-multinode-full-base': (
        'openstack/tempest', 'tempest', 'multinode'),
    'tempest-multinode-full-py3': (
        'openstack/tempest', 'tempest', 'multinode'),
}

#: Upstream nodesets (opendev base-jobs, devstack) that have nodes.
UPSTREAM_NODESETS = frozenset([
    'ubuntu-focal', 'ubuntu-jammy', 'ubuntu-noble', 'debian-bookworm',
    'openstack-two-node-focal', 'openstack-two-node-jammy',
    'openstack-two-node-noble',
])

#: Upstream nodesets that still exist in name only, or no longer at all.
DEAD_NODESETS = frozenset([
    'ubuntu-bionic', 'ubuntu-xenial', 'openstack-two-node-bionic',
    'openstack-two-node-xenial',
])

#: Branches deleted at end of life (only ``<series>-eol`` tags remain);
#: override-checkout would silently fall back to master for them.
DELETED_BRANCHES = re.compile(
    r'^stable/(stein|train|ussuri|victoria|wallaby|xena)$')

PLAYBOOK_KEYS = ('pre-run', 'run', 'post-run', 'cleanup-run')
PIPELINES = ('check', 'gate', 'experimental', 'periodic')
THIS_PLUGIN = 'nova-revert-lock'

#: What the devstack jobs must run, and what they must not.
TEMPEST_MUST_MATCH = [
    'tempest.api.compute.admin.test_migrations.MigrationsAdminTest.'
    'test_cold_migration',
    'tempest.api.compute.admin.test_migrations.MigrationsAdminTest.'
    'test_revert_cold_migration',
    'tempest.api.compute.admin.test_migrations.MigrationsAdminTest.'
    'test_resize_server_revert_deleted_flavor',
    'tempest.api.compute.servers.test_server_actions.ServerActionsTestJSON.'
    'test_resize_server_confirm',
    'tempest.api.compute.servers.test_server_actions.ServerActionsTestJSON.'
    'test_resize_server_revert',
    'tempest.api.compute.servers.test_server_actions.ServerActionsTestOtherB'
    '.test_resize_server_revert_with_volume_attached',
]
TEMPEST_MUST_NOT_MATCH = [
    'tempest.api.compute.servers.test_server_actions.ServerActionsTestJSON.'
    'test_reboot_server_hard',
    'tempest.api.compute.admin.test_live_migration.LiveMigrationTest.'
    'test_live_block_migration',
    'tempest.scenario.test_network_basic_ops.TestNetworkBasicOps.'
    'test_network_basic_ops',
]


def load_zuul():
    with open(path('.zuul.yaml')) as f:
        return yaml.safe_load(f)


def tox_envs():
    """Names of the envs tox.ini defines."""
    parser = configparser.ConfigParser(interpolation=None, strict=False)
    parser.read(path('tox.ini'))
    return {s.split(':', 1)[1] for s in parser.sections()
            if s.startswith('testenv:')}


def as_list(value):
    if value is None:
        return []
    return value if isinstance(value, list) else [value]


class ZuulConfig(object):
    """The parsed .zuul.yaml, indexed."""

    def __init__(self, data):
        self.data = data
        self.jobs = {}
        self.nodesets = {}
        self.projects = []
        self.duplicates = []
        for item in data:
            (kind, body), = item.items()
            if kind == 'job':
                if body['name'] in self.jobs:
                    self.duplicates.append(body['name'])
                self.jobs[body['name']] = body
            elif kind == 'nodeset':
                self.nodesets[body['name']] = body
            elif kind == 'project':
                self.projects.append(body)

    def ancestry(self, name):
        """[name, parent, grandparent, ...] up to the first upstream job."""
        chain = [name]
        while chain[-1] in self.jobs:
            parent = self.jobs[chain[-1]].get('parent', 'base')
            if parent in chain:
                raise ValueError('parent cycle: %s' % ' -> '.join(
                    chain + [parent]))
            chain.append(parent)
        return chain

    def upstream_root(self, name):
        return self.ancestry(name)[-1]

    def inherited(self, name, key, default=None):
        """A job attribute as the first job in its ancestry sets it."""
        for job in self.ancestry(name):
            if job in self.jobs and key in self.jobs[job]:
                return self.jobs[job][key]
        return default

    def var(self, name, var):
        """A job variable, as set here or by a known upstream job."""
        for job in self.ancestry(name):
            if job in self.jobs:
                if var in self.jobs[job].get('vars', {}):
                    return self.jobs[job]['vars'][var]
            elif var == 'tox_envlist' and job in UPSTREAM_JOBS:
                return UPSTREAM_JOBS[job][2]
        return None

    def merged_var(self, name, var):
        """A dict variable merged down the local ancestry (as Zuul does)."""
        merged = {}
        for job in reversed(self.ancestry(name)):
            if job in self.jobs:
                merged.update(self.jobs[job].get('vars', {}).get(var) or {})
        return merged

    def pipeline_jobs(self, pipeline):
        names = []
        for project in self.projects:
            for entry in project.get(pipeline, {}).get('jobs', []):
                names.append(entry if isinstance(entry, str)
                             else next(iter(entry)))
        return names


class TestZuulConfig(unittest.TestCase):

    @classmethod
    def setUpClass(cls):
        cls.zuul = ZuulConfig(load_zuul())
        cls.envs = tox_envs()

    def test_shape(self):
        self.assertIsInstance(self.zuul.data, list)
        for item in self.zuul.data:
            self.assertEqual(1, len(item), item)
            kind = next(iter(item))
            self.assertIn(kind, ('job', 'nodeset', 'project',
                                 'project-template', 'secret', 'semaphore'))
        self.assertEqual([], self.zuul.duplicates)
        self.assertEqual(1, len(self.zuul.projects))

    def test_every_parent_is_defined_here_or_known_upstream(self):
        for name in self.zuul.jobs:
            self.assertIn('parent', self.zuul.jobs[name],
                          '%s: say which job it builds on' % name)
            root = self.zuul.upstream_root(name)  # raises on cycles
            self.assertIn(root, UPSTREAM_JOBS,
                          '%s builds on %s, which is neither defined here '
                          'nor a known upstream job' % (name, root))

    def test_nodesets_exist(self):
        for name in self.zuul.jobs:
            nodeset = self.zuul.jobs[name].get('nodeset')
            if nodeset is None:
                continue
            if isinstance(nodeset, dict):
                self.assertTrue(nodeset.get('nodes'), name)
                continue
            self.assertNotIn(nodeset, DEAD_NODESETS,
                             '%s: nodeset %s has no nodes any more'
                             % (name, nodeset))
            self.assertTrue(
                nodeset in self.zuul.nodesets or
                nodeset in UPSTREAM_NODESETS,
                '%s: nodeset %s is neither defined here nor a known '
                'upstream one' % (name, nodeset))

    def test_local_nodesets_are_consistent(self):
        for name, nodeset in self.zuul.nodesets.items():
            nodes = [n['name'] for n in nodeset['nodes']]
            self.assertEqual(len(nodes), len(set(nodes)), name)
            for node in nodeset['nodes']:
                self.assertTrue(node.get('label'), name)
            for group in nodeset.get('groups', []):
                for node in group['nodes']:
                    self.assertIn(node, nodes, '%s: group %s' % (
                        name, group['name']))
        used = {j.get('nodeset') for j in self.zuul.jobs.values()}
        for name in self.zuul.nodesets:
            self.assertIn(name, used, 'nodeset %s is not used' % name)

    def test_playbooks_exist(self):
        for name, job in self.zuul.jobs.items():
            for key in PLAYBOOK_KEYS:
                for playbook in as_list(job.get(key)):
                    if isinstance(playbook, dict):
                        playbook = playbook['name']
                    self.assertTrue(playbook.startswith('playbooks/'),
                                    '%s: %s' % (name, playbook))
                    self.assertTrue(os.path.isfile(path(playbook)),
                                    '%s: %s %s does not exist'
                                    % (name, key, playbook))
                    with open(path(playbook)) as f:
                        plays = yaml.safe_load(f)
                    self.assertIsInstance(plays, list, playbook)
                    for play in plays:
                        self.assertIn('hosts', play, playbook)

    def test_every_playbook_is_used(self):
        used = set()
        for job in self.zuul.jobs.values():
            for key in PLAYBOOK_KEYS:
                used.update(p if isinstance(p, str) else p['name']
                            for p in as_list(job.get(key)))
        on_disk = set()
        for top, _dirs, files in os.walk(path('playbooks')):
            for f in files:
                if f.endswith(('.yaml', '.yml')):
                    on_disk.add(os.path.relpath(os.path.join(top, f),
                                                path()))
        self.assertEqual(set(), on_disk - used)

    def _tox_jobs(self):
        """(job, env) for every env a job runs from this tox.ini."""
        found = []
        for name in self.zuul.jobs:
            root = self.zuul.upstream_root(name)
            envlist = self.zuul.var(name, 'tox_envlist')
            if UPSTREAM_JOBS[root][1] == 'tox' and envlist is not None:
                found.extend((name, env) for env in envlist.split(','))
        for name in self.zuul.pipeline_jobs('check'):
            if name in UPSTREAM_JOBS and UPSTREAM_JOBS[name][2]:
                found.append((name, UPSTREAM_JOBS[name][2]))
        return found

    def test_tox_envs_exist(self):
        jobs = self._tox_jobs()
        self.assertGreater(len(jobs), 5)
        missing = ['%s runs tox env %s' % (name, env)
                   for name, env in jobs if env not in self.envs]
        self.assertFalse(missing, 'tox.ini does not define the envs these '
                         'jobs run: %s' % '; '.join(missing))

    def test_python_matches_run_tests(self):
        # The interpreter a job installs must be the one tools/run-tests
        # looks for, for the env the job runs.
        with open(path('tools', 'run-tests')) as f:
            rules = re.findall(r'^\s*([^\s()]+)\)\s*echo\s+([\d.]+)\s*;;',
                               f.read(), re.M)
        self.assertTrue(rules)
        checked = 0
        for name, env in self._tox_jobs():
            if name not in self.zuul.jobs:
                continue
            if self.zuul.inherited(name, 'run') != (
                    'playbooks/run-tests/run.yaml'):
                continue
            wanted = next(v for pattern, v in rules
                          if any(fnmatch.fnmatchcase(env, p)
                                 for p in pattern.split('|')))
            self.assertEqual(wanted,
                             str(self.zuul.var(name, 'python_version')),
                             '%s (%s)' % (name, env))
            checked += 1
        self.assertGreater(checked, 3)

    def test_every_job_runs_somewhere(self):
        used = set()
        for pipeline in PIPELINES:
            used.update(self.zuul.pipeline_jobs(pipeline))
        for name in used:
            self.assertTrue(name in self.zuul.jobs or name in UPSTREAM_JOBS,
                            'pipeline job %s is not defined' % name)
            if name in self.zuul.jobs:
                self.assertFalse(self.zuul.jobs[name].get('abstract'),
                                 '%s is abstract' % name)
        for name, job in self.zuul.jobs.items():
            if not job.get('abstract'):
                self.assertIn(name, used, '%s is in no pipeline' % name)

    def test_gate_is_voting_and_checked(self):
        check = set(self.zuul.pipeline_jobs('check'))
        for name in self.zuul.pipeline_jobs('gate'):
            self.assertIn(name, check, '%s gates but is not checked' % name)
            if name in self.zuul.jobs:
                self.assertTrue(self.zuul.inherited(name, 'voting', True),
                                '%s is non-voting but in gate' % name)

    def test_file_matchers_compile(self):
        for name, job in self.zuul.jobs.items():
            for key in ('files', 'irrelevant-files'):
                for regex in as_list(job.get(key)):
                    re.compile(regex)

    def test_override_checkout_names_existing_refs(self):
        for name, job in self.zuul.jobs.items():
            refs = [job.get('override-checkout')]
            refs.extend(p.get('override-checkout')
                        for p in as_list(job.get('required-projects'))
                        if isinstance(p, dict))
            for ref in refs:
                if ref is None:
                    continue
                self.assertIsNone(
                    DELETED_BRANCHES.match(str(ref)),
                    '%s: %s was deleted at end of life; use the -eol tag'
                    % (name, ref))

    def _devstack_jobs(self):
        return [n for n in self.zuul.jobs
                if not self.zuul.jobs[n].get('abstract') and
                UPSTREAM_JOBS[self.zuul.upstream_root(n)][1] == 'tempest']

    def test_devstack_jobs_enable_this_plugin(self):
        jobs = self._devstack_jobs()
        self.assertGreaterEqual(len(jobs), 2)
        for name in jobs:
            plugins = self.zuul.merged_var(name, 'devstack_plugins')
            self.assertIn(THIS_PLUGIN, plugins, name)
            required = [p if isinstance(p, str) else p['name']
                        for j in self.zuul.ancestry(name)
                        if j in self.zuul.jobs
                        for p in as_list(
                            self.zuul.jobs[j].get('required-projects'))]
            self.assertIn('x/nova-revert-lock', required, name)
            self.assertIn('openstack/nova', required, name)

    def test_devstack_jobs_run_the_resize_and_migrate_tests(self):
        for name in self._devstack_jobs():
            regex = re.compile(self.zuul.var(name, 'tempest_test_regex'))
            for test in TEMPEST_MUST_MATCH:
                self.assertTrue(regex.search(test), '%s: %s' % (name, test))
            for test in TEMPEST_MUST_NOT_MATCH:
                self.assertFalse(regex.search(test), '%s: %s' % (name, test))

    def test_devstack_jobs_are_multinode_and_pinned(self):
        series = set()
        for name in self._devstack_jobs():
            nodeset = self.zuul.inherited(name, 'nodeset')
            self.assertTrue(nodeset, name)
            if nodeset in self.zuul.nodesets:
                nodes = self.zuul.nodesets[nodeset]['nodes']
                self.assertEqual(2, len(nodes), name)
            else:
                self.assertIn('two-node', nodeset, name)
            ref = self.zuul.inherited(name, 'override-checkout')
            self.assertTrue(ref, '%s: devstack is not pinned' % name)
            series.add(ref)
        self.assertTrue({'ussuri-eol', 'train-eol'} <= series, series)


class TestToxConfig(unittest.TestCase):

    def test_run_tests_default_envs_exist(self):
        # tools/run-tests runs tox.ini's envlist: one list of defaults.
        out = subprocess.run(
            ['bash', '-c', 'source <(sed -n "/^DEFAULT_ENVS=/,/^fi$/p" '
             'tools/run-tests) && echo "$DEFAULT_ENVS"'],
            cwd=path(), stdout=subprocess.PIPE, universal_newlines=True,
            check=True).stdout.split()
        envs = tox_envs()
        for env in out:
            self.assertIn(env, envs)
        # all-ussuri: functional-ussuri, rpc and start-ussuri in one
        # virtualenv.
        for env in ('pep8', 'all-ussuri', 'docs', 'releasenotes',
                    'lint-ci', 'cloud-short'):
            self.assertIn(env, out)
