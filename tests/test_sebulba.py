"""The Sebulba runner and host environments (jrl.run.sebulba, jrl.envs.host): Gymnasium and
EnvPool envs stepped by actor threads, the learner on its device(s); synchronous runs equal a
sequential loop, staleness bounds the policy lag, a crashing env stops everything."""

import os
import subprocess
import sys
import textwrap
import threading

import jax
import jax.numpy as jnp
import jrl.agents
import jrl.envs
import numpy as np
import pytest
from conftest import PipeLines
from jrl.envs.host import HostEnvError

from jrl.app import api as experiment
from jrl.core.types import Transition
from jrl.run import sebulba

gymnasium = pytest.importorskip("gymnasium")  # the test extra installs it
pytestmark = pytest.mark.filterwarnings("ignore:os.fork:RuntimeWarning", "ignore::UserWarning")

JRL = [sys.executable, "-m", "jrl.app.cli"]
SMALL = dict(num_envs=4, num_steps=16, num_minibatches=2, num_epochs=2, hidden_sizes=(16, 16))


def cli(*args, cwd, timeout=600, env=None):
    env = {**os.environ, "JAX_PLATFORMS": "cpu", "MPLBACKEND": "Agg", **(env or {})}
    return subprocess.run(
        JRL + [str(a) for a in args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=cwd,
        env=env,
    )


def run_small(built, env, config, iterations, options=sebulba.SebulbaOptions(), **kwargs):
    """``sebulba.run`` of one seed (key 0) of a :func:`build` result."""
    keys = kwargs.pop("keys", jax.random.key(0)[None])
    return sebulba.run(
        built.agent,
        env,
        built.spec,
        keys,
        iterations,
        config.num_steps,
        config.num_envs,
        options,
        **kwargs,
    )


def build(agent="ppo", env_id="gymnasium:CartPole-v1", devices=1, **overrides):
    env, params = jrl.envs.make(env_id)
    config = experiment.make_config(agent, "CartPole-v1", **{**SMALL, **overrides})
    return env, config, jrl.agents.get(agent).build(config, env, params, num_devices=devices)


# --- host envs ------------------------------------------------------------------------------


def test_gymnasium_batch_resets_in_the_step_an_episode_ends_and_reports_it():
    env, _ = jrl.envs.make("gymnasium:CartPole-v1")
    assert env.observation_space().shape == (4,) and env.action_space().n == 2
    with pytest.raises(HostEnvError, match="--runner sebulba"):
        env.reset(jax.random.key(0))
    batch = env.make_batch(3, seed=7)
    obs = batch.reset()
    reference = [gymnasium.make("CartPole-v1") for _ in range(3)]
    ref_obs = np.stack([e.reset(seed=7 + i)[0] for i, e in enumerate(reference)])
    np.testing.assert_array_equal(obs, ref_obs)
    returns = np.zeros(3)
    ended = 0
    for t in range(60):  # always push right: episodes end after ~10 steps
        step = batch.step(np.ones(3, np.int32))
        returns += step.reward
        for i, e in enumerate(reference):
            o, r, te, tr, _ = e.step(1)
            np.testing.assert_array_equal(step.final_observation[i], o)
            assert step.terminated[i] == te and step.truncated[i] == tr
            if te or tr:
                assert step.episode_return[i] == returns[i] == step.episode_length[i]
                returns[i] = 0
                ended += 1
                o, _ = e.reset()
                assert not np.array_equal(step.observation[i], step.final_observation[i])
            else:
                assert step.episode_return[i] == 0
            np.testing.assert_array_equal(step.observation[i], o)
    assert ended >= 6


def test_gymnasium_snapshot_continues_the_same_episodes():
    env, _ = jrl.envs.make("gymnasium:CartPole-v1")
    a = env.make_batch(2, seed=3)
    a.reset()
    for _ in range(5):
        a.step(np.array([0, 1]))
    saved = a.snapshot()
    b = env.make_batch(2, seed=99)
    b.reset()
    b.restore(saved)
    np.testing.assert_array_equal(b.last_observation(), a.last_observation())
    for t in range(40):
        action = np.array([t % 2, 1])
        sa, sb = a.step(action), b.step(action)
        np.testing.assert_array_equal(sa.observation, sb.observation)
        np.testing.assert_array_equal(sa.episode_return, sb.episode_return)


def test_a_host_env_takes_the_preset_of_the_jrl_env_of_the_same_id():
    acrobot = experiment.make_config("ppo", "Acrobot-v1")
    assert experiment.make_config("ppo", "gymnasium:Acrobot-v1") == acrobot
    assert experiment.make_config("ppo", "envpool:Acrobot-v1") == acrobot
    assert acrobot.num_envs != experiment.make_config("ppo", "gymnasium:Taxi-v3").num_envs


def test_unknown_host_env_suggests_names():
    with pytest.raises(jrl.envs.UnknownEnvError, match="gymnasium:CartPole-v1"):
        jrl.envs.make("gymnasium:CartPol-v1")


def test_envpool_pull_mode_keeps_every_env_in_its_own_time_order():
    """Pull mode: slot i of a trajectory is env i's own next T transitions, even though each
    recv returns whichever envs are ready: each slot's observations follow on from the
    previous step's successor (or start a new episode after an end)."""
    pytest.importorskip("envpool")
    env, params = jrl.envs.make("envpool:CartPole-v1")
    config = experiment.make_config("ppo", "CartPole-v1", **{**SMALL, "num_envs": 8})
    built = jrl.agents.get("ppo").build(config, env, params)
    options = sebulba.SebulbaOptions(pull_batch=2, max_staleness=3, queue_size=3)
    items = sebulba.collect(
        built.agent, env, built.spec, jax.random.key(0)[None], 16, 8, 3, options
    )
    assert len(items) == 3 and all(len(one) == 1 for one in items)  # one thread
    items = [one[0] for one in items]
    for item in items:
        b = item.batch  # [1, T, n]
        obs, nxt = np.asarray(b.observation[0]), np.asarray(b.next_observation[0])
        done = np.asarray(b.terminated[0] | b.truncated[0])
        for i in range(8):
            for t in range(15):
                if not done[t, i]:  # the next step starts where this one ended
                    np.testing.assert_array_equal(obs[t + 1, i], nxt[t, i])
                else:  # a new episode: near the start state
                    assert np.abs(obs[t + 1, i]).max() < 0.05
    first, second = items[0].batch, items[1].batch  # trajectories follow on, per env
    done = np.asarray(first.terminated[0, -1] | first.truncated[0, -1])
    for i in np.flatnonzero(~done):
        np.testing.assert_array_equal(second.observation[0, 0, i], first.next_observation[0, -1, i])


def test_envpool_atari_frames_are_channels_last_uint8_and_ppo_runs_on_them():
    pytest.importorskip("envpool")
    env, params = jrl.envs.make("envpool:Breakout-v5")
    space = env.observation_space()
    assert space.shape == (84, 84, 4) and space.dtype == jnp.uint8  # EnvPool's preprocessing
    batch = env.make_batch(2, seed=0)
    obs = batch.reset()
    assert obs.shape == (2, 84, 84, 4) and obs.dtype == np.uint8
    step = batch.step(np.ones(2, np.int32))  # FIRE
    assert step.observation.shape == (2, 84, 84, 4) and step.final_observation.dtype == np.uint8
    batch.close()
    config = experiment.make_config(
        "ppo",
        "CartPole-v1",
        hidden_sizes=(8,),  # an MLP on the flattened frames: the CNN's compile is not tested
        num_envs=2,
        num_steps=8,
        num_minibatches=1,
        num_epochs=1,
    )
    built = jrl.agents.get("ppo").build(config, env, params)
    res = run_small(built, env, config, 2, sebulba.SebulbaOptions(transfer="bfloat16"))
    assert res.iterations == 2 and np.isfinite(res.metrics["train/value_loss"]).all()
    # uint8 frames travel as they are: 8 x 2 observations of 84*84*4 bytes, twice (o and o'),
    # and the rest (actions, rewards, flags, log-probs, values in bfloat16) is small
    frames = 8 * 2 * 84 * 84 * 4 * 2
    assert frames < res.metrics["sebulba/trajectory_bytes"][0, 0] < frames + 1000


# --- the runner -------------------------------------------------------------------------------


def test_synchronous_run_equals_the_sequential_loop():
    """max_staleness 0, one actor thread: the same parameters as the agent stepping the same
    host envs in a plain loop (act, step, ..., learn)."""
    env, config, built = build()
    agent, iters, T, N = built.agent, 3, config.num_steps, config.num_envs
    keys = jax.random.key(5)[None]
    res = sebulba.run(agent, env, built.spec, keys, iters, T, N, num_reports=iters)

    state = jax.tree.map(lambda x: x[0], sebulba.init_states(agent, built.spec, keys))
    batch = env.make_batch(N, int(state.env_seed))
    obs = batch.reset()
    agent_state = state.agent_state
    for j in range(iters):
        steps = []
        for t in range(T):
            key = jax.random.fold_in(jax.random.fold_in(jax.random.fold_in(state.act_key, j), 0), t)
            action, info = agent.act(agent_state, jnp.asarray(obs), key)
            s = batch.step(np.asarray(action))
            steps.append(
                Transition(
                    obs, action, s.reward, s.terminated, s.truncated, s.final_observation, info
                )
            )
            obs = s.observation
        rollout = jax.tree.map(lambda *xs: jnp.stack(xs), *steps)
        agent_state = agent.learn(
            agent_state, rollout, jax.random.fold_in(state.key, j)
        ).agent_state
    got = jax.tree.map(lambda x: x[0], res.final_state.agent_state.params)
    for a, b in zip(jax.tree.leaves(got), jax.tree.leaves(agent_state.params)):
        np.testing.assert_allclose(a, b, atol=1e-5)
    assert res.metrics["sebulba/policy_lag_max"].max() == 0
    assert res.iterations == iters


class CountingHostEnv:
    """A host env whose batches count their steps (each actor thread steps batches of its
    own), so that a test can wait until every actor has come to a given step."""

    def __init__(self, env):
        self.env, self.steps, self.changed = env, [], threading.Condition()

    def __getattr__(self, name):
        return getattr(self.env, name)

    def make_batch(self, n, seed, pull=None):
        with self.changed:
            self.steps.append(0)
            return CountingBatch(self.env.make_batch(n, seed, pull), self, len(self.steps) - 1)


class CountingBatch:
    def __init__(self, batch, counts: CountingHostEnv, index: int):
        self.batch, self.counts, self.index = batch, counts, index

    def __getattr__(self, name):
        return getattr(self.batch, name)

    def step(self, actions):
        with self.counts.changed:
            self.counts.steps[self.index] += 1
            self.counts.changed.notify_all()
        return self.batch.step(actions)


def test_staleness_bounds_the_policy_lag_and_a_held_learner_reaches_the_bound():
    """max_staleness 2, two actor threads: no trajectory is learned more than 2 versions after
    the parameters it was acted with, under any scheduling. The learner is held after update 1
    (its on_chunk hook waits, without a timing guess, until both actors have stepped into
    trajectory 3): trajectory 3 needs version 1 and cannot get a newer one (version 2 is
    published after the hook returns), so it is learned with a lag of exactly 2."""
    env, config, built = build()
    counting = CountingHostEnv(env)
    started_3 = 3 * config.num_steps  # steps an actor's envs take before trajectory 3
    held = []

    def hold(states, done, metrics):
        if done == 1:
            ahead = lambda: len(counting.steps) == 2 and min(counting.steps) > started_3
            with counting.changed:
                held.append(counting.changed.wait_for(ahead, timeout=600))

    options = sebulba.SebulbaOptions(actor_threads=2, max_staleness=2, queue_size=4)
    hooks = sebulba.RunHooks(on_chunk=hold)
    res = run_small(built, counting, config, 8, options, num_reports=8, hooks=hooks)
    assert held == [True], counting.steps  # the actors reached trajectory 3 during the hold
    lag, lag_max = (res.metrics[k][0] for k in ("sebulba/policy_lag", "sebulba/policy_lag_max"))
    assert np.all((0 <= lag) & (lag_max <= 2)), lag_max  # the bound, every update
    assert lag[3] == lag_max[3] == 2  # both actors' trajectory 3: version 1, learned at 3


def test_bfloat16_transfers_halve_the_float_bytes():
    env, config, built = build()
    runs = {
        t: run_small(built, env, config, 2, sebulba.SebulbaOptions(transfer=t), num_reports=1)
        for t in ("float32", "bfloat16")
    }
    f32, bf16 = (runs[t].metrics for t in ("float32", "bfloat16"))
    state = sebulba.init_states(built.agent, built.spec, jax.random.key(0)[None]).agent_state
    floats = sum(x.nbytes for x in jax.tree.leaves(state) if x.dtype == jnp.float32)
    others = sum(x.nbytes for x in jax.tree.leaves(state) if x.dtype != jnp.float32)
    assert f32["sebulba/params_bytes"][0, 0] == floats + others
    assert bf16["sebulba/params_bytes"][0, 0] == floats // 2 + others
    # observations, rewards, log-probs and values halve; actions and flags stay
    assert f32["sebulba/trajectory_bytes"][0, 0] / 2 < bf16["sebulba/trajectory_bytes"][0, 0]
    assert bf16["sebulba/trajectory_bytes"][0, 0] < 0.7 * f32["sebulba/trajectory_bytes"][0, 0]


def test_learner_on_two_devices_with_an_actor_device_equals_one_device(tmp_path):
    """--devices 2 (the learner data-parallel, the envs split) and an actor device of its own,
    on 3 fake CPU devices: the parameters of the run on one device."""
    script = textwrap.dedent(
        """
        import sys, warnings
        warnings.simplefilter("ignore")
        import jax, numpy as np
        import jrl.agents, jrl.envs
        from jrl.app import api as experiment
        from jrl.run import sebulba
        env, params = jrl.envs.make("gymnasium:CartPole-v1")
        small = dict(num_minibatches=2, num_epochs=2, hidden_sizes=(16, 16))
        config = experiment.make_config("ppo", "CartPole-v1", num_envs=4, num_steps=16, **small)
        out = []
        for devices, actors in ((1, 0), (2, 1)):
            built = jrl.agents.get("ppo").build(config, env, params, num_devices=devices)
            options = sebulba.SebulbaOptions(learner_devices=devices, actor_devices=actors)
            res = sebulba.run(built.agent, env, built.spec, jax.random.key(1)[None], 3, 16, 4,
                              options, num_reports=1)
            out.append(jax.tree.leaves(jax.device_get(res.final_state.agent_state.params)))
        for a, b in zip(*out):
            np.testing.assert_allclose(a, b, atol=1e-5)
        print("OK")
        """
    )
    env = {
        **os.environ,
        "JAX_PLATFORMS": "cpu",
        "XLA_FLAGS": "--xla_force_host_platform_device_count=3",
    }
    out = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
        cwd=tmp_path,
    )
    assert out.returncode == 0 and "OK" in out.stdout, out.stderr[-3000:]
    # through jrl train: evaluation and checkpoints see the replicated learner state
    flags = {"XLA_FLAGS": env["XLA_FLAGS"]}
    trained = cli(
        "train",
        "ppo",
        "--env",
        "gymnasium:CartPole-v1",
        "--runner",
        "sebulba",
        "--devices",
        2,
        "--actor-devices",
        1,
        "--num-envs",
        4,
        "--total-steps",
        2048,
        "--eval-every",
        1024,
        "--eval-episodes",
        2,
        "--checkpoint-every",
        1024,
        "--out",
        "run",
        "--quiet",
        cwd=tmp_path,
        env=flags,
    )
    assert trained.returncode == 0, trained.stderr[-3000:]
    assert '"eval/episode_return"' in (tmp_path / "run" / "summary.json").read_text() or (
        "eval/episode_return" in (tmp_path / "run" / "metrics.csv").read_text().splitlines()[0]
    )


