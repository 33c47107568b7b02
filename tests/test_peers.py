"""The processes' vote at a chunk boundary (jrl.app.peers.StopVote) and their exchanges
(jrl.app.peers.Peers: gather, agreement), on a fake of jax's
coordination client: a dict for the key-value store, a threading barrier for its barriers.
The real client is exercised by tests/test_pod.py's runs of two processes."""

import threading

import numpy as np

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

    def key_value_delete(self, key):  # jax's: the key and every key under key/
        with self.lock:
            for k in [k for k in self.store if k == key or k.startswith(key + "/")]:
                del self.store[k]

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


def _in_processes(n, body, client=None):
    """``body(peers, p)`` in one thread per process, each with its own ``Peers`` on one
    shared fake client; returns each process's result or raised exception."""
    client, out = client or FakeClient(n), [None] * n

    def process(p):
        try:
            out[p] = body(peers.Peers(client, p, n, timeout=10.0), p)
        except Exception as e:
            out[p] = e

    threads = [threading.Thread(target=process, args=(p,)) for p in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert not any(t.is_alive() for t in threads)
    return out


def _decide_all(client, wishes_per_boundary):
    """Every process's decisions: ``wishes_per_boundary[k][p]`` is process p's wish at
    boundary k; each process runs in its own thread, as the processes do."""

    def body(group, p):
        vote = peers.StopVote(group)
        return [vote.decide(wishes[p]) for wishes in wishes_per_boundary]

    return _in_processes(len(wishes_per_boundary[0]), body, client)


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
    vote = peers.StopVote(peers.Peers(FakeClient(2), 0, 2))  # its peer never comes
    assert vote.peers.timeout_ms == 200
    with pytest.raises(peers.PeerError) as e:
        vote.decide("SIGTERM")
    assert str(e.value).startswith(
        "the processes did not all reach chunk boundary 0 within 0.2 s ($JRL_BOUNDARY_TIMEOUT): "
        "DEADLINE_EXCEEDED"
    )


def test_without_jax_distributed_there_is_no_client():
    with pytest.raises(peers.PeerError, match="jax.distributed is not initialised"):
        peers.coordination()


def test_gather_gives_every_process_every_value_in_process_order():
    def body(group, p):
        return [group.gather("a", f"v{p}"), group.gather("b", str(10 * p))]

    out = _in_processes(3, body)
    assert out == [[["v0", "v1", "v2"], ["0", "10", "20"]]] * 3


def test_the_store_keeps_only_the_last_calls_posts():
    """A run gathers every chunk: process 0 deletes each call's posts at the next call, when
    every process has read them, so the coordination service's store does not grow."""
    client = FakeClient(2)

    def body(group, p):
        return [group.gather("the metrics of iteration", f"{p}-{k}") for k in range(5)]

    out = _in_processes(2, body, client)
    assert out[0] == out[1] == [[f"0-{k}", f"1-{k}"] for k in range(5)]
    assert sorted(client.store) == [
        "jrl/peers/4-the_metrics_of_iteration/0",
        "jrl/peers/4-the_metrics_of_iteration/1",
    ]


def test_an_agreement_stops_every_process_when_one_fails():
    """Process 1 fails inside the block: it raises its own error, the others a PeerError
    naming it; a block where nobody fails lets every process go on."""

    def body(group, p):
        with group.agreement("start the run"):
            pass
        with group.agreement("start the run"):
            if p == 1:
                raise FileExistsError("folder x is taken\nmore detail")
        return "went on"

    out = _in_processes(3, body)
    assert isinstance(out[1], FileExistsError)
    for p in (0, 2):
        assert isinstance(out[p], peers.PeerError) and out[p].process == 1
        assert str(out[p]) == "process 1 could not start the run: folder x is taken"


def test_an_agreement_names_the_lowest_failing_process():
    def body(group, p):
        with group.agreement("resume the run"):
            if p > 0:
                raise ValueError(f"bad {p}")

    out = _in_processes(3, body)
    assert str(out[0]) == "process 1 could not resume the run: bad 1"
    assert [str(e) for e in out[1:]] == ["bad 1", "bad 2"]


def test_a_process_that_does_not_come_is_an_error_naming_what_waited(monkeypatch):
    group = peers.Peers(FakeClient(2), 0, 2, timeout=0.2)
    with pytest.raises(peers.PeerError) as e:
        group.gather("the digests of checkpoint 4", "x")
    assert str(e.value).startswith(
        "the processes did not all reach the digests of checkpoint 4 within 0.2 s "
        "($JRL_BOUNDARY_TIMEOUT): DEADLINE_EXCEEDED"
    )


def test_a_single_process_run_has_no_group_and_its_agreements_just_run():
    assert peers.group() is None
    with pytest.raises(KeyError):  # the block's own error, untouched
        with peers.agreement("start the run"):
            raise KeyError("x")


def test_the_host_metrics_of_every_process_combine_into_the_runs():
    """Each process counts the transfers of its own actors (Sebulba); the run's metrics sum
    the bytes, calls and restarts, average the means (policy lag, bytes per step, batch size,
    wait), take the maximum of its maximum, and keep one version's size."""
    from jrl.app.chunk_work import combine_host_metrics

    p0 = {
        "sebulba/trajectory_bytes": [[100.0]],
        "sebulba/bytes_per_s": [[10.0]],
        "sebulba/params_bytes": [[7.0]],
        "sebulba/policy_lag": [[1.0]],
        "sebulba/policy_lag_max": [[1.0]],
        "ray/actor_restarts": [[0.0]],
        "ray/bytes_per_step": [[50.0]],
        "inference/calls": [[16.0]],
        "inference/batch_size": [[2.0]],
        "inference/wait_ms": [[0.5]],
    }
    p1 = {**p0, "sebulba/policy_lag": [[2.0]], "sebulba/policy_lag_max": [[3.0]]}
    p1.update({"ray/bytes_per_step": [[70.0]], "inference/batch_size": [[1.0]]})
    p1.update({"inference/calls": [[48.0]], "inference/wait_ms": [[0.1]]})
    p1["ray/actor_restarts"] = [[1.0]]
    out = {k: np.round(v, 9).tolist() for k, v in combine_host_metrics([p0, p1]).items()}
    assert out == {
        "sebulba/trajectory_bytes": [[200.0]],
        "sebulba/bytes_per_s": [[20.0]],
        "sebulba/params_bytes": [[7.0]],
        "sebulba/policy_lag": [[1.5]],
        "sebulba/policy_lag_max": [[3.0]],
        "ray/actor_restarts": [[1.0]],
        "ray/bytes_per_step": [[60.0]],
        "inference/calls": [[64.0]],
        "inference/batch_size": [[1.25]],  # (16 x 2 + 48 x 1) / 64 calls
        "inference/wait_ms": [[0.26]],  # (32 x 0.5 + 48 x 0.1) / 80 requests
    }
