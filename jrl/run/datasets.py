"""Offline datasets: fixed sets of transitions that offline agents learn from, and the
compiled rollout that collects them from a policy (``jrl collect``).

A dataset is one ``.npz`` file of ``N`` transitions (flat, in collection order: step ``t``
of env ``e`` is row ``t * E + e``):

- ``observation`` ``[N, *obs_shape]`` (the env's own observations, not normalised),
- ``action`` ``[N, *act_shape]``, ``reward`` ``[N]`` float32,
- ``next_observation`` ``[N, *obs_shape]``: the true successor, the final observation where
  an episode ended (``info["final_observation"]``, so a truncated episode bootstraps from its
  real last state),
- ``terminated``, ``truncated`` ``[N]`` bool,
- ``episode_returns`` ``[M]`` float32: the returns of the ``M`` episodes that finished during
  collection (the behaviour policy's, mixing included),
- ``metadata``: a JSON string (a 0-d unicode array): env id, agent, the run's fingerprint and
  seed, the policy mix, the number of steps and the mean episode return.

:func:`save_dataset` writes it atomically (a temporary file renamed over the target);
:func:`load_dataset` reads it back, checked, and refuses a file whose SHA-256
(:func:`file_digest`) differs from the one a run recorded. :class:`Collector` is the
collection itself: ``E`` envs stepped with the policy in a jitted ``scan`` of
``chunk`` steps, each action replaced, with probability ``epsilon`` (independently per env
and step), by a uniformly random one.
"""

from __future__ import annotations

import hashlib
import json
import os
import zipfile
from pathlib import Path
from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from jrl.core import spaces
from jrl.core.env import Environment
from jrl.core.types import EPISODE_DONE, EPISODE_RETURN, PyTree
from jrl.core.wrappers import wrap_for_training
from jrl.parts.agent import Agent
from jrl.run.algorithm import collect_step
from jrl.util import files

__all__ = [
    "Collector",
    "Dataset",
    "FIELDS",
    "check_dataset",
    "file_digest",
    "flatten_chunks",
    "load_dataset",
    "save_dataset",
]

FIELDS = ("observation", "action", "reward", "next_observation", "terminated", "truncated")
"""The per-transition arrays of a dataset, each ``[N, ...]``."""


class Dataset(NamedTuple):
    """A loaded dataset: ``arrays`` (:data:`FIELDS` -> ``[N, ...]`` numpy arrays),
    ``episode_returns`` ``[M]`` and ``metadata`` (the JSON record)."""

    arrays: dict[str, np.ndarray]
    episode_returns: np.ndarray
    metadata: dict[str, Any]

    @property
    def size(self) -> int:
        """``N``, the number of transitions."""
        return int(self.arrays["reward"].shape[0])


def flatten_chunks(parts: list, steps: int) -> dict[str, np.ndarray]:
    """:data:`FIELDS` as flat ``[steps, ...]`` numpy arrays (row ``t * E + e``, the first
    ``steps`` rows) from :class:`Collector` chunks' ``[T, E]`` transitions."""
    arrays = {}
    for name in FIELDS:
        x = np.concatenate([np.asarray(getattr(p, name)) for p in parts])  # [T, E, ...]
        arrays[name] = x.reshape((-1,) + x.shape[2:])[:steps]
    arrays["reward"] = arrays["reward"].astype(np.float32)
    return arrays