def test_runner_refusals_name_the_way_out():
    env, config, built = build()
    with pytest.raises(ValueError, match="num_envs .5. must divide"):
        sebulba.SebulbaOptions(actor_threads=2).validate(5)
    with pytest.raises(ValueError, match="pull mode"):
        run_small(built, env, config, 1, sebulba.SebulbaOptions(pull_batch=2))
    with pytest.raises(ValueError, match="--runner sebulba"):
        experiment.train("ppo", "gymnasium:CartPole-v1", total_steps=1000, progress=False)
    with pytest.raises(ValueError, match="pure-JAX env"):
        experiment.train("ppo", "CartPole-v1", runner="sebulba", total_steps=1000, progress=False)
    with pytest.raises(ValueError, match="on-policy rollouts .*ppo.*dqn does not"):
        experiment.train("dqn", "gymnasium:CartPole-v1", runner="sebulba", progress=False)
    with pytest.raises(ValueError, match="--max-staleness is an option of the sebulba runner"):
        experiment.train("ppo", "CartPole-v1", max_staleness=1, progress=False)
    with pytest.raises(ValueError, match="acting state"):
        experiment.train(
            "ppo", "gymnasium:CartPole-v1", runner="sebulba", recurrent="gru", progress=False
        )


# --- through the CLI: the run folder, resume, eval, a crashing env ------------------------------


