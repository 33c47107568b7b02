"""Exact request schedule of the Ray actor pool (jrl/run/ray_actors.py ``RayPool.publish``):
which trajectories a published version lets the actors start, under the staleness bound and
the queue size, without starting Ray (a stub stands in for ``ray.put``) (tools/mutation.py's
targets)."""

import sys
import types
from types import SimpleNamespace

import pytest

from jrl.run.ray_actors import RayPool

# a schedule that never ends (a loop that does not advance) fails here, in the test, instead of
# hanging until the suite's timeout ends the whole worker
pytestmark = pytest.mark.timeout(30, method="signal")


@pytest.fixture
def pool(monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", types.SimpleNamespace(put=lambda value: ("ref", value)))

    def make(max_staleness, queue_size, num_iterations=10, start=0, count=2):
        p = RayPool.__new__(RayPool)
        options = SimpleNamespace(max_staleness=max_staleness, queue_size=queue_size)
        p.runner = SimpleNamespace(options=options, num_iterations=num_iterations, start=start)
        p.count, p.deaths = count, [0] * count
        p.pending = [[] for _ in range(count)]
        p.next_j, p.version, p.ref = start, -1, None
        p._request = lambda a, j: request(a, j)
        return p

    calls = []

    def request(a, j):
        calls.append(j)
        assert len(calls) <= 1000, "publish requests trajectories without end"
        return (a, j)

    return make


def requested(p):
    return [[j for j, _ in actor] for actor in p.pending]


def test_a_version_lets_the_actors_run_up_to_its_staleness_bound(pool):
    """max_staleness 2, queue 4: version v allows trajectories up to v + 2, every actor one
    each, in order; the next version adds only the new ones."""
    p = pool(2, 4)
    p.publish(0, "params0")
    assert requested(p) == [[0, 1, 2], [0, 1, 2]] and p.next_j == 3
    assert p.version == 0 and p.ref == ("ref", "params0")
    p.publish(1, "params1")
    assert requested(p) == [[0, 1, 2, 3], [0, 1, 2, 3]] and p.next_j == 4
    assert [ref for _, ref in p.pending[1]] == [(1, 0), (1, 1), (1, 2), (1, 3)]


def test_the_queue_size_caps_how_far_ahead_and_the_run_caps_the_last(pool):
    p = pool(3, 1)  # the queue holds 1: one trajectory ahead, whatever the staleness allows
    p.publish(0, None)
    assert requested(p) == [[0, 1], [0, 1]]
    p = pool(0, 4)  # synchronous: only the version's own trajectory
    p.publish(0, None)
    assert requested(p) == [[0], [0]]
    p = pool(2, 4, num_iterations=5, start=3, count=1)  # resumed at 3 of 5 iterations
    p.publish(3, None)
    assert requested(p) == [[3, 4]] and p.next_j == 5
    p.publish(4, None)
    assert requested(p) == [[3, 4]]


def test_restarts_count_every_death(pool):
    p = pool(0, 1, count=3)
    p.deaths = [2, 0, 1]
    assert p.restarts == 3
