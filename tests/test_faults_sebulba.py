"""Faults of the Sebulba runner and its Ray actors (issue #41), each shown by the command that
had it: refusals made before any run folder exists, an unreachable --ray-address failing at
once, bounded waits on a stuck actor, plugins imported by Ray actor processes, a killed learner
taking its local Ray with it, the docs' pull-mode command, host-env presets that Sebulba can
run, and the docs' exact-resume promise with its exceptions. The CLI runs in subprocesses
(each in a temporary folder, with a timeout); a Ray test starts one small local Ray, inside the
subprocess that needs it, after the session's Ray is shut down (tests/conftest.py
``ray_of_its_own``: one Ray at a time)."""

import os
import re
import socket
import subprocess
import sys
from pathlib import Path

import jrl.agents
import jrl.envs
import pytest
from conftest import PipeLines

from jrl.app import api as experiment
from jrl.app.run_options import RunOptions, RunSpec
from jrl.run import sebulba

gymnasium = pytest.importorskip("gymnasium")
pytestmark = pytest.mark.filterwarnings("ignore:os.fork:RuntimeWarning", "ignore::UserWarning")

JRL = [sys.executable, "-m", "jrl.app.cli"]
DOCS = Path(__file__).resolve().parents[1] / "docs"
SCALING_OUT = DOCS / "scaling-out.md"  # the Sebulba runner's commands and its resume exceptions
RUN_FOLDER = DOCS / "run-folder.md"  # the run folder's guarantees, exact resume among them
TINY = ["--num-envs", 4, "--num-steps", 16, "--hidden-sizes", 16, 16]