def test_cli_run_resumes_exactly_and_evaluates(tmp_path):
    """A synchronous run stopped after a checkpoint and resumed ends with the parameters of the
    uninterrupted run (the host envs are saved with the checkpoint); eval plays the host env."""
    common = [
        "train",
        "ppo",
        "--env",
        "gymnasium:CartPole-v1",
        "--runner",
        "sebulba",
        "--total-steps",
        512,
        "--num-reports",
        4,
        "--quiet",
        *[
            x
            for k, v in SMALL.items()
            for x in (f"--{k.replace('_', '-')}", *(v if isinstance(v, tuple) else (v,)))
        ],
    ]
    full = cli(*common, "--out", "full", cwd=tmp_path)
    assert full.returncode == 0, full.stderr[-2000:]
    part = cli(*common, "--out", "part", "--stop-at-steps", 256, cwd=tmp_path)
    assert part.returncode == 0 and "Resume with" in part.stderr, part.stderr[-2000:]
    resumed = cli("train", "--resume", "part", "--quiet", cwd=tmp_path)
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    import flax.serialization

    a = flax.serialization.msgpack_restore((tmp_path / "full" / "params.msgpack").read_bytes())
    b = flax.serialization.msgpack_restore((tmp_path / "part" / "params.msgpack").read_bytes())
    for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b)):
        np.testing.assert_array_equal(x, y)
    ev = cli("eval", "full", "--episodes", 3, cwd=tmp_path)
    assert ev.returncode == 0, ev.stderr[-2000:]
    assert "gymnasium:CartPole-v1" in ev.stdout
    rendered = cli("render", "full", "--out", "ep.gif", "--max-steps", 20, cwd=tmp_path)
    assert rendered.returncode == 0, rendered.stderr[-2000:]
    import imageio.v3 as iio

    frames = iio.imread(tmp_path / "ep.gif", index=None)
    assert frames.ndim == 4 and 2 <= len(frames) <= 21 and frames.shape[-1] in (3, 4)


