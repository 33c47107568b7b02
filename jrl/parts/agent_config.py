"""Agent configs: the frozen dataclass bases every agent config extends.

A config is a frozen dataclass with one docstring per field (the CLI shows
it as ``--help``). Each field is declared once, in the most general base that
has it; a subclass changes a default with a bare one-line redeclaration
(``num_envs: int = 16``), which inherits the docstring. The bases:

- :class:`AgentConfig`: what every agent has (budget, envs, learning rate,
  discount, gradient clipping, network widths), the per-env ``PRESETS``, the
  hyperparameter type ``HPARAMS`` whose fields are the *sweepable* config
  fields, the ``RANGES`` of its float fields, and ``validate()`` built from ``checks()``;
- :class:`RolloutConfig`: on-policy rollouts learned in epochs of minibatches;
- :class:`ReplayConfig`: collection into a replay buffer, then updates;
- :class:`EpsilonGreedyConfig`: a linearly decaying exploration rate.

``validate()`` hands the ``(condition, message)`` pairs of ``checks()`` to
:func:`check`, which raises ``ValueError`` with the first failing message; a
subclass extends ``checks()``. The interval a float field must lie in is declared once, as
a :class:`Range` in the ``RANGES`` of the class that declares the field
(:meth:`AgentConfig.field_ranges` merges them): ``checks()`` refuses values outside it, and
population-based training (:mod:`jrl.run.pbt`) clips its perturbed hyperparameters into it.
:func:`envs_per_device` splits the envs over devices.
"""

from __future__ import annotations

import dataclasses
import math
import typing
from typing import Annotated, Any, ClassVar, Iterable

import jax.numpy as jnp
import numpy as np
import tyro

from jrl.parts import torsos

__all__ = [
    "AgentConfig",
    "Check",
    "EpsilonGreedyConfig",
    "LearningRate",
    "MINATAR_ENVS",
    "MINATAR_NETWORK",
    "NON_NEGATIVE",
    "POSITIVE",
    "Range",
    "ReplayConfig",
    "RolloutConfig",
    "check",
    "coerce_field",
    "envs_per_device",
    "hparams_from",
    "presets_for",
    "UNIT_INTERVAL",
]

Check = tuple[bool, str]

MINATAR_ENVS = (
    "gymnax:Asterix-MinAtar",
    "gymnax:Breakout-MinAtar",
    "gymnax:Freeway-MinAtar",
    "gymnax:SpaceInvaders-MinAtar",
)
"""The gymnax MinAtar envs (Young & Tian, 2019; 10x10 images with a channel per object kind)
that agents carry presets for."""
MINATAR_NETWORK = {"torso": "minatar_cnn", "hidden_sizes": (128,), "activation": "relu"}
"""The MinAtar paper's network: one 3x3 conv of 16 channels, then 128 ReLU units."""


