"""Host environments: envs that step in Python or C++, outside any compiled program.

``gymnasium:<id>`` runs any registered Gymnasium env (``pip install jrl-jax[gymnasium]``),
``envpool:<id>`` an EnvPool env (C++ threads; ``pip install jrl-jax[envpool]``; Atari with
EnvPool's own frame preprocessing). ``jrl.envs.make("gymnasium:CartPole-v1")`` returns a
:class:`HostEnvironment`: a jrl :class:`~jrl.core.env.Environment` that has the env's spaces, so
agents are built for it as for any other env, but whose ``reset``/``step`` refuse to run,
because it cannot be traced. The Sebulba runner (:mod:`jrl.run.sebulba`) steps it on the host
through :meth:`HostEnvironment.make_batch`, a :class:`HostBatch` of N envs:

- **push** (synchronous): ``reset() -> obs [N, ...]``, ``step(actions [N, ...]) -> HostStep``
  over all N envs;
- **pull** (asynchronous, EnvPool only): ``send(actions [B], env_ids [B])`` and ``recv() ->
  HostStep`` of whichever B envs are ready (``env_ids`` says which).

Episode ends follow jrl's own envs: ``terminated`` and ``truncated`` apart (the env's time limit
gives ``truncated``), and in push mode an env whose episode ended is reset in the same step: the
returned observation is the new episode's first, ``final_observation`` the ended one's last
(equal to ``observation`` elsewhere). In pull mode EnvPool resets an ended env on its next
``send`` (the action is ignored): that row comes back with ``first`` set, and is no transition.
Every batch keeps each env's running return and length and reports them where an episode ends.
"""

from __future__ import annotations

import abc
import dataclasses
import pickle
from typing import Any

import numpy as np

from jrl.core import spaces
from jrl.core.env import Environment
from jrl.envs.entries import ENVPOOL_PREFIX, GYMNASIUM_PREFIX, EnvEntry, UnknownEnvError

__all__ = [
    "HostBatch",
    "HostEnvError",
    "HostEnvironment",
    "HostStep",
    "envpool_entry",
    "from_gymnasium_space",
    "gymnasium_entry",
    "host_env_of",
]


class HostEnvError(RuntimeError):
    """A host env used where a pure-JAX env is needed (the Anakin runner, evaluation in JAX)."""


def host_env_of(env: Any) -> "HostEnvironment | None":
    """The :class:`HostEnvironment` inside ``env`` (possibly wrapped), or None."""
    while env is not None:
        if isinstance(env, HostEnvironment):
            return env
        env = getattr(env, "env", None)
    return None


@dataclasses.dataclass
class HostStep:
    """What a :class:`HostBatch` returns for B envs (all N in push mode). NumPy arrays."""

    observation: Any  # [B, *obs] the observation to act on next
    reward: np.ndarray  # [B] float32 reward of the step (0 on a `first` row)
    terminated: np.ndarray  # [B] bool
    truncated: np.ndarray  # [B] bool
    final_observation: Any  # [B, *obs] the step's true successor (== observation unless done)
    episode_return: np.ndarray  # [B] float32 return of the episode that ended here (else 0)
    episode_length: np.ndarray  # [B] int32 its length (else 0)
    env_ids: np.ndarray  # [B] int32 which envs of the batch these rows are
    first: np.ndarray  # [B] bool: a reset row (pull mode), not a transition

    @property
    def done(self) -> np.ndarray:
        return self.terminated | self.truncated


def from_gymnasium_space(space) -> spaces.Space:
    """The jrl space of a ``gymnasium.spaces`` Discrete, MultiDiscrete or Box (float64 bounds
    become float32 boxes)."""
    import gymnasium  # optional extra: gymnasium may be absent

    gs = gymnasium.spaces
    if isinstance(space, gs.Discrete):
        if int(space.start) != 0:
            raise ValueError(f"a Discrete space starting at {space.start} is not supported")
        return spaces.Discrete(int(space.n))
    if isinstance(space, gs.MultiDiscrete):
        return spaces.MultiDiscrete([int(n) for n in np.asarray(space.nvec).ravel()])
    if isinstance(space, gs.Box):
        dtype = np.float32 if np.issubdtype(space.dtype, np.floating) else space.dtype
        return spaces.Box(space.low, space.high, space.shape, dtype)
    raise ValueError(f"host envs support Discrete, MultiDiscrete and Box spaces, got {space}")


