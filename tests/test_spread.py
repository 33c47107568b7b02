"""Runs spread over the CPU's cores (ARCHITECTURE.md, "Runs spread over the CPU's cores").

Without a device mesh, on a CPU backend with several devices, the Anakin runner splits the
R runs of a program over them (``anakin.spread_mesh``): each device steps its block of runs
with the same program, no collective between them. These tests run in a subprocess with
fake CPU devices (``--xla_force_host_platform_device_count``), as the multi-device tests
do; ``jrl train`` makes one device per core itself (``parallel.use_cpu_cores``).
"""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest

from jrl.app import checkpoint
from jrl.core import parallel

SPREAD_CHECKS = r"""
import json, sys, tempfile
import jax, numpy as np
import jrl, jrl.agents, jrl.envs
from jrl.app import checkpoint, api as experiment
from jrl.core import parallel
from jrl.run import pbt
from jrl.app.api import make_config
from jrl.run import anakin

assert jax.device_count() == 2, jax.devices()
assert parallel.use_cpu_cores() is None  # XLA_FLAGS chose the count: left alone
small = dict(total_steps=1200, learning_starts=400, num_envs=4, buffer_size=600, batch_size=32)
config = make_config("dqn", "CartPole-v1", **small)
env, params = jrl.envs.make("CartPole-v1")
alg = jrl.agents.get("dqn").build(config, env, params).algorithm
out = {}

# which run counts are spread: a divisor of R up to the 2 devices, independent runs only
out["mesh_sizes"] = {
    r: (None if anakin.spread_mesh(r, alg) is None else anakin.spread_mesh(r, alg).devices.size)
    for r in (1, 2, 3, 4)
}
out["pbt_spread"] = anakin.spread_mesh(4, pbt.with_pbt(alg, pbt.PBT(interval=400), 4)) is not None

def params_of(res):
    return [np.asarray(x) for x in jax.tree.leaves(res.final_state.agent_state.params)]

keys = jax.random.split(jax.random.key(3), 4)
# two runs, one per device: each is its one-run program, bit for bit
two = anakin.run(alg, keys[:2], config.num_iterations, num_reports=3)
leaf = jax.tree.leaves(two.final_state)[0]
out["two_devices"] = sorted(d.id for d in leaf.sharding.device_set)
alone = [anakin.run(alg, keys[i : i + 1], config.num_iterations, num_reports=3) for i in (0, 1)]
out["two_bitwise"] = all(
    np.array_equal(a[i : i + 1], b)
    for i, res in enumerate(alone)
    for a, b in zip(params_of(two), params_of(res))
) and all(
    np.array_equal(two.metrics[k][i : i + 1], res.metrics[k], equal_nan=True)
    for i, res in enumerate(alone)
    for k in two.metrics
)
# four runs, two per device, against the same four runs on one device (spread=False)
four = anakin.run(alg, keys, config.num_iterations, num_reports=3)
plain = anakin.run(alg, keys, config.num_iterations, num_reports=3, spread=False)
out["plain_devices"] = len(jax.tree.leaves(plain.final_state)[0].sharding.device_set)
out["four_vs_plain"] = max(
    float(np.abs(a - b).max()) for a, b in zip(params_of(four), params_of(plain))
)

# a checkpoint of spread states is written in pieces and loads as the whole arrays
with tempfile.TemporaryDirectory() as d:
    ck = checkpoint.Checkpointer(d)
    path = ck.save(7, four.final_state, {"x": np.arange(3.0)}, {})
    ck.close()
    meta = json.loads((path / "meta" / "metadata").read_text())
    out["pieces"] = sorted(set(meta["pieces"].values()))
    out["pieced_leaves"] = len(meta["pieces"])
    like = jax.eval_shape(lambda s: s, four.final_state)
    loaded = checkpoint.load(d, like)
    out["checkpoint_equal"] = all(
        np.array_equal(a, b)
        for a, b in zip(checkpoint.to_host(loaded.state), checkpoint.to_host(four.final_state))
    )

# through jrl.train: a run stopped half way and resumed equals the uninterrupted run, with
# periodic evaluation on the spread states
with tempfile.TemporaryDirectory() as d:
    kw = dict(seeds=2, progress=False, num_reports=4, eval_every=600, eval_episodes=2, **small)
    whole = jrl.train("dqn", "CartPole-v1", out=f"{d}/whole", **kw)
    try:
        jrl.train("dqn", "CartPole-v1", out=f"{d}/cut", stop_at_steps=600, **kw)
        raise SystemExit("stop_at_steps did not stop the run")
    except experiment.TrainingInterrupted:
        pass
    again = experiment.resume(f"{d}/cut", progress=False)
    out["resume_equal"] = all(
        np.array_equal(a, b)
        for a, b in zip(jax.tree.leaves(whole.final_params), jax.tree.leaves(again.final_params))
    )
    out["evals"] = len(whole.evals)
print("RESULT " + json.dumps(out))
"""


