"""Evolution strategies as agents: a search distribution over a policy network's
parameters, moved towards the samples that score well.

The genome is the parameter tree of a deterministic policy network (an MLP ending in a
``tanh`` layer of one unit per action: ``argmax`` for Discrete actions, the units rescaled to
the bounds for a Box). A strategy of `evosax <https://github.com/RobertTLange/evosax>`_ (0.3)
keeps the distribution; this module adapts three of them to jrl's state and config:

- ``openai_es`` (Salimans et al., 2017): isotropic Gaussian of fixed std ``sigma_init``,
  antithetic (mirrored) samples, centred-rank fitness shaping and Adam on the mean,
  ``mean <- Adam(-(1 / (P sigma)) sum_i u_i eps_i)`` with ``u_i`` the centred ranks in
  ``[-0.5, 0.5]`` (best member 0.5) and ``eps_i`` the member's standard normal noise;
- ``snes`` (Schaul et al., 2011; Wierstra et al., 2014): separable NES, a per-parameter std
  adapted by its natural gradient, rank-based utilities;
- ``cma_es``: separable CMA-ES (Ros & Hansen, 2008), a diagonal covariance (a full
  covariance over thousands of network weights would cost ``O(G^2)`` memory per run).

Fitness is the mean episode return of a member (evosax minimises, so it is handed
``-fitness``). Observations are normalised as in Salimans et al.: running mean and variance
of every observation the population met, frozen within a generation, updated after it, and
part of ``params`` (so evaluation, rendering and export apply them too).

The hyperparameter ``learning_rate`` (the mean's step: Adam's for ``openai_es``, the SGD
step for ``snes``, ``c_mean`` for ``cma_es``) lives in the state and can be swept.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, ClassVar, NamedTuple

import jax
import jax.numpy as jnp
import optax
from flax import struct
from jrl.agents.continuous.common import ActionScale

from jrl.core import spaces
from jrl.core.types import PRNGKey, PyTree
from jrl.core.normalization import RunningMeanStd
from jrl.parts import networks
from jrl.parts.agent import EnvSpec, replace_hparams
from jrl.parts.agent_config import AgentConfig, Check, LearningRate

__all__ = [
    "ES",
    "ESConfig",
    "ESHParams",
    "ESState",
    "STRATEGIES",
    "make_es",
    "normalize_observation",
    "policy_action",
]

STRATEGIES = ("openai_es", "snes", "cma_es")
"""The strategies :func:`make_es` builds."""
OBS_CLIP = 5.0
"""Normalised observations are clipped to ``[-OBS_CLIP, OBS_CLIP]`` (Salimans et al. 2017)."""


@struct.dataclass
class ESHParams:
    """The sweepable hyperparameters of an evolution strategy; [] float32."""

    learning_rate: jax.Array  # the step size of the distribution's mean


@struct.dataclass
class ESState:
    """One run's evolution strategy."""

    params: PyTree  # {"policy": the network params at the mean, "obs_stats": RunningMeanStd}
    strategy: PyTree  # evosax's state (flat mean [G], std, optimiser, ...)
    hparams: ESHParams


