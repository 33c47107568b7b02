"""Central inference (SEED RL) under the Sebulba runner, ``--inference learner``
(jrl.run.sebulba.inference): a row of the fixed-shape batch does not depend on the others, so
a synchronous run is the same however its requests were batched, equals actor-side inference
and resumes exactly (API and CLI); Ray env workers give the same run; what it cannot take is
refused before any folder; failures (the server's, an env's, a lost reply) end the run with
one error naming them. Learning tests: tests/test_sebulba.py (threads) and
tests/test_ray_actors.py (Ray) run IMPALA and PPO both ways."""

import csv
import json
import re
import sys
import threading

import flax.serialization
import jax
import jrl.agents
import jrl.envs
import numpy as np
import pytest

from jrl.app import api as experiment
from jrl.app import cli
from jrl.app.execution import TrainingInterrupted
from jrl.app.run_options import RunOptions
from jrl.run import sebulba
from jrl.run.anakin import RunHooks
from jrl.run.sebulba import inference

gymnasium = pytest.importorskip("gymnasium")  # the test extra installs it
pytestmark = pytest.mark.filterwarnings("ignore:os.fork:RuntimeWarning", "ignore::UserWarning")

SMALL = dict(num_envs=4, num_steps=16, num_minibatches=2, num_epochs=2, hidden_sizes=(16, 16))
CENTRAL = dict(inference="learner")


def build(agent="ppo", **overrides):
    env, params = jrl.envs.make("gymnasium:CartPole-v1")
    config = experiment.make_config(agent, "CartPole-v1", **{**SMALL, **overrides})
    return env, config, jrl.agents.get(agent).build(config, env, params)


def run(built, env, config, iterations, options, seeds=2, **kwargs):
    keys = jax.vmap(jax.random.key)(np.arange(seeds))
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


def leaves(tree):
    return [np.asarray(x) for x in jax.tree.leaves(tree)]


def assert_same(a, b):
    for x, y in zip(leaves(a), leaves(b), strict=True):
        np.testing.assert_array_equal(x, y)


# --- the batch ---------------------------------------------------------------------------------


def test_a_row_of_the_fixed_batch_depends_on_that_row_alone():
    """The server acts on a fixed shape [W, R, n] with worker w in row w: a row's actions and
    act info are the same bits whatever the other rows hold (other workers' observations, or
    the zeros of workers that have not sent), and the keys fold in (j, a, t) as actor-side."""
    env, config, built = build("impala", num_envs=6)
    states = sebulba.init_states(built.agent, built.spec, jax.vmap(jax.random.key)(np.arange(2)))
    act = inference.central_act_fn(built.agent)
    rng = np.random.default_rng(0)
    W, R, n = 3, 2, 6
    obs = rng.normal(size=(W, R, n, 4)).astype(np.float32)
    j, a, t = (np.array(v, np.int32) for v in ([4, 4, 5], [0, 1, 2], [7, 3, 0]))
    full = jax.device_get(act(states.agent_state, obs, states.act_key, j, a, t))
    for w in range(W):
        alone = np.zeros_like(obs)
        alone[w] = obs[w]
        other = rng.normal(size=obs.shape).astype(np.float32) * 5
        other[w] = obs[w]
        for rows in (alone, other):
            got = jax.device_get(act(states.agent_state, rows, states.act_key, j, a, t))
            assert_same(jax.tree.map(lambda x: x[w], got), jax.tree.map(lambda x: x[w], full))
    # row w equals actor-side act of the same worker, iteration and step
    one = sebulba.act_fn(built.agent)
    for w in range(W):
        side = one(states.agent_state, obs[w], states.act_key, int(j[w]), int(a[w]), int(t[w]))
        np.testing.assert_array_equal(np.asarray(side[0]), full[0][w])