def _cpu_env(**variables: str) -> dict:
    """This process's environment for a child on jax's CPU backend, without the settings of
    its device count and XLA's thread pool, plus ``variables``."""
    chosen = ("XLA_FLAGS", "JAX_NUM_CPU_DEVICES", "PJRT_NPROC")
    env = {k: v for k, v in os.environ.items() if k not in chosen}
    env.update(JAX_PLATFORMS="cpu", **variables)
    return env


def _fake_devices_env(n: int) -> dict:
    return _cpu_env(XLA_FLAGS=f"--xla_force_host_platform_device_count={n}")


def test_runs_spread_over_two_cpu_devices(tmp_path):
    import json

    proc = subprocess.run(
        [sys.executable, "-c", SPREAD_CHECKS],
        capture_output=True,
        text=True,
        timeout=900,
        env=_fake_devices_env(2),
        cwd=tmp_path,
    )
    lines = [s for s in proc.stdout.splitlines() if s.startswith("RESULT ")]
    assert proc.returncode == 0 and lines, proc.stderr[-3000:]
    out = json.loads(lines[-1][len("RESULT ") :])
    assert out["mesh_sizes"] == {"1": None, "2": 2, "3": None, "4": 2}
    assert out["pbt_spread"] is False  # PBT ranks all runs in one program
    assert out["two_devices"] == [0, 1]
    assert out["two_bitwise"], "a run spread one per device differs from its one-run program"
    assert out["plain_devices"] == 1
    assert out["four_vs_plain"] < 1e-5  # the same runs, batched otherwise: float rounding
    assert out["pieces"] == [2] and out["pieced_leaves"] > 10
    assert out["checkpoint_equal"]
    assert out["resume_equal"]
    assert out["evals"] == 2


CORES_CHECK = r"""
import jax
from jrl.core import parallel
print("SET", parallel.use_cpu_cores(3))
print("DEVICES", jax.device_count())
print("AGAIN", parallel.use_cpu_cores(2))
"""


