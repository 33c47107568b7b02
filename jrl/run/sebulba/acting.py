"""The acting half of the Sebulba loop, shared by the actor threads
(:mod:`jrl.run.sebulba.actors`) and the Ray actor processes (:mod:`jrl.run.ray_actors`): the
jitted ``act`` and ``prepare`` of every run, push-mode acting over one actor's share of the
host envs (:class:`PushActing`), and the queue item a trajectory travels as (:class:`Item`)."""

from __future__ import annotations

import dataclasses
import time
from typing import Callable

import jax
import jax.numpy as jnp
import numpy as np

from jrl.core.types import EPISODE_DONE, EPISODE_LENGTH, EPISODE_RETURN, Transition
from jrl.parts.agent import Agent
from jrl.run.sebulba.transfers import compress, compress_items, compress_trajectory

__all__ = ["Item", "LocalEnvs", "PushActing", "act_fn", "act_one", "make_item", "prepare_fn"]


@dataclasses.dataclass
class Item:
    """One actor's trajectory for one iteration (host arrays)."""

    version: int  # the parameter version the trajectory was acted with (its oldest)
    batch: Transition  # [R, T, n]
    episodes: dict[str, np.ndarray]  # [R, T, n]
    act_seconds: float  # acting and stepping the envs, without waiting
    snapshots: list[bytes | None] | None = None  # per run, after the trajectory (push mode)


def act_one(agent: Agent, replay=None):
    """``one(agent_state, obs [n], act_key, j, a, t)``: one run's actions on actor ``a``'s envs
    at step ``t`` of trajectory ``j``, the run's act key folded with ``j``, ``a`` and ``t`` (the
    same in actor threads, Ray actors and central inference, :mod:`jrl.run.sebulba.inference`).
    With ``replay`` it acts with ``replay.act``, which also takes each env's index among the
    run's envs (actor ``a``'s env ``i`` is ``a * n + i``)."""

    def one(agent_state, obs, key, j, a, t):
        key = jax.random.fold_in(jax.random.fold_in(jax.random.fold_in(key, j), a), t)
        if replay is None:
            return agent.act(agent_state, obs, key)
        n = jax.tree.leaves(obs)[0].shape[0]
        return replay.act(agent_state, obs, key, a * n + jnp.arange(n, dtype=jnp.int32))

    return one


def act_fn(agent: Agent, replay=None):
    """``act(agent_state [R], obs [R, n], act_keys [R], j, thread, t)``, jitted: :func:`act_one`
    of every run."""
    return jax.jit(jax.vmap(act_one(agent, replay), in_axes=(0, 0, 0, None, None, None)))


def prepare_fn(replay):
    """``prepare(agent_state [R], batch [R, T, n], act_keys [R], j, thread) -> (items,
    priorities)`` ``[R, T, n, ...]``, jitted (None without ``replay``): each run's key folds in
    the iteration, the thread and ``T`` (a step no act key of the trajectory uses)."""
    if replay is None:
        return None

    def one(agent_state, batch, key, j, a):
        T = batch.reward.shape[0]
        key = jax.random.fold_in(jax.random.fold_in(jax.random.fold_in(key, j), a), T)
        return replay.prepare(agent_state, batch, key)

    return jax.jit(jax.vmap(one, in_axes=(0, 0, 0, None, None)))


def make_item(version: int, batch: Transition, episodes: dict, t0: float, transfer: str) -> Item:
    """The queue item of a trajectory acted since ``t0``, compressed for the transfer."""
    return Item(
        version,
        compress_trajectory(batch, transfer),
        compress(episodes, transfer),
        time.perf_counter() - t0,
    )


class LocalEnvs:
    """One actor's share of every run's host envs, stepped in this process: one ``HostBatch``
    per run (``batches``). :class:`jrl.run.ray_workers.RayEnvs` is the same interface over
    envs in a Ray process."""

    def __init__(self, batches: list):
        self.batches = batches

    @classmethod
    def make(cls, host_env, seeds: list[int], per_actor: int, index: int, pull_batch=None):
        """Actor ``index``'s envs: ``per_actor`` of every run, run ``r``'s env ``i`` seeded
        ``seeds[r] + index * per_actor + i`` (those already made are closed when one fails)."""
        made = cls([])
        try:
            for seed in seeds:
                made.batches.append(
                    host_env.make_batch(per_actor, seed + index * per_actor, pull_batch)
                )
        except BaseException:
            made.close()
            raise
        return made

    def reset(self, snapshots: list | None = None) -> np.ndarray:
        """Fresh episodes, or (``snapshots``: per run, saved bytes or None) the saved ones;
        returns the observations ``[R, n, ...]``."""
        obs = np.stack([b.reset() for b in self.batches])
        if snapshots is not None:
            for b, data in zip(self.batches, snapshots):
                if data is not None:
                    b.restore(data)
            obs = np.stack([b.last_observation() for b in self.batches])
        return obs

    def step(self, actions) -> list:
        """Steps every run's envs with its actions ``[R, n, ...]``: a ``HostStep`` per run."""
        return [b.step(actions[i]) for i, b in enumerate(self.batches)]

    def snapshots(self) -> list:
        """Per run, the host envs' saved state (None where they cannot be saved)."""
        return [b.snapshot() for b in self.batches]

    def close(self) -> None:
        for b in self.batches:
            try:
                b.close()
            except Exception:  # closing after a crash: the original error is what matters
                pass


