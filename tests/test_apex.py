"""Ape-X DQN (agents/value/apex.py) on the Sebulba runner: Ape-X's per-env epsilons, n-step
transitions cut from the actors' blocks (jrl.parts.nstep.trajectory_nsteps) and their initial
priorities by hand; threads and Ray actors give the same run, which resumes exactly; bad
input exits 2; a killed Ray actor is replaced; Ape-X learns CartPole with 2 Ray actors."""

import os
import signal
import subprocess
import sys

import jax
import jax.numpy as jnp
import jrl.agents
import jrl.envs
import numpy as np
import pytest
from jrl.agents.value import apex

from jrl.app import api as experiment
from jrl.app import cli
from jrl.core.types import Transition
from jrl.parts import nstep
from jrl.run import evaluation, sebulba
from jrl.run.anakin import RunHooks

gymnasium = pytest.importorskip("gymnasium")  # the test extra installs it
pytestmark = pytest.mark.filterwarnings("ignore:os.fork:RuntimeWarning", "ignore::UserWarning")

SMALL = dict(
    num_envs=4,
    steps_per_iteration=8,
    updates_per_iteration=2,
    batch_size=16,
    buffer_size=256,
    learning_starts=32,
    hidden_sizes=(16, 16),
)


def build(**overrides):
    env, params = jrl.envs.make("gymnasium:CartPole-v1")
    config = experiment.make_config("apex", "CartPole-v1", **{**SMALL, **overrides})
    return env, config, jrl.agents.get("apex").build(config, env, params)


def run(built, env, config, iterations, options, seeds=1, first_seed=0, **kwargs):
    """``sebulba.run`` of ``seeds`` runs, seeds ``first_seed, first_seed + 1, ...``."""
    keys = jax.vmap(jax.random.key)(np.arange(first_seed, first_seed + seeds))
    return sebulba.run(
        built.agent,
        env,
        built.spec,
        keys,
        iterations,
        config.num_steps,
        config.num_envs,
        options,
        replay=built.replay,
        **kwargs,
    )


def max_diff(a, b) -> float:
    def plain(x):
        if jnp.issubdtype(x.dtype, jax.dtypes.prng_key):
            x = jax.random.key_data(x)
        return np.asarray(x, np.float64)

    return max(
        float(np.max(np.abs(plain(x) - plain(y)), initial=0.0))
        for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True)
    )


# --- by hand ---------------------------------------------------------------------------------


def test_apex_epsilons_follow_the_papers_schedule_and_reach_the_actors():
    i = np.arange(8)
    np.testing.assert_allclose(apex.apex_epsilons(i, 8), 0.4 ** (1 + 7 * i / 7), rtol=1e-6)
    np.testing.assert_allclose(apex.apex_epsilons(i[:1], 1), [0.4], rtol=1e-6)
    np.testing.assert_allclose(
        apex.apex_epsilons(np.array([0, 2]), 3, 0.5, 2.0), [0.5, 0.5**3], rtol=1e-6
    )
    np.testing.assert_allclose(apex.apex_epsilons(np.arange(2), 2), [0.4, 0.4**8], rtol=1e-6)
    # the actors' act: env k of the run explores with eps_k (a random action differs from
    # the greedy one with probability eps * (A - 1) / A); envs 2 and 3 of 4 here
    env, config, built = build(epsilon_base=0.8, epsilon_alpha=3.0)
    state = built.agent.init(jax.random.key(0), built.spec)
    obs = jnp.tile(jnp.asarray([[0.1, -0.2, 0.05, 0.3]]), (2, 1))
    greedy = built.agent.policy(state.params, obs, None)
    draws = 4000
    acts = jax.vmap(lambda k: built.replay.act(state, obs, k, jnp.asarray([2, 3]))[0])(
        jax.random.split(jax.random.key(1), draws)
    )
    off = np.asarray(acts != greedy[None]).mean(axis=0)
    want = 0.8 ** (1 + 3 * np.array([2, 3]) / 3) / 2
    np.testing.assert_allclose(off, want, atol=0.025)


