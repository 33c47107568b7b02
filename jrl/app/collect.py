"""``jrl collect RUN --steps N``: a dataset of transitions from a trained run's policy, for the
offline agents (``jrl train bc --dataset PATH``; :mod:`jrl.agents.offline`).

The run folder is loaded as ``jrl eval`` loads it (:func:`jrl.app.api.load_run`); one run's
greedy evaluation policy (normalisers frozen) steps ``envs`` fresh copies of the run's env in
a compiled rollout (:class:`jrl.run.datasets.Collector`), chunk by chunk, and the
transitions are written to one ``.npz`` file atomically (:func:`jrl.run.datasets.save_dataset`).

A *mixed* dataset (``epsilon > 0``) replaces each action, independently per env and step, with
probability ``epsilon`` by one drawn uniformly from the action space; ``epsilon = 1`` is a
uniformly random policy's data, ``epsilon = 0`` (the default) the expert's own.
"""

from __future__ import annotations

import math
import os
import time
from pathlib import Path
from typing import Callable

import jax
import numpy as np

from jrl.app import api
from jrl.core import spaces
from jrl.core.multi_agent_env import agent_names
from jrl.core.types import EPISODE_DONE, EPISODE_RETURN
from jrl.envs.host import host_env_of
from jrl.run import datasets, evaluation

__all__ = ["DEFAULT_NAME", "collect_run"]

DEFAULT_NAME = "dataset.npz"
"""The dataset's file name in the run folder when no ``out`` is given."""

CHUNK_STEPS = 256
"""Steps of every env per compiled chunk (a progress line after each)."""


def _check_out(out: Path) -> None:
    """``ValueError`` in one line unless ``out`` can be written (checked before collecting)."""
    if out.is_dir():
        raise ValueError(f"--out {out} is a folder; give a file path such as {out / DEFAULT_NAME}")
    parent = out.parent if str(out.parent) else Path(".")
    if not parent.is_dir():
        raise ValueError(f"cannot write the dataset: folder {parent} does not exist")
    if not os.access(parent, os.W_OK):
        raise ValueError(f"cannot write the dataset: folder {parent} is not writable")


def _policy(loaded: api.LoadedRun, run: int):
    """Run ``run``'s greedy policy on batches, ``ValueError`` where collection does not apply."""
    built, spec = loaded.built, loaded.spec
    if built.player is not None or agent_names(built.env):
        raise ValueError(
            f"jrl collect records single-agent transitions; {spec.env_id} is a "
            "two-player game or a team env"
        )
    if host_env_of(built.env) is not None:
        raise ValueError(f"jrl collect steps jrl envs in a compiled rollout; {spec.env_id} is not")
    if not isinstance(built.spec.observation_space, spaces.Box):  # e.g. a masked env's dict
        raise ValueError(
            f"jrl collect records array observations; {spec.env_id}'s are "
            f"{type(built.spec.observation_space).__name__}"
        )
    if not 0 <= run < len(spec.run_seeds):
        raise ValueError(f"--run must lie in [0, {len(spec.run_seeds)}), got {run}")
    one = jax.tree.map(lambda x: x[run], loaded.state)
    agent = built.agent
    if agent.recurrent is not None and agent.recurrent.stateful(True):
        raise ValueError(f"jrl collect takes memoryless policies; {spec.agent}'s has memory")
    return evaluation.run_policy(agent, built.env, one.agent_state, one.env_state, True)


def collect_run(
    run_dir: str | os.PathLike,
    steps: int,
    out: str | os.PathLike | None = None,
    *,
    epsilon: float = 0.0,
    envs: int = 16,
    seed: int = 0,
    run: int = 0,
    step: int | None = None,
    report: Callable[[str], None] | None = None,
) -> tuple[Path, dict]:
    """Collects ``steps`` transitions (summed over ``envs`` envs) from run ``run`` of the run
    folder ``run_dir`` (its checkpoint ``step``, default the latest) and writes them to
    ``out`` (default ``RUN_DIR/dataset.npz``). Returns ``(path, metadata)``. ``report``
    receives a progress line after each chunk. Bad input (a folder that is not a run, a
    path that cannot be written, out-of-range numbers) is a ``ValueError`` before anything is
    written; the file appears only when complete."""
    if int(steps) < 1:
        raise ValueError(f"--steps must be >= 1, got {steps}")
    if int(envs) < 1:
        raise ValueError(f"--envs must be >= 1, got {envs}")
    if not 0.0 <= float(epsilon) <= 1.0:
        raise ValueError(f"--epsilon must lie in [0, 1], got {epsilon}")
    api.read_spec(run_dir)  # a folder that holds no run: refused first
    out = Path(run_dir) / DEFAULT_NAME if out is None else Path(out)
    _check_out(out)
    loaded = api.load_run(run_dir, step)
    policy = _policy(loaded, int(run))
    built, spec = loaded.built, loaded.spec
    per_env = math.ceil(int(steps) / int(envs))
    length = min(CHUNK_STEPS, per_env)
    collector = datasets.Collector(
        policy, evaluation.evaluation_env(built.env), built.env_params, envs, epsilon, length
    )
    parts, ep = _rollout(collector, jax.random.key(int(seed)), per_env, int(steps), report)
    arrays = datasets.flatten_chunks(parts, int(steps))
    meta = {
        "format": 1,
        "env_id": spec.env_id,
        "env_overrides": spec.options.env_overrides,
        "agent": spec.agent,
        "run_fingerprint": spec.fingerprint(),
        "run": int(run),
        "run_seed": int(spec.run_seeds[int(run)]),
        "checkpoint_iteration": int(loaded.step),
        "policy": "greedy" if epsilon == 0 else f"greedy, epsilon {float(epsilon):g} uniform",
        "epsilon": float(epsilon),
        "envs": int(envs),
        "collection_seed": int(seed),
        "steps": int(steps),
        "episodes": int(ep.size),
        "mean_episode_return": float(ep.mean()) if ep.size else None,
    }
    return datasets.save_dataset(out, arrays, ep, meta), meta


def _rollout(collector: datasets.Collector, key, per_env: int, steps: int, report):
    """``(chunks of transitions, returns [M] of the episodes that ended)`` of ``per_env``
    steps of every env, a ``report`` line after each chunk."""
    carry = collector.init(key)
    envs = collector.env.num_envs
    parts, returns, done, start = [], [], 0, time.monotonic()
    while done < per_env:
        carry, (transitions, episodes) = jax.device_get(collector.chunk(carry))
        parts.append(transitions)
        returns.append(episodes[EPISODE_RETURN][episodes[EPISODE_DONE]])
        done += collector.length
        if report is not None:
            made = min(done * envs, steps)
            report(f"collected {made:,}/{steps:,} steps ({time.monotonic() - start:.1f} s)")
    return parts, np.concatenate(returns).astype(np.float32)
