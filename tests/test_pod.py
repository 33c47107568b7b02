"""Multi-process runs through the CLI (``jrl train --coordinator ... --num-processes 2``), each
process a subprocess with 2 fake CPU devices, on 127.0.0.1: a signal to one process stops all
of them after the same chunk with one checkpoint, which every process wrote its own blocks of;
the run resumes from it bit for bit; one process evaluates the folder; a killed process does
not leave the other waiting; and a refusal in one process stops every process."""

import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import jax
import numpy as np
import pytest
from conftest import free_port, wait_until
from jrl.app import api as experiment

# 2 devices per process; XLA's CPU collectives wait longer than their 40 s default for a
# device thread that a loaded 2-core machine deschedules (as in tests/dist_worker.py)
FAKE_DEVICES = {
    "JAX_PLATFORMS": "cpu",
    "XLA_FLAGS": "--xla_force_host_platform_device_count=2 "
    "--xla_cpu_collective_call_terminate_timeout_seconds=600",
}
PER_ITER = 8 * 32  # env steps per iteration (8 envs, 2 per device, x 32 steps): one chunk each
RESUME_HINT = (
    "on every process (with the same --coordinator, --num-processes and --process-id, or "
    "--multihost)"
)


def _train(out: str, iterations: int = 2000, runner: tuple = ()) -> list[str]:
    """``jrl train ppo`` on CartPole with one chunk and one report per iteration."""
    env = "gymnasium:CartPole-v1" if runner else "CartPole-v1"
    args = ["train", "ppo", "--env", env, "--num-envs", "8", "--num-steps", "32"]
    args += ["--total-steps", str(PER_ITER * iterations), "--num-reports", str(iterations)]
    return args + ["--quiet", "--out", out, *runner]


def _launch(tmp_path: Path, args: list[str], tag: str, env: dict | None = None, n: int = 2):
    """``jrl ARGS`` as processes 0 .. n-1 of one run, in ``tmp_path``; their stderr goes to
    files (``TAG0.err`` ...), not pipes: a process blocked on a full pipe would stall its peer."""
    address = f"127.0.0.1:{free_port()}"
    procs, logs = [], [tmp_path / f"{tag}{pid}.err" for pid in range(n)]
    for pid in range(n):
        flags = ["--coordinator", address, "--num-processes", str(n), "--process-id", str(pid)]
        with open(logs[pid], "w") as err:
            procs.append(
                subprocess.Popen(
                    [sys.executable, "-m", "jrl.app.cli", *args, *flags],
                    cwd=tmp_path,
                    stdout=subprocess.DEVNULL,
                    stderr=err,
                    env={**os.environ, **FAKE_DEVICES, **(env or {})},
                )
            )
    return procs, logs


def _wait(procs, logs, timeout: float = 600) -> list[str]:
    """Waits for each process (bounded), kills any left, and returns their stderr."""
    try:
        for p in procs:
            p.wait(timeout=timeout)
    finally:
        _kill(procs)
    return [f.read_text() for f in logs]


def _kill(procs) -> None:
    for p in procs:
        p.kill()
        p.wait(timeout=60)


def _run(tmp_path: Path, args: list[str], tag: str, codes=(0, 0)) -> list[str]:
    """``jrl ARGS`` as ``len(codes)`` processes of one run, which must exit with ``codes``;
    returns their stderr."""
    procs, logs = _launch(tmp_path, args, tag, n=len(codes))
    texts = _wait(procs, logs)
    assert [p.returncode for p in procs] == list(codes), [t[-3000:] for t in texts]
    return texts


def _alone(tmp_path: Path, args: list[str], code: int = 0) -> str:
    """``jrl ARGS`` in one process with 2 fake CPU devices, which must exit with ``code``;
    returns its stderr."""
    out = subprocess.run(
        [sys.executable, "-m", "jrl.app.cli", *args],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, **FAKE_DEVICES},
    )
    assert out.returncode == code, out.stderr[-3000:]
    return out.stderr


def _params(folder: Path) -> list[np.ndarray]:
    from flax import serialization

    tree = serialization.msgpack_restore((folder / "params.msgpack").read_bytes())
    return [np.asarray(x) for x in jax.tree.leaves(tree)]


def _wait_for_two_reports(procs, logs, csv: Path):
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


def _last_line(text: str) -> str:
    return text.strip().splitlines()[-1]