@dataclasses.dataclass(frozen=True)
class ESConfig(AgentConfig):
    """Settings every evolution strategy has. One iteration is one generation:
    ``population_size`` members each play ``episodes_per_member`` episodes of at most
    ``episode_steps`` steps."""

    HPARAMS: ClassVar[type] = ESHParams
    ACTION_SPACES: ClassVar[tuple[type, ...]] = (spaces.Discrete, spaces.Box)
    STRATEGY: ClassVar[str] = ""
    """Which of :data:`STRATEGIES`; also the agent name in error messages."""
    UNUSED: ClassVar[tuple[str, ...]] = ("num_envs", "gamma", "max_grad_norm", "anneal_lr")
    """Fields of :class:`~jrl.parts.agent_config.AgentConfig` an evolution strategy has no use for
    (no
    discount, no gradients, envs set by the population); setting one is refused."""

    total_steps: int = 2_560_000
    """Environment steps to train for, per seed: every member plays every step of its
    episodes' ``episode_steps`` (steps after an episode has ended are computed and
    masked), so generations = total_steps // (population_size * episodes_per_member *
    episode_steps)."""
    population_size: int = 64
    """Members sampled per generation: at least 2, even for openai_es (evosax's OpenAI-ES
    samples mirrored pairs), divisible by the number of devices."""
    episodes_per_member: int = 1
    """Episodes each member plays per generation; its fitness is their mean return."""
    episode_steps: int = 200
    """Steps each episode is played for at most (the env's time limit also ends it; the
    presets set the env's limit, e.g. CartPole-v1's 500)."""
    sigma_init: float = 0.1
    """Initial std of the search distribution (OpenAI-ES keeps it fixed)."""
    normalize_observations: bool = True
    """Normalise observations by running statistics of the population's observations."""
    hidden_sizes: tuple[int, ...] = (32, 32)
    learning_rate: LearningRate = 0.03

    @property
    def env_steps_per_iteration(self) -> int:
        """Env steps one generation computes: population_size * episodes_per_member *
        episode_steps."""
        return self.population_size * self.episodes_per_member * self.episode_steps

    def checks(self) -> list[Check]:
        defaults = {f.name: f.default for f in dataclasses.fields(AgentConfig)}
        name = self.STRATEGY or type(self).__name__
        return (
            super().checks()
            + [
                (
                    getattr(self, field) == defaults[field],
                    f"{name} has no use for {field} (an evolution strategy has no discount, "
                    "gradients or env count of its own; its fields include population_size, "
                    "episodes_per_member, episode_steps, sigma_init)",
                )
                for field in self.UNUSED
            ]
            + [
                (
                    self.population_size >= 2,
                    f"population_size must be >= 2, got {self.population_size}",
                ),
                (
                    self.episodes_per_member > 0,
                    f"episodes_per_member must be positive, got {self.episodes_per_member}",
                ),
                (
                    self.episode_steps > 0,
                    f"episode_steps must be positive, got {self.episode_steps}",
                ),
                (self.sigma_init > 0, f"sigma_init must be positive, got {self.sigma_init}"),
                self._one_iteration("population_size * episodes_per_member * episode_steps"),
            ]
        )


class ES(NamedTuple):
    """An evolution strategy as the population loop
    (:func:`jrl.agents.evolution.population.population`) calls
    it; every function is pure and jittable.

    - ``init(key, spec) -> ESState``: the mean at a fresh network initialisation;
    - ``ask(state, key) -> (genomes, state)``: ``population_size`` network parameter trees,
      stacked ``[P, ...]`` per leaf;
    - ``tell(state, genomes, fitness [P], obs_stats, key) -> (state, metrics)``: the update
      from the members' fitness (higher is better) and the new observation statistics;
    - ``member_action(genome, obs_stats, obs [...]) -> action``: a member acting;
    - ``policy(params, obs [N, ...], key) -> actions [N]``: the mean's (evaluation) policy.
    """

    init: Callable[[PRNGKey, EnvSpec], ESState]
    ask: Callable[[ESState, PRNGKey], tuple[PyTree, ESState]]
    tell: Callable[..., tuple[ESState, dict[str, jax.Array]]]
    member_action: Callable[[PyTree, RunningMeanStd, Any], jax.Array]
    policy: Callable[[PyTree, Any, PRNGKey], jax.Array]
    population_size: int
    normalize_observations: bool
    with_hparams: Callable[[ESState, dict[str, Any]], ESState] = replace_hparams


def normalize_observation(stats: RunningMeanStd, obs: jax.Array) -> jax.Array:
    """``clip((obs - mean) / sqrt(var + 1e-8), -OBS_CLIP, OBS_CLIP)``, float32."""
    z = (jnp.asarray(obs, jnp.float32) - stats.mean) / jnp.sqrt(stats.var + 1e-8)
    return jnp.clip(z, -OBS_CLIP, OBS_CLIP)


def policy_action(out: jax.Array, action_space: spaces.Space) -> jax.Array:
    """The action of the network's ``tanh`` output ``out [..., A]``: the argmax for a
    Discrete space, the output rescaled from ``[-1, 1]`` to the bounds for a Box."""
    if isinstance(action_space, spaces.Discrete):
        return jnp.argmax(out, axis=-1).astype(jnp.int32)
    return ActionScale.from_space(action_space, "an evolution strategy").to_env(out)