class HostBatch(abc.ABC):
    """N host envs (see the module docstring). Not thread-safe: one owner thread."""

    num_envs: int
    batch_size: int  # rows per recv() in pull mode (N in push mode)
    pull: bool  # True: send/recv; False: reset/step

    def __init__(self, num_envs: int):
        self.num_envs = int(num_envs)
        self._returns = np.zeros(self.num_envs, np.float64)
        self._lengths = np.zeros(self.num_envs, np.int64)

    def _episodes(self, ids, reward, done, first):
        """Running returns/lengths of envs ``ids`` after a step; ``(returns, lengths)`` of the
        episodes that ended on it (0 elsewhere)."""
        live = ~first
        self._returns[ids] += np.where(live, reward, 0.0)
        self._lengths[ids] += live
        ended = done & live
        ret = np.where(ended, self._returns[ids], 0.0).astype(np.float32)
        length = np.where(ended, self._lengths[ids], 0).astype(np.int32)
        self._returns[ids] = np.where(ended, 0.0, self._returns[ids])
        self._lengths[ids] = np.where(ended, 0, self._lengths[ids])
        return ret, length

    @abc.abstractmethod
    def reset(self) -> Any:
        """Starts every env; push mode returns ``obs [N, ...]``."""

    def step(self, actions: np.ndarray) -> HostStep:
        """Push mode: steps all N envs."""
        raise HostEnvError(f"{type(self).__name__} is in pull mode: use send/recv")

    def send(self, actions: np.ndarray, env_ids: np.ndarray) -> None:
        """Pull mode: actions for the envs ``env_ids``."""
        raise HostEnvError(f"{type(self).__name__} has no pull mode (EnvPool's async mode)")

    def recv(self) -> HostStep:
        """Pull mode: the next ``batch_size`` envs that are ready."""
        raise HostEnvError(f"{type(self).__name__} has no pull mode (EnvPool's async mode)")

    def snapshot(self) -> bytes | None:
        """The whole batch's state (envs, random generators, running returns, the current
        observations) as bytes, or None when the envs cannot be saved (EnvPool)."""
        return None

    def restore(self, data: bytes) -> None:
        """Puts the batch back in the state of a :meth:`snapshot`."""
        raise HostEnvError(f"{type(self).__name__} cannot be restored")

    def last_observation(self) -> Any:
        """Push mode: the observations ``[N, ...]`` to act on next."""
        raise HostEnvError(f"{type(self).__name__} does not keep its last observation")

    def close(self) -> None:
        """Frees the envs."""


class HostEnvironment(Environment):
    """A host env as a jrl env: its spaces for building agents; ``reset``/``step`` raise
    :class:`HostEnvError` (it steps on the host, through :meth:`make_batch`)."""

    def __init__(self, id: str, observation_space: spaces.Space, action_space: spaces.Space):
        self.id = id
        self._observation_space, self._action_space = observation_space, action_space

    @property
    def default_params(self):
        return None

    def observation_space(self, params=None) -> spaces.Space:
        return self._observation_space

    def action_space(self, params=None) -> spaces.Space:
        return self._action_space

    def _refuse(self, *args, **kwargs):
        raise HostEnvError(
            f"{self.id} is a host environment (it steps outside the compiled program): "
            "train it with --runner sebulba (Python: runner='sebulba')"
        )

    reset_env = step_env = reset = step = _refuse

    @property
    def pull_capable(self) -> bool:
        """Whether :meth:`make_batch` supports pull mode."""
        return False

    def make_batch(self, num_envs: int, seed: int, batch_size: int | None = None) -> HostBatch:
        """``num_envs`` envs seeded from ``seed`` (env i of the batch gets ``seed + i``); a
        ``batch_size`` (1 to ``num_envs``: the envs each ``recv`` returns) asks for pull mode,
        None for push mode."""
        raise NotImplementedError


# --- Gymnasium -----------------------------------------------------------------------------


def _gymnasium():
    try:
        import gymnasium  # optional extra: gymnasium may be absent
    except ImportError as e:
        raise ImportError(
            "gymnasium:<id> environments need gymnasium: pip install 'jrl-jax[gymnasium]'"
        ) from e
    return gymnasium


class GymnasiumEnvironment(HostEnvironment):
    """``gymnasium:<id>``: any Gymnasium env (with its registered time limit)."""

    def __init__(self, name: str, **kwargs: Any):
        gymnasium = _gymnasium()
        self.name, self.kwargs = name, dict(kwargs)
        try:
            probe = gymnasium.make(name, **self.kwargs)
        except gymnasium.error.DependencyNotInstalled as e:  # e.g. Box2D for CarRacing-v3
            first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
            raise ImportError(
                f"{GYMNASIUM_PREFIX}{name} needs a package that is not installed: {first}"
            ) from e
        try:
            obs, act = probe.observation_space, probe.action_space
            self.max_episode_steps = probe.spec.max_episode_steps if probe.spec else None
        finally:
            probe.close()
        super().__init__(
            GYMNASIUM_PREFIX + name, from_gymnasium_space(obs), from_gymnasium_space(act)
        )

    def make_batch(self, num_envs: int, seed: int, batch_size: int | None = None) -> HostBatch:
        if batch_size is not None:
            raise HostEnvError(
                f"{self.id}: pull mode (a batch size) needs EnvPool envs (envpool:<id>); "
                "Gymnasium envs step in push mode"
            )
        return GymnasiumBatch(self, num_envs, seed)

    def render_env(self):
        """One env drawing RGB frames (``jrl render``)."""
        return _gymnasium().make(self.name, render_mode="rgb_array", **self.kwargs)


