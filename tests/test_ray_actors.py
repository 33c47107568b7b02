"""Ray actors for the Sebulba runner (jrl.run.ray_actors): the actor loop in Ray processes
equals the threaded one, a killed actor process is replaced and the run still learns, IMPALA
learns with two Ray actors, and bad --actors values exit 2 with the reason. The session's
local Ray (tests/conftest.py ``ray_session``) serves the tests in this process; a test whose
child starts a Ray of its own takes ``ray_of_its_own`` (one Ray at a time)."""

import contextlib
import csv
import json
import os
import signal
import subprocess
import sys

import jax
import jrl.agents
import jrl.envs
import numpy as np
import pytest
from conftest import PipeLines, wait_until

from jrl.app import api as experiment
from jrl.app import cli
from jrl.app.run_options import RunOptions
from jrl.run import sebulba
from jrl.run.anakin import RunHooks

gymnasium = pytest.importorskip("gymnasium")
pytestmark = pytest.mark.filterwarnings("ignore:os.fork:RuntimeWarning", "ignore::UserWarning")

SMALL = dict(num_envs=4, num_steps=16, num_minibatches=2, num_epochs=2, hidden_sizes=(16, 16))


def build(agent="ppo", **overrides):
    env, params = jrl.envs.make("gymnasium:CartPole-v1")
    config = experiment.make_config(agent, "CartPole-v1", **{**SMALL, **overrides})
    return env, config, jrl.agents.get(agent).build(config, env, params)


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
        **kwargs,
    )


# --- bad input (no Ray started) ------------------------------------------------------------


@pytest.mark.parametrize(
    "args, reason",
    [
        (["--runner", "sebulba", "--actors", "ray:0"], "'ray:N' with N >= 1"),
        (["--runner", "sebulba", "--actors", "ray:x"], "'ray:N' with N >= 1"),
        (["--actors", "ray:2"], "--actors is an option of the sebulba runner"),
        (["--runner", "sebulba", "--ray-address", "h:1"], "--ray-address is for Ray actors"),
        (
            ["--runner", "sebulba", "--actors", "ray:2", "--actor-threads", "2"],
            "does not take --actor-threads",
        ),
    ],
)
def test_bad_actors_exit_2_with_the_reason(tmp_path, monkeypatch, capsys, args, reason):
    monkeypatch.chdir(tmp_path)
    assert cli.main(["train", "ppo", "--env", "gymnasium:CartPole-v1", *args]) == 2
    err = capsys.readouterr().err
    assert reason in err, err[-2000:]
    assert not any(tmp_path.iterdir())  # refused before any run folder