def nstep_reference(reward, terminated, truncated, next_obs, gamma, n):
    """Explicit loops: for each start s and env e, sum up to n rewards, stopping after an
    episode's end or at the trajectory's end; bootstrap from the last step's successor."""
    T, N = reward.shape
    out = {k: np.zeros((T, N)) for k in ("reward", "discount", "steps")}
    out["next"] = np.zeros((T, N) + next_obs.shape[2:])
    for s in range(T):
        for e in range(N):
            total, m = 0.0, 0
            for k in range(n):
                t = s + k
                if t >= T:
                    break
                total += gamma**k * reward[t, e]
                m += 1
                if terminated[t, e] or truncated[t, e]:
                    break
            last = s + m - 1
            out["reward"][s, e] = total
            out["discount"][s, e] = gamma**m * (0.0 if terminated[last, e] else 1.0)
            out["steps"][s, e] = m
            out["next"][s, e] = next_obs[last, e]
    return out


def random_trajectory(rng, T, N):
    obs = rng.normal(size=(T, N, 2)).astype(np.float32)
    terminated = rng.random((T, N)) < 0.15
    truncated = (rng.random((T, N)) < 0.1) & ~terminated
    return Transition(
        obs,
        rng.integers(0, 3, (T, N)).astype(np.int32),
        rng.normal(size=(T, N)).astype(np.float32),
        terminated,
        truncated,
        rng.normal(size=(T, N, 2)).astype(np.float32),
        {},
    )


