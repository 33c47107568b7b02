"""Run-folder integrity: one writer per folder, checkpoints that know their run, finishing
that a resume completes, no silent deletion, I/O errors reported in one line, and refusals
of bad input before anything is written."""

import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import jax
import numpy as np
import pytest

import jrl
from conftest import PipeLines
from jrl.app import api as experiment
from jrl.app import checkpoint, run_folder
from jrl.app.checkpoint import CheckpointError

JRL = [sys.executable, "-m", "jrl.app.cli"]
QUIET = dict(progress=False)
SMALL = dict(total_steps=4 * 128 * 6, num_reports=6)  # PPO, 6 iterations of 512 steps


def cli(*args, cwd, timeout=600):
    env = {**os.environ, "JAX_PLATFORMS": "cpu", "MPLBACKEND": "Agg"}
    return subprocess.run(
        JRL + [str(a) for a in args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
        cwd=cwd,
    )


def python(code: str, cwd, timeout=600):
    env = {**os.environ, "JAX_PLATFORMS": "cpu", "MPLBACKEND": "Agg"}
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
        cwd=cwd,
    )


# --------------------------------------------------------------------------- one writer


def test_a_live_run_folder_refuses_a_second_writer(tmp_path):
    """While one process holds a run folder, a second train, an --overwrite and a resume of
    it are refused with exit 2 naming the owner; nothing of the first run changes."""
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, time\n"
            "from jrl.app.run_folder import RunLock\n"
            "with RunLock(sys.argv[1]):\n"
            "    print('locked', flush=True)\n"
            "    time.sleep(120)\n",
            str(tmp_path / "run"),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert PipeLines(holder.stdout).next_line(timeout=300).strip() == "locked"
        (tmp_path / "run" / "keep.txt").write_text("mine")
        for args in (
            ["train", "ppo", "--out", "run", "--total-steps", "1024"],
            ["train", "ppo", "--out", "run", "--total-steps", "1024", "--overwrite"],
        ):
            out = cli(*args, cwd=tmp_path)
            assert out.returncode == 2, out.stderr
            assert "is in use by pid" in out.stderr and str(holder.pid) in out.stderr
            assert len(out.stderr.strip().splitlines()) == 1
        assert sorted(p.name for p in (tmp_path / "run").iterdir()) == [".jrl.lock", "keep.txt"]
    finally:
        holder.kill()
        holder.wait(timeout=60)


def test_the_lock_of_a_killed_run_is_taken_over(tmp_path):
    run = tmp_path / "run"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, time\nfrom jrl.app.run_folder import RunLock\n"
            "with RunLock(sys.argv[1]):\n    print('locked', flush=True)\n    time.sleep(120)\n",
            str(run),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert PipeLines(proc.stdout).next_line(timeout=300).strip() == "locked"
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=60)
    owner = json.loads((run / ".jrl.lock").read_text())
    assert owner["pid"] == proc.pid  # the dead owner's record is still there
    res = experiment.train("ppo", "CartPole-v1", out=run, **QUIET, **SMALL)
    assert res.out_dir == run and (run / ".jrl.lock").read_text() == ""


def test_two_processes_on_one_folder_one_wins(tmp_path):
    """Two identical `jrl train --out X` at once: one trains, the other is refused with exit 2;
    the folder holds one consistent run."""
    args = ["train", "ppo", "--out", "run", "--total-steps", "6144", "--quiet", "--seed", "3"]
    env = {**os.environ, "JAX_PLATFORMS": "cpu", "MPLBACKEND": "Agg"}
    procs = [
        subprocess.Popen(JRL + args, cwd=tmp_path, env=env, stderr=subprocess.PIPE, text=True)
        for _ in range(2)
    ]
    pipes = [PipeLines(p.stderr) for p in procs]  # drained as they run: neither blocks writing
    try:
        codes = sorted(p.wait(timeout=600) for p in procs)
    finally:
        for p in procs:
            p.kill()
    errors = [pipe.rest(timeout=60) for pipe in pipes]
    assert codes == [0, 2], errors
    assert any("is in use by pid" in e for e in errors)
    spec = experiment.read_spec(tmp_path / "run")
    assert spec.options.seed == 3
    rows = (tmp_path / "run" / "metrics.csv").read_text().splitlines()
    assert len(rows) == 1 + len(set(rows[1:]))  # a header and distinct, well-formed rows


