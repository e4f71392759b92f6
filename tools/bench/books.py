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

"""Check the books (each host's ``vcpus_used``) around a confirm or revert.

One job: judge one cycle's books at the moments they are meant to be
consistent, each release of ``COMPUTE_RESOURCE_SEMAPHORE`` during the
operation and once more after a full periodic task on each host has
followed it. A cycle is wrong if a host read below zero
(``negative``), if the host giving the instance up still counted it when
its own claim drop released the lock, or the host keeping it counted it
twice (``double``), if the host keeping the instance lost it (``lost``),
or if the books were still off at the end (``stuck``). A revert has one
more window, left open upstream and not part of bug 1879878: between the
destination's status change and the source's ``finish_revert_resize``, a
periodic task counts the instance on the destination's side or on
neither; such readings are counted separately (``handback``), not as
wrong.
"""

import collections

#: Migration statuses that end the operation's window.
FINAL_STATUSES = ('confirmed', 'reverted')
#: The tracker's periodic task, as the lock tracer names it.
PERIODIC = '_update_available_resource'


class Cycle(object):
    """What one confirm or revert did to the books."""

    def __init__(self, kind, giver, keeper, vcpus):
        self.kind = kind
        self.giver = giver      # host giving the instance up
        self.keeper = keeper    # host keeping it
        self.vcpus = vcpus
        self.checking = False
        self.status_final = False
        self.dropped = False
        self.done_at = None     # perf_counter when the operation finished
        self.synced = set()     # hosts with a full periodic after done_at
        self.problems = collections.OrderedDict()
        self.handback = 0

    def problem(self, category, text):
        self.problems.setdefault(category, text)

    def in_handback(self, host):
        """In the revert's hand-back window for ``host``?"""
        return (self.kind == 'revert' and self.status_final and
                host not in self.synced)


class Books(object):
    """The checks of one mode's cycles.

    :param usage: callable(host) -> that host's ``vcpus_used``
    :param sections: names of the lock sections that drop the claim in
        this mode (see ``cycle_driver.DROP_SECTIONS``)
    """

    def __init__(self, usage, sections):
        self.usage = usage
        self.sections = sections

    def released(self, cycle, fname, host, acquired):
        """``fname`` on ``host`` released the lock it got at ``acquired``."""
        if fname == PERIODIC and cycle.done_at is not None and (
                acquired > cycle.done_at):
            cycle.synced.add(host)
        if (fname in self.sections and host == cycle.giver and
                cycle.status_final and not cycle.dropped):
            cycle.dropped = True
            left = self.usage(cycle.giver)
            if left < 0:
                cycle.problem('negative', '%s read %d after its claim drop'
                              % (host, left))
            elif left > 0:
                cycle.problem('double', '%s still counted %d after its '
                              'claim drop' % (host, left))
        self.check(cycle)

    def check(self, cycle):
        giver, keeper = self.usage(cycle.giver), self.usage(cycle.keeper)
        v = cycle.vcpus
        for host, used in ((cycle.giver, giver), (cycle.keeper, keeper)):
            if used < 0:
                cycle.problem('negative', '%s read %d' % (host, used))
        if keeper > v:
            cycle.problem('double', '%s (keeps it) read %d' % (
                cycle.keeper, keeper))
        elif keeper < v:
            if cycle.in_handback(cycle.keeper):
                cycle.handback += 1
            else:
                cycle.problem('lost', '%s (keeps it) read %d' % (
                    cycle.keeper, keeper))
        if cycle.dropped and giver > 0:
            if cycle.in_handback(cycle.giver):
                cycle.handback += 1
            else:
                cycle.problem('double', '%s (gave it up) read %d' % (
                    cycle.giver, giver))

    def settled(self, cycle):
        """The last check, after a full periodic task on each host."""
        cycle.checking = False
        giver, keeper = self.usage(cycle.giver), self.usage(cycle.keeper)
        if (giver, keeper) != (0, cycle.vcpus):
            cycle.problem('stuck', 'books (%s=%d, %s=%d) after a full '
                          'periodic task on each host' % (
                              cycle.giver, giver, cycle.keeper, keeper))
