"""JaxMARL environments as jrl multi-agent envs
(:class:`jrl.core.multi_agent_env.MultiAgentEnvironment`).

``jrl.envs.make("jaxmarl:MPE_simple_spread_v3")`` builds a :class:`JaxMARLEnv` around
``jaxmarl.make("MPE_simple_spread_v3")``; any name JaxMARL registers works (MPE, SMAX,
Overcooked, ...). Needs the optional extra: ``pip install jrl-jax[jaxmarl]``.

What the adapter does:

- Agents keep JaxMARL's order (``env.agents``); observations, rewards and dones, which
  JaxMARL keeps in dicts keyed by agent, are stacked on the leading agent axis. Actions
  go back as a dict.
- It calls JaxMARL's ``step_env`` (no auto-reset; jrl's AutoReset resets), so an episode
  ends where JaxMARL's ``dones["__all__"]`` says, and ``dones[agent]`` is each agent's
  ``terminated``. JaxMARL's envs end their episodes themselves (MPE on the step taken at
  step count ``max_steps`` = 25, so after 26 steps, reported as done as JaxMARL's own
  baselines treat it), so no TimeLimit is added.
- Every agent must have the same action space (Discrete or Box); observations of
  different sizes (e.g. MPE simple_tag's adversaries) are zero-padded at the end to the
  largest. Per-agent action masks come from ``get_avail_actions`` when the env defines
  it (SMAX); the global state is every agent's observation, concatenated.
- ``render`` draws the MPE scene (agents and landmarks as discs in JaxMARL's colours);
  other JaxMARL envs have none here.

JaxMARL prints a line about its optional submoduled environments when imported; it goes to
stderr, so ``jrl envs`` keeps stdout for its table.
"""

from __future__ import annotations

import contextlib
import functools
import os
import sys
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from jrl.core import spaces
from jrl.core.multi_agent_env import MultiAgentEnvironment
from jrl.core.types import PRNGKey, PyTree
from jrl.envs import raster as R
from jrl.envs.entries import (
    JAXMARL_PREFIX,
    EnvEntry,
    ExtraMissingError,
    UnknownEnvError,
    import_extra,
    install_hint,
)

__all__ = ["INSTALL", "JaxMARLEnv", "JaxMARLMissingError", "jaxmarl_entry", "jaxmarl_names"]

INSTALL = install_hint("jaxmarl")


class JaxMARLMissingError(ExtraMissingError):
    """jaxmarl cannot be imported: a user error (``jrl`` exits with 2) naming the extra."""


@contextlib.contextmanager
def _stdout_to_stderr():
    """Everything written to stdout (file descriptor 1 included) goes to stderr meanwhile."""
    for stream in (sys.stdout, sys.__stdout__):
        if stream is not None:
            stream.flush()
    saved = os.dup(1)
    os.dup2(2, 1)
    try:
        with contextlib.redirect_stdout(sys.stderr):
            yield
    finally:
        for stream in (sys.stdout, sys.__stdout__):
            if stream is not None:
                stream.flush()
        os.dup2(saved, 1)
        os.close(saved)


def _import_jaxmarl():
    def load(module: str):
        return import_extra(module, "jaxmarl", "JaxMARL environments", JaxMARLMissingError)

    with _stdout_to_stderr():  # jaxmarl prints on import, file descriptor 1 included
        jaxmarl = load("jaxmarl")
        base = load("jaxmarl.environments.multi_agent_env").MultiAgentEnv
        registered = load("jaxmarl.registration").registered_envs
    return jaxmarl, base, list(registered)


def jaxmarl_names() -> list[str]:
    """The env names JaxMARL registers (``jaxmarl:<name>`` ids); ImportError without it."""
    return sorted(_import_jaxmarl()[2])


@functools.cache
def _make(name: str):
    jaxmarl, _, known = _import_jaxmarl()
    if name not in known:
        raise UnknownEnvError(
            name, sorted(known), prefix=JAXMARL_PREFIX, listing=f"JaxMARL has: {', '.join(known)}."
        )
    return jaxmarl.make(name)


def jaxmarl_entry(name: str) -> EnvEntry:
    """The :class:`~jrl.envs.EnvEntry` of ``jaxmarl:<name>`` (no time limit: JaxMARL's envs
    end their episodes); unknown names raise :class:`~jrl.envs.UnknownEnvError` with the
    closest JaxMARL names, a missing jaxmarl an ImportError naming the extra."""
    _make(name)
    return EnvEntry(
        JAXMARL_PREFIX + name, JaxMARLEnv, None, source="jaxmarl", kwargs=(("env", name),)
    )