def test_the_server_reports_its_own_failure_and_a_lost_reply_is_bounded(monkeypatch):
    """An act that raises ends the server with the error (CentralActors names it); an actor
    whose request is never served gives up after the wait bound with one line."""
    stop = threading.Event()

    def broken(*args):
        raise RuntimeError("no device left")

    server = inference.InferenceServer(broken, 2, 0, None, 1.0, stop)
    server.start()
    with pytest.raises(sebulba.waits.Stopping):
        server(None, np.zeros((1, 2, 4), np.float32), None, 0, 1, 0)
    assert isinstance(server.error, RuntimeError) and stop.is_set()
    server.close()

    monkeypatch.setenv(sebulba.WAIT_ENV, "0.3")
    idle = inference.InferenceServer(broken, 2, 0, None, 1.0, threading.Event())  # not started
    with pytest.raises(sebulba.ActorTimeout, match="actor thread 1 waited 0.3 s for central"):
        idle(None, np.zeros((1, 2, 4), np.float32), None, 5, 1, 3)


# --- runs --------------------------------------------------------------------------------------


def test_a_synchronous_run_is_the_same_however_batched_equals_actor_side_and_resumes():
    """Two env-worker threads, max_staleness 0: runs whose server waits 0 ms (batches of one
    whenever the other worker is a moment late) and up to 10 s (every batch holds both: the
    server acts once both have sent) give the same bits; they equal actor-side inference with
    two actor threads (to float rounding: another batch shape); a run resumed at iteration 2
    from the states and env snapshots handed out there ends with the same bits as the whole
    run."""
    env, config, built = build()
    mid = {}
    hooks = RunHooks(on_chunk=lambda states, done, _: mid.setdefault(done, states))
    keep = lambda done, snapshots: mid.setdefault(("envs", done), snapshots)
    opts = lambda **kw: sebulba.SebulbaOptions(actor_threads=2, **CENTRAL, **kw)
    eager = run(built, env, config, 4, opts(inference_wait_ms=0), num_reports=2)
    patient = run(
        built,
        env,
        config,
        4,
        opts(inference_wait_ms=10_000),
        num_reports=2,
        hooks=hooks,
        on_snapshots=keep,
    )
    assert_same(eager.final_state.agent_state, patient.final_state.agent_state)
    np.testing.assert_array_equal(patient.metrics["inference/batch_size"], 2.0)  # it batched
    # one call per step of the 4 trajectories (how they spread over iterations is timing)
    assert patient.metrics["inference/calls"][0].sum() == 4 * config.num_steps
    side = run(built, env, config, 4, sebulba.SebulbaOptions(actor_threads=2), num_reports=2)
    for x, y in zip(leaves(side.final_state.agent_state), leaves(patient.final_state.agent_state)):
        np.testing.assert_allclose(x, y, atol=1e-6)
    resumed = run(
        built,
        env,
        config,
        4,
        opts(),
        num_reports=2,
        initial_state=mid[2],
        start_iteration=2,
        env_snapshots=mid[("envs", 2)],
    )
    assert resumed.iterations == 4
    assert_same(patient.final_state.agent_state, resumed.final_state.agent_state)


def test_a_central_run_folder_stops_resumes_exactly_and_records_the_mode(tmp_path):
    """Through train/resume with a run folder: stopped at half and resumed, the parameters and
    metrics.csv's values are those of the uninterrupted run; config.json records the mode (and
    a resume keeps it); actor-side records stay as they were (no inference entry)."""
    kw = dict(
        runner="sebulba",
        actor_threads=2,
        total_steps=512,
        num_reports=4,
        progress=False,
        **SMALL,
    )
    experiment.train("ppo", "gymnasium:CartPole-v1", out=tmp_path / "full", **CENTRAL, **kw)
    with pytest.raises(TrainingInterrupted, match="stop_at_steps=256 reached"):
        experiment.train(
            "ppo",
            "gymnasium:CartPole-v1",
            out=tmp_path / "part",
            stop_at_steps=256,
            **CENTRAL,
            **kw,
        )
    experiment.resume(tmp_path / "part", progress=False)
    read = lambda name: flax.serialization.msgpack_restore(
        (tmp_path / name / "params.msgpack").read_bytes()
    )
    assert_same(read("full"), read("part"))
    rows = lambda name: list(csv.DictReader(open(tmp_path / name / "metrics.csv")))
    full, part = rows("full"), rows("part")
    assert len(full) == len(part) == 8  # one row per iteration
    learned = [k for k in full[0] if k.startswith(("train/", "loss", "ppo/"))]
    assert "train/episode_return" in learned
    assert [[r[k] for k in learned] for r in full] == [[r[k] for k in learned] for r in part]
    record = json.loads((tmp_path / "part" / "config.json").read_text())["run"]["sebulba"]
    assert record["inference"] == "learner"
    assert "inference_wait_ms" not in record  # at its default: recorded only when changed
    actor_side = RunOptions(runner="sebulba").record()["sebulba"]
    assert "inference" not in actor_side and "inference_wait_ms" not in actor_side