@pytest.mark.parametrize("n", [1, 3])
def test_trajectory_nsteps_match_explicit_loops_and_the_accumulator(n):
    rng = np.random.default_rng(0)
    T, N, gamma = 9, 5, 0.9
    batch = random_trajectory(rng, T, N)
    got = jax.jit(nstep.trajectory_nsteps, static_argnums=2)(batch, gamma, n)
    want = nstep_reference(
        batch.reward, batch.terminated, batch.truncated, batch.next_observation, gamma, n
    )
    np.testing.assert_allclose(got.reward, want["reward"], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(got.discount, want["discount"], rtol=1e-5)
    np.testing.assert_array_equal(got.steps, want["steps"])
    np.testing.assert_array_equal(got.next_observation, want["next"])
    np.testing.assert_array_equal(got.observation, batch.observation)
    np.testing.assert_array_equal(got.action, batch.action)
    # inside the block, the same transitions as the loops' n-step accumulator emits
    acc = nstep.nstep_accumulator(n, gamma)
    state, push = acc.init(jax.tree.map(lambda x: x[0], batch)), jax.jit(acc.push)
    for t in range(T):
        state, item, valid = push(state, jax.tree.map(lambda x, t=t: x[t], batch))
        s = t - n + 1
        if s >= 0:
            assert bool(valid.all())
            for field in ("reward", "discount", "steps", "terminated", "truncated"):
                np.testing.assert_allclose(
                    getattr(item, field), getattr(got, field)[s], rtol=1e-6, err_msg=field
                )


def test_actor_priorities_are_the_td_errors_of_the_acting_parameters():
    """``prepare``: the block's 3-step transitions and, as priorities, |TD error| with the
    actor's online and target parameters (double Q), computed here from the network's
    outputs in NumPy."""
    env, config, built = build(dueling=False)
    k1, k2 = jax.random.split(jax.random.key(3))
    state = built.agent.init(k1, built.spec)
    other = built.agent.init(k2, built.spec)  # a target network apart from the online one
    state = state.replace(target_params=other.params)
    rng = np.random.default_rng(1)
    batch = random_trajectory(rng, 6, 4)
    batch = batch.replace(
        observation=rng.normal(size=(6, 4, 4)).astype(np.float32),
        next_observation=rng.normal(size=(6, 4, 4)).astype(np.float32),
        action=rng.integers(0, 2, (6, 4)).astype(np.int32),
    )
    items, priorities = jax.jit(built.replay.prepare)(state, batch, jax.random.key(0))
    q = lambda p, x: np.asarray(built.network.apply(p, jnp.asarray(x)))
    want = nstep_reference(
        batch.reward, batch.terminated, batch.truncated, batch.next_observation, 0.99, 3
    )
    for t in range(6):
        q_now = q(state.params, batch.observation[t])
        q_next_online = q(state.params, want["next"][t])
        q_next_target = q(state.target_params, want["next"][t])
        greedy = q_next_online.argmax(axis=1)
        target = want["reward"][t] + want["discount"][t] * q_next_target[np.arange(4), greedy]
        td = target - q_now[np.arange(4), batch.action[t]]
        np.testing.assert_allclose(priorities[t], np.abs(td), rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(items.reward, want["reward"], rtol=1e-5, atol=1e-6)


# --- the runner ------------------------------------------------------------------------------


def test_the_learner_inserts_pushed_priorities_learns_and_threads_resume_exactly():
    """Two actor threads, synchronous: every iteration inserts 4 x 8 items with the actors'
    priorities (a FIFO ring: 256 items hold 8 blocks), updates start at 32 items; a run
    resumed from its state and host envs after 6 of 12 iterations ends where the whole run
    did, replay buffer included."""
    env, config, built = build()
    mid = {}
    hooks = RunHooks(on_chunk=lambda states, done, _: mid.setdefault(done, states))
    keep = lambda done, snapshots: mid.setdefault(("envs", done), snapshots)
    options = sebulba.SebulbaOptions(actor_threads=2)
    whole = run(built, env, config, 12, options, num_reports=2, hooks=hooks, on_snapshots=keep)
    buf = whole.final_state.replay
    assert int(buf.size[0]) == 256 and int(buf.position[0]) == (12 * 32) % 256
    assert int(whole.final_state.agent_state.num_updates[0]) == 2 * 12  # from the first block
    # the newest block's slots hold the actors' priorities ((|p| + eps) ** alpha in the tree)
    leaves = buf.tree[0, :256]  # the sum tree stores the leaves first
    assert np.all(np.asarray(leaves) > 0) and len(np.unique(np.asarray(leaves))) > 100
    m = whole.metrics
    assert np.all(m["apex/actor_priority"] > 0) and np.all(m["sebulba/trajectory_bytes"] > 0)
    resumed = run(
        built,
        env,
        config,
        12,
        options,
        num_reports=2,
        initial_state=mid[6],
        start_iteration=6,
        env_snapshots=mid[("envs", 6)],
    )
    assert max_diff(whole.final_state, resumed.final_state) == 0.0


def cli_run(*args, cwd):
    env = {**os.environ, "JAX_PLATFORMS": "cpu", "MPLBACKEND": "Agg"}
    return subprocess.run(
        [sys.executable, "-m", "jrl.app.cli", *map(str, args)],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=cwd,
        env=env,
    )


def test_cli_run_folder_resumes_exactly_with_its_replay_and_evaluates(tmp_path):
    """``jrl train apex``: a run stopped after a checkpoint and resumed (its replay buffer and
    host envs restored from the checkpoint) ends with the parameters of the uninterrupted
    run; ``jrl eval`` plays the greedy policy on the host env."""
    flags = [f"--{k.replace('_', '-')}" for k in SMALL]
    common = ["train", "apex", "--env", "gymnasium:CartPole-v1", "--runner", "sebulba"]
    common += ["--actor-threads", 2, "--total-steps", 768, "--num-reports", 4, "--quiet"]
    for flag, value in zip(flags, SMALL.values()):
        common += [flag, *(value if isinstance(value, tuple) else (value,))]
    full = cli_run(*common, "--out", "full", cwd=tmp_path)
    assert full.returncode == 0, full.stderr[-2000:]
    part = cli_run(*common, "--out", "part", "--stop-at-steps", 384, cwd=tmp_path)
    assert part.returncode == 0 and "Resume with" in part.stderr, part.stderr[-2000:]
    resumed = cli_run("train", "--resume", "part", "--quiet", cwd=tmp_path)
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    import flax.serialization

    a = flax.serialization.msgpack_restore((tmp_path / "full" / "params.msgpack").read_bytes())
    b = flax.serialization.msgpack_restore((tmp_path / "part" / "params.msgpack").read_bytes())
    for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True):
        np.testing.assert_array_equal(x, y)
    header = (tmp_path / "full" / "metrics.csv").read_text().splitlines()[0].split(",")
    assert {"apex/actor_priority", "sebulba/bytes_per_s", "train/loss"} <= set(header)
    ev = cli_run("eval", "full", "--episodes", 3, cwd=tmp_path)
    assert ev.returncode == 0 and "gymnasium:CartPole-v1" in ev.stdout, ev.stderr[-2000:]


def test_ray_actors_push_what_threads_push_bfloat16_and_restarts(ray_session, capfd):
    """Two Ray actor processes, synchronous, give the run of two actor threads (same envs,
    keys, priorities, replay); with bfloat16 on the wire (threads) observations and
    parameters travel at about half the bytes and the run stays close; a killed actor
    process is replaced and the run goes on."""
    env, config, built = build()
    threads = run(built, env, config, 4, sebulba.SebulbaOptions(actor_threads=2))
    rays = run(built, env, config, 4, sebulba.SebulbaOptions(actors="ray:2"))
    assert max_diff(threads.final_state, rays.final_state) <= 1e-6
    assert (rays.metrics["ray/actor_restarts"] == 0).all()
    assert set(threads.metrics) | {"ray/actor_restarts", "ray/bytes_per_step"} == set(rays.metrics)
    bf16 = sebulba.SebulbaOptions(actor_threads=2, transfer="bfloat16")
    half = run(built, env, config, 4, bf16)
    assert (
        max_diff(threads.final_state.agent_state.params, half.final_state.agent_state.params) < 0.05
    )
    full_bytes = threads.metrics["sebulba/trajectory_bytes"][0, -1]
    assert half.metrics["sebulba/trajectory_bytes"][0, -1] < 0.8 * full_bytes
    assert (
        half.metrics["sebulba/params_bytes"][0, -1]
        < 0.6 * (threads.metrics["sebulba/params_bytes"][0, -1])
    )
    # kill -9 of one actor process after the first of 4 chunks: it is replaced with fresh
    # envs, the restart is logged, and the run finishes
    from jrl.run import ray_actors

    killed = []

    def kill_one(states, done, metrics):
        if not killed:
            name, pid = sorted(ray_actors.pids().items())[0]
            assert name.endswith("-0")
            os.kill(pid, signal.SIGKILL)
            killed.append(pid)

    options = sebulba.SebulbaOptions(actors="ray:2")
    after = run(built, env, config, 8, options, num_reports=4, hooks=RunHooks(on_chunk=kill_one))
    assert killed and after.iterations == 8
    assert "jrl: ray actor 0 died; restarted it with fresh envs" in capfd.readouterr().err
    restarts = after.metrics["ray/actor_restarts"][0]
    assert restarts[0] == 0 and restarts[-1] == 1, restarts
    assert killed[0] not in ray_actors.pids().values()


@pytest.mark.parametrize(
    "args, reason",
    [
        (["--env", "CartPole-v1"], "apex runs on the sebulba runner only"),
        (
            ["--env", "gymnasium:Pendulum-v1", "--runner", "sebulba"],
            "apex needs a Discrete action space",
        ),
        (
            ["--env", "gymnasium:CartPole-v1", "--runner", "sebulba", "--buffer-size", "128"]
            + ["--steps-per-iteration", "32"],
            "cannot hold one pushed block",
        ),
        (
            ["--env", "gymnasium:CartPole-v1", "--runner", "sebulba", "--epsilon-base", "2"],
            "epsilon_base must lie in [0, 1]",
        ),
    ],
)
def test_bad_input_exits_2_with_the_reason(tmp_path, monkeypatch, capsys, args, reason):
    monkeypatch.chdir(tmp_path)
    assert cli.main(["train", "apex", *args]) == 2
    err = capsys.readouterr().err
    assert reason in err, err[-2000:]
    assert not any(tmp_path.iterdir())  # refused before any run folder


def test_two_learner_devices_exit_2_before_any_run_folder(tmp_path):
    """The learner's replay lives on one device: ``--devices 2`` is refused (2 fake CPU
    devices, so the device count itself is not what fails)."""
    env = {
        **os.environ,
        "JAX_PLATFORMS": "cpu",
        "XLA_FLAGS": "--xla_force_host_platform_device_count=2",
    }
    args = ["train", "apex", "--env", "gymnasium:CartPole-v1", "--runner", "sebulba"]
    out = subprocess.run(
        [sys.executable, "-m", "jrl.app.cli", *args, "--devices", "2", "--out", "run"],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
        env=env,
    )
    assert out.returncode == 2, out.stderr[-2000:]
    assert "apex's learner runs on at most 1 device(s)" in out.stderr, out.stderr[-2000:]
    assert not any(tmp_path.iterdir())


@pytest.mark.learning
def test_apex_with_two_ray_actors_learns_cartpole(ray_session, learning_seed):
    """Ape-X (its CartPole preset, 1e5 env steps) with 2 Ray actor processes, synchronous,
    2 seeds; the greedy policy's return over 10 episodes per seed, mean of the pair >= 200.
    Reach measured 2026-12-02: this test 463.1 and 442.3 (mean 452.7); threads (which a
    synchronous Ray run equals), other evaluation episodes, seeds 0-3: 441.8, 469.6, 456.1,
    435.2. 2026-12-04, 2 actor threads (BENCHMARKS.md "The learning tests on other seed
    pairs"): seeds 26, 27: 440.0, 356.6 (as the Ray run: the former threshold 400 failed);
    2000-2007: 500, 479.4, 234.0, 358.0, 500, 500, 481.2, 254.5; 3000-3007: 500, 453.9, 366.1,
    498.6, 336.1, 471.6, 500, 354.3. The worst pair of these 18, 244.3, clears 200 by 44.3.
    A run whose actor 0 was killed after the first quarter (fresh envs from there on) reached
    500.0 and 314.0: the threshold is for the uninterrupted run; the restart is tested in
    test_ray_actors_push_what_threads_push_bfloat16_and_restarts."""
    env, params = jrl.envs.make("gymnasium:CartPole-v1")
    config = experiment.make_config("apex", "CartPole-v1")
    built = jrl.agents.get("apex").build(config, env, params)
    options = sebulba.SebulbaOptions(actors="ray:2")
    result = run(
        built, env, config, config.num_iterations, options, seeds=2,
        first_seed=learning_seed, num_reports=4,
    )  # fmt: skip
    assert result.iterations == config.num_iterations
    assert (result.metrics["ray/actor_restarts"] == 0).all()
    # the greedy policy's return: the training return is dominated by the episodes of the
    # most exploring envs (eps 0.4 ends episodes far more often than eps 0.0007)
    returns, _ = evaluation.host_evaluator(built.agent, env, 10)(
        result.final_state, jax.random.key(7)
    )
    final = returns.mean(axis=1)
    print(f"apex greedy return per seed: {final}")
    assert final.mean() >= APEX_THRESHOLD, final


APEX_THRESHOLD = 200