def cli(*args, cwd, timeout=300, env=None):
    """``jrl ARGS`` in ``cwd``, warnings off (stderr holds jrl's own lines only)."""
    env = {
        **os.environ,
        "JAX_PLATFORMS": "cpu",
        "MPLBACKEND": "Agg",
        "PYTHONWARNINGS": "ignore",
        **(env or {}),
    }
    return subprocess.run(
        JRL + [str(a) for a in args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=cwd,
        env=env,
    )


def error_line(out: subprocess.CompletedProcess) -> str:
    """The one line a failed command wrote on stderr (the test fails when there are more)."""
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("jrl: error: "), out.stderr[-3000:]
    return lines[0]


def closed_port() -> int:
    """A local TCP port nothing listens on (bound, then released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# --- 1. refusals before the run folder ---------------------------------------------------------


@pytest.mark.parametrize(
    "args, reason",
    [
        (["--env", "gymnasium:CartPole-v1", "--pull-batch", 2], "has no pull mode"),
        (["--env", "envpool:CartPole-v1", "--pull-batch", 3], "pull_batch .3. must divide"),
        (["--env", "envpool:CartPole-v1", "--pull-batch", 32], "pull_batch .32. must divide"),
        (["--env", "gymnasium:CartPole-v1", "--actor-threads", 3], "must divide among actor"),
        (["--env", "gymnasium:CartPole-v1", "--actor-devices", 5], "5 actor devices requested"),
        (
            ["--env", "gymnasium:CartPole-v1", "--actors", "ray:2", "--ray-address", "not_a_host"],
            "--ray-address must be HOST:PORT",
        ),
        (
            ["--env", "gymnasium:CartPole-v1", "--actors", "ray:2", "--ray-address", "x.invalid:1"],
            "host 'x.invalid' does not resolve",
        ),
    ],
)
def test_options_the_run_cannot_take_are_refused_before_its_folder(tmp_path, args, reason):
    """Each refusal is one line, exit 2, and no run folder (no config.json, metrics.csv,
    checkpoints/ or lock left to refuse the same --out next time)."""
    if "envpool:CartPole-v1" in args:
        pytest.importorskip("envpool")
    if "--actors" in args:
        pytest.importorskip("ray")
    out = cli("train", "ppo", "--runner", "sebulba", *args, "--out", "run", cwd=tmp_path)
    assert out.returncode == 2, out.stderr[-3000:]
    assert re.search(reason, error_line(out)), out.stderr
    assert not (tmp_path / "run").exists()


# --- 2. an unreachable Ray address ---------------------------------------------------------------


def test_a_ray_address_where_nothing_listens_fails_at_once_with_one_line(tmp_path):
    pytest.importorskip("ray")
    port = closed_port()
    args = ["--actors", "ray:2", "--ray-address", f"127.0.0.1:{port}", "--out", "run"]
    out = cli(  # bounded: Ray's own connect would retry for minutes; CONNECT_TIMEOUT_S is 10 s
        "train", "ppo", "--env", "gymnasium:CartPole-v1", "--runner", "sebulba", *args,
        cwd=tmp_path, timeout=300,
    )  # fmt: skip
    assert out.returncode == 2, out.stderr[-3000:]
    line = error_line(out)
    assert f"--ray-address 127.0.0.1:{port}: nothing accepts a connection" in line
    assert not (tmp_path / "run").exists()


NO_RAY = """
import sys
from jrl.run import ray_session
ray_session.INIT_TIMEOUT_S = 3.0
try:
    ray_session.RaySession.start(sys.argv[1], 2)
except ConnectionError as e:
    print(e, flush=True)
"""


def test_a_ray_address_that_answers_but_is_no_ray_fails_within_the_init_bound(tmp_path):
    """A port that accepts connections but never speaks Ray's protocol: ``ray.init`` retries
    it forever; the run gives up after INIT_TIMEOUT_S (shrunk to 3 s here) with
    ConnectionError (exit 2 in the CLI). Bounded by the child's timeout, far below forever;
    no elapsed time is asserted."""
    pytest.importorskip("ray")
    with socket.socket() as server:  # the kernel completes connections; nobody answers them
        server.bind(("127.0.0.1", 0))
        server.listen(16)
        port = server.getsockname()[1]
        (tmp_path / "no_ray.py").write_text(NO_RAY)
        out = subprocess.run(
            [sys.executable, "no_ray.py", f"127.0.0.1:{port}"],
            capture_output=True,
            text=True,
            timeout=300,
            cwd=tmp_path,
            env={**os.environ, "JAX_PLATFORMS": "cpu"},
        )
    assert out.returncode == 0, out.stderr[-3000:]
    message = out.stdout.strip()
    assert f"--ray-address 127.0.0.1:{port}: no Ray answered there within 3 s" in message


# --- 3. bounded waits ----------------------------------------------------------------------------

STUCK = """
import threading

import gymnasium
from gymnasium.envs.classic_control import CartPoleEnv

NEVER = threading.Event()  # never set: the env is stuck from its first step


class Stuck(CartPoleEnv):
    def step(self, action):
        NEVER.wait()


gymnasium.register("Stuck-v0", entry_point=Stuck, max_episode_steps=500)
"""


@pytest.mark.parametrize(
    "actors", ["threads", pytest.param("ray:2", marks=pytest.mark.xdist_group("ray"))]
)
def test_a_stuck_actor_stops_the_run_with_one_line_in_bounded_time(tmp_path, actors, request):
    """An env that never returns from step: the learner's wait for the first trajectory gives
    up after $JRL_SEBULBA_WAIT_S (10 s here) and the run ends with one line naming the
    trajectory and the actor it waited for (exit 1), actor threads or Ray actor processes.
    Bounded by the child's timeout (the env itself never returns)."""
    if actors != "threads":
        request.getfixturevalue("ray_of_its_own")
    (tmp_path / "stuck_env.py").write_text(STUCK)
    out = cli(
        "train", "ppo", "--env", "gymnasium:Stuck-v0", "--runner", "sebulba", "--actors", actors,
        "--import", "stuck_env", *TINY, "--total-steps", 1024, "--quiet", "--out", "run",
        cwd=tmp_path, timeout=600,
        env={"PYTHONPATH": str(tmp_path), sebulba.WAIT_ENV: "10"},
    )  # fmt: skip
    assert out.returncode == 1, out.stderr[-3000:]
    who = "actor thread 0" if actors == "threads" else "ray actor 0"
    assert f"the learner waited 10 s for trajectory 0 of {who}, which sent none" in error_line(out)


def test_the_wait_bound_is_read_from_the_environment(monkeypatch):
    monkeypatch.delenv(sebulba.WAIT_ENV, raising=False)
    assert sebulba.wait_limit() == sebulba.WAIT_S >= 300  # minutes: compiling counts
    monkeypatch.setenv(sebulba.WAIT_ENV, "2.5")
    assert sebulba.wait_limit() == 2.5
    monkeypatch.setenv(sebulba.WAIT_ENV, "soon")
    with pytest.raises(ValueError, match="JRL_SEBULBA_WAIT_S must be a number of seconds > 0"):
        sebulba.wait_limit()


# --- 4. plugins in Ray actor processes -----------------------------------------------------------

PLUGIN = """
import gymnasium
from gymnasium.envs.classic_control import CartPoleEnv


class PluginCartPole(CartPoleEnv):
    pass


gymnasium.register("PluginCartPole-v0", entry_point=PluginCartPole, max_episode_steps=500)
"""


def test_ray_actor_processes_import_the_run_plugins(tmp_path, ray_of_its_own):
    """An env registered by ``--import jrl_plugin_env``: the Ray actor processes import the
    plugin before building their envs, as the learner's process did."""
    (tmp_path / "jrl_plugin_env.py").write_text(PLUGIN)
    out = cli(
        "train", "ppo", "--env", "gymnasium:PluginCartPole-v0", "--runner", "sebulba",
        "--actors", "ray:2", "--import", "jrl_plugin_env", *TINY, "--total-steps", 256,
        "--quiet", "--out", "run",
        cwd=tmp_path, timeout=600, env={"PYTHONPATH": str(tmp_path)},
    )  # fmt: skip
    assert out.returncode == 0, out.stderr[-3000:]
    assert "ppo on gymnasium:PluginCartPole-v0" in out.stdout


# --- 5. a killed learner takes its local Ray with it ---------------------------------------------


def test_a_killed_ray_learner_leaves_no_process_of_its_local_ray(tmp_path, ray_of_its_own):
    """kill -9 of ``jrl train --actors ray:2`` (which started a local Ray): every process
    under it (GCS, raylet, dashboard and runtime-env agents, actors, the watchdog) ends."""
    psutil = pytest.importorskip("psutil")
    env = {**os.environ, "JAX_PLATFORMS": "cpu", "PYTHONWARNINGS": "ignore"}
    args = ["train", "ppo", "--env", "gymnasium:CartPole-v1", "--runner", "sebulba"]
    args += ["--actors", "ray:2", *TINY, "--total-steps", 10**8, "--num-reports", 10**6]
    learner = subprocess.Popen(
        JRL + [str(a) for a in args + ["--out", "run"]],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        cwd=tmp_path,
        env=env,
    )
    try:  # the first progress line: the actors are acting
        PipeLines(learner.stderr).wait_for("steps/s", timeout=600)
        under = psutil.Process(learner.pid).children(recursive=True)
        names = {p.name() for p in under}  # before the kill, while they all run
    finally:
        learner.kill()
        learner.wait(timeout=60)
    assert {"raylet", "gcs_server"} <= names, names
    assert any("Agent" in name for name in names), names  # the raylet's, which outlived it
    _, alive = psutil.wait_procs(under, timeout=60)
    left = [(p.pid, p.name()) for p in alive]
    for p in alive:  # not to leak them into the rest of the suite
        p.kill()
    assert not left


# --- 6. the docs' pull-mode command --------------------------------------------------------------

PULL_COMMAND = "jrl train ppo --env envpool:CartPole-v1 --runner sebulba --pull-batch 4"


def test_the_docs_pull_mode_command_runs(tmp_path):
    """The command of docs/scaling-out.md, as written, with a small --total-steps: pull mode
    may take every env of an actor thread per recv (the CartPole preset has 4 envs)."""
    pytest.importorskip("envpool")
    assert PULL_COMMAND in SCALING_OUT.read_text()
    args = PULL_COMMAND.split()[1:] + ["--total-steps", "1024", "--quiet", "--out", "run"]
    out = cli(*args, cwd=tmp_path)
    assert out.returncode == 0, out.stderr[-3000:]
    assert (tmp_path / "run" / "params.msgpack").is_file()


# --- 7. host-env presets under the runner they need ----------------------------------------------


def sebulba_presets() -> list[tuple[str, str]]:
    """(agent, gymnasium id) for every agent that runs on sebulba and every preset of a jrl
    env whose id the gymnasium package provides."""
    registry = set(gymnasium.envs.registry)
    pairs = []
    for name in jrl.agents.names():
        cls = jrl.agents.get(name).config_cls
        if "sebulba" not in cls.RUNNERS or getattr(cls, "TURN_BASED", False):
            continue
        if getattr(cls, "MULTI_AGENT", False):
            continue
        pairs += [(name, env_id) for env_id in cls.PRESETS if env_id in registry]
    return pairs


@pytest.mark.parametrize("agent, env_id", sebulba_presets())
def test_every_host_env_preset_passes_the_sebulba_checks(agent, env_id):
    """What the run checks before training: the runner, the agent's kind and the env
    (check_env), then the built agent (check_agent: no normalisers)."""
    host_id = "gymnasium:" + env_id
    config = experiment.make_config(agent, host_id)
    spec = RunSpec(agent, host_id, config, RunOptions(runner="sebulba").validate())
    experiment.check_env(spec)
    env, params = jrl.envs.make(host_id)
    built = jrl.agents.get(agent).build(config, env, params)
    sebulba.check_agent(built.agent, built.env)


def test_ppo_trains_on_gymnasium_pendulum_with_its_preset(tmp_path):
    out = cli(
        "train", "ppo", "--env", "gymnasium:Pendulum-v1", "--runner", "sebulba",
        "--total-steps", 4096, "--quiet", "--out", "run",
        cwd=tmp_path,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr[-3000:]
    assert "ppo on gymnasium:Pendulum-v1" in out.stdout


@pytest.mark.parametrize("agent, env_id", [("impala", "MountainCar-v0"), ("a2c", "Pendulum-v1")])
def test_other_agents_train_on_host_envs_whose_presets_normalise(agent, env_id):
    """One iteration of each agent's own preset (which turns normalisation on for the jrl
    env), under Sebulba."""
    config = experiment.make_config(agent, "gymnasium:" + env_id)
    result = experiment.train(
        agent,
        "gymnasium:" + env_id,
        runner="sebulba",
        total_steps=config.num_envs * config.num_steps,
        progress=False,
    )
    assert result.final_returns().shape == (1,)


# --- 8. the exact-resume promise and its exceptions ----------------------------------------------


def test_an_envpool_run_resumes_with_fresh_episodes_as_the_docs_say(tmp_path):
    """EnvPool envs cannot be saved: the resumed run says it starts fresh episodes, which the
    docs' exact-resume promise (docs/run-folder.md) names as an exception (with a crashing
    env's checkpoint), as the Sebulba runner's section of docs/scaling-out.md does."""
    pytest.importorskip("envpool")
    text = " ".join(RUN_FOLDER.read_text().split())
    promise = text[text.index("**Exact resume.**") :][:600]
    assert "EnvPool" in promise and "crashing env" in promise, promise
    text = " ".join(SCALING_OUT.read_text().split())
    sebulba_part = text[text.index("`--max-staleness 0` (the default)") :][:800]
    assert "EnvPool envs" in sebulba_part and "a crashing env leaves" in sebulba_part
    common = ["train", "ppo", "--env", "envpool:CartPole-v1", "--runner", "sebulba", *TINY]
    part = cli(
        *common, "--total-steps", 512, "--num-reports", 4, "--stop-at-steps", 256, "--quiet",
        "--out", "run", cwd=tmp_path,
    )  # fmt: skip
    assert part.returncode == 0, part.stderr[-3000:]
    resumed = cli("train", "--resume", "run", "--quiet", cwd=tmp_path)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "the resumed run starts fresh episodes" in resumed.stderr