def _space(space) -> spaces.Space:
    """A JaxMARL space as a jrl one (Discrete or Box)."""
    if hasattr(space, "n") and not hasattr(space, "low"):
        return spaces.Discrete(int(space.n))
    low = np.broadcast_to(np.asarray(space.low, np.float64), tuple(space.shape))
    high = np.broadcast_to(np.asarray(space.high, np.float64), tuple(space.shape))
    return spaces.Box(low, high, tuple(space.shape), jnp.float32)


class JaxMARLEnv(MultiAgentEnvironment):
    """A JaxMARL env behind jrl's multi-agent API; see the module docstring."""

    def __init__(self, env: str):
        self.jaxmarl_env = _make(env)
        _, base, _ = _import_jaxmarl()
        self.id = JAXMARL_PREFIX + env
        self.agents = tuple(self.jaxmarl_env.agents)
        actions = [_space(self.jaxmarl_env.action_space(a)) for a in self.agents]
        if any(repr(s) != repr(actions[0]) for s in actions):
            raise ValueError(f"{self.id}: jrl needs agents with one action space, got {actions}")
        self._action_space = actions[0]
        shapes = [tuple(self.jaxmarl_env.observation_space(a).shape) for a in self.agents]
        if len(set(shapes)) > 1 and any(len(s) != 1 for s in shapes):
            raise ValueError(f"{self.id}: observations of different shapes {shapes}")
        self._obs_shape = max(shapes)
        self.has_action_mask = (
            type(self.jaxmarl_env).get_avail_actions is not base.get_avail_actions
        )
        self._mpe = hasattr(self.jaxmarl_env, "colour") and hasattr(self.jaxmarl_env, "rad")

    @property
    def default_params(self) -> PyTree:
        return None

    def _stack_obs(self, obs: dict) -> jax.Array:
        size = self._obs_shape[0] if len(self._obs_shape) == 1 else None

        def one(x):
            x = jnp.asarray(x, jnp.float32)
            if size is not None and x.shape[0] < size:
                x = jnp.pad(x, (0, size - x.shape[0]))
            return x

        return jnp.stack([one(obs[a]) for a in self.agents])

    def reset_env(self, key: PRNGKey, params: PyTree):
        obs, state = self.jaxmarl_env.reset(key)
        return state, self._stack_obs(obs)

    def step_env(self, key: PRNGKey, state: PyTree, action: Any, params: PyTree):
        actions = {a: action[i] for i, a in enumerate(self.agents)}
        obs, state, rewards, dones, _ = self.jaxmarl_env.step_env(key, state, actions)
        reward = jnp.stack([jnp.asarray(rewards[a], jnp.float32) for a in self.agents])
        done = jnp.stack([jnp.asarray(dones[a], bool) for a in self.agents])
        done = done | jnp.asarray(dones["__all__"], bool)
        return state, self._stack_obs(obs), reward, done, {}

    def action_mask(self, state: PyTree, params: PyTree) -> jax.Array:
        avail = self.jaxmarl_env.get_avail_actions(state)
        return jnp.stack([jnp.asarray(avail[a], bool) for a in self.agents])

    def agent_observation_space(self, params=None) -> spaces.Box:
        return spaces.Box(-np.inf, np.inf, self._obs_shape, jnp.float32)

    def agent_action_space(self, params=None) -> spaces.Space:
        return self._action_space

    def render(self, state: PyTree, params: PyTree | None = None) -> jax.Array:
        """The MPE scene, ``uint8[400, 400, 3]``: every entity a disc of its radius and
        colour, in a view of [-1.5, 1.5]^2 (white background)."""
        if not self._mpe:
            raise NotImplementedError(f"{self.id} has no render() in jrl (MPE envs do)")
        size, half = 400, 1.5
        px, py = R.pixel_grid(size, size)
        canvas = R.blank(size, size)
        scale = size / (2 * half)
        env = self.jaxmarl_env
        pos = jnp.asarray(state.p_pos)
        for i in range(pos.shape[0]):  # landmarks first, then agents on top
            e = (i + env.num_agents) % pos.shape[0]
            cx, cy = (pos[e, 0] + half) * scale, (pos[e, 1] + half) * scale
            # the radii and colours are the env's constants: read on the host, as numbers
            # (indexing the jax arrays would stage an op, and float() of it fails under jit)
            disc = R.sd_circle(px, py, cx, cy, float(np.asarray(env.rad)[e]) * scale)
            colour = tuple(int(c) for c in np.asarray(env.colour)[e])
            canvas = R.paint(canvas, disc, colour)
        return R.to_uint8(canvas)
