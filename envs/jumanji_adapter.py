"""Jumanji's single-agent, discrete-action environments as jrl
:class:`~jrl.core.env.Environment`\\ s.

``jrl.envs.make("jumanji:Snake-v1")`` builds a :class:`JumanjiEnv` around
``jumanji.make("Snake-v1", time_limit=LIFTED_TIME_LIMIT)`` and wraps it in a
:class:`~jrl.core.wrappers.TimeLimit` at jumanji's own default limit (4000 steps for
Snake-v1); pass ``max_episode_steps=`` to ``make`` to change it. Needs the optional extra:
``pip install jrl-jax[jumanji]``.

The ids: ``jumanji:<name>`` for the names of :data:`ADAPTED`, jumanji's envs whose agent
takes one discrete action (a ``DiscreteArray`` action spec): CVRP-v1, Game2048-v1,
GraphColoring-v1, Knapsack-v1, Maze-v0, PacMan-v1, SlidingTilePuzzle-v0, Snake-v1,
Sokoban-v0 and TSP-v1. The other names jumanji registers are refused with one line saying
why (a multi-discrete action such as Minesweeper's ``(row, col)`` or Tetris's
``(rotation, column)``, a continuous action, or several agents, as RobotWarehouse,
Connector, LevelBasedForaging); names jumanji does not register raise
:class:`~jrl.envs.UnknownEnvError` with the closest adapted names.

The mapping:

- State: jumanji's ``State`` pytree. ``reset`` gives jumanji the raw ``uint32[2]`` key data
  of jrl's typed key; ``step`` is jumanji's ``step`` (deterministic given the state: the
  step's key is not used). Same key, same episode as ``jumanji``'s own ``reset``/``step``.
- Observation: jumanji's is a NamedTuple; jrl's agents have one torso, so it becomes ONE
  ``float32`` vector: every field of jumanji's observation but ``action_mask``, in the
  NamedTuple's field order (nested NamedTuples such as ``Position(row, col)`` field by
  field), each flattened row-major and cast to float32 (booleans as 0/1), concatenated.
  For example Snake-v1: ``grid`` [12, 12, 5] then ``step_count`` (721 values); Maze-v0:
  ``agent_position`` (row, col), ``target_position`` (row, col), ``walls`` [10, 10] (0/1),
  ``step_count`` (105 values); Game2048-v1: ``board`` [4, 4] (the tiles' exponents, 16
  values); TSP-v1: ``coordinates`` [20, 2], ``position`` (-1 before the first city: the
  lower bound is -1, below jumanji's spec), ``trajectory`` [20] (61 values).
  The space is a :class:`~jrl.core.spaces.Box` whose bounds are jumanji's spec bounds of
  each value (``-inf``/``inf`` where the spec has none). An env whose observation has an
  ``action_mask`` (all but Sokoban) returns ``{"observation": x, "action_mask": bool[A]}``,
  jrl's masked-observation convention; Sokoban-v0 returns ``x`` alone.
- Action: ``Discrete(num_values)`` (int32), jumanji's ``DiscreteArray``. An illegal action
  (one the mask rules out) does what jumanji does with it: Snake, TSP, CVRP, Knapsack and
  GraphColoring end the episode (with a penalty where jumanji gives one), Maze, PacMan,
  SlidingTilePuzzle and Game2048 stay put. jrl's agents take the mask: the value-based ones
  (``dqn``, ``pqn``, ...) mask their exploration, greedy and bootstrap actions, the
  actor-critics (``ppo``, ``a2c``, ...) give illegal actions probability 0.
- Reward: jumanji's, as float32.
- ``terminated``: jumanji's ``step_type`` is LAST with ``discount`` 0, its natural end
  (Snake hits itself or a wall, 2048 has no move left, the maze's target is reached, a tour
  is complete, ...). jumanji ends an episode at its time limit in the same way (discount 0);
  jrl does not: the adapter builds the env with a time limit of :data:`LIFTED_TIME_LIMIT`
  (``2**31 - 1`` steps, never reached) and the entry carries jumanji's default limit
  (``time_limit`` of ``jumanji.make(name)``) as ``max_episode_steps``, so jrl's TimeLimit
  truncates at exactly the step where jumanji would have ended the episode, as a
  truncation (``truncated``, learners bootstrap) and with ``info["final_observation"]``
  from AutoReset. Envs without a time limit (2048, TSP, CVRP, Knapsack, GraphColoring) get
  none: their episodes always end. An episode that jumanji ends by itself with a discount
  above 0 (a truncation; none of the adapted envs does in jumanji 1.1) is reported as
  ``truncated``, not ``terminated``. One consequence of the lifted limit: an observation's
  ``step_count`` goes on past jumanji's limit on a bare env (``make(id,
  max_episode_steps=...)`` with a longer limit).
- ``params``: None (jumanji configures an env through its constructor, not a params pytree;
  ``make(id, field=value)`` raises).
- ``info``: jumanji's ``extras`` (``{"highest_tile": int32}`` for Game2048-v1,
  ``{"prop_correctly_placed": float32}`` for SlidingTilePuzzle-v0, ``{}`` for the others),
  on reset and step alike.
- ``render``: not provided (``NotImplementedError``): jumanji draws with matplotlib on the
  host, which cannot run inside a compiled program.

Sokoban-v0's default level generator downloads the Boxoban levels from Hugging Face when the
env is built; without a network (and no cached copy) building it fails, reported as one
line (:class:`JumanjiBuildError`). Other constructor arguments (board sizes, generators) are
not exposed: the ids are jumanji's registered defaults.
"""