@pytest.mark.parametrize(
    "args, reason",
    [
        (["--transfer", "bfloat16"], "--inference learner does not take --transfer bfloat16"),
        (["--pull-batch", "2"], "--inference learner does not take --pull-batch"),
        (["--actor-devices", "1"], "--inference learner does not take --actor-devices"),
        (["--inference-wait-ms", "-1"], r"inference_wait_ms must be in [0, 10000]"),
        (["--inference-wait-ms", "inf"], r"inference_wait_ms must be in [0, 10000]"),
    ],
)
def test_what_central_inference_cannot_take_is_refused_before_any_folder(
    tmp_path, monkeypatch, capsys, args, reason
):
    monkeypatch.chdir(tmp_path)
    argv = ["train", "ppo", "--env", "gymnasium:CartPole-v1", "--runner", "sebulba"]
    assert cli.main([*argv, "--inference", "learner", *args]) == 2
    err = capsys.readouterr().err
    assert reason in err, err[-2000:]
    assert not any(tmp_path.iterdir())


def test_apex_the_anakin_runner_and_actor_side_runs_refuse_central_inference_options(
    tmp_path, monkeypatch, capsys
):
    monkeypatch.chdir(tmp_path)
    apex = ["train", "apex", "--env", "gymnasium:CartPole-v1", "--runner", "sebulba"]
    assert cli.main([*apex, "--inference", "learner"]) == 2
    assert "(apex) computes priorities where it acts" in capsys.readouterr().err
    assert cli.main(["train", "ppo", "--inference", "learner"]) == 2
    assert "--inference is an option of the sebulba runner" in capsys.readouterr().err
    ppo = ["train", "ppo", "--env", "gymnasium:CartPole-v1", "--runner", "sebulba"]
    assert cli.main([*ppo, "--inference-wait-ms", "5"]) == 2
    assert "--inference-wait-ms is for central inference" in capsys.readouterr().err
    assert not any(tmp_path.iterdir())


class CrashingHostEnv:
    """CartPole whose envs raise at their 40th step."""

    def __init__(self, env):
        self.env = env

    def __getattr__(self, name):
        if name == "env":  # while unpickling (it travels to Ray workers by value)
            raise AttributeError(name)
        return getattr(self.env, name)

    def make_batch(self, n, seed, pull=None):
        return CrashingBatch(self.env.make_batch(n, seed, pull))


class CrashingBatch:
    def __init__(self, batch):
        self.batch, self.count = batch, 0

    def __getattr__(self, name):
        if name == "batch":
            raise AttributeError(name)
        return getattr(self.batch, name)

    def step(self, actions):
        self.count += 1
        if self.count == 40:
            raise RuntimeError("the simulator lost its connection")
        return self.batch.step(actions)


def test_an_env_failing_in_an_env_worker_thread_stops_the_run_with_its_error():
    env, config, built = build()
    options = sebulba.SebulbaOptions(actor_threads=2, **CENTRAL)
    with pytest.raises(sebulba.ActorError) as caught:
        run(built, CrashingHostEnv(env), config, 20, options, seeds=1)
    message = str(caught.value)
    assert "actor thread 0 failed: RuntimeError: the simulator lost its connection" in message
    assert caught.value.result.iterations == 2  # 2 trajectories of 16 steps, then the crash


# --- Ray env workers ---------------------------------------------------------------------------


