"""The device-axis helpers outside a sharded trace (inside one, see tests/test_distributed.py)."""

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jrl.core import parallel


def test_local_keys_on_one_device():
    key = jax.random.key(7)
    np.testing.assert_array_equal(
        jax.random.key_data(parallel.local_keys(key, 3)),
        jax.random.key_data(jax.random.split(key, 3)),
    )
    one = parallel.local_keys(key, 1)  # a single item takes the key itself: no split to pay for
    assert one.shape == (1,)
    np.testing.assert_array_equal(jax.random.key_data(one[0]), jax.random.key_data(key))


def test_reductions_are_identities_outside_a_sharded_trace():
    x = {"a": jnp.arange(3.0)}
    assert (
        parallel.current_axis() is None
        and parallel.axis_size() == 1
        and int(parallel.axis_index()) == 0
    )
    np.testing.assert_array_equal(parallel.pmean(x)["a"], x["a"])
    np.testing.assert_array_equal(parallel.psum(x)["a"], x["a"])
    np.testing.assert_allclose(parallel.global_mean(jnp.array([1.0, 2.0, 6.0])), 3.0)
    np.testing.assert_allclose(
        parallel.global_mean(jnp.array([1.0, 3.0]), jnp.array([3.0, 1.0])), 1.5
    )


def _gated(x):
    """Doubles x where every run has x > 2 (the gate reduced with all_runs)."""
    ready = parallel.all_runs(x > 2.0)
    return jax.lax.cond(ready, lambda v: v * 2.0, lambda v: v, x)


def test_all_runs_is_the_predicate_outside_the_runs_axis():
    assert bool(parallel.all_runs(jnp.asarray(True))) and not bool(
        parallel.all_runs(jnp.asarray(False))
    )
    # plain vmap without the axis: the predicate stays per run (cond becomes a select)
    out = jax.vmap(_gated)(jnp.array([1.0, 3.0]))
    np.testing.assert_array_equal(out, [1.0, 6.0])
    assert "select_n" in str(jax.make_jaxpr(jax.vmap(_gated))(jnp.array([1.0, 3.0])))


def test_all_runs_reduces_over_the_runs_and_keeps_the_branch():
    def mapped(xs):
        with parallel.runs_axis():
            return jax.vmap(_gated, axis_name=parallel.RUNS)(xs)

    np.testing.assert_array_equal(mapped(jnp.array([3.0, 4.0])), [6.0, 8.0])  # every run ready
    np.testing.assert_array_equal(
        mapped(jnp.array([1.0, 4.0])), [1.0, 4.0]
    )  # one is not: none branch
    jaxpr = str(jax.make_jaxpr(mapped)(jnp.array([3.0, 4.0])))
    assert "cond[" in jaxpr and "select_n" not in jaxpr  # an unbatched predicate: a real branch


def _any_gated(x):
    """Doubles x where x > 2, inside a branch taken when any run has x > 2 (any_run)."""
    return jax.lax.cond(
        parallel.any_run(x > 2.0), lambda v: jnp.where(v > 2.0, v * 2.0, v), lambda v: v, x
    )


def test_any_run_is_the_predicate_outside_the_runs_axis():
    assert bool(parallel.any_run(jnp.asarray(True))) and not bool(
        parallel.any_run(jnp.asarray(False))
    )
    assert "select_n" in str(jax.make_jaxpr(jax.vmap(_any_gated))(jnp.array([1.0, 3.0])))


def test_any_run_reduces_over_the_runs_and_keeps_the_branch():
    def mapped(xs):
        with parallel.runs_axis():
            return jax.vmap(_any_gated, axis_name=parallel.RUNS)(xs)

    np.testing.assert_array_equal(mapped(jnp.array([1.0, 4.0])), [1.0, 8.0])  # one run: branch
    np.testing.assert_array_equal(mapped(jnp.array([1.0, 2.0])), [1.0, 2.0])  # none: no branch
    jaxpr = str(jax.make_jaxpr(mapped)(jnp.array([1.0, 4.0])))
    # an unbatched predicate: a real branch (the select inside it is the per-run where)
    assert "cond[" in jaxpr and "pmax" in jaxpr


def _small_dqn(learning_starts: int):
    """A tiny DQN on CartPole-v1 (2 envs, batch 8, buffer 64): its algorithm."""
    import jrl.agents
    import jrl.envs

    from jrl.app.api import make_config

    env, params = jrl.envs.make("CartPole-v1")
    config = make_config(
        "dqn",
        "CartPole-v1",
        total_steps=2_000,
        num_envs=2,
        batch_size=8,
        buffer_size=64,
        learning_starts=learning_starts,
        hidden_sizes=(8,),
    )
    return jrl.agents.get("dqn").build(config, env, params).algorithm