def test_a_sigterm_to_one_process_stops_every_process_with_one_checkpoint_that_resumes_exactly(
    tmp_path,
):
    """SIGTERM to process 1 alone: both processes stop after the same chunk (their vote at the
    chunk boundary, jrl.app.peers), write one checkpoint together (each process its own
    devices' blocks of the state), and exit 143, each saying whose signal it was. Resumed on
    the same 2 processes x 2 devices, the run ends bit for bit as an uninterrupted run does
    (parameters and metrics.csv), and one process evaluates the folder."""
    procs, logs = _launch(tmp_path, _train("run"), "stop")
    try:
        _wait_for_two_reports(procs, logs, tmp_path / "run" / "metrics.csv")
        procs[1].send_signal(signal.SIGTERM)
    except BaseException:
        _kill(procs)  # they would run 2,000 chunks
        raise
    texts = _wait(procs, logs)
    assert [p.returncode for p in procs] == [143, 143], [t[-3000:] for t in texts]
    lines = [_last_line(t) for t in texts]
    assert lines[0] == lines[1], lines  # the same chunk, the same checkpoint
    head, _, tail = lines[0].partition(" env steps per run; checkpoint ")
    assert head.startswith("jrl: SIGTERM received by process 1: stopped after "), lines[0]
    done = int(head.rsplit(" ", 1)[-1].split("/")[0].replace(",", ""))
    iteration = done // PER_ITER
    saved = tmp_path / "run" / "checkpoints" / str(iteration)
    assert tail == f"{saved}. Resume with: jrl train --resume run {RESUME_HINT}", lines[0]
    assert "Traceback" not in texts[0] + texts[1]
    meta = json.loads((saved / "meta" / "metadata").read_text())
    assert meta["processes"] == 2 and meta["iterations"] == iteration
    # every leaf of the [4 devices, ...] state was written in blocks, one per device
    assert {len(b) for b in meta["blocks"].values()} == {4}
    assert len(meta["blocks"]) == len(meta["leaves"])
    rows = (tmp_path / "run" / "metrics.csv").read_text().splitlines()
    last = dict(zip(rows[0].split(","), rows[-1].split(",")))
    assert int(float(last["train/env_steps"])) == done

    target = ["--stop-at-steps", str(done + 2 * PER_ITER)]  # two chunks past the stop
    _run(tmp_path, _train("whole") + target, "whole")
    _run(tmp_path, ["train", "--resume", "run", "--quiet", *target], "resume")
    for name in ("params.msgpack", "metrics.csv"):
        assert (tmp_path / "run" / name).read_bytes() == (tmp_path / "whole" / name).read_bytes()

    # one process (no --coordinator) evaluates the folder the two processes wrote
    _alone(tmp_path, ["eval", "run", "--episodes", "2"])
    report = json.loads((tmp_path / "run" / "eval.json").read_text())
    assert report["checkpoint_iteration"] == iteration + 2
    assert report["episodes_per_run"] == 2 and len(report["returns"][0]) == 2


def test_the_sebulba_runner_over_two_processes_resumes_exactly(tmp_path):
    """The Sebulba runner, one actor thread per process stepping its 4 gymnasium envs: a run
    stopped at a step count resumes on the same 2 processes with each actor's host envs as
    they were (gathered from both processes into the checkpoint) and ends with the parameters
    of the uninterrupted run, bit for bit. On one process (a copy of it) its 2 actors become 2
    threads there, each with its envs as they were, and the learner's 4 devices become 2: the
    same parameters up to float rounding."""
    sebulba = ("--runner", "sebulba", "--actor-threads", "1", "--max-staleness", "0")
    run, whole = _train("run", 8, sebulba), _train("whole", 8, sebulba)
    texts = _run(tmp_path, run + ["--stop-at-steps", str(4 * PER_ITER)], "stop")
    assert "checkpoint" in _last_line(texts[1]), texts[1][-2000:]
    meta = json.loads((tmp_path / "run" / "checkpoints" / "4" / "meta" / "metadata").read_text())
    assert len(meta["host_envs"]) == 2  # process 0's actor, then process 1's
    shutil.copytree(tmp_path / "run", tmp_path / "alone")
    _run(tmp_path, ["train", "--resume", "run", "--quiet"], "resume")
    _run(tmp_path, whole, "whole")
    params = [(tmp_path / r / "params.msgpack").read_bytes() for r in ("run", "whole")]
    assert params[0] == params[1]
    _alone(tmp_path, ["train", "--resume", "alone", "--devices", "2", "--quiet"])
    moved, reference = _params(tmp_path / "alone"), _params(tmp_path / "whole")
    assert max(float(np.abs(a - b).max()) for a, b in zip(moved, reference)) <= 1e-5


def test_a_four_process_run_resumes_on_two_processes_and_on_one(tmp_path):
    """A run of 4 processes x 2 devices stopped at a step count resumes on 2 processes x 2
    devices, and (a copy of it) on one process with --devices 2: its state is moved onto the
    new device count (the envs split anew, jrl.app.reshard), and both end with the
    parameters of an uninterrupted one-process run on 2 devices up to float rounding (a run
    on D devices computes the one-device result up to rounding). One process evaluates the
    moved run."""
    stop = ["--stop-at-steps", str(4 * PER_ITER)]
    _run(tmp_path, _train("run", 8) + stop, "four", codes=(0,) * 4)
    shutil.copytree(tmp_path / "run", tmp_path / "alone")
    texts = _run(tmp_path, ["train", "--resume", "run", "--quiet"], "two")
    note = "jrl: note: resuming on {} device(s) a run checkpointed on 8: its envs are split anew"
    assert note.format(4) in texts[0] and note.format(4) not in texts[1]
    refused = _alone(tmp_path, ["train", "--resume", "alone"], code=2)
    assert _last_line(refused) == (
        "jrl: error: alone's checkpoint was written on 8 devices and this "
        "process has 2: resume with --devices N (N <= 2, dividing num_envs) to move its state "
        "onto N devices"
    )
    assert note.format(2) in _alone(tmp_path, ["train", "--resume", "alone", "--devices", "2"])
    _alone(tmp_path, _train("whole", 8) + ["--devices", "2"])
    whole = _params(tmp_path / "whole")
    for folder in ("run", "alone"):
        moved = _params(tmp_path / folder)
        assert max(float(np.abs(a - b).max()) for a, b in zip(moved, whole)) <= 1e-5, folder
    assert (
        json.loads((tmp_path / "run" / "summary.json").read_text())["env_steps_per_run"]
        == 8 * PER_ITER
    )
    # its checkpoints are on 4 devices now, its record says 8: evaluation follows the checkpoint
    _alone(tmp_path, ["eval", "run", "--episodes", "2"])