from __future__ import annotations

import functools
import inspect
import logging
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from jrl.core import spaces
from jrl.core.env import Environment
from jrl.core.types import ACTION_MASK, OBSERVATION, PRNGKey, PyTree, TimeStep
from jrl.envs.entries import (
    JUMANJI_PREFIX,
    EnvEntry,
    ExtraMissingError,
    UnknownEnvError,
    import_extra,
    install_hint,
)

__all__ = [
    "ADAPTED",
    "INSTALL",
    "LIFTED_TIME_LIMIT",
    "JumanjiBuildError",
    "JumanjiEnv",
    "JumanjiMissingError",
    "JumanjiUnsupportedError",
    "jumanji_entry",
    "jumanji_names",
]

INSTALL = install_hint("jumanji")
ADAPTED = (
    "CVRP-v1",
    "Game2048-v1",
    "GraphColoring-v1",
    "Knapsack-v1",
    "Maze-v0",
    "PacMan-v1",
    "SlidingTilePuzzle-v0",
    "Snake-v1",
    "Sokoban-v0",
    "TSP-v1",
)
"""The jumanji envs jrl adapts: one agent, one discrete action."""
LIFTED_TIME_LIMIT = 2**31 - 1
"""The time limit the adapter builds jumanji's envs with (jrl's TimeLimit truncates instead)."""
_LAST = 2  # jumanji's StepType.LAST
_LOW_FIXES = {("TSP-v1", "position"): -1.0}
"""Lower bounds below jumanji's spec: TSP's ``position`` is -1 until the first city is chosen
(its spec says 0..19)."""


class JumanjiMissingError(ExtraMissingError):
    """jumanji cannot be imported: a user error (``jrl`` exits with 2) naming the extra."""


class JumanjiUnsupportedError(ValueError):
    """A name jumanji registers whose env jrl does not adapt (its action is not one discrete
    choice of one agent)."""


class JumanjiBuildError(ValueError):
    """jumanji could not build an adapted env (Sokoban-v0's levels not downloadable)."""


def _import_jumanji():
    return import_extra("jumanji", "jumanji", "jumanji environments", JumanjiMissingError)


def jumanji_names() -> list[str]:
    """The ``jumanji:<name>`` names jrl adapts; ImportError without jumanji."""
    registered = set(_import_jumanji().registered_environments())
    return [n for n in ADAPTED if n in registered]