def presets_for(env_ids: Iterable[str], preset: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """``{env_id: preset}`` for each id (a copy each): one preset shared by several envs."""
    return {env_id: dict(preset) for env_id in env_ids}


LearningRate = Annotated[float, tyro.conf.arg(aliases=("--lr",))]
"""The type of ``learning_rate`` (the CLI also accepts ``--lr``); a subclass that changes
the default writes ``learning_rate: LearningRate = 1e-3``."""


def check(checks: Iterable[Check]) -> None:
    """Raises ``ValueError(message)`` for the first ``(ok, message)`` with ``ok`` false."""
    for ok, message in checks:
        if not ok:
            raise ValueError(message)


def hparams_from(config: Any, cls: type) -> Any:
    """``cls`` (a dataclass of [] float32 fields) filled from the config's fields of the same
    names."""
    return cls(
        **{
            f.name: jnp.asarray(getattr(config, f.name), jnp.float32)
            for f in dataclasses.fields(cls)
        }
    )


def envs_per_device(num_envs: int, num_devices: int) -> int:
    """``num_envs / num_devices``; ``ValueError`` unless it divides evenly."""
    if num_devices < 1 or num_envs % num_devices:
        raise ValueError(f"num_envs = {num_envs} is not divisible by {num_devices} devices")
    return num_envs // num_devices


FLOAT32_MAX = float(np.finfo(np.float32).max)
FLOAT32_TINY = float(np.finfo(np.float32).tiny)


@dataclasses.dataclass(frozen=True)
class Range:
    """The interval a float config field must lie in: from ``low`` to ``high``, each end
    included unless ``low_open`` / ``high_open``. A config's ``RANGES`` map its fields to
    theirs; ``validate()`` refuses values outside (:meth:`check`) and PBT clips perturbed
    values into it (:meth:`float32_bounds`)."""

    low: float = -math.inf
    high: float = math.inf
    low_open: bool = False
    high_open: bool = False

    def __contains__(self, value: float) -> bool:
        above = value > self.low if self.low_open else value >= self.low
        below = value < self.high if self.high_open else value <= self.high
        return bool(above and below)

    def describe(self) -> str:
        """``"be positive"``, ``"be >= 0"``, ``"lie in [0, 1]"``, ``"lie in (0, 1]"``..."""
        if math.isinf(self.high):
            if self.low == 0:
                return "be positive" if self.low_open else "be >= 0"
            return f"be {'>' if self.low_open else '>='} {self.low:g}"
        if math.isinf(self.low):
            return f"be {'<' if self.high_open else '<='} {self.high:g}"
        left, right = "(" if self.low_open else "[", ")" if self.high_open else "]"
        return f"lie in {left}{self.low:g}, {self.high:g}{right}"

    def check(self, name: str, value: float) -> Check:
        """``(value in range, "<name> must <describe()>, got <value>")``."""
        return value in self, f"{name} must {self.describe()}, got {value}"

    def float32_bounds(self) -> tuple[float, float]:
        """The closed float32 interval of the values inside: an open end moves to the next
        float32 inside (the smallest normal float32 above an open 0: denormals may flush to
        zero), an infinite end to the largest finite float32 (config floats are finite
        float32 numbers)."""

        def inward(end: float, is_open: bool, direction: float) -> float:
            if math.isinf(end):
                return -direction * FLOAT32_MAX
            if not is_open:
                return end
            if end == 0:
                return direction * FLOAT32_TINY
            return float(np.nextafter(np.float32(end), np.float32(direction * math.inf)))

        return inward(self.low, self.low_open, 1.0), inward(self.high, self.high_open, -1.0)


POSITIVE = Range(0.0, low_open=True)
"""``(0, inf)``."""
NON_NEGATIVE = Range(0.0)
"""``[0, inf)``."""
UNIT_INTERVAL = Range(0.0, 1.0)
"""``[0, 1]``: discounts, trace parameters, probabilities."""


def _finite_floats(config: Any) -> list[Check]:
    out = []
    for f in dataclasses.fields(config):
        value = getattr(config, f.name)
        if isinstance(value, float):
            ok = math.isfinite(value) and abs(value) <= FLOAT32_MAX
            out.append((ok, f"{f.name} must be a finite number (float32), got {value!r}"))
    return out


def coerce_field(field: dataclasses.Field, value: Any, hints: dict[str, Any]) -> Any:
    """``value`` checked and converted to the declared type of a config ``field`` (``hints``:
    the class's type hints); ``TypeError`` naming the field otherwise."""
    tp = hints[field.name]
    try:
        if tp is bool:
            if isinstance(value, str):
                if value.lower() in ("true", "1", "yes"):
                    return True
                if value.lower() in ("false", "0", "no"):
                    return False
                raise ValueError
            if not isinstance(value, (bool, np.bool_)):
                raise ValueError
            return bool(value)
        if tp is int:
            if isinstance(value, bool) or (
                isinstance(value, float) and not float(value).is_integer()
            ):
                raise ValueError
            return int(value)
        if tp is float:
            if isinstance(value, bool):
                raise ValueError
            return float(value)
        if tp is str:
            if not isinstance(value, str):
                raise ValueError
            return value
        if typing.get_origin(tp) is tuple:
            return tuple(int(v) for v in value)
    except (TypeError, ValueError):
        raise TypeError(
            f"config field {field.name!r} expects {getattr(tp, '__name__', tp)}, got {value!r}"
        ) from None
    return value


@dataclasses.dataclass(frozen=True)
class AgentConfig:
    """Settings every agent has."""

    PRESETS: ClassVar[dict[str, dict[str, Any]]] = {}
    """Env id -> field overrides applied on top of the defaults (``jrl.app.api.make_config``)."""
    HPARAMS: ClassVar[type | None] = None
    """The agent's hyperparameter dataclass (``[]`` float32 fields, traced in the agent state);
    its field names are the config fields that can be swept in one compiled program."""
    RETIRED_FIELDS: ClassVar[tuple[str, ...]] = ()
    """Fields older versions of this config had; ignored when an old run record is read."""
    ADDED_FIELDS: ClassVar[dict[str, Any]] = {}
    """Fields added after runs were written, with the value that computes what those runs
    computed; an old run record without the field gets it (not today's default), so an old
    run resumes, evaluates and renders as it ran."""
    ACTION_SPACES: ClassVar[tuple[type, ...] | None] = None
    """The action space classes (``jrl.core.spaces``) the agent can act in; None: not declared
    (the agent's ``build`` decides). ``jrl.agents.check_action_space`` refuses an env whose
    action space is not one of them, naming the agents that fit it."""
    RUNNERS: ClassVar[tuple[str, ...]] = ("anakin",)
    """The runners (``--runner``) that can train the agent; ``jrl.app.api.check_runner``
    refuses the others, naming the agents that fit."""
    MAX_DEVICES: ClassVar[int | None] = None
    """The most devices (``--devices``) the agent's learner spans; None: any."""
    TURN_BASED: ClassVar[bool] = False
    """The agent plays two-player turn-based games (:class:`jrl.core.two_player_env.TwoPlayerEnv`)
    and only those; single-player agents are refused on them and the reverse."""
    RANGES: ClassVar[dict[str, Range]] = {"learning_rate": POSITIVE, "gamma": UNIT_INTERVAL}
    """Field -> the :class:`Range` its value must lie in, for the fields this class declares
    (a subclass's ``RANGES`` add to its bases'; :meth:`field_ranges` merges them)."""

    total_steps: int = 500_000
    """Environment steps to train for, summed over envs (per seed)."""
    num_envs: int = 4
    """Parallel environments per seed."""
    learning_rate: LearningRate = 2.5e-4
    """Optimizer step size (sweepable)."""
    anneal_lr: bool = True
    """Decay the learning rate linearly to 0 over training."""
    gamma: float = 0.99
    """Discount factor in [0, 1] (sweepable)."""
    max_grad_norm: float = 0.5
    """Global-norm gradient clipping threshold (0: no clipping, and no train/grad_norm metric)."""
    hidden_sizes: tuple[int, ...] = (64, 64)
    """Hidden layer widths of the network's MLP(s)."""
    activation: str = "tanh"
    """Hidden activation: tanh, relu, gelu, silu or elu."""
    torso: str = "mlp"
    """The network torso (jrl.parts.torsos.TORSOS): mlp, layernorm_mlp, or for image observations
    [H, W, C] minatar_cnn, nature_cnn or impala_resnet; or one registered by a plugin."""

    @classmethod
    def field_ranges(cls) -> dict[str, Range]:
        """Field -> :class:`Range`: the ``RANGES`` of this class and of its bases (mixins
        included), a subclass's entry replacing its base's, for the fields the config has."""
        names = {f.name for f in dataclasses.fields(cls)}
        merged: dict[str, Range] = {}
        for klass in reversed(cls.__mro__):
            merged.update(vars(klass).get("RANGES", {}))
        return {name: r for name, r in merged.items() if name in names}

    @classmethod
    def sweepable(cls) -> tuple[str, ...]:
        """Config fields that can take several values in one compiled program: the fields of
        ``HPARAMS`` (none without one)."""
        return tuple(f.name for f in dataclasses.fields(cls.HPARAMS)) if cls.HPARAMS else ()

    def hparams(self) -> Any:
        """The sweepable fields as ``HPARAMS`` of traced-ready float32 scalars."""
        if self.HPARAMS is None:
            raise TypeError(f"{type(self).__name__} declares no HPARAMS")
        return hparams_from(self, self.HPARAMS)

    @property
    def env_steps_per_iteration(self) -> int:
        """Env steps one iteration collects (per seed, all envs)."""
        raise NotImplementedError(f"{type(self).__name__} must define env_steps_per_iteration")

    @property
    def num_iterations(self) -> int:
        """Iterations in a run: total_steps // env_steps_per_iteration."""
        return self.total_steps // self.env_steps_per_iteration

    def checks(self) -> list[Check]:
        """``(condition, message)`` pairs that :meth:`validate` checks in order: first that
        every float field is a finite float32 number (traced hyperparameters are float32),
        then the :meth:`field_ranges`, then the other conditions."""
        c = self
        ranges = [r.check(name, getattr(c, name)) for name, r in self.field_ranges().items()]
        first = _finite_floats(self) + ranges
        return first + [
            (c.num_envs > 0, f"num_envs must be positive, got {c.num_envs}"),
            (
                c.max_grad_norm >= 0,
                f"max_grad_norm must be >= 0 (0: no clipping), got {c.max_grad_norm}",
            ),
            (
                len(c.hidden_sizes) > 0 and all(h > 0 for h in c.hidden_sizes),
                f"hidden_sizes must be positive, got {c.hidden_sizes}",
            ),
            (
                c.activation in torsos.ACTIVATIONS,
                f"activation must be one of {sorted(torsos.ACTIVATIONS)}, got {c.activation!r}",
            ),
            (
                c.torso in torsos.TORSOS,
                f"torso must be one of {sorted(torsos.TORSOS)}, got {c.torso!r}",
            ),
        ]

    def validate(self) -> None:
        """Raises ValueError naming the first inconsistent or out-of-range field."""
        check(self.checks())

    def env_checks(self, action_space: Any, agent: str = "this agent") -> list[Check]:
        """``(condition, message)`` pairs about the env's action space that the action space
        classes of ``ACTION_SPACES`` do not settle (e.g. finite bounds; ``agent``: the name
        the messages use); none by default."""
        return []

    def check_env(self, env: Any, env_params: Any) -> None:
        """``ValueError`` in one line where this config cannot train on ``env`` for a reason
        its action space alone does not give (an offline agent's dataset of another env's
        shapes); run before any run folder is touched. Nothing by default."""

    def _one_iteration(self, what: str) -> Check:
        return (
            self.total_steps >= self.env_steps_per_iteration,
            f"total_steps = {self.total_steps} is less than one iteration "
            f"({what} = {self.env_steps_per_iteration})",
        )


@dataclasses.dataclass(frozen=True)
class RolloutConfig(AgentConfig):
    """On-policy settings: rollouts of ``num_steps`` from every env, learned in
    ``num_epochs`` passes of ``num_minibatches`` env-stratified minibatches."""

    OPTIMIZERS: ClassVar[tuple[str, ...]] = ("adam", "rmsprop")
    """Values ``optimizer`` accepts."""
    RUNNERS: ClassVar[tuple[str, ...]] = ("anakin", "sebulba")

    num_steps: int = 128
    """Steps collected from each env per iteration (rollout length T)."""
    num_epochs: int = 4
    """Passes over each rollout."""
    num_minibatches: int = 4
    """Minibatches per pass; num_steps must be divisible by it (each holds
    num_steps/num_minibatches steps of every env)."""
    optimizer: str = "adam"
    """The gradient scaler: one of the agent's OPTIMIZERS ('adam' or 'rmsprop' for the
    actor-critic agents, 'radam' or 'adam' for PQN)."""

    def _minibatch_check(self) -> Check:
        """That the rollout cuts into ``num_minibatches`` (by default along time)."""
        return (
            self.num_steps % max(self.num_minibatches, 1) == 0,
            f"num_steps = {self.num_steps} is not divisible by num_minibatches = "
            f"{self.num_minibatches} (each minibatch holds num_steps / num_minibatches steps "
            "of every env)",
        )

    @property
    def batch_size(self) -> int:
        """Samples per iteration: num_envs * num_steps."""
        return self.num_envs * self.num_steps

    @property
    def env_steps_per_iteration(self) -> int:
        """Env steps one iteration collects: num_envs * num_steps."""
        return self.batch_size

    def checks(self) -> list[Check]:
        return super().checks() + [
            (self.num_steps > 0, f"num_steps must be positive, got {self.num_steps}"),
            (self.num_epochs > 0, f"num_epochs must be positive, got {self.num_epochs}"),
            (
                self.num_minibatches > 0,
                f"num_minibatches must be positive, got {self.num_minibatches}",
            ),
            self._minibatch_check(),
            self._one_iteration("num_envs * num_steps"),
            (
                self.optimizer in self.OPTIMIZERS,
                f"optimizer must be {' or '.join(map(repr, sorted(self.OPTIMIZERS)))}, "
                f"got {self.optimizer!r}",
            ),
        ]


@dataclasses.dataclass(frozen=True)
class ReplayConfig(AgentConfig):
    """Off-policy settings: each iteration collects ``steps_per_iteration`` steps from
    every env into a replay buffer, then does ``updates_per_iteration`` updates."""

    steps_per_iteration: int = 4
    """Steps collected from each env per iteration, before the updates."""
    updates_per_iteration: int = 2
    """Gradient updates per iteration (replay ratio = updates * batch_size /
    (steps_per_iteration * num_envs))."""
    batch_size: int = 128
    """Transitions per update (summed over devices; divisible by the number of devices)."""
    buffer_size: int = 50_000
    """Replay capacity per seed (summed over devices: each holds buffer_size / devices items
    of its own envs)."""
    learning_starts: int = 10_000
    """Env steps collected (all envs) before updates begin."""

    @property
    def env_steps_per_iteration(self) -> int:
        """Env steps one iteration collects: num_envs * steps_per_iteration."""
        return self.num_envs * self.steps_per_iteration

    def checks(self) -> list[Check]:
        return super().checks() + [
            (
                self.steps_per_iteration > 0,
                f"steps_per_iteration must be positive, got {self.steps_per_iteration}",
            ),
            (
                self.updates_per_iteration > 0,
                f"updates_per_iteration must be positive, got {self.updates_per_iteration}",
            ),
            (self.batch_size > 0, f"batch_size must be positive, got {self.batch_size}"),
            self._one_iteration("num_envs * steps_per_iteration"),
            (
                self.learning_starts >= 0,
                f"learning_starts must be >= 0, got {self.learning_starts}",
            ),
            (
                self.learning_starts < self.total_steps,
                f"learning_starts = {self.learning_starts} leaves no updates within "
                f"total_steps = {self.total_steps}",
            ),
            (
                self.buffer_size >= max(self.batch_size, self.num_envs),
                f"buffer_size = {self.buffer_size} must be at least batch_size and num_envs",
            ),
        ]


@dataclasses.dataclass(frozen=True)
class EpsilonGreedyConfig:
    """Exploration settings of epsilon-greedy agents (a mixin next to an :class:`AgentConfig`
    base): epsilon decays linearly from ``epsilon_start`` to ``epsilon_end``."""

    epsilon_start: float = 1.0
    """Initial exploration rate (sweepable)."""
    epsilon_end: float = 0.01
    """Final exploration rate (sweepable)."""
    exploration_fraction: float = 0.2
    """Fraction of the agent's updates over which epsilon decays linearly (sweepable)."""

    RANGES: ClassVar[dict[str, Range]] = {
        "epsilon_start": UNIT_INTERVAL,
        "epsilon_end": UNIT_INTERVAL,
        "exploration_fraction": UNIT_INTERVAL,
    }