def test_off_policy_gate_is_a_branch_in_the_runner():
    """DQN's learning_starts gate stays a cond in the runner's vmapped chunk (no update computed
    before it)."""
    from jrl.run import anakin

    algorithm = _small_dqn(learning_starts=40)
    keys = jax.random.split(jax.random.key(0), 2)
    states = anakin.abstract_states(algorithm, keys)
    jaxpr = jax.make_jaxpr(anakin.make_chunk(algorithm, 3))(states)
    text = str(jaxpr)
    assert "pmin" in text and "cond[" in text
    # and it gates: a run of 10 iterations x 2 envs (20 steps < 40) makes no update
    res = anakin.run(algorithm, keys, 10, num_reports=1)
    np.testing.assert_array_equal(res.metrics["train/updates"], 0)


def test_one_run_chunk_steps_without_the_runs_vmap():
    """A chunk of one run is ``scan(step)`` on the unbatched state, bitwise, with the same
    ``[R, ...]`` shapes in and out as the vmapped path; DQN's gate stays a branch there (the
    run's own predicate, no reduction over an axis that is not bound)."""
    from jrl.app.checkpoint import to_host
    from jrl.run import anakin

    algorithm = _small_dqn(learning_starts=8)
    keys = jax.random.split(jax.random.key(0), 1)
    length = 12
    states = anakin.abstract_states(algorithm, keys)
    text = str(jax.make_jaxpr(anakin.make_chunk(algorithm, length))(states))
    assert "cond[" in text and "pmin" not in text

    def unbatched(states):
        one = jax.tree.map(lambda x: x[0], states)
        return jax.lax.scan(lambda s, _: algorithm.step(s), one, None, length=length)

    want_state, want_metrics = jax.jit(unbatched)(anakin.init_runs(algorithm, keys))
    got_state, got_metrics = anakin.make_chunk(algorithm, length)(anakin.init_runs(algorithm, keys))
    assert anakin.num_runs(got_state) == 1
    assert {k: v.shape for k, v in got_metrics.items()} == {
        k: (length, 1, *v.shape[1:]) for k, v in want_metrics.items()
    }
    got_one = jax.tree.map(lambda x: x[0], got_state)
    assert jax.tree.structure(got_one) == jax.tree.structure(want_state)
    chex.assert_trees_all_equal(to_host(got_one), to_host(want_state))  # keys as their data
    chex.assert_trees_all_equal(jax.tree.map(lambda x: x[:, 0], got_metrics), want_metrics)
    assert int(got_metrics["train/updates"].sum()) > 0  # it learnt: the gate opened


def test_chunk_programs_compile_on_one_thread_in_order_of_first_use():
    """The runner's chunk programs: each distinct length compiled once, in the order the run
    first needs it, on a background thread that sees the caller's context (the runs-axis
    name the trace reads); the caller's wait is the run's compile time; close() cancels what
    has not started."""
    import threading

    from jrl.run import anakin

    seen, started, gate = [], threading.Event(), threading.Event()

    def compile_chunk(n):
        seen.append((n, threading.current_thread().name, parallel.runs_axis_name()))
        if n == 7:
            started.set()
            gate.wait(10)
        return f"program {n}"

    spec = {"x": jax.ShapeDtypeStruct((2, 3), jnp.float32)}
    with parallel.runs_axis("outer"):
        programs = anakin._Programs(compile_chunk, [5, 5, 2, 5, 2], spec)
    with programs:
        assert programs[5] == "program 5" and programs[2] == "program 2" and programs[5]
    assert [n for n, _, _ in seen] == [5, 2]
    assert all(name.startswith("jrl-compile") and axis == "outer" for _, name, axis in seen)
    assert programs.waited > 0

    seen.clear()
    programs = anakin._Programs(compile_chunk, [7, 3], spec)
    assert started.wait(10)
    programs.close()  # 7 is under way and finishes; 3 never starts
    gate.set()
    programs._pool.shutdown(wait=True)
    assert [n for n, _, _ in seen] == [7]

    assert not programs.spec_differs({"x": jax.ShapeDtypeStruct((2, 3), jnp.float32)})
    assert programs.spec_differs({"x": jax.ShapeDtypeStruct((2, 3), jnp.int32)})
    assert programs.spec_differs({"x": jax.ShapeDtypeStruct((2, 4), jnp.float32)})
    assert programs.spec_differs({"y": jax.ShapeDtypeStruct((2, 3), jnp.float32)})


# --------------------------------------------------------------------------
# folding_vmap
# --------------------------------------------------------------------------


def _probe(sizes):
    """An identity whose vmap rule records the batch size it is traced with."""

    @jax.custom_batching.custom_vmap
    def probe(x):
        return x

    @probe.def_vmap
    def rule(axis_size, in_batched, x):
        sizes.append(axis_size)
        return x, in_batched[0]

    return probe