def test_use_cpu_cores_sets_the_cpu_device_count_once_before_jax_starts():
    env = _cpu_env()
    proc = subprocess.run(
        [sys.executable, "-c", CORES_CHECK], capture_output=True, text=True, timeout=300, env=env
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "SET 3" in proc.stdout and "DEVICES 3" in proc.stdout, proc.stdout
    assert "AGAIN None" in proc.stdout  # jax has started: the count can no longer change
    proc = subprocess.run(  # the user's own choice wins
        [sys.executable, "-c", CORES_CHECK],
        capture_output=True,
        text=True,
        timeout=300,
        env={**env, "JAX_NUM_CPU_DEVICES": "1"},
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "SET None" in proc.stdout and "DEVICES 1" in proc.stdout, proc.stdout


POOL_CHECK = r"""
import json, os, sys
if sys.argv[1] in ("cores", "collective"):
    import jax
    from jrl.core import parallel
    parallel.use_cpu_cores(3)
    if sys.argv[1] == "collective":  # jrl train --devices 2: a learner's collectives on 2
        parallel.size_cpu_thread_pool(2)
else:
    import jrl  # sizes XLA's CPU thread pool before jax starts
    import jax
    from jrl.core import parallel
jax.devices()
names = [open(f"/proc/self/task/{t}/comm").read().strip() for t in os.listdir("/proc/self/task")]
print("RESULT " + json.dumps({
    "devices": jax.device_count(),
    "env": os.environ.get("PJRT_NPROC"),
    "eigen_threads": names.count("tf_XLAEigen"),  # XLA's intra-op pool, one of the two it sizes
    "after_start": parallel.size_cpu_thread_pool(),
}))
"""


@pytest.mark.parametrize(
    "case, variables, devices, threads",
    [
        ("import", {"XLA_FLAGS": "--xla_force_host_platform_device_count=4"}, 4, 16),
        ("import", {"JAX_NUM_CPU_DEVICES": "3"}, 3, 12),
        # use_cpu_cores(3), as jrl train does with one device per core: no collective between
        # them, and threads beyond the cores cost speed, so the pool is left alone
        ("cores", {}, 3, None),
        # ... but jrl train --devices 2 averages gradients across 2 of them: 4 threads each
        ("collective", {}, 3, 8),
        ("import", {}, 1, None),  # one device: no collective, nothing to size
        # the user's own setting wins
        (
            "import",
            {"XLA_FLAGS": "--xla_force_host_platform_device_count=4", "PJRT_NPROC": "5"},
            4,
            5,
        ),
    ],
)
def test_fake_cpu_devices_get_a_thread_pool_their_collectives_cannot_starve(
    case, variables, devices, threads
):
    """XLA's CPU client has max(cores, devices) threads; with fake devices on fewer cores, a
    collective program could wait forever for a thread (jrl.core.parallel.size_cpu_thread_pool).
    jrl asks for 4 threads per device, where the cores do not give that many already, for the
    devices asked for before it is imported (not for use_cpu_cores' one device per core)."""
    import json

    proc = subprocess.run(
        [sys.executable, "-c", POOL_CHECK, case],
        capture_output=True,
        text=True,
        timeout=300,
        env=_cpu_env(**variables),
    )
    lines = [s for s in proc.stdout.splitlines() if s.startswith("RESULT ")]
    assert proc.returncode == 0 and lines, proc.stderr[-2000:]
    out = json.loads(lines[-1][len("RESULT ") :])
    assert out["devices"] == devices
    assert out["after_start"] is None  # jax has started and read it: left alone
    cores = parallel.usable_cores()
    if "PJRT_NPROC" in variables:
        assert out["env"] == variables["PJRT_NPROC"]
        assert out["eigen_threads"] == max(int(variables["PJRT_NPROC"]), devices)
    elif threads is None or threads <= cores:  # the client's own count (the cores) is enough
        assert out["env"] is None
        assert out["eigen_threads"] == max(cores, devices)
    else:
        assert out["env"] == str(threads)
        assert out["eigen_threads"] == threads


@pytest.mark.parametrize("devices, sized", [("2", [2]), ("1", []), (None, [])])
def test_jrl_train_sizes_the_pool_for_a_learner_on_several_devices(
    monkeypatch, tmp_path, devices, sized
):
    """``jrl train --devices D`` (D > 1) asks for a thread pool D devices' collectives cannot
    starve, after making one CPU device per core; without --devices, or with 1, it does not."""
    from jrl.app import cli

    calls = []
    monkeypatch.setattr(parallel, "use_cpu_cores", lambda: calls.append("cores"))
    monkeypatch.setattr(parallel, "size_cpu_thread_pool", lambda d=None: calls.append(d))
    # stopped before any training: a bad --total-steps is refused after these calls
    args = ["train", "ppo", "--total-steps", "0", "--out", str(tmp_path / "run")]
    code = cli.main(args + ([] if devices is None else ["--devices", devices]))
    assert code == 2 and calls == ["cores", *sized] and not (tmp_path / "run").exists()


def test_use_cpu_cores_refuses_a_count_below_one():
    with pytest.raises(ValueError, match="count must be >= 1"):
        parallel.use_cpu_cores(0)


def test_jrl_train_spreads_seeds_over_the_cores(tmp_path):
    """The command makes one CPU device per core and says how many the seeds use."""
    cores = parallel.usable_cores()
    env = {k: v for k, v in os.environ.items() if k not in ("XLA_FLAGS", "JAX_NUM_CPU_DEVICES")}
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "jrl.app.cli",
            "train",
            "ppo",
            "--seeds",
            "2",
            "--total-steps",
            "2048",
        ]
        + ["--num-reports", "2", "--out", "run"],
        capture_output=True,
        text=True,
        timeout=600,
        env={**env, "JAX_PLATFORMS": "cpu"},
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    spread = "on 2 CPU cores" in proc.stderr
    assert spread == (cores >= 2), proc.stderr[-2000:]
    assert (tmp_path / "run" / "params.msgpack").exists()


def test_a_digest_of_pieces_is_the_digest_of_the_joined_array():
    a = np.arange(24, dtype=np.float32).reshape(4, 3, 2)
    whole = checkpoint._digest([a, np.ones(2)])
    assert checkpoint._digest([[a[:2], a[2:]], np.ones(2)]) == whole
    assert checkpoint._digest([[a[:1], a[1:]], np.ones(2)]) == whole
    assert checkpoint._digest([[a[2:], a[:2]], np.ones(2)]) != whole  # the order matters