def test_a_refusal_in_one_process_stops_every_process_with_one_line(tmp_path):
    """Process 0 refuses the run folder (it holds a metrics.csv but no run record): process 1
    does not go on to train and wait for it in a collective, it ends too, naming process 0's
    reason. Processes
    given different run folders are refused in every process."""
    (tmp_path / "taken").mkdir()
    (tmp_path / "taken" / "metrics.csv").write_text("not a run's")
    texts = _run(tmp_path, _train("taken", 4), "refuse", codes=(2, 1))
    first = _last_line(texts[0])
    assert first.startswith("jrl: error: ") and "refusing to write or delete there" in first
    reason = first.removeprefix("jrl: error: ")
    assert _last_line(texts[1]) == f"jrl: error: process 0 could not start the run: {reason}"

    procs, logs = [], []
    address = f"127.0.0.1:{free_port()}"
    for pid, out in enumerate(["a", "b"]):
        args = _train(out, 4) + ["--coordinator", address, "--num-processes", "2"]
        logs.append(tmp_path / f"apart{pid}.err")
        with open(logs[-1], "w") as err:
            procs.append(
                subprocess.Popen(
                    [sys.executable, "-m", "jrl.app.cli", *args, "--process-id", str(pid)],
                    cwd=tmp_path,
                    stdout=subprocess.DEVNULL,
                    stderr=err,
                    env={**os.environ, **FAKE_DEVICES},
                )
            )
    texts = _wait(procs, logs)
    assert [p.returncode for p in procs] == [2, 2], [t[-2000:] for t in texts]
    for text in texts:
        assert _last_line(text) == (
            "jrl: error: every process of a run writes one run folder, on a filesystem they "
            "share: process 0 was given a, process 1 b"
        )
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()


@pytest.mark.parametrize("killed", [1, 0], ids=["a-peer", "the-coordinator"])
def test_a_process_killed_mid_run_ends_the_others_with_one_line_and_the_run_resumes(
    tmp_path, killed
):
    """kill -9 of one process of a 2-process run (the process the user started: its training
    child dies with it): the other is not left waiting in a collective. With
    JRL_PEER_TIMEOUT=10, jax's coordination service finds a dead process 1 within 10 s of its
    last heartbeat and ends process 0; a dead process 0 (which hosts the service) ends process
    1 at once. The survivor's wait is bounded at 60 s (jax's default bound is 100 s), and it
    ends with one line (jrl.app.supervisor) and exit code 75, not with jax's crash report. The
    run then resumes on 2 processes from the last checkpoint written before the kill."""
    every = ["--checkpoint-every", str(2 * PER_ITER)]
    procs, logs = _launch(tmp_path, _train("run") + every, "kill", {"JRL_PEER_TIMEOUT": "10"})
    survivor = procs[1 - killed]
    try:
        _wait_for_two_reports(procs, logs, tmp_path / "run" / "metrics.csv")
        wait_until(
            lambda: (
                experiment.checkpoint.steps(tmp_path / "run")
                or any(p.poll() is not None for p in procs)
            ),
            600,
            "the first checkpoint",
        )
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
        _kill(procs)
    text = logs[1 - killed].read_text()
    assert survivor.returncode == 75, text[-3000:]
    lost = (
        "process 1 of this run stopped sending heartbeats"
        if killed == 1
        else "the connection to process 0 of this run (which coordinates it) closed"
    )
    steps = experiment.checkpoint.steps(tmp_path / "run")
    assert steps, text[-2000:]
    assert _last_line(text) == (
        f"jrl: error: {lost}, so this process ends too; resume from its last complete "
        f"checkpoint (iteration {steps[-1]}) with `jrl train --resume run` {RESUME_HINT}"
    )
    assert "Check failure" not in text and "Traceback" not in text
    if killed == 0:  # the resume is the same for both
        return
    target = (steps[-1] + 1) * PER_ITER
    _run(tmp_path, ["train", "--resume", "run", "--quiet", "--stop-at-steps", str(target)], "on")
    assert experiment.checkpoint.steps(tmp_path / "run")[-1] == steps[-1] + 1