def test_ctrl_c_stops_the_actors_checkpoints_and_resumes(tmp_path):
    """SIGINT during an asynchronous run with two actor threads: the learner stops after the
    chunk, every thread ends, a checkpoint is written (exit 130), and the run resumes."""
    import signal

    env = {**os.environ, "JAX_PLATFORMS": "cpu", "MPLBACKEND": "Agg"}
    args = [
        "train",
        "ppo",
        "--env",
        "gymnasium:CartPole-v1",
        "--runner",
        "sebulba",
        "--actor-threads",
        2,
        "--max-staleness",
        2,
        "--num-envs",
        4,
        "--num-steps",
        16,
        "--total-steps",
        400_000,
        "--num-reports",
        400,
        "--out",
        "run",
    ]
    proc = subprocess.Popen(
        JRL + [str(a) for a in args], stderr=subprocess.PIPE, text=True, env=env, cwd=tmp_path
    )
    try:
        stderr = PipeLines(proc.stderr)
        stderr.wait_for("steps/s", timeout=600)  # the first progress line: training has started
        proc.send_signal(signal.SIGINT)
        err = stderr.rest(timeout=300)
        assert proc.wait(timeout=60) == 130, err
    finally:
        proc.kill()
    assert "SIGINT received" in err and "jrl train --resume run" in err and "Traceback" not in err
    from jrl.app import checkpoint

    steps = checkpoint.steps(tmp_path / "run")
    assert steps and 0 < steps[-1] < 400_000 // 64
    resumed = cli(
        "train", "--resume", "run", "--stop-at-steps", (steps[-1] + 2) * 64, "--quiet", cwd=tmp_path
    )
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert "fresh episodes" not in resumed.stderr  # Gymnasium's envs were saved and restored
    assert checkpoint.steps(tmp_path / "run")[-1] > steps[-1]