def test_ray_absent_names_the_extra(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setitem(sys.modules, "ray", None)  # as if Ray were not installed
    args = ["--runner", "sebulba", "--actors", "ray:2"]
    assert cli.main(["train", "ppo", "--env", "gymnasium:CartPole-v1", *args]) == 2
    err = capsys.readouterr().err
    assert "needs Ray, which is not installed: pip install jrl-jax[ray]" in err, err[-2000:]
    with pytest.raises(ValueError, match=r"pip install jrl-jax\[ray\]"):
        RunOptions(runner="sebulba", actors="ray:1").validate()


def test_ray_actors_option_reads_as_text():
    from jrl.run.ray_actors import RayActors

    options = RunOptions(runner="sebulba", actors=RayActors(3)).normalized()
    assert options.actors == "ray:3" and options.sebulba().ray_actors == 3
    assert sebulba.SebulbaOptions().ray_actors == 0
    with pytest.raises(ValueError, match="must divide among actors"):
        sebulba.SebulbaOptions(actors="ray:3").validate(num_envs=4)


# --- Ray runs --------------------------------------------------------------------------------


def max_diff(a, b) -> float:
    diff = jax.tree.map(lambda x, y: float(np.abs(np.asarray(x) - np.asarray(y)).max()), a, b)
    return max(jax.tree.leaves(diff))


def test_synchronous_ray_actors_equal_actor_threads_and_resume_their_checkpoint(ray_session):
    """Two Ray actor processes, synchronous: the same parameters as two actor threads (same
    envs, same act keys, CPU inference either way); Ray actors resumed from the threads' state
    and host envs after 2 of 4 iterations end where the threads did (the envs' snapshots
    travel to the actor processes); the wire's bytes/s is logged."""
    env, config, built = build()
    mid = {}
    hooks = RunHooks(on_chunk=lambda states, done, _: mid.setdefault(done, states))
    keep = lambda done, snapshots: mid.setdefault(("envs", done), snapshots)
    two_threads = sebulba.SebulbaOptions(actor_threads=2)
    threads = run(built, env, config, 4, two_threads, num_reports=2, hooks=hooks, on_snapshots=keep)
    rays = run(built, env, config, 4, sebulba.SebulbaOptions(actors="ray:2"), num_reports=2)
    assert max_diff(threads.final_state.agent_state, rays.final_state.agent_state) <= 1e-6
    resumed = run(
        built,
        env,
        config,
        4,
        sebulba.SebulbaOptions(actors="ray:2"),
        num_reports=2,
        initial_state=mid[2],
        start_iteration=2,
        env_snapshots=mid[("envs", 2)],
    )
    assert resumed.iterations == 4
    assert max_diff(threads.final_state.agent_state, resumed.final_state.agent_state) <= 1e-6
    m = rays.metrics
    assert (m["ray/actor_restarts"] == 0).all()
    assert (m["sebulba/bytes_per_s"] > 0).all()
    np.testing.assert_array_equal(m["sebulba/policy_lag_max"], 0)
    wire = m["sebulba/trajectory_bytes"] + 2 * m["sebulba/params_bytes"]  # 2 actors pull
    assert wire[0, -1] > 0
    assert set(threads.metrics) | {"ray/actor_restarts", "ray/bytes_per_step"} == set(m)


def test_the_ray_actors_of_a_later_process_act_as_that_process_share_of_threads(ray_session):
    """In a multi-process run (jax.distributed learner) process 1 with one Ray actor over its 2
    of 4 envs acts as actor 1 of a one-process run with two threads: the same env seeds and
    act keys, so the same trajectory."""
    from jrl.run import ray_actors

    env, config, built = build()
    states = sebulba.init_states(built.agent, built.spec, jax.vmap(jax.random.key)(np.arange(2)))
    seeds = np.asarray(jax.device_get(states.env_seed)).tolist()
    published = sebulba.published(states, "float32")
    act = sebulba.act_fn(built.agent)

    def first_items(options, pool_of):
        runner = sebulba.Runner(options, config.num_steps, 1, 0, act, lambda done: False, None)
        with pool_of(runner) as pool:
            pool.publish(0, published)
            pool.start()
            items, _ = pool.take()
        assert items is not None
        return items

    template = jax.tree.map(lambda x: np.zeros((), x.dtype), states.agent_state)
    ray_items = first_items(
        sebulba.SebulbaOptions(actors="ray:1"),
        lambda r: ray_actors.ray_pool(r, built.agent, env, seeds, 2, template, 1, 4),
    )
    thread_items = first_items(
        sebulba.SebulbaOptions(actor_threads=2),
        lambda r: sebulba.actor_threads(r, env, seeds, 4, jax.devices()[:1]),
    )
    assert len(ray_items) == 1 and len(thread_items) == 2
    as_float = lambda item: jax.tree.map(lambda x: np.asarray(x, np.float64), item.batch)
    assert max_diff(as_float(ray_items[0]), as_float(thread_items[1])) == 0.0
    assert max_diff(as_float(ray_items[0]), as_float(thread_items[0])) > 0.0  # actor 0 differs


def test_cli_trains_with_ray_actors_on_a_local_ray_of_its_own(tmp_path, ray_of_its_own):
    """``jrl train --actors ray:2`` starts and stops its own local Ray (the session's is shut
    down first: one Ray at a time); the run folder records the actors and logs restarts and
    bytes/s."""
    args = ["--runner", "sebulba", "--actors", "ray:2", "--num-envs", 4, "--num-steps", 16]
    args += ["--hidden-sizes", 16, 16, "--total-steps", 1024, "--num-reports", 2, "--out", "run"]
    env = {**os.environ, "JAX_PLATFORMS": "cpu"}
    out = subprocess.run(
        [sys.executable, "-m", "jrl.app.cli", "train", "ppo", "--env", "gymnasium:CartPole-v1"]
        + [str(a) for a in args],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=tmp_path,
        env=env,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    config = json.loads((tmp_path / "run" / "config.json").read_text())
    assert config["run"]["sebulba"]["actors"] == "ray:2", config["run"]
    rows = list(csv.DictReader((tmp_path / "run" / "metrics.csv").open()))
    assert rows and {"ray/actor_restarts", "sebulba/bytes_per_s"} <= set(rows[0])
    # the values, not only the columns: no actor was restarted, trajectories crossed the wire,
    # and the run reached its budget (1024 steps)
    assert all(float(r["ray/actor_restarts"]) == 0 for r in rows), rows
    assert all(float(r["sebulba/bytes_per_s"]) > 0 for r in rows), rows
    assert max(int(r["env_steps"]) for r in rows) == 1024, rows


class CrashingHostEnv:
    """A host env whose batches raise after 40 steps (travels to the actors by value)."""

    def __init__(self, env):
        self.env = env

    def __getattr__(self, name):
        if name == "env":  # while unpickling
            raise AttributeError(name)
        return getattr(self.env, name)

    def make_batch(self, n, seed, pull=None):
        return CrashingBatch(self.env.make_batch(n, seed, pull))


class CrashingBatch:
    def __init__(self, batch):
        self.batch, self.steps = batch, 0

    def __getattr__(self, name):
        if name == "batch":
            raise AttributeError(name)
        return getattr(self.batch, name)

    def step(self, actions):
        self.steps += 1
        if self.steps > 40:
            raise RuntimeError("the simulator lost its connection")
        return self.batch.step(actions)


def test_an_env_failing_in_a_ray_actor_stops_the_run_with_its_error(ray_session):
    """An env that raises inside an actor process, or an actor that cannot be built, is not
    restarted (it would fail again): the run stops with ActorError naming the actor and the
    error, after the iterations learned."""
    from ray import cloudpickle  # Ray's own copy pickles actor arguments

    env, config, built = build()
    options = sebulba.SebulbaOptions(actors="ray:2")
    # an actor that cannot be built (its module absent in the actor process) is not retried
    with pytest.raises(sebulba.ActorError, match="ray actor 0 could not start: .*test_ray_actors"):
        run(built, CrashingHostEnv(env), config, 20, options)
    cloudpickle.register_pickle_by_value(sys.modules[__name__])
    try:
        with pytest.raises(sebulba.ActorError) as caught:
            run(built, CrashingHostEnv(env), config, 20, options)
    finally:
        cloudpickle.unregister_pickle_by_value(sys.modules[__name__])
    message = str(caught.value)
    assert "ray actor 0 failed: RuntimeError: the simulator lost its connection" in message
    assert caught.value.result.iterations == 2  # 2 trajectories of 16 steps, then the crash


LEARNER = """
import json
import jax
import jrl.agents, jrl.envs
from jrl.app import api as experiment
from jrl.run import ray_actors, sebulba
from jrl.run.anakin import RunHooks

env, params = jrl.envs.make("gymnasium:CartPole-v1")
config = experiment.make_config("ppo", "CartPole-v1", num_envs=4, num_steps=16,
                                hidden_sizes=(16, 16))
built = jrl.agents.get("ppo").build(config, env, params)
said = []

def tell(states, done, metrics):  # the actors' and the local Ray's process ids, once
    if not said:
        import ray
        node = ray._private.worker._global_node
        procs = [i.process.pid for infos in node.all_processes.values() for i in infos]
        print(json.dumps([*ray_actors.pids().values(), *procs]), flush=True)
        said.append(True)

sebulba.run(built.agent, env, built.spec, jax.random.key(0)[None], 10**6, 16, 4,
            sebulba.SebulbaOptions(actors="ray:2"), num_reports=10**6,
            hooks=RunHooks(on_chunk=tell))
"""


def test_a_lost_learner_takes_its_actors_and_its_local_ray_with_it(tmp_path, ray_of_its_own):
    """kill -9 of the learner's process: its Ray actors and the local Ray it started end
    too (Ray ends the actors a dead driver owned); nothing is left running."""
    (tmp_path / "learner.py").write_text(LEARNER)
    env = {**os.environ, "JAX_PLATFORMS": "cpu"}
    learner = subprocess.Popen(
        [sys.executable, "learner.py"], cwd=tmp_path, env=env, stdout=subprocess.PIPE, text=True
    )
    try:
        pids = json.loads(PipeLines(learner.stdout).next_line(timeout=600))
    finally:
        learner.kill()
        assert learner.wait(timeout=60) == -signal.SIGKILL
    assert len(pids) >= 4  # 2 actors, the GCS, the raylet, ...

    def alive(pid):
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        return True

    left = lambda: [p for p in pids if alive(p)]
    try:
        wait_until(lambda: not left(), 120, lambda: f"the learner's processes {left()} ended")
    finally:
        for p in left():  # not to leak them into the rest of the suite
            with contextlib.suppress(ProcessLookupError):
                os.kill(p, signal.SIGKILL)


@pytest.mark.learning
def test_a_killed_actor_process_is_restarted_and_the_run_learns(ray_session, capfd, learning_seed):
    """kill -9 of one Ray actor after the first chunk: the runner replaces it (a line on
    stderr, ``ray/actor_restarts``), the run finishes and PPO still learns CartPole (bfloat16
    on the wire). Reach measured 2026-12-05 at 150k steps with the kill (the test with its
    threshold lifted, JRL_LEARNING_SEED = 38, 40, ..., 60, 2000, ..., 2006: 32 seeds; with the
    kill a seed still gives the same run, seed 38 269.5 twice): 29 at 500.0, seed 38 269.5,
    seed 57 320.0, seed 58 240.5. Worst adjacent pair (57, 58): 280.25. Threshold 250, margin
    30 (a random policy scores ~22). It was 420, set from seeds 0 and 1 alone (500.0, 475.0),
    until seed pair 38 failed it (mean 384.75) beside a loaded suite. Reproduce:
    `python benchmarks/seed_checks.py ray-kill --seeds 38:2 40:2 ...`."""
    from jrl.run import ray_actors

    env, config, built = build(
        num_envs=8, num_steps=64, learning_rate=1e-3, num_minibatches=4, num_epochs=4,
        hidden_sizes=(64, 64),
    )  # fmt: skip
    killed = []

    def kill_one(states, done, metrics):
        if not killed:
            name, pid = sorted(ray_actors.pids().items())[0]
            assert name.endswith("-0")
            os.kill(pid, signal.SIGKILL)
            killed.append(pid)

    iterations = KILL_TEST_STEPS // (8 * 64)
    options = sebulba.SebulbaOptions(actors="ray:2", transfer="bfloat16")
    result = run(
        built, env, config, iterations, options, seeds=2, first_seed=learning_seed,
        num_reports=4, hooks=RunHooks(on_chunk=kill_one),
    )  # fmt: skip
    assert killed and result.iterations == iterations
    err = capfd.readouterr().err
    assert "jrl: ray actor 0 died; restarted it with fresh envs (1 restart in this run)" in err
    restarts = result.metrics["ray/actor_restarts"][0]
    assert restarts[0] == 0 and restarts[-1] == 1, restarts
    assert killed[0] not in ray_actors.pids().values()
    # bfloat16 parameters on the wire: half the float32 bytes
    f32 = sebulba.nbytes(result.final_state.agent_state)
    assert result.metrics["sebulba/params_bytes"][0, -1] < 0.6 * f32
    final = result.metrics["train/episode_return"][:, -1]
    assert final.mean() >= KILL_TEST_THRESHOLD, final


KILL_TEST_STEPS = 150_000
KILL_TEST_THRESHOLD = 250


def test_impala_with_two_ray_actors_equals_two_actor_threads(ray_session):
    """IMPALA (V-trace over the actors' behaviour log-probs) with 2 Ray actor processes,
    synchronous, 2 seeds: after 4 iterations the same parameters as 2 actor threads (same envs,
    same act keys). IMPALA's learning under the Sebulba runner is
    tests/test_sebulba.py::test_impala_sebulba_gymnasium_cartpole_420 (threads), so a learning
    run through Ray adds nothing this equality does not show (it was a 500k-step run here)."""
    env, config, built = build("impala")
    threads = run(built, env, config, 4, sebulba.SebulbaOptions(actor_threads=2), seeds=2)
    rays = run(built, env, config, 4, sebulba.SebulbaOptions(actors="ray:2"), seeds=2)
    assert max_diff(threads.final_state.agent_state, rays.final_state.agent_state) <= 1e-6
    assert (rays.metrics["ray/actor_restarts"] == 0).all()
    # not trivially equal: the last 2 iterations moved the parameters
    half = run(built, env, config, 2, sebulba.SebulbaOptions(actor_threads=2), seeds=2)
    assert max_diff(half.final_state.agent_state, threads.final_state.agent_state) > 1e-4
