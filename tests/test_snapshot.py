"""Determinism snapshot: short fixed-seed runs of every agent family give the same
bits as the code that recorded ``tests/data/snapshot.json``, and run folders
written by that code (``tests/data/old_runs/``) still resume, evaluate and
render.

A refactor must not change what a run computes. Where a change of floats is
truly intended, regenerate the snapshot in a commit of its own and say why::

    JRL_WRITE_SNAPSHOT=1 pytest tests/test_snapshot.py -k snapshot

The old run folders are written once (``JRL_WRITE_OLD_RUNS=1``) and never
regenerated: they stand for the folders users already have on disk, and they
end with the bits recorded in ``tests/data/old_runs/snapshot.json``. An
intended change of floats changes what the second half of such a run computes
too: the command above then also records what each old folder resumes to now
(the folders themselves are not touched).

The bits depend on the CPU as well: XLA compiles for the host's vector instructions, so an
Intel machine with AVX-512 and the AMD EPYC the snapshot was recorded on differ in the last
bits of a few agents (PPO's metrics by up to about 1e-4 relative after these 4,096 steps).
The snapshot names the CPU vendor it was recorded on (``_machine``); on that vendor's
CPUs the check is bitwise, on others it compares the metrics and the parameters' norms
within :data:`RTOL` -- close enough to catch a change of what is computed, loose enough
for another CPU's rounding.

History: the snapshot was regenerated once, when run keys became per-seed
(run i of ``seed=s`` uses ``key(s + i)`` instead of ``split(key(s), n)[i]``,
so that a run's seed label reproduces it alone); that changed every run's
random streams by design. The old run folders keep the old derivation.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path

import jax
import numpy as np
import pytest

from jrl.app import api as experiment

DATA = Path(__file__).parent / "data"
SNAPSHOT = DATA / "snapshot.json"
OLD_RUNS = DATA / "old_runs"
OLD_SNAPSHOT = OLD_RUNS / "snapshot.json"
"""What the old run folders end with when resumed by today's code: their first half as the
code of the day they were written computed it (before per-seed run keys, which changed every
run's random streams), their second half as today's code does."""

CASES = {
    "ppo": dict(total_steps=4096),
    "a2c": dict(total_steps=4096),
    "dqn": dict(total_steps=3000, learning_starts=1000, buffer_size=2000),
    "rainbow": dict(total_steps=3000, learning_starts=1000, buffer_size=2000),
    "pqn": dict(total_steps=4096),
    "sac": dict(total_steps=1200, learning_starts=400, buffer_size=1200, hidden_sizes=(32, 32)),
    "td3": dict(total_steps=1200, learning_starts=400, buffer_size=1200, hidden_sizes=(32, 32)),
}
"""Agent -> config overrides of a short run (2 seeds, 4 reports) on its env (ENVS)."""
ENVS = {"sac": "Pendulum-v1", "td3": "Pendulum-v1"}
"""The env of a case when it is not CartPole-v1 (the continuous agents')."""


RTOL, ATOL = 1e-3, 1e-6
"""The tolerance of the check on a CPU other than the recording one (see the module
docstring): metrics and per-leaf parameter norms, ``|a - b| <= ATOL + RTOL * |b|``."""


def cpu_vendor() -> str:
    """``vendor_id`` of ``/proc/cpuinfo`` (``GenuineIntel``, ``AuthenticAMD``), else the
    machine's architecture."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("vendor_id"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    import platform

    return platform.machine()


def digest(tree) -> str:
    """sha256 over the leaves' dtypes, shapes and bytes, in tree order."""
    h = hashlib.sha256()
    for x in jax.tree.leaves(tree):
        a = np.ascontiguousarray(np.asarray(x))
        h.update(f"{a.dtype.name}{a.shape}".encode())
        h.update(a.tobytes())
    return h.hexdigest()


def fingerprint(result) -> dict:
    """What the snapshot keeps of a run: the final parameters' checksum and the last
    metrics row of every run (floats as exact hex strings, NaN included)."""
    last = {
        k: [float(v).hex() for v in np.asarray(m[:, -1], np.float64)]
        for k, m in sorted(result.metrics.items())
    }
    norms = [
        float(np.linalg.norm(np.asarray(x, np.float64)))
        for x in jax.tree.leaves(result.final_params)
    ]
    return {
        "params_sha256": digest(result.final_params),
        "last_metrics": last,
        "params_norms": norms,
    }


def check(got: dict, want: dict, machine: str | None) -> None:
    """Bitwise when this CPU's vendor is the recording one's (``machine``), else within
    :data:`RTOL`."""
    assert sorted(got["last_metrics"]) == sorted(want["last_metrics"])
    if machine == cpu_vendor():
        for name, values in want["last_metrics"].items():
            assert got["last_metrics"][name] == values, name
        assert got["params_sha256"] == want["params_sha256"]
        return
    for name, values in want["last_metrics"].items():
        a = np.array([float.fromhex(v) for v in got["last_metrics"][name]])
        b = np.array([float.fromhex(v) for v in values])
        np.testing.assert_allclose(a, b, rtol=RTOL, atol=ATOL, equal_nan=True, err_msg=name)
    np.testing.assert_allclose(got["params_norms"], want["params_norms"], rtol=RTOL, atol=ATOL)


def _write(path: Path, key: str, entry: dict) -> None:
    data = json.loads(path.read_text()) if path.exists() else {}
    if data.get("_machine", cpu_vendor()) != cpu_vendor():
        raise RuntimeError(
            f"{path} was recorded on {data['_machine']} CPUs and this one is {cpu_vendor()}: "
            "regenerate every entry here (delete the file first) or on such a machine"
        )
    data["_machine"] = cpu_vendor()
    data[key] = entry
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")


def run_case(agent: str, out: Path | None = None, **kw):
    return experiment.train(
        agent,
        ENVS.get(agent, "CartPole-v1"),
        2,
        seed=3,
        num_reports=4,
        progress=False,
        out=out,
        **CASES[agent],
        **kw,
    )


@pytest.mark.parametrize("agent", sorted(CASES))
def test_snapshot_bit_identical(agent):
    result = run_case(agent)
    got = fingerprint(result)
    if os.environ.get("JRL_WRITE_SNAPSHOT"):
        _write(SNAPSHOT, agent, got)
        return
    data = json.loads(SNAPSHOT.read_text())
    check(got, data[agent], data.get("_machine"))


OLD_CASES = ("ppo", "a2c", "dqn", "pqn")


def write_old_run(agent: str) -> None:
    """An interrupted run folder (a checkpoint at half the run), as the code of the day
    writes it."""
    out = OLD_RUNS / agent
    shutil.rmtree(out, ignore_errors=True)
    with pytest.raises(experiment.TrainingInterrupted):
        run_case(agent, out, stop_at_steps=CASES[agent]["total_steps"] // 2)


@pytest.mark.parametrize("agent", OLD_CASES)
def test_old_run_folder_resumes_to_the_snapshot(agent, tmp_path):
    """A run folder written before the agent-contract refactor resumes to the bits recorded
    for it (:data:`OLD_SNAPSHOT`), and can be evaluated."""
    if os.environ.get("JRL_WRITE_OLD_RUNS"):
        write_old_run(agent)
    run = tmp_path / agent
    shutil.copytree(OLD_RUNS / agent, run)
    resumed = experiment.resume(run, progress=False)
    got = fingerprint(resumed)
    if os.environ.get("JRL_WRITE_SNAPSHOT"):  # an intended change of floats (module docstring)
        _write(OLD_SNAPSHOT, agent, got)
    else:
        data = json.loads(OLD_SNAPSHOT.read_text())
        check(got, data[agent], data.get("_machine"))
    stats = experiment.evaluate_run(run, episodes=2)
    assert stats["agent"] == agent and len(stats["runs"]) == 2


def test_the_check_is_bitwise_on_the_recording_cpu_and_close_elsewhere():
    """One ulp of difference fails on the recording vendor's CPUs and passes on another's;
    a difference beyond RTOL fails on both."""
    want = json.loads(SNAPSHOT.read_text())["ppo"]
    one_ulp = json.loads(json.dumps(want))
    name = "train/entropy"
    value = float.fromhex(want["last_metrics"][name][0])
    one_ulp["last_metrics"][name][0] = float(np.nextafter(np.float32(value), np.float32(9))).hex()
    with pytest.raises(AssertionError):
        check(one_ulp, want, cpu_vendor())
    check(one_ulp, want, "another vendor")
    far = json.loads(json.dumps(want))
    far["last_metrics"][name][0] = (value * (1 + 10 * RTOL)).hex()
    for machine in (cpu_vendor(), "another vendor"):
        with pytest.raises(AssertionError):
            check(far, want, machine)
    other_params = json.loads(json.dumps(want))
    other_params["params_norms"][0] *= 1 + 10 * RTOL
    with pytest.raises(AssertionError):
        check(other_params, want, "another vendor")