@pytest.mark.xdist_group("ray")
def test_ray_env_workers_equal_threads_move_no_trajectory_and_fail_with_their_error(ray_session):
    """Two Ray env workers, synchronous: the same bits as two env-worker threads (the same
    envs, keys and server), resumed from the threads' states and snapshots at iteration 2 the
    same end; what crossed between processes per env step is logged and smaller than the
    actor-side Ray pool's (which also sends parameters); an env that raises in a worker ends the
    run naming the worker."""
    from ray import cloudpickle  # Ray's own copy pickles actor arguments

    env, config, built = build()
    mid = {}
    hooks = RunHooks(on_chunk=lambda states, done, _: mid.setdefault(done, states))
    keep = lambda done, snapshots: mid.setdefault(("envs", done), snapshots)
    threads = run(
        built,
        env,
        config,
        4,
        sebulba.SebulbaOptions(actor_threads=2, **CENTRAL),
        num_reports=2,
        hooks=hooks,
        on_snapshots=keep,
    )
    ray2 = sebulba.SebulbaOptions(actors="ray:2", **CENTRAL)
    rays = run(built, env, config, 4, ray2, num_reports=2)
    assert_same(threads.final_state.agent_state, rays.final_state.agent_state)
    resumed = run(
        built,
        env,
        config,
        4,
        ray2,
        num_reports=2,
        initial_state=mid[2],
        start_iteration=2,
        env_snapshots=mid[("envs", 2)],
    )
    assert_same(threads.final_state.agent_state, resumed.final_state.agent_state)
    side = run(built, env, config, 4, sebulba.SebulbaOptions(actors="ray:2"), num_reports=2)
    central_bytes = rays.metrics["ray/bytes_per_step"][0, -1]
    assert 0 < central_bytes < side.metrics["ray/bytes_per_step"][0, -1]
    assert (rays.metrics["sebulba/bytes_per_s"] > 0).all()
    cloudpickle.register_pickle_by_value(sys.modules[__name__])
    try:
        with pytest.raises(sebulba.ActorError) as caught:
            run(built, CrashingHostEnv(env), config, 20, ray2, seeds=1)
    finally:
        cloudpickle.unregister_pickle_by_value(sys.modules[__name__])
    # both workers' envs fail at their 40th step: the run ends with whichever reports first
    message = str(caught.value)
    pattern = r"ray env worker [01] failed: RuntimeError: the simulator lost its connection"
    assert re.search(pattern, message), message
    assert caught.value.result.iterations == 2


def test_a_ray_env_worker_lost_or_stuck_ends_the_run_with_one_line_naming_it(monkeypatch):
    """RayEnvs maps Ray's failures to the run's errors: a worker that could not start, a worker
    process that died (no replacement with central inference: resume), a step that did not
    come back within the wait bound, and a stop while it waits. (No Ray started: ``ray.wait``
    and ``ray.get`` stand in.)"""
    ray = pytest.importorskip("ray")
    from ray import exceptions

    from jrl.run import ray_workers

    class Handle:
        def __getattr__(self, name):
            return type("Method", (), {"remote": staticmethod(lambda *args: name)})

    stop = threading.Event()
    envs = ray_workers.RayEnvs(Handle(), 3, stop)
    answered = lambda refs, **kw: (refs, [])
    monkeypatch.setattr(ray, "wait", answered)

    def fails_with(error):
        def get(ref, timeout=None):
            raise error

        monkeypatch.setattr(ray, "get", get)

    fails_with(exceptions.RayActorError(actor_init_failed=True, error_msg="no module stuck_env"))
    with pytest.raises(sebulba.ActorError, match="ray env worker 3 could not start: .*stuck_env"):
        envs.reset(None)
    fails_with(exceptions.RayActorError())
    with pytest.raises(sebulba.ActorError, match="ray env worker 3 died .*resume it from its last"):
        envs.reset(None)
    monkeypatch.setattr(ray, "get", lambda ref, timeout=None: [None, b"abc"])
    assert envs.snapshots() == [None, b"abc"] and envs.wire == (3, 0)

    monkeypatch.setattr(ray, "wait", lambda refs, **kw: ([], refs))  # never answers
    monkeypatch.setenv(sebulba.WAIT_ENV, "0.3")
    with pytest.raises(sebulba.ActorTimeout, match="ray env worker 3 did not answer a step within"):
        envs.step(np.zeros((1, 2), np.int32))
    stop.set()
    with pytest.raises(sebulba.waits.Stopping):
        envs.step(np.zeros((1, 2), np.int32))
