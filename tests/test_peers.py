"""The processes' vote at a chunk boundary (jrl.app.peers.StopVote), on a fake of jax's
coordination client: a dict for the key-value store, a threading barrier for its barriers.
The real client is exercised by tests/test_distributed.py's two-process SIGTERM test."""

import threading

import pytest
from jrl.app import peers


class FakeClient:
    """The store and barriers one run's processes share; ``wait_at_barrier`` meets
    ``parties`` threads (or raises as jax does on a timeout)."""

    def __init__(self, parties: int):
        self.store, self.lock = {}, threading.Lock()
        self.barriers: dict[str, threading.Barrier] = {}
        self.parties = parties

    def key_value_set(self, key, value):
        with self.lock:
            assert key not in self.store, f"{key} posted twice"
            self.store[key] = value

    def key_value_dir_get(self, prefix):
        with self.lock:
            return [(k, v) for k, v in sorted(self.store.items()) if k.startswith(prefix)]

    def wait_at_barrier(self, barrier_id, timeout_in_ms):
        with self.lock:
            barrier = self.barriers.setdefault(barrier_id, threading.Barrier(self.parties))
        try:
            barrier.wait(timeout_in_ms / 1000)
        except threading.BrokenBarrierError:
            raise RuntimeError(f"DEADLINE_EXCEEDED: Barrier timed out. Id: {barrier_id}") from None


def _decide_all(client, wishes_per_boundary, timeout=10.0):
    """Every process's decisions: ``wishes_per_boundary[k][p]`` is process p's wish at
    boundary k; each process runs in its own thread, as the processes do."""
    n = len(wishes_per_boundary[0])
    out = [[] for _ in range(n)]

    def process(p):
        vote = peers.StopVote(client, p, timeout=timeout)
        for wishes in wishes_per_boundary:
            out[p].append(vote.decide(wishes[p]))

    threads = [threading.Thread(target=process, args=(p,)) for p in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert not any(t.is_alive() for t in threads)
    return out


def test_every_process_takes_the_same_decision_at_each_boundary():
    wishes = [
        [None, None, None],  # nobody asks: all go on
        [None, "SIGTERM", None],  # one asks: all stop, naming it
        [None, "SIGINT", "SIGTERM"],  # two ask: the lowest-numbered process's reason
        ["SIGTERM", None, "SIGINT"],
    ]
    out = _decide_all(FakeClient(3), wishes)
    expected = [None, ("SIGTERM", 1), ("SIGINT", 1), ("SIGTERM", 0)]
    assert out == [expected] * 3


def test_a_wish_counts_only_at_its_own_boundary():
    """A post is keyed by its boundary: a process that asked to stop at boundary 1 does not
    make boundary 2 stop (a run that goes on past a decision never does, but the keys of a
    boundary must not leak into the next)."""
    out = _decide_all(FakeClient(2), [[None, None], ["SIGTERM", None], [None, None]])
    assert out == [[None, ("SIGTERM", 0), None]] * 2


def test_a_peer_that_does_not_reach_the_boundary_is_an_error_naming_the_bound(monkeypatch):
    monkeypatch.setenv(peers.BOUNDARY_TIMEOUT_ENV, "0.2")
    vote = peers.StopVote(FakeClient(2), 0)  # its peer never comes
    assert vote.timeout_ms == 200
    with pytest.raises(peers.PeerError) as e:
        vote.decide("SIGTERM")
    assert str(e.value).startswith(
        "the processes did not all reach chunk boundary 0 within 0.2 s ($JRL_BOUNDARY_TIMEOUT): "
        "DEADLINE_EXCEEDED"
    )


def test_without_jax_distributed_there_is_no_client():
    with pytest.raises(peers.PeerError, match="jax.distributed is not initialised"):
        peers.coordination()
