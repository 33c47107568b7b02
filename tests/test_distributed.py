"""Data-parallel learner: 1 device == N devices == N processes (subprocesses).

Fake CPU devices need XLA_FLAGS set before jax starts, so every case runs
in a fresh interpreter (tests/dist_worker.py).
"""

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from conftest import wait_until

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


@pytest.mark.parametrize("agent", ["ppo", "dqn", "reinforce", "sac", "td3", "ddpg"])
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


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def two_processes(tmp_path, agent, *extra):
    """Runs the worker as processes 0 and 1 of a jax.distributed run on 127.0.0.1 (their
    results in ``p0.npz``, ``p1.npz``)."""
    address = f"127.0.0.1:{_free_port()}"
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

    port = _free_port()  # nothing listens there
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


def test_a_sigterm_to_one_process_stops_every_process_after_the_same_chunk(tmp_path):
    """SIGTERM to process 1 alone: both processes stop after the same chunk (their vote at the
    chunk boundary, jrl.app.peers) and exit 143, each saying whose signal it was and at how
    many env steps; before the vote process 1 left alone and process 0 waited for it in the
    next chunk's collective until jax's heartbeat aborted it."""
    procs, logs, csv = _long_cli_run_on_two_processes(tmp_path, {})
    try:
        _wait_for_two_reports(procs, logs, csv)
        procs[1].send_signal(signal.SIGTERM)
        for p in procs:  # both, each bounded (not _wait_all: a first exit of 143 is no failure)
            p.wait(timeout=600)
    finally:
        for p in procs:
            p.kill()
            p.wait(timeout=60)
    texts = [f.read_text() for f in logs]
    assert [p.returncode for p in procs] == [143, 143], [t[-3000:] for t in texts]
    steps = []
    for text in texts:
        line = text.strip().splitlines()[-1]
        assert line.startswith("jrl: SIGTERM received by process 1: stopped after "), line
        assert line.endswith("multi-process runs write no checkpoints yet, so it cannot be resumed")
        steps.append(line.split("stopped after ")[1].split("/")[0])
    assert steps[0] == steps[1]  # the same chunk in both
    rows = csv.read_text().splitlines()
    header = rows[0].split(",")
    last = dict(zip(header, rows[-1].split(",")))
    assert int(float(last["train/env_steps"])) == int(steps[0].replace(",", ""))
    assert "Traceback" not in texts[0] + texts[1]
    assert not (tmp_path / "run1").exists()  # process 1 writes no folder


@pytest.mark.parametrize("killed", [1, 0], ids=["a-peer", "the-coordinator"])
def test_a_process_killed_mid_run_ends_the_others_within_the_peer_bound(tmp_path, killed):
    """kill -9 of one process of a 2-process run: the other is not left waiting in a
    collective. With JRL_PEER_TIMEOUT=10, jax's coordination service finds a dead process 1
    within 10 s of its last heartbeat and ends process 0; a dead process 0 (which hosts the
    service) ends process 1 at once. The survivor's wait is bounded at 60 s, which jax's
    default of 100 s would exceed. (It ends by abort, with jax's report: not yet one line.)"""
    procs, logs, csv = _long_cli_run_on_two_processes(tmp_path, {"JRL_PEER_TIMEOUT": "10"})
    survivor = procs[1 - killed]
    try:
        _wait_for_two_reports(procs, logs, csv)
        procs[killed].kill()
        procs[killed].wait(timeout=60)
        try:
            survivor.wait(timeout=60)
        except subprocess.TimeoutExpired:
            pytest.fail(
                f"process {1 - killed} outlived the killed process {killed} by 60 s: "
                + logs[1 - killed].read_text()[-2000:]
            )
    finally:
        for p in procs:
            p.kill()
            p.wait(timeout=60)
    assert survivor.returncode != 0
    if killed == 1:  # found by the missed heartbeats, not by some other failure
        assert "Task 1 heartbeat timeout" in logs[0].read_text(), logs[0].read_text()[-2000:]


def _long_cli_run_on_two_processes(tmp_path, env):
    """``jrl train ppo`` on CartPole as processes 0 and 1 of one run (CLI, 127.0.0.1), long
    enough (2,000 chunks of one iteration) to be stopped or killed mid-run; ``env`` is added to
    their environment. Returns ``(procs, stderr log files, process 0's metrics.csv)``."""
    address = f"127.0.0.1:{_free_port()}"
    per_report = 4 * 128  # one report, and one chunk, per iteration of 4 envs x 128 steps
    common = ["train", "ppo", "--env", "CartPole-v1", "--num-envs", "4", "--num-steps", "128"]
    common += ["--total-steps", str(per_report * 2000), "--num-reports", "2000", "--quiet"]
    common += ["--coordinator", address, "--num-processes", "2"]
    procs, logs = [], [tmp_path / f"p{pid}.err" for pid in range(2)]
    for pid in range(2):
        with open(logs[pid], "w") as err:  # files, not pipes: see two_processes
            procs.append(
                subprocess.Popen(
                    [sys.executable, "-m", "jrl.app.cli", *common, "--process-id", str(pid)]
                    + ["--out", f"run{pid}"],
                    cwd=tmp_path,
                    stdout=subprocess.DEVNULL,
                    stderr=err,
                    env={**os.environ, "JAX_PLATFORMS": "cpu", **env},
                )
            )
    return procs, logs, tmp_path / "run0" / "metrics.csv"


def _wait_for_two_reports(procs, logs, csv):
    """Waits (bounded) until process 0 has written two reports to ``csv``; fails the test if
    a process ended first."""
    wait_until(
        lambda: (
            csv.is_file()
            and len(csv.read_text().splitlines()) >= 3
            or any(p.poll() is not None for p in procs)
        ),
        600,
        "process 0 writing its second report",
    )
    assert all(p.poll() is None for p in procs), [f.read_text()[-2000:] for f in logs]