CRASHING = """
import gymnasium
from gymnasium.envs.classic_control import CartPoleEnv

class Crashing(CartPoleEnv):
    steps = 0

    def step(self, action):
        Crashing.steps += 1
        if Crashing.steps > 1500:
            raise RuntimeError("the simulator lost its connection")
        return super().step(action)

gymnasium.register("Crashing-v0", entry_point=Crashing, max_episode_steps=500)
"""


def test_a_crashing_env_stops_every_thread_with_its_error(tmp_path):
    (tmp_path / "crashing_env.py").write_text(CRASHING)
    out = cli(
        "train",
        "ppo",
        "--env",
        "gymnasium:Crashing-v0",
        "--runner",
        "sebulba",
        "--import",
        "crashing_env",
        "--actor-threads",
        2,
        "--num-envs",
        4,
        "--num-steps",
        16,
        "--total-steps",
        100_000,
        "--num-reports",
        50,
        "--quiet",
        "--out",
        "run",
        cwd=tmp_path,
        timeout=600,  # its expiry (subprocess.TimeoutExpired) fails the test: the run must end
        env={"PYTHONPATH": str(tmp_path)},
    )
    assert out.returncode == 1, (out.returncode, out.stderr[-3000:])
    assert "the simulator lost its connection" in out.stderr
    assert "actor thread" in out.stderr and "--resume" in out.stderr
    assert any((tmp_path / "run" / "checkpoints").iterdir())