class GymnasiumBatch(HostBatch):
    """N Gymnasium envs stepped one after the other, reset in the step their episode ends."""

    pull = False

    def __init__(self, env: GymnasiumEnvironment, num_envs: int, seed: int):
        super().__init__(num_envs)
        gymnasium = _gymnasium()
        self.batch_size, self.seed = self.num_envs, int(seed)
        self.envs = [gymnasium.make(env.name, **env.kwargs) for _ in range(self.num_envs)]
        self.obs_dtype = env.observation_space().dtype
        self._started = False

    def reset(self):
        obs = [e.reset(seed=self.seed + i)[0] for i, e in enumerate(self.envs)]
        self._started = True
        self._obs = np.stack(obs).astype(self.obs_dtype)
        return self._obs

    def step(self, actions: np.ndarray) -> HostStep:
        if not self._started:
            raise HostEnvError("step() before reset()")
        obs, final, rew, term, trunc = [], [], [], [], []
        for env, a in zip(self.envs, np.asarray(actions)):
            o, r, te, tr, _ = env.step(a.item() if a.ndim == 0 else a)
            final.append(o)
            if te or tr:
                o, _ = env.reset()
            obs.append(o)
            rew.append(r)
            term.append(te)
            trunc.append(tr)
        ids = np.arange(self.num_envs, dtype=np.int32)
        reward = np.asarray(rew, np.float32)
        terminated, truncated = np.asarray(term, bool), np.asarray(trunc, bool)
        no = np.zeros(self.num_envs, bool)
        ret, length = self._episodes(ids, reward, terminated | truncated, no)
        self._obs = np.stack(obs).astype(self.obs_dtype)
        return HostStep(
            self._obs,
            reward,
            terminated,
            truncated,
            np.stack(final).astype(self.obs_dtype),
            ret,
            length,
            ids,
            no,
        )

    def snapshot(self) -> bytes | None:
        try:
            return pickle.dumps((self.envs, self._returns, self._lengths, self._obs))
        except Exception:  # an env holding a handle that cannot be pickled
            return None

    def restore(self, data: bytes) -> None:
        self.close()
        self.envs, self._returns, self._lengths, self._obs = pickle.loads(data)
        self._started = True

    def last_observation(self):
        return self._obs

    def close(self) -> None:
        for e in self.envs:
            e.close()


def gymnasium_entry(name: str) -> EnvEntry:
    """The registry entry of ``gymnasium:<name>`` (unknown names raise with suggestions)."""
    gymnasium = _gymnasium()
    known = sorted(gymnasium.envs.registry)
    if name not in known:
        raise UnknownEnvError(
            name, known, prefix=GYMNASIUM_PREFIX, listing="gymnasium.pprint_registry() lists them."
        )
    return EnvEntry(
        GYMNASIUM_PREFIX + name,
        GymnasiumEnvironment,
        None,
        source="gymnasium",
        kwargs=(("name", name),),
    )


# --- EnvPool -------------------------------------------------------------------------------


def _envpool():
    try:
        import envpool  # optional extra: envpool may be absent
    except ImportError as e:
        raise ImportError(
            "envpool:<id> environments need EnvPool: pip install 'jrl-jax[envpool]'"
        ) from e
    return envpool