def test_unwritable_run_folder_is_one_line_and_exit_1(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    out = cli("train", "ppo", "--out", blocker / "run", "--total-steps", "1024", cwd=tmp_path)
    assert out.returncode == 1, out.stderr
    assert "cannot create run folder" in out.stderr and len(out.stderr.strip().splitlines()) == 1
    out = cli("train", "ppo", "--out", blocker, "--total-steps", "1024", cwd=tmp_path)
    assert out.returncode == 2 and "exists and is not a folder" in out.stderr


# ----------------------------------------------------------- checkpoints know their run


def _two_runs(tmp_path, **other):
    a = tmp_path / "a"
    d = tmp_path / "d"
    kw = dict(checkpoint_every=1024, **QUIET, **SMALL)
    experiment.train("ppo", "CartPole-v1", 2, out=a, **kw)
    experiment.train("ppo", "CartPole-v1", 2, out=d, **{**kw, **other})
    return a, d


def _graft(src: Path, dst: Path, step: int):
    """dst with its checkpoints after ``step`` removed and src's checkpoint ``step`` in place."""
    for s in checkpoint.steps(dst):
        shutil.rmtree(dst / "checkpoints" / str(s))
    shutil.copytree(src / "checkpoints" / str(step), dst / "checkpoints" / str(step))
    for name in run_folder.FINAL_FILES:
        (dst / name).unlink()


def test_a_checkpoint_of_another_configuration_is_refused(tmp_path):
    """The reproducer of the issue: D's checkpoint (another learning rate) copied into A."""
    a, d = _two_runs(tmp_path, learning_rate=1e-3)
    step = checkpoint.steps(d)[1]
    _graft(d, a, step)
    with pytest.raises(CheckpointError, match=r"learning_rate: 0\.001 vs 0\.00025"):
        experiment.resume(a, **QUIET)
    with pytest.raises(CheckpointError, match="belongs to another run"):
        experiment.evaluate_run(a, episodes=1)
    out = cli("eval", a, "--episodes", "1", cwd=tmp_path)
    assert out.returncode == 2 and "learning_rate" in out.stderr


def test_a_checkpoint_of_another_seed_is_refused(tmp_path):
    a, d = _two_runs(tmp_path, seed=5)
    _graft(d, a, checkpoint.steps(d)[-1])
    with pytest.raises(CheckpointError, match="seed: 5 vs 0"):
        experiment.evaluate_run(a, episodes=1)
    with pytest.raises(CheckpointError, match="seed: 5 vs 0"):
        experiment.load_run(a)


# ---------------------------------------------------------------- finishing, deletion


def test_a_kill_after_the_final_checkpoint_is_completed_by_resume(tmp_path):
    """Killed (SIGKILL) between the final checkpoint and the final outputs: `jrl train
    --resume` writes the missing params, summary and plot, with the uninterrupted run's
    parameters; a second resume says the run is complete."""
    code = f"""
        import os, signal
        import jrl.app.result
        def die(*a, **k):
            os.kill(os.getpid(), signal.SIGKILL)
        jrl.app.result.TrainResult.save = die
        import jrl
        jrl.train("ppo", "CartPole-v1", 2, out="run", progress=False,
                  total_steps={SMALL["total_steps"]}, num_reports={SMALL["num_reports"]})
    """
    out = python(code, cwd=tmp_path)
    assert out.returncode == -signal.SIGKILL, out.stderr
    run = tmp_path / "run"
    assert checkpoint.steps(run) == [6]
    assert not any((run / f).exists() for f in run_folder.FINAL_FILES)
    done = experiment.resume(run, **QUIET)
    assert all((run / f).is_file() for f in run_folder.FINAL_FILES)
    whole = experiment.train("ppo", "CartPole-v1", 2, out=tmp_path / "whole", **QUIET, **SMALL)
    for x, y in zip(jax.tree.leaves(done.final_params), jax.tree.leaves(whole.final_params)):
        np.testing.assert_array_equal(x, y)
    summary = json.loads((run / "summary.json").read_text())
    assert (
        summary["final_returns"]
        == json.loads((tmp_path / "whole" / "summary.json").read_text())["final_returns"]
    )
    with pytest.raises(CheckpointError, match="already complete"):
        experiment.resume(run, **QUIET)


def test_resume_step_keeps_later_checkpoints_until_the_first_new_one(tmp_path):
    run = tmp_path / "run"
    experiment.train(
        "ppo", "CartPole-v1", out=run, checkpoint_every=1024, keep_checkpoints=6, **QUIET, **SMALL
    )
    assert checkpoint.steps(run) == [2, 4, 6]
    # stopped before its first checkpoint: nothing is deleted
    with pytest.raises(experiment.TrainingInterrupted):
        experiment.resume(run, step=2, stop_at_steps=0, **QUIET)
    assert checkpoint.steps(run) == [2, 4, 6]
    out = cli("train", "--resume", run, "--resume-step", "2", "--quiet", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert "the later checkpoints [4, 6] are deleted when this run writes its first" in out.stderr
    assert checkpoint.steps(run) == [2, 4, 6]  # rewritten by the resumed run


def test_disk_full_at_a_checkpoint_is_one_line_exit_1_and_keeps_the_last_good_one(tmp_path):
    """A real I/O failure inside orbax/tensorstore: the file-size limit (EFBIG, like a full
    disk for the writer) lets config.json, metrics.csv and the parameters through but not a
    checkpoint's array file."""
    code = """
        import resource, signal, sys
        from jrl.app.cli import main
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (100_000, 100_000))
        sys.exit(main(["train", "dqn", "--out", "run", "--total-steps", "3000",
                       "--learning-starts", "500", "--buffer-size", "20000", "--num-reports", "6",
                       "--quiet", "--no-compile-cache"]))
    """
    out = python(code, cwd=tmp_path)
    assert out.returncode == 1, out.stderr[-3000:]
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1, out.stderr[-3000:]
    assert "could not write the checkpoint of iteration" in lines[0]
    assert "File too large" in lines[0] and "train again" in lines[0]
    run = tmp_path / "run"
    assert (run / "params.msgpack").is_file()  # the small final parameter file made it
    assert checkpoint.steps(run) == []
    assert (run / "checkpoints" / checkpoint.SAVE_LOG).is_file()


# -------------------------------------------------------------- refusals, labels, errors


@pytest.mark.parametrize("value", ["inf", "1e300", "nan"])
def test_non_finite_or_float32_overflowing_values_are_refused(value, tmp_path):
    out = cli("train", "ppo", "--lr", value, "--out", "run", cwd=tmp_path)
    assert out.returncode == 2 and "learning_rate must be a finite number" in out.stderr
    assert not (tmp_path / "run").exists()


def test_sweep_conflicts_are_refused(tmp_path):
    out = cli(
        "train", "ppo", "--sweep", "gamma=0.9", "--sweep", "gamma=0.95", "--out", "r", cwd=tmp_path
    )
    assert out.returncode == 2 and "--sweep gamma is given twice" in out.stderr
    with pytest.raises(ValueError, match="learning_rate is both set"):
        jrl.train("ppo", learning_rate=1e-3, sweep={"learning_rate": [1e-3, 3e-4]}, **QUIET)
    assert not (tmp_path / "r").exists()


def test_whole_numbers_only_for_counts():
    with pytest.raises(ValueError, match="seeds must be a whole number"):
        jrl.train("ppo", seeds=2.5, total_steps=1024, **QUIET)


def test_foreign_or_missing_records_are_described_as_such(tmp_path):
    (tmp_path / "foreign").mkdir()
    (tmp_path / "foreign" / "config.json").write_text(json.dumps({"lr": 1}))
    with pytest.raises(CheckpointError, match="is not a jrl run record"):
        experiment.read_spec(tmp_path / "foreign")
    (tmp_path / "afile").write_text("x")
    with pytest.raises(CheckpointError, match="is a file, not a run folder"):
        experiment.read_spec(tmp_path / "afile")
    with pytest.raises(FileNotFoundError, match="does not exist"):
        experiment.read_spec(tmp_path / "nothing")


def test_devices_1_is_no_change_on_resume_and_another_count_moves_the_run(tmp_path):
    """--devices 1 on a one-device run is the run as it was (no device axis, nothing moved);
    --devices 2 moves its state onto 2 devices (jrl.app.reshard), and says so."""
    run = tmp_path / "run"
    with pytest.raises(experiment.TrainingInterrupted):
        experiment.train("ppo", "CartPole-v1", out=run, stop_at_steps=1024, **QUIET, **SMALL)
    out = cli("train", "--resume", run, "--devices", "1", "--stop-at-steps", 2048, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert "jrl: note: resuming on" not in out.stderr
    assert experiment.checkpoint.record(run)["run"]["devices"] is None
    out = cli("train", "--resume", run, "--devices", "2", "--quiet", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert "jrl: note: resuming on 2 device(s) a run checkpointed on 1" in out.stderr
    assert experiment.checkpoint.record(run)["run"]["devices"] == 2


def test_resuming_a_swept_run_with_its_own_sweep(tmp_path):
    run = tmp_path / "run"
    with pytest.raises(experiment.TrainingInterrupted):
        experiment.train(
            "ppo",
            "CartPole-v1",
            out=run,
            stop_at_steps=1024,
            sweep={"learning_rate": [1e-3, 3e-4]},
            **QUIET,
            **SMALL,
        )
    out = cli(
        "train", "--resume", run, "--sweep", "learning_rate=0.001,0.0003", "--quiet", cwd=tmp_path
    )
    assert out.returncode == 0, out.stderr


def test_a_diverging_sweep_member_is_named_and_the_others_go_on(tmp_path, capfd):
    """lr 1e30 diverges, 1e-3 does not: the warning names the run by its swept value, training
    finishes, the finite run has finite parameters."""
    res = jrl.train(
        "ppo",
        "CartPole-v1",
        sweep={"learning_rate": [1e30, 1e-3]},
        max_grad_norm=0.0,
        normalize_advantages=False,
        **QUIET,
        **SMALL,
    )
    err = capfd.readouterr().err
    assert "run 0 (seed 0, learning_rate=1e+30)" in err and "the other runs go on" in err
    p = jax.tree.leaves(res.final_params)
    assert all(np.isfinite(np.asarray(x)[1]).all() for x in p)
    assert not all(np.isfinite(np.asarray(x)[0]).all() for x in p)


def test_every_run_diverging_stops_with_exit_3(tmp_path):
    out = cli(
        "train",
        "ppo",
        "--lr",
        "1e30",
        "--max-grad-norm",
        "0",
        "--no-normalize-advantages",
        "--total-steps",
        "3072",
        "--num-reports",
        "6",
        "--out",
        "run",
        "--quiet",
        cwd=tmp_path,
    )
    assert out.returncode == 3, out.stderr
    assert "run 0 (seed 0)" in out.stderr and "no run is finite" in out.stderr


def test_a_second_ctrl_c_is_one_line_and_exit_130(tmp_path):
    """The KeyboardInterrupt of a second Ctrl-C (the first only asks to stop) ends `jrl train`
    with one line and exit 130, no traceback. Raised from inside training deterministically (a
    real double SIGINT depends on where the second one lands)."""
    code = """
        import sys
        import jrl.app.execution
        def interrupted(*args, **kwargs):
            raise KeyboardInterrupt
        jrl.app.execution.execute = interrupted
        from jrl.app.cli import main
        sys.exit(main(["train", "ppo", "--out", "run", "--total-steps", "1024", "--quiet"]))
    """
    out = python(code, cwd=tmp_path)
    assert out.returncode == 130, out.stderr
    assert "Traceback" not in out.stderr and "aborted (Ctrl-C)" in out.stderr
    assert len(out.stderr.strip().splitlines()) == 1


def test_seed_labels_name_the_run_that_reproduces_it(tmp_path):
    """--seed 1 --seeds 2 labels its runs seed 1 and 2 (config.json, metrics.csv, jrl eval), and
    its second run is the run of --seed 2 alone: the same random streams, so the same result up
    to float rounding (a batch of two runs compiles to other kernels than a batch of one)."""
    two = experiment.train("ppo", "CartPole-v1", 2, seed=1, out=tmp_path / "two", **QUIET, **SMALL)
    one = experiment.train("ppo", "CartPole-v1", 1, seed=2, **QUIET, **SMALL)
    for x, y in zip(jax.tree.leaves(two.final_params), jax.tree.leaves(one.final_params)):
        np.testing.assert_allclose(np.asarray(x)[1], np.asarray(y)[0], atol=1e-5, rtol=1e-4)
    other = experiment.train("ppo", "CartPole-v1", 1, seed=3, **QUIET, **SMALL)  # not vacuous
    assert not np.allclose(
        jax.tree.leaves(other.final_params)[0], jax.tree.leaves(one.final_params)[0]
    )
    assert two.seeds == [1, 2]
    assert json.loads((tmp_path / "two" / "config.json").read_text())["seeds"] == [1, 2]
    rows = (tmp_path / "two" / "metrics.csv").read_text().splitlines()
    seed_col = rows[0].split(",").index("seed")
    assert {r.split(",")[seed_col] for r in rows[1:]} == {"1", "2"}
    stats = experiment.evaluate_run(tmp_path / "two", episodes=1)
    assert [r["seed"] for r in stats["runs"]] == [1, 2]


def test_disk_full_after_a_good_checkpoint_names_it_and_resumes_from_it(tmp_path):
    """The second checkpoint write fails with ENOSPC (a patched writer): one line, exit 1,
    the last good checkpoint named and untouched, the resume hint; the resume works."""
    code = """
        import errno, sys
        import orbax.checkpoint as ocp
        from jrl.app.cli import main
        real, calls = ocp.CheckpointManager.save, []
        def save(self, *a, **k):
            calls.append(1)
            if len(calls) == 2:
                raise OSError(errno.ENOSPC, "No space left on device")
            return real(self, *a, **k)
        ocp.CheckpointManager.save = save
        sys.exit(main(["train", "ppo", "--out", "run", "--total-steps", "3072", "--num-reports",
                       "6", "--checkpoint-every", "1024", "--quiet"]))
    """
    out = python(code, cwd=tmp_path)
    assert out.returncode == 1, out.stderr[-3000:]
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1, out.stderr[-3000:]
    assert "No space left on device (errno 28)" in lines[0]
    assert "the last good checkpoint is" in lines[0] and "/checkpoints/2" in lines[0]
    assert "resume with: jrl train --resume run" in lines[0]
    run = tmp_path / "run"
    assert checkpoint.steps(run) == [2]
    resumed = experiment.resume(run, **QUIET)
    assert resumed.metrics["train/loss"].shape == (1, 6)