# --- learning -------------------------------------------------------------------------------


@pytest.mark.learning
@pytest.mark.parametrize(
    "transfer, inference", [("float32", "actor"), ("bfloat16", "actor"), ("float32", "learner")]
)
def test_ppo_sebulba_gymnasium_cartpole_300(transfer, inference, learning_seed):
    """PPO under synchronous Sebulba on Gymnasium's CartPole, 2 seeds, with and without
    bfloat16 transfers (learning is unaffected), and with central inference (SEED RL's, at the
    same threshold; a synchronous run equals actor-side to float rounding, tests/
    test_central_inference.py): the mean final training return >= 300 (a
    random policy scores ~22). Reach measured 2026-12-04 at 200k steps, float32: seeds 100-107
    all 500.0; seeds 22 and 23 500.0 and 212.9 (seed 23's greedy policy 206.4 over 20
    episodes: it has not solved CartPole yet), so the worst pair of the 10 seeds has mean 356,
    margin 56 (the old threshold 450 failed on seeds 22/23). 2026-12-02, seeds 0 and 1: 500.0
    and 500.0 with either transfer."""
    result = experiment.train(
        "ppo",
        "gymnasium:CartPole-v1",
        seeds=2,
        seed=learning_seed,
        runner="sebulba",
        transfer=transfer,
        inference=inference,
        progress=False,
        total_steps=200_000,
        num_envs=8,
        num_steps=64,
        learning_rate=1e-3,
        num_reports=4,
    )
    final = result.final_returns()
    assert final.mean() >= 300, final


@pytest.mark.learning
@pytest.mark.parametrize("inference", ["actor", "learner"])
def test_impala_sebulba_gymnasium_cartpole_420(inference, learning_seed):
    """IMPALA (its CartPole-v1 preset) under synchronous Sebulba on Gymnasium's CartPole, 2
    seeds, 500k steps, actor-side or central inference (the same threshold): the pair's mean
    final training return >= 420. Measured 2026-12-05 with the preset's ent_coef 0.02
    (BENCHMARKS.md "IMPALA's advantage floor"; `benchmarks/seed_checks.py impala-actors --set
    actor_threads=1 ent_coef=0.02 --seeds 5:2 9:2 ...`): 16 pairs (0, 3, 5, 7, 9 .. 23,
    2000 .. 2006) end at pair means 447.6 .. 498.6 (the 18 seeds of 9 of them: 406.1 .. 500);
    threshold 420, a margin of 27.6 over the worst pair. With ent_coef 0.01 seed 6 of pair 5
    collapsed to one action (9.3: pair mean 254.7), which the former threshold 450 failed."""
    result = experiment.train(
        "impala",
        "gymnasium:CartPole-v1",
        seeds=2,
        seed=learning_seed,
        runner="sebulba",
        inference=inference,
        progress=False,
        total_steps=500_000,
        num_reports=4,
    )
    final = result.final_returns()
    assert final.mean() >= 420, final


@pytest.mark.parametrize(
    "options, num_envs, reason",
    [
        (dict(pull_batch=2), 8, "pull mode runs in one process"),
        (dict(actor_devices=1), 8, "--actor-devices is for a one-process run"),
        (dict(learner_devices=2), 8, r"spans every device \(1 in 2 processes\), got --devices 2"),
        (dict(actor_threads=2), 6, r"num_envs \(6\) must divide among the 2 processes, each one"),
    ],
)
def test_what_a_multi_process_learner_refuses(options, num_envs, reason):
    """A jax.distributed learner spans every device; each process runs its own actors over
    its share of the envs (checked for 2 processes of this process's 1 device)."""
    with pytest.raises(ValueError, match=reason):
        sebulba.check_processes(sebulba.SebulbaOptions(**options), num_envs, 2)
    sebulba.check_processes(sebulba.SebulbaOptions(actor_threads=2), 8, 2)  # fits