def file_digest(path: str | os.PathLike) -> str:
    """The SHA-256 of a file's bytes, as hex."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def save_dataset(
    path: str | os.PathLike,
    arrays: dict[str, np.ndarray],
    episode_returns: np.ndarray,
    metadata: dict[str, Any],
) -> Path:
    """Writes a dataset to ``path`` atomically (the old file, if any, stays until the new one
    is complete); returns the path. ``arrays`` must hold every one of :data:`FIELDS`."""
    missing = [k for k in FIELDS if k not in arrays]
    if missing:
        raise ValueError(f"a dataset needs the arrays {list(FIELDS)}; missing {missing}")
    path = Path(path)
    with files.replacing(path) as tmp, open(tmp, "wb") as f:  # a file object: no suffix added
        np.savez(
            f,
            **{k: np.asarray(arrays[k]) for k in FIELDS},
            episode_returns=np.asarray(episode_returns, np.float32),
            metadata=np.asarray(json.dumps(metadata)),
        )
    return path


def load_dataset(path: str | os.PathLike, digest: str | None = None) -> Dataset:
    """Reads a dataset written by :func:`save_dataset`, checked: ``ValueError`` in one line for
    a missing or unreadable file, one that is not a jrl dataset, arrays of different lengths,
    or (``digest`` given) a file whose SHA-256 is not ``digest``."""
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"dataset {path} does not exist (write one with `jrl collect`)")
    if digest is not None and file_digest(path) != digest:
        raise ValueError(
            f"dataset {path} changed since the run started (its SHA-256 is not the recorded "
            f"{digest[:12]}...); put the original file back, or train a new run on this one"
        )
    try:
        with np.load(path, allow_pickle=False) as z:
            data = {k: z[k] for k in z.files}
    except (OSError, ValueError, zipfile.BadZipFile) as e:
        raise ValueError(f"dataset {path} cannot be read as .npz: {e}") from None
    missing = [k for k in (*FIELDS, "metadata") if k not in data]
    if missing:
        raise ValueError(f"{path} is not a jrl dataset: it has no {', '.join(missing)}")
    lengths = {k: data[k].shape[0] if data[k].ndim else None for k in FIELDS}
    if len(set(lengths.values())) != 1 or None in lengths.values():
        raise ValueError(f"dataset {path}: its arrays differ in length {lengths}")
    if lengths["reward"] == 0:
        raise ValueError(f"dataset {path} holds no transitions")
    metadata = json.loads(str(data["metadata"]))
    returns = data.get("episode_returns", np.zeros((0,), np.float32))
    return Dataset({k: data[k] for k in FIELDS}, returns, metadata)


def check_dataset(dataset: Dataset, observation_space, action_space, where: str) -> None:
    """``ValueError`` in one line unless the dataset's observations and actions have the
    shapes of the env's spaces (``where``: the dataset's name in the message)."""
    obs = jax.eval_shape(lambda: spaces.zeros_like_space(observation_space))
    if not hasattr(obs, "shape"):
        raise ValueError(f"offline training takes array observations; this env's are {obs}")
    act = jax.eval_shape(lambda: spaces.zeros_like_space(action_space))
    a = dataset.arrays
    for name, want in (
        ("observation", obs.shape),
        ("next_observation", obs.shape),
        ("action", act.shape),
    ):
        got = tuple(a[name].shape[1:])
        if got != tuple(want):
            raise ValueError(
                f"dataset {where}: its {name}s are {list(got)} per transition, this env's "
                f"{list(want)} (collected on env {dataset.metadata.get('env_id', '?')!r})"
            )


class Collector:
    """Collection of a dataset: ``num_envs`` copies of ``env`` (unbatched, with its time
    limit) stepped with ``policy(obs [E, ...], key) -> actions [E, ...]``, each action
    replaced with probability ``epsilon`` by a uniformly random one of the action space
    (independently per env and step). ``chunk(carry) -> (carry, (transitions, episodes))``
    is jitted: ``length`` steps of the ``E`` envs in a ``scan``, ``transitions`` a
    :class:`~jrl.core.types.Transition` ``[length, E]`` whose ``next_observation`` is the
    true successor, ``episodes`` EpisodeStatistics' ``[length, E]`` arrays."""

    def __init__(
        self,
        policy: Callable[[Any, jax.Array], jax.Array],
        env: Environment,
        env_params: PyTree,
        num_envs: int,
        epsilon: float,
        length: int,
    ):
        if not 0.0 <= float(epsilon) <= 1.0:
            raise ValueError(f"epsilon must lie in [0, 1], got {epsilon}")
        if int(num_envs) < 1:
            raise ValueError(f"num_envs must be positive, got {num_envs}")
        self.env = wrap_for_training(env, int(num_envs))
        self.params = env.default_params if env_params is None else env_params
        space = env.action_space(self.params)
        eps = jnp.float32(epsilon)

        def act(_, obs, key):  # the policy's action, or with probability epsilon a random one
            k_policy, k_mix, k_random = jax.random.split(key, 3)
            chosen = policy(obs, k_policy)
            n = jax.tree.leaves(obs)[0].shape[0]
            random = jax.vmap(space.sample)(jax.random.split(k_random, n))
            mix = jax.random.uniform(k_mix, (n,)) < eps
            mix = mix.reshape(mix.shape + (1,) * (chosen.ndim - 1))
            return jnp.where(mix, random.astype(chosen.dtype), chosen), {}

        self.agent = Agent(init=None, act=act, learn=None)
        self.length = int(length)
        self.chunk = jax.jit(self._chunk)

    def init(self, key: jax.Array) -> tuple:
        """The first carry: the reset envs, their observations and the rollout's key."""
        k_reset, key = jax.random.split(key)
        state, ts = self.env.reset(k_reset, self.params)
        return state, ts.observation, key

    def _chunk(self, carry):
        def body(c, _):
            env_state, obs, key = c
            key, k = jax.random.split(key)
            env_state, obs, transition, episodes = collect_step(
                self.agent, self.env, self.params, None, env_state, obs, k
            )
            keep = {k: episodes[k] for k in (EPISODE_RETURN, EPISODE_DONE)}
            return (env_state, obs, key), (transition.replace(extras={}), keep)

        return jax.lax.scan(body, carry, None, length=self.length)