def _strong(tree: PyTree) -> PyTree:
    """Every leaf as a strongly typed array (evosax's states start with Python scalars, which
    jax keeps weakly typed; a checkpoint restores them strong)."""
    return jax.tree.map(lambda x: jnp.asarray(x, jnp.asarray(x).dtype), tree)


def _strategy(config: ESConfig, template: PyTree):
    """``(evosax strategy, its params, set_rate(state, params, lr) -> (state, params))``."""
    # evosax takes about 0.2 s to import: loaded when a strategy is built, not when `jrl agents`
    # imports this module to list the agents
    from evosax import algorithms

    p = config.population_size
    lr = float(config.learning_rate)

    def inject_rate(state, params, rate):
        opt = state.opt_state
        opt = opt._replace(hyperparams={**opt.hyperparams, "learning_rate": rate})
        return state.replace(opt_state=opt), params

    if config.STRATEGY == "openai_es":
        es = algorithms.Open_ES(
            p,
            template,
            use_antithetic_sampling=config.antithetic,
            optimizer=optax.inject_hyperparams(optax.adam)(learning_rate=lr),
            std_schedule=optax.constant_schedule(float(config.sigma_init)),
        )
        return es, es.default_params, inject_rate
    if config.STRATEGY == "snes":
        es = algorithms.SNES(p, template, optimizer=optax.inject_hyperparams(optax.sgd)(lr))
        params = es.default_params.replace(std_init=jnp.float32(config.sigma_init))
        return es, params, inject_rate
    if config.STRATEGY == "cma_es":
        es = algorithms.Sep_CMA_ES(p, template)
        params = es.default_params.replace(std_init=jnp.float32(config.sigma_init))
        return es, params, lambda state, params, rate: (state, params.replace(c_mean=rate))
    raise ValueError(f"unknown strategy {config.STRATEGY!r}; choose from {STRATEGIES}")


def make_es(config: ESConfig, spec: EnvSpec) -> tuple[ES, Any]:
    """The evolution strategy ``config.STRATEGY`` over the parameters of a deterministic policy
    network for ``spec``; returns ``(es, network)``."""
    space = spec.action_space
    if isinstance(space, spaces.Discrete):
        out_dim = int(space.n)
    else:
        out_dim = ActionScale.from_space(space, config.STRATEGY).dim
    obs_shape = tuple(spec.observation_space.shape)
    network = networks.DeterministicActor(
        out_dim, tuple(config.hidden_sizes), config.activation, max(len(obs_shape), 1), config.torso
    )
    example = jnp.zeros((1,) + obs_shape, jnp.float32)
    template = jax.eval_shape(network.init, jax.random.key(0), example)
    template = jax.tree.map(lambda s: jnp.zeros(s.shape, s.dtype), template)
    strategy, es_params, set_rate = _strategy(config, template)
    normalize = bool(config.normalize_observations)

    def features(stats, obs):
        return normalize_observation(stats, obs) if normalize else jnp.asarray(obs, jnp.float32)

    def init(key, spec_=None) -> ESState:
        k_net, k_es = jax.random.split(key)
        mean = network.init(k_net, example)
        strat = _strong(strategy.init(k_es, mean, es_params))
        stats = RunningMeanStd.create(obs_shape)
        return ESState({"policy": mean, "obs_stats": stats}, strat, config.hparams())

    def ask(state: ESState, key):
        strat, params = set_rate(state.strategy, es_params, state.hparams.learning_rate)
        genomes, strat = strategy.ask(key, strat, params)
        return genomes, state.replace(strategy=strat)

    def tell(state: ESState, genomes, fitness, obs_stats, key):
        strat, params = set_rate(state.strategy, es_params, state.hparams.learning_rate)
        strat, _ = strategy.tell(key, genomes, -fitness, strat, params)
        mean = strategy.get_mean(strat)
        metrics = {"train/sigma": jnp.mean(strat.std)}
        return state.replace(
            params={"policy": mean, "obs_stats": obs_stats}, strategy=strat
        ), metrics

    def member_action(genome, stats, obs):
        return policy_action(network.apply(genome, features(stats, obs)), space)

    def policy(params, obs, key=None):
        return member_action(params["policy"], params["obs_stats"], obs)

    return ES(init, ask, tell, member_action, policy, config.population_size, normalize), network
