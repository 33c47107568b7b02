"""Exact behaviour of Sebulba's parameter store (the staleness bound) and of its bfloat16
transfers (jrl/run/sebulba/actors.py, transfers.py), without threads or host envs: hand-made
versions and arrays (tools/mutation.py's targets)."""

import threading
from types import SimpleNamespace

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jrl.core.types import Transition
from jrl.parts.nstep import NStepTransition
from jrl.run.sebulba import actors, transfers, waits

# a wait that never ends fails its test here instead of hanging the suite
pytestmark = pytest.mark.timeout(60, method="signal")


def test_store_hands_out_a_version_at_or_above_the_minimum(monkeypatch):
    """A wait for version v returns at once when the store holds v or newer, and waits (here:
    times out) when it holds v - 1; a stopped store returns None."""
    monkeypatch.setenv(waits.WAIT_ENV, "0.3")
    stop = threading.Event()
    store = actors.Store(stop)
    with pytest.raises(waits.ActorTimeout, match="version 0"):
        store.wait(0, "nobody")  # nothing published: version -1
    store.publish(2, "v2")
    assert store.wait(2) == (2, "v2")
    assert store.wait(1) == (2, "v2")
    assert store.wait(-5) == (2, "v2")
    with pytest.raises(waits.ActorTimeout, match="thread 7 waited .* version 3"):
        store.wait(3, "thread 7")
    stop.set()
    assert store.wait(3) is None
    assert store.wait(0) is None


def test_actor_asks_for_the_version_its_staleness_allows(monkeypatch):
    """Trajectory j with max_staleness k waits for version j - k: with version 3 published,
    trajectory 5 under k = 2 gets it (5 - 2 = 3), under k = 1 it waits (4 > 3)."""
    monkeypatch.setenv(waits.WAIT_ENV, "0.3")
    for k, ok in ((2, True), (3, True), (1, False)):
        stop = threading.Event()
        runner = SimpleNamespace(
            options=SimpleNamespace(max_staleness=k), store=actors.Store(stop), expand=None
        )
        runner.store.publish(3, ({"w": jnp.ones(2)}, jnp.arange(2)))
        thread = actors.ActorThread.__new__(actors.ActorThread)
        thread.index, thread.runner, thread.device = 0, runner, jax.devices()[0]
        if ok:
            version, state, keys = thread._params(5)
            assert version == 3
            np.testing.assert_array_equal(state["w"], [1.0, 1.0])
            np.testing.assert_array_equal(keys, [0, 1])
        else:
            with pytest.raises(waits.ActorTimeout, match="version 4"):
                thread._params(5)


def test_actor_widens_bfloat16_parameters_with_the_runners_expand(monkeypatch):
    monkeypatch.setenv(waits.WAIT_ENV, "0.3")
    like = {"w": jnp.zeros(2, jnp.float32)}
    runner = SimpleNamespace(
        options=SimpleNamespace(max_staleness=0),
        store=actors.Store(threading.Event()),
        expand=lambda s: transfers.expand(s, like),
    )
    runner.store.publish(0, (transfers.compress({"w": jnp.array([1.5, -2.0])}, "bfloat16"), 0))
    thread = actors.ActorThread.__new__(actors.ActorThread)
    thread.index, thread.runner, thread.device = 0, runner, jax.devices()[0]
    _, state, _ = thread._params(0)
    assert state["w"].dtype == jnp.float32
    np.testing.assert_array_equal(state["w"], [1.5, -2.0])


def test_compress_rounds_only_float32_leaves_to_bfloat16():
    tree = {
        "f": np.array([1.0 + 2.0**-10, 3.0], np.float32),
        "i": np.array([1, 2], np.int32),
        "u": np.array([255], np.uint8),
        "b": np.array([True]),
    }
    out = transfers.compress(tree, "bfloat16")
    assert out["f"].dtype == jnp.bfloat16
    # bfloat16 keeps 8 significant bits: 1 + 2^-10 rounds to 1
    np.testing.assert_array_equal(np.asarray(out["f"], np.float32), [1.0, 3.0])
    assert [out[k].dtype for k in "iub"] == [np.int32, np.uint8, np.bool_]
    assert transfers.compress(tree, "float32") is tree
    back = transfers.expand(out, tree)
    assert [back[k].dtype for k in "fiub"] == [np.float32, np.int32, np.uint8, np.bool_]
    assert back["i"] is out["i"]  # an uncompressed leaf is passed through


def test_compressed_trajectory_keeps_its_extras_and_items_their_rewards():
    f = lambda *v: np.array(v, np.float32)
    batch = Transition(f(0.5), np.array([1], np.int32), f(1.0), f(0), f(0), f(0.25), {"lp": f(0.1)})
    out = transfers.compress_trajectory(batch, "bfloat16")
    assert out.observation.dtype == out.reward.dtype == jnp.bfloat16
    assert out.extras["lp"].dtype == np.float32 and out.action.dtype == np.int32
    flag, one = np.array([False]), np.array([1], np.int32)
    items = NStepTransition(f(0.5), one, f(1.0 + 2.0**-10), f(0.99), f(0.75), flag, flag, one)
    packed = transfers.compress_items(items, "bfloat16")
    assert packed.observation.dtype == packed.next_observation.dtype == jnp.bfloat16
    assert packed.reward.dtype == packed.discount.dtype == np.float32
    np.testing.assert_array_equal(packed.reward, items.reward)
    assert transfers.compress_items(items, "float32") is items


def test_nbytes_sums_every_leaf():
    tree = {"a": np.zeros((3, 2), np.float32), "b": [np.zeros(5, np.uint8), jnp.zeros(2)]}
    assert transfers.nbytes(tree) == 24 + 5 + 8


class FakeCondition:
    """A condition whose ``wait`` records its timeout and moves the fake clock on by 0.125 s
    (an exact binary fraction), whatever the timeout; it refuses to wait more than 10 times."""

    def __init__(self, clock):
        self.clock, self.waits = clock, []

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def notify_all(self):
        pass

    def wait(self, timeout):
        self.waits.append(timeout)
        assert len(self.waits) <= 10, "the wait never ends"
        self.clock.now += 0.125


def test_store_polls_every_tenth_of_a_second_until_its_deadline(monkeypatch):
    """Limit 0.25 s on a fake clock: at 0 s, 0.25 s are left (wait min(0.1, 0.25) = 0.1); at
    0.125 s, 0.125 s (wait 0.1); at 0.25 s none: ActorTimeout, after exactly two waits."""
    clock = SimpleNamespace(now=0.0)
    monkeypatch.setattr(actors, "time", SimpleNamespace(monotonic=lambda: clock.now))
    monkeypatch.setenv(waits.WAIT_ENV, "0.25")
    store = actors.Store(threading.Event())
    store._cond = FakeCondition(clock)
    with pytest.raises(waits.ActorTimeout):
        store.wait(0)
    assert store._cond.waits == [0.1, 0.1]
    # a version published during the wait is returned without a timeout
    clock.now = 0.0
    store._cond = FakeCondition(clock)
    store._cond.wait = lambda timeout: store.publish(4, "v4")
    assert store.wait(3) == (4, "v4")