def _why_not(jumanji: Any, name: str) -> str:
    """Why jrl does not adapt the registered jumanji env ``name``, in a few words."""
    try:
        with jax.ensure_compile_time_eval():  # its specs are jnp arrays, even inside a trace
            env = jumanji.make(name)
            spec = env.action_spec
    except Exception as e:  # noqa: BLE001 - only to word the refusal
        return f"it could not be built here ({type(e).__name__})"
    agents = getattr(env, "num_agents", None)
    if agents is not None and int(agents) > 1:
        return f"it is multi-agent ({int(agents)} agents, a joint action of shape {spec.shape})"
    if hasattr(spec, "num_values") and np.ndim(spec.num_values) == 1:
        values = " x ".join(str(int(v)) for v in spec.num_values)
        return f"its action is multi-discrete ({len(spec.num_values)} choices: {values})"
    return f"its action is a {type(spec).__name__} of shape {spec.shape}, not one discrete choice"


def _first_sentence(e: BaseException) -> str:
    """``Type: first sentence of the message`` (one line)."""
    text = " ".join(str(e).split())
    end = text.find(". ")
    text = text[: end + 1] if 0 <= end < 240 else text[:240]
    return f"{type(e).__name__}: {text}" if text else type(e).__name__


def _build(jumanji: Any, name: str, **kwargs: Any):
    """``jumanji.make(name, **kwargs)``, a failure as one :class:`JumanjiBuildError` line."""
    hub = logging.getLogger("huggingface_hub")
    level = hub.level
    hub.setLevel(logging.ERROR)  # Sokoban's download retries would log a line each
    try:
        return jumanji.make(name, **kwargs)
    except Exception as e:  # noqa: BLE001 - jumanji's constructors fail in many ways
        why = " (its level generator downloads the Boxoban levels from Hugging Face)"
        why = why if name.startswith("Sokoban") else ""
        raise JumanjiBuildError(
            f"jumanji:{name} could not be built{why}: {_first_sentence(e)}"
        ) from None
    finally:
        hub.setLevel(level)


@functools.cache
def _make(name: str):
    """``(env with the lifted time limit, jumanji's default time limit or None)``."""
    jumanji = _import_jumanji()
    registered = list(jumanji.registered_environments())
    if name not in ADAPTED or name not in registered:
        if name in registered:
            raise JumanjiUnsupportedError(
                f"jumanji:{name} is not adapted: {_why_not(jumanji, name)}; jrl adapts "
                f"jumanji's single-agent envs with one discrete action: {', '.join(ADAPTED)}."
            )
        known = [n for n in ADAPTED if n in registered]
        raise UnknownEnvError(
            name, known, prefix=JUMANJI_PREFIX, listing=f"jrl adapts: {', '.join(known)}."
        )
    # jumanji computes its specs (cached) with jnp ops: eagerly, even when first built in a trace
    with jax.ensure_compile_time_eval():
        default = _build(jumanji, name)
        if "time_limit" not in inspect.signature(type(default).__init__).parameters:
            env, limit = default, None
        else:
            env = _build(jumanji, name, time_limit=LIFTED_TIME_LIMIT)
            limit = int(default.time_limit)
        env.observation_spec, env.action_spec  # noqa: B018 - computed (and cached) here
    return env, limit


def jumanji_entry(name: str) -> EnvEntry:
    """The :class:`~jrl.envs.EnvEntry` of ``jumanji:<name>`` (time limit: jumanji's default
    ``time_limit``, None for envs without one)."""
    _, limit = _make(name)
    return EnvEntry(
        JUMANJI_PREFIX + name, JumanjiEnv, limit, source="jumanji", kwargs=(("env", name),)
    )


def _spec_at(spec: Any, path: tuple) -> Any:
    for key in path:
        spec = getattr(spec, key.name)
    return spec


def _bounds(name: str, path: tuple, spec: Any, shape: tuple) -> tuple[np.ndarray, np.ndarray]:
    """The flat bounds of one observation field: its spec's, or ``+-inf`` where it has none."""
    spec = _spec_at(spec, path)
    low = _LOW_FIXES.get((name, path[0].name), getattr(spec, "minimum", -np.inf))
    high = getattr(spec, "maximum", np.inf)
    return (
        np.broadcast_to(np.asarray(low, np.float64), shape).reshape(-1),
        np.broadcast_to(np.asarray(high, np.float64), shape).reshape(-1),
    )