class EnvPoolEnvironment(HostEnvironment):
    """``envpool:<id>``: an EnvPool env (its Gymnasium interface), push or pull."""

    def __init__(self, name: str, **kwargs: Any):
        envpool = _envpool()
        self.name, self.kwargs = name, dict(kwargs)
        probe = envpool.make(name, env_type="gymnasium", num_envs=1, **self.kwargs)
        try:
            obs, act = probe.observation_space, probe.action_space
        finally:
            probe.close()
        obs_space = from_gymnasium_space(obs)
        shape = tuple(obs_space.shape)
        # EnvPool's images are channels-first (Atari: 4 stacked 84x84 frames); jrl's CNN
        # torsos read channels last, so image observations are transposed on the way out
        self.channels_first = len(shape) == 3 and shape[0] < min(shape[1:])
        if self.channels_first:
            c, h, w = shape
            obs_space = spaces.Box(
                np.moveaxis(obs_space.low, 0, -1),
                np.moveaxis(obs_space.high, 0, -1),
                (h, w, c),
                obs_space.dtype,
            )
        super().__init__(ENVPOOL_PREFIX + name, obs_space, from_gymnasium_space(act))

    @property
    def pull_capable(self) -> bool:
        return True

    def make_batch(self, num_envs: int, seed: int, batch_size: int | None = None) -> HostBatch:
        return EnvPoolBatch(self, num_envs, seed, batch_size)


class EnvPoolBatch(HostBatch):
    """An EnvPool pool: push mode (no ``batch_size``) resets ended envs in the same step
    (EnvPool's partial reset), pull mode (a ``batch_size``, up to ``num_envs``) passes
    EnvPool's next-step resets on as ``first`` rows."""

    def __init__(self, env: EnvPoolEnvironment, num_envs: int, seed: int, batch_size: int | None):
        super().__init__(num_envs)
        b = self.num_envs if batch_size is None else int(batch_size)
        if not 1 <= b <= self.num_envs:
            raise ValueError(f"batch_size must be in [1, {self.num_envs}], got {b}")
        self.batch_size, self.pull = b, batch_size is not None
        self.pool = _envpool().make(
            env.name,
            env_type="gymnasium",
            num_envs=self.num_envs,
            batch_size=b,
            seed=int(seed),
            **env.kwargs,
        )
        self.obs_dtype = env.observation_space().dtype
        self.channels_first = env.channels_first
        self._ended = np.zeros(self.num_envs, bool)  # pull mode: the next row is a reset
        self.ids = np.arange(self.num_envs, dtype=np.int32)

    def _obs(self, obs) -> np.ndarray:
        """``[B, *obs]`` in the env's dtype, images channels last."""
        obs = np.asarray(obs, self.obs_dtype)
        return np.ascontiguousarray(np.moveaxis(obs, 1, -1)) if self.channels_first else obs

    def reset(self):
        if self.pull:
            self.pool.async_reset()
            self._ended[:] = True  # the first recv of every env is a reset row
            return None
        obs, _ = self.pool.reset()
        return self._obs(obs)

    def step(self, actions: np.ndarray) -> HostStep:
        if self.pull:
            return super().step(actions)
        obs, rew, term, trunc, _ = self.pool.step(np.asarray(actions), self.ids)
        obs = self._obs(obs)
        final, done = obs.copy(), np.asarray(term, bool) | np.asarray(trunc, bool)
        if done.any():
            fresh, info = self.pool.reset(options={"reset_mask": done})
            obs[np.asarray(info["env_id"])] = self._obs(fresh)
        reward = np.asarray(rew, np.float32)
        no = np.zeros(self.num_envs, bool)
        ret, length = self._episodes(self.ids, reward, done, no)
        return HostStep(
            obs,
            reward,
            np.asarray(term, bool),
            np.asarray(trunc, bool),
            final,
            ret,
            length,
            self.ids,
            no,
        )

    def send(self, actions: np.ndarray, env_ids: np.ndarray) -> None:
        if not self.pull:
            return super().send(actions, env_ids)
        self.pool.send(np.asarray(actions), np.asarray(env_ids, np.int32))

    def recv(self) -> HostStep:
        if not self.pull:
            return super().recv()
        obs, rew, term, trunc, info = self.pool.recv()
        ids = np.asarray(info["env_id"], np.int32)
        first = self._ended[ids].copy()
        terminated = np.asarray(term, bool) & ~first
        truncated = np.asarray(trunc, bool) & ~first
        reward = np.where(first, 0.0, np.asarray(rew, np.float32)).astype(np.float32)
        done = terminated | truncated
        self._ended[ids] = done
        ret, length = self._episodes(ids, reward, done, first)
        obs = self._obs(obs)
        return HostStep(obs, reward, terminated, truncated, obs, ret, length, ids, first)

    def close(self) -> None:
        self.pool.close()


def envpool_entry(name: str) -> EnvEntry:
    """The registry entry of ``envpool:<name>`` (unknown names raise with suggestions)."""
    known = sorted(_envpool().list_all_envs())
    if name not in known:
        raise UnknownEnvError(
            name, known, prefix=ENVPOOL_PREFIX, listing="envpool.list_all_envs() lists them."
        )
    return EnvEntry(
        ENVPOOL_PREFIX + name, EnvPoolEnvironment, None, source="envpool", kwargs=(("name", name),)
    )
