"""Data-parallel learner: 1 device == N devices == N processes (subprocesses).

Fake CPU devices need XLA_FLAGS set before jax starts, so every case runs
in a fresh interpreter (tests/dist_worker.py).
"""

import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from conftest import free_port

WORKER = str(Path(__file__).with_name("dist_worker.py"))


def worker(out, agent, devices, *extra, timeout=600):
    cmd = [sys.executable, WORKER, str(out), agent, str(devices), *map(str, extra)]
    return subprocess.run(
        cmd,
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, "JAX_PLATFORMS": "cpu"},
    )


def load(path):
    data = np.load(path)
    return [data[k] for k in data.files if k.startswith("arr_")], data


def max_diff(a, b):
    return max(float(np.abs(x - y).max()) for x, y in zip(a, b))


@pytest.mark.parametrize("agent", ["ppo", "dqn", "reinforce", "sac", "td3", "ddpg", "sac_discrete"])
def test_device_count_invariance(agent, tmp_path):
    """The same global batch gives the same parameters on 1, 2 and 4 devices (DQN: replay split by
    env over the devices, each device sampling the same items from its envs as one device would)."""
    results = {}
    for name, devices, fake in [("plain", 0, 1), ("2dev", 2, 2), ("4dev", 4, 4)]:
        out = worker(tmp_path / f"{name}.npz", agent, devices, "--fake-devices", fake)
        assert out.returncode == 0, out.stderr[-3000:]
        results[name] = load(tmp_path / f"{name}.npz")[0]
    for name in ["2dev", "4dev"]:
        assert max_diff(results["plain"], results[name]) <= 1e-5, name
    # and the two seeds really differ (the comparison is not vacuous)
    assert max(float(np.abs(x[0] - x[1]).max()) for x in results["plain"]) > 1e-3


def two_processes(tmp_path, agent, *extra):
    """Runs the worker as processes 0 and 1 of a jax.distributed run on 127.0.0.1 (their
    results in ``p0.npz``, ``p1.npz``)."""
    address = f"127.0.0.1:{free_port()}"
    procs = []
    for pid in range(2):
        cmd = [
            sys.executable,
            WORKER,
            str(tmp_path / f"p{pid}.npz"),
            agent,
            "0",
            "--process-id",
            str(pid),
            "--num-processes",
            "2",
            "--coordinator",
            address,
            *map(str, extra),
        ]
        # output to files, not pipes: a process blocked on a full pipe would stall its peer
        log = open(tmp_path / f"p{pid}.log", "w+")
        procs.append(
            subprocess.Popen(
                cmd,
                stdout=log,
                stderr=subprocess.STDOUT,
                env={**os.environ, "JAX_PLATFORMS": "cpu"},
            )
        )
        log.close()
    try:
        _wait_all(procs, deadline=time.monotonic() + 600)
    finally:
        for p in procs:
            p.kill()
            p.wait(timeout=60)
    for pid, p in enumerate(procs):
        assert p.returncode == 0, (tmp_path / f"p{pid}.log").read_text()[-3000:]


def _wait_all(procs, deadline):
    """Waits for every process until all have exited, one has failed (the others are then
    killed: a peer left alone would wait in the rendezvous or a collective for minutes), or
    ``deadline`` (time.monotonic()) has passed, which fails the test."""
    while None in (codes := [p.poll() for p in procs]):  # every process polled each round
        if any(code not in (None, 0) for code in codes):
            return
        if time.monotonic() > deadline:
            pytest.fail("the processes did not finish in 600 s")
        try:
            next(p for p in procs if p.poll() is None).wait(timeout=1.0)
        except (subprocess.TimeoutExpired, StopIteration):
            pass


def test_two_processes_match_single_process(tmp_path):
    """Two processes on 127.0.0.1 (jax.distributed, gloo) end with identical parameters,
    equal to a single-process run with the same global batch."""
    two_processes(tmp_path, "ppo")
    single = worker(tmp_path / "single.npz", "ppo", 0)
    assert single.returncode == 0, single.stderr[-3000:]
    p0, p1, s = (load(tmp_path / f"{n}.npz")[0] for n in ["p0", "p1", "single"])
    assert max_diff(p0, p1) == 0.0
    assert max_diff(p0, s) <= 1e-5


def test_sebulba_learner_over_two_processes_matches_one_process(tmp_path):
    """The Sebulba runner with a jax.distributed learner: two processes on 127.0.0.1, each with
    one actor thread stepping its 2 of the 4 host envs, learn the parameters of one process
    with two actor threads and two learner devices (its envs split the same way), and of one
    process on one device up to float rounding."""
    two_processes(tmp_path, "ppo-sebulba", "--actor-threads", 1)
    one = worker(tmp_path / "one.npz", "ppo-sebulba", 2, "--fake-devices", 2, "--actor-threads", 2)
    assert one.returncode == 0, one.stderr[-3000:]
    plain = worker(tmp_path / "plain.npz", "ppo-sebulba", 0, "--actor-threads", 2)
    assert plain.returncode == 0, plain.stderr[-3000:]
    p0, p1, one, plain = (load(tmp_path / f"{n}.npz")[0] for n in ["p0", "p1", "one", "plain"])
    assert max_diff(p0, p1) == 0.0
    assert max_diff(p0, one) == 0.0
    assert max_diff(p0, plain) <= 1e-5
    assert max(float(np.abs(x[0] - x[1]).max()) for x in p0) > 1e-3  # the two seeds differ


def test_ppo_learns_on_two_devices(tmp_path):
    out = worker(
        tmp_path / "learn.npz",
        "ppo",
        2,
        "--fake-devices",
        2,
        "--total-steps",
        500_000,
        "--seeds",
        2,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    _, data = load(tmp_path / "learn.npz")
    # PPO CartPole on one device, measured 2026-12-01 with 8 seeds (benchmarks/
    # learning_reach.py): 500.0 +- 0.0; the sharded run equals it up to float rounding
    assert data["final_returns"].mean() >= 475, data["final_returns"]


def test_bad_device_requests():
    import jrl
    from jrl.run import anakin

    with pytest.raises(ValueError, match="devices requested but only"):
        anakin.make_mesh(64)
    with pytest.raises(ValueError, match="devices requested but only"):
        jrl.train("ppo", "CartPole-v1", devices=64, total_steps=512)
    import jrl.envs
    from jrl.agents.actor_critic import ppo

    env, params = jrl.envs.make("CartPole-v1")
    with pytest.raises(ValueError, match="not divisible by 3 devices"):
        ppo.build(ppo.PPOConfig(num_envs=4), env, params, num_devices=3)


def test_unreachable_coordinator_is_a_clear_error():
    import jrl.app.distributed

    port = free_port()  # nothing listens there
    with pytest.raises(ConnectionError, match="unreachable"):
        jrl.app.distributed.initialize(f"127.0.0.1:{port}", 2, 1, timeout=1.0)
    with pytest.raises(ValueError, match="needs all of"):
        jrl.app.distributed.initialize("127.0.0.1:1234", None, None)
    with pytest.raises(ValueError, match="process id must lie"):
        jrl.app.distributed.initialize("127.0.0.1:1234", 2, 5)


def test_cli_devices_flag_errors(tmp_path):
    out = subprocess.run(
        [sys.executable, "-m", "jrl.app.cli", "train", "ppo", "--devices", "64"],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "JAX_PLATFORMS": "cpu"},
        cwd=tmp_path,
    )
    assert out.returncode == 2 and "devices requested but only" in out.stderr