class JumanjiEnv(Environment):
    """A jumanji env with one discrete action (see the module docstring)."""

    def __init__(self, env: str):
        self.jumanji_env, self.jumanji_time_limit = _make(env)
        self.id = JUMANJI_PREFIX + env
        key = jax.ShapeDtypeStruct((2,), jnp.uint32)  # jumanji's raw keys
        obs = jax.eval_shape(self.jumanji_env.reset, key)[1].observation
        self._masked = ACTION_MASK in getattr(obs, "_fields", ())
        leaves = jax.tree_util.tree_flatten_with_path(self._fields(obs))[0]
        spec = self.jumanji_env.observation_spec
        bounds = [_bounds(env, path, spec, tuple(x.shape)) for path, x in leaves]
        low = np.concatenate([b[0] for b in bounds])
        high = np.concatenate([b[1] for b in bounds])
        box = spaces.Box(low, high, (low.size,), jnp.float32)
        action = self.jumanji_env.action_spec
        self._action_space = spaces.Discrete(int(action.num_values))
        if self._masked:
            mask = spaces.Box(0, 1, (int(action.num_values),), jnp.bool_)
            self._observation_space = spaces.Dict({OBSERVATION: box, ACTION_MASK: mask})
        else:
            self._observation_space = box

    def _fields(self, obs: Any) -> Any:
        """jumanji's observation without its action mask."""
        return obs._replace(action_mask=None) if self._masked else obs

    def _obs(self, obs: Any) -> Any:
        flat = jnp.concatenate(
            [jnp.ravel(jnp.asarray(x, jnp.float32)) for x in jax.tree.leaves(self._fields(obs))]
        )
        if self._masked:
            return {OBSERVATION: flat, ACTION_MASK: jnp.asarray(obs.action_mask, bool)}
        return flat

    @property
    def default_params(self) -> PyTree:
        return None

    def reset_env(self, key: PRNGKey, params: PyTree) -> tuple[PyTree, PyTree]:
        state, ts = self.jumanji_env.reset(jax.random.key_data(key))
        return state, self._obs(ts.observation)

    def step_env(self, key: PRNGKey, state: PyTree, action: Any, params: PyTree):
        state, ts = self.step(key, state, action, params)
        return state, ts.observation, ts.reward, ts.terminated, ts.info

    def reset(self, key: PRNGKey, params: PyTree | None = None) -> tuple[PyTree, TimeStep]:
        """As :meth:`Environment.reset`, with jumanji's ``extras`` as ``info``."""
        state, ts = self.jumanji_env.reset(jax.random.key_data(key))
        return state, self._time_step(ts, first=True)

    def step(
        self, key: PRNGKey, state: PyTree, action: Any, params: PyTree | None = None
    ) -> tuple[PyTree, TimeStep]:
        """As :meth:`Environment.step`, but an episode that jumanji ends with a discount above
        0 (its own truncation) is reported as ``truncated``, not ``terminated``."""
        state, ts = self.jumanji_env.step(state, jnp.asarray(action, jnp.int32))
        return state, self._time_step(ts, first=False)

    def _time_step(self, ts: Any, first: bool) -> TimeStep:
        """jrl's :class:`~jrl.core.types.TimeStep` of jumanji's ``ts``."""
        last = jnp.logical_and(ts.step_type == _LAST, not first)
        return TimeStep(
            observation=self._obs(ts.observation),
            reward=jnp.zeros((), jnp.float32) if first else jnp.asarray(ts.reward, jnp.float32),
            terminated=last & (ts.discount == 0),
            truncated=last & (ts.discount > 0),
            info=dict(ts.extras),
        )

    def observation_space(self, params: PyTree | None = None) -> spaces.Space:
        return self._observation_space

    def action_space(self, params: PyTree | None = None) -> spaces.Space:
        return self._action_space