class PushActing:
    """One actor's share of every run's host envs in push mode (:class:`LocalEnvs`, or a Ray
    process's :class:`jrl.run.ray_workers.RayEnvs`) and their current observations: the acting
    half of the Sebulba loop, shared by the actor threads, the Ray actor processes
    (:mod:`jrl.run.ray_actors`) and central inference's env workers (its ``act`` then the
    inference server, :mod:`jrl.run.sebulba.inference`). With ``prepare`` (from
    :func:`prepare_fn`) a trajectory leaves as replay items and their priorities, computed
    here with the parameters it was acted with (Ape-X)."""

    def __init__(
        self,
        envs,
        index: int,
        act: Callable,
        num_steps: int,
        transfer: str,
        prepare: Callable | None = None,
    ):
        self.envs, self.index, self.act = envs, index, act
        self.num_steps, self.transfer, self.prepare = num_steps, transfer, prepare
        self.obs: np.ndarray | None = None  # [R, n, ...]

    def reset(self, snapshots: list | None = None) -> None:
        """Fresh episodes, or (``snapshots``: per run, saved bytes or None) the saved ones."""
        self.obs = self.envs.reset(snapshots)

    def rollout(
        self, j: int, version: int, agent_state, act_keys, stopping: Callable[[], bool]
    ) -> Item | None:
        """Trajectory ``j`` (``[R, T, n]``) acted with ``agent_state`` of ``version``; None
        when ``stopping()`` turned true on the way."""
        t0 = time.perf_counter()
        traj, obs = _Trajectory(self.num_steps), self.obs
        for t in range(self.num_steps):
            action, info = jax.device_get(
                self.act(agent_state, obs, act_keys, j, self.index, t)
            )  # one transfer back per step
            host = self.envs.step(action)
            traj.add(t, obs, action, info, host)
            obs = (
                np.stack([s.observation for s in host])
                if len(host) > 1
                else host[0].observation[None]
            )
            if stopping():
                return None
        self.obs = obs
        if self.prepare is None:
            return make_item(version, *traj.arrays(), t0, self.transfer)
        batch, episodes = traj.arrays()
        items, priorities = jax.device_get(
            self.prepare(agent_state, batch, act_keys, j, self.index)
        )
        return Item(
            version,
            (compress_items(items, self.transfer), priorities),
            compress(episodes, self.transfer),
            time.perf_counter() - t0,
        )

    def snapshots(self) -> list:
        """Per run, the host envs' saved state (None where they cannot be saved)."""
        return self.envs.snapshots()

    def close(self) -> None:
        self.envs.close()


class _Trajectory:
    """A push-mode trajectory ``[R, T, n]``, written step by step into arrays allocated at the
    first step."""

    FIELDS = ("reward", "terminated", "truncated", "final_observation")
    EPISODES = ((EPISODE_RETURN, "episode_return"), (EPISODE_LENGTH, "episode_length"))

    def __init__(self, num_steps: int):
        self.T, self.buf = num_steps, None

    def _alloc(self, x) -> np.ndarray:
        x = np.asarray(x)
        return np.empty((x.shape[0], self.T) + x.shape[1:], x.dtype)

    def add(self, t: int, obs, action, info, host) -> None:
        stack = (
            (lambda f: getattr(host[0], f)[None])
            if len(host) == 1
            else (lambda f: np.stack([getattr(s, f) for s in host]))
        )
        values = {
            "observation": obs,
            "action": action,
            "info": info,
            **{f: stack(f) for f in self.FIELDS},
            **{k: stack(f) for k, f in self.EPISODES},
            EPISODE_DONE: stack("terminated") | stack("truncated"),
        }
        if self.buf is None:
            self.buf = jax.tree.map(self._alloc, values)
        jax.tree.map(lambda b, v: b.__setitem__((slice(None), t), v), self.buf, values)

    def arrays(self) -> tuple[Transition, dict[str, np.ndarray]]:
        b = self.buf
        batch = Transition(
            b["observation"],
            b["action"],
            b["reward"],
            b["terminated"],
            b["truncated"],
            b["final_observation"],
            b["info"],
        )
        episodes = {k: b[k] for k in (EPISODE_RETURN, EPISODE_LENGTH, EPISODE_DONE)}
        return batch, episodes
