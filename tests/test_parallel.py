"""The device-axis helpers outside a sharded trace (inside one, see tests/test_distributed.py)."""

import jax
import jax.numpy as jnp
import numpy as np

from jrl import parallel


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


def test_off_policy_gate_is_a_branch_in_the_runner():
    """DQN's learning_starts gate stays a cond in the runner's vmapped chunk (no update computed
    before it)."""
    import jrl.agents
    import jrl.envs
    from jrl.experiment import make_config
    from jrl.run import anakin

    env, params = jrl.envs.make("CartPole-v1")
    config = make_config(
        "dqn",
        "CartPole-v1",
        total_steps=2_000,
        num_envs=2,
        batch_size=8,
        buffer_size=64,
        learning_starts=40,
        hidden_sizes=(8,),
    )
    built = jrl.agents.get("dqn").build(config, env, params)
    keys = jax.random.split(jax.random.key(0), 2)
    states = anakin.abstract_states(built.algorithm, keys)
    jaxpr = jax.make_jaxpr(anakin.make_chunk(built.algorithm, 3))(states)
    text = str(jaxpr)
    assert "pmin" in text and "cond[" in text
    # and it gates: a run of 10 iterations x 2 envs (20 steps < 40) makes no update
    res = anakin.run(built.algorithm, keys, 10, num_reports=1)
    np.testing.assert_array_equal(res.metrics["train/updates"], 0)


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