def _env_like(sizes):
    """fn(key, state, action, shared): per-item work, a key draw and a shared argument."""
    probe = _probe(sizes)

    def fn(key, state, action, shared):
        noise = jax.random.normal(key, state["x"].shape)
        x = probe(state["x"]) * shared["scale"] + action + noise
        return {"x": x, "t": state["t"] + 1}, jnp.sum(x**2)

    return fn


def _args(r=None, n=4):
    lead = (n,) if r is None else (r, n)
    keys = jax.random.split(jax.random.key(3), int(np.prod(lead))).reshape(lead)
    x = jnp.arange(np.prod(lead) * 2, dtype=jnp.float32).reshape(lead + (2,))
    state = {"x": x, "t": jnp.zeros(lead, jnp.int32)}
    action = jnp.linspace(-1.0, 1.0, int(np.prod(lead))).reshape(lead + (1,))
    return keys, state, action, {"scale": jnp.float32(0.5)}


def test_folding_vmap_unbatched_is_vmap():
    sizes = []
    fn = _env_like(sizes)
    axes = (0, 0, 0, None)
    chex.assert_trees_all_equal(
        parallel.folding_vmap(fn, axes)(*_args()), jax.vmap(fn, in_axes=axes)(*_args())
    )


def test_folding_vmap_folds_an_outer_vmap_into_one_batch():
    """Under vmap over R=3 runs of N=4 items, fn is batched as one batch of 12 items (the
    probe's rule sees 12; nested, it never does), and the values equal the nested vmap's
    bitwise."""
    axes = (0, 0, 0, None)
    folded_sizes, nested_sizes = [], []
    folded = jax.jit(
        jax.vmap(parallel.folding_vmap(_env_like(folded_sizes), axes), in_axes=(0, 0, 0, None))
    )
    nested = jax.jit(
        jax.vmap(jax.vmap(_env_like(nested_sizes), in_axes=axes), in_axes=(0, 0, 0, None))
    )
    out = folded(*_args(3))
    chex.assert_trees_all_equal(out, nested(*_args(3)))
    assert out[0]["x"].shape == (3, 4, 2) and out[1].shape == (3, 4)
    # (the rule also sees N=4 when custom_vmap traces fn's plain batch: tracing, not the program)
    assert 12 in folded_sizes and 12 not in nested_sizes


def test_folding_vmap_two_outer_levels_and_an_unbatched_mapped_argument():
    """Two outer vmaps fold level by level (2 x 3 x 4 = 24 items); an action shared by the
    outer level (not batched by it) is broadcast over it first."""
    axes = (0, 0, 0, None)
    keys, state, action, shared = _args(6)
    keys, state = jax.tree.map(lambda x: x.reshape((2, 3) + x.shape[1:]), (keys, state))
    one_action = action[0]  # [N, 1]: the same actions for every outer element
    sizes = []
    f = parallel.folding_vmap(_env_like(sizes), axes)
    outer = (0, 0, None, None)
    got = jax.vmap(jax.vmap(f, in_axes=outer), in_axes=outer)(keys, state, one_action, shared)
    ref_fn = jax.vmap(_env_like([]), in_axes=axes)
    ref = jax.vmap(jax.vmap(ref_fn, in_axes=outer), in_axes=outer)(keys, state, one_action, shared)
    chex.assert_trees_all_equal(got, ref)
    assert 24 in sizes


def test_folding_vmap_nests_when_the_shared_argument_is_batched_outside():
    """A per-run shared argument (e.g. swept env params) cannot fold without copying it per
    item: the two vmaps nest, with the same values as plain vmap."""
    axes = (0, 0, 0, None)
    keys, state, action, _ = _args(3)
    shared = {"scale": jnp.array([0.5, 1.0, 2.0], jnp.float32)}
    sizes = []
    got = jax.vmap(parallel.folding_vmap(_env_like(sizes), axes))(keys, state, action, shared)
    ref = jax.vmap(jax.vmap(_env_like([]), in_axes=axes))(keys, state, action, shared)
    chex.assert_trees_all_equal(got, ref)
    assert 12 not in sizes


def test_folding_vmap_zero_size_leaves_and_bad_axes():
    f = parallel.folding_vmap(lambda x, e: (x * 2.0, e), (0, 0))
    x, e = jnp.ones((2, 3, 1)), jnp.zeros((2, 3, 0))  # MJX states hold 0-size arrays
    y, e2 = jax.vmap(f)(x, e)
    assert y.shape == (2, 3, 1) and e2.shape == (2, 3, 0)
    with pytest.raises(ValueError, match="must be 0 or None"):
        parallel.folding_vmap(lambda x: x, (1,))
