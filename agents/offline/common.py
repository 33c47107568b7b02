"""What the offline agents (BC, CQL, IQL) share: the config base with the dataset fields, the
losses they are built from (as functions of arrays, tested against hand-computed values), one
gradient step of a loss over the agent's parameters, and the build onto the offline loop
(:func:`jrl.run.offline.offline`).

An offline agent never learns from its own env steps: it draws minibatches from a fixed
dataset written by ``jrl collect`` (:mod:`jrl.run.datasets`) and plays greedy episodes in the
env only to report its return. ``total_steps`` counts those greedy env steps (as every
runner counts env steps); the number of updates is ``num_iterations *
updates_per_iteration``.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any, Callable, ClassVar

import jax
import jax.numpy as jnp

from jrl.core import parallel, spaces
from jrl.parts.agent import Agent, EnvSpec
from jrl.parts.agent_config import AgentConfig, Check, LearningRate
from jrl.parts.learner import apply_gradients, scheduled_lr
from jrl.parts.optim import grad_norm_metric
from jrl.run.builders import Built, training_env
from jrl.run.datasets import check_dataset, file_digest, load_dataset
from jrl.run.offline import DatasetSource, OfflineSchedule, offline

__all__ = [
    "NO_DATASET",
    "OfflineConfig",
    "build_offline",
    "cql_penalty",
    "expectile_loss",
    "gradient_step",
    "log_likelihood_loss",
    "obs_ndim",
    "taken",
    "weighted_log_likelihood_loss",
]

NO_DATASET = (
    "learns from a fixed dataset: give --dataset PATH (write one with `jrl collect RUN_DIR "
    "--steps N`)"
)
"""The end of the one-line refusal of an offline run without a dataset."""


@dataclasses.dataclass(frozen=True)
class OfflineConfig(AgentConfig):
    """Offline settings: ``updates_per_iteration`` updates on ``batch_size`` transitions drawn
    from the dataset, then ``eval_steps_per_iteration`` greedy steps of each of the
    ``num_envs`` envs (reported, never learned from); ``total_steps`` counts those env steps.

    A fresh config given a ``dataset`` makes its path absolute and records the file's
    SHA-256 in ``dataset_digest``, so the run record pins the data: a resume refuses a file
    that changed."""

    ACTION_SPACES: ClassVar[tuple[type, ...]] = (spaces.Discrete,)
    MAX_DEVICES: ClassVar[int | None] = 1

    total_steps: int = 64_000
    """Greedy env steps per run (the episodes whose returns the run reports; learning takes
    updates_per_iteration updates per num_envs * eval_steps_per_iteration of them)."""
    num_envs: int = 8
    learning_rate: LearningRate = 3e-4
    anneal_lr: bool = False
    max_grad_norm: float = 10.0
    hidden_sizes: tuple[int, ...] = (256, 256)
    activation: str = "relu"
    dataset: str = ""
    """Path of the .npz dataset to learn from (written by `jrl collect RUN_DIR --steps N`);
    required."""
    dataset_digest: str = ""
    """SHA-256 of the dataset file, filled in when a run is made (a resume refuses a dataset
    that changed); leave it empty."""
    updates_per_iteration: int = 8
    """Gradient updates per iteration, each on batch_size transitions drawn from the dataset."""
    batch_size: int = 256
    """Transitions per update, drawn uniformly (with replacement) from the dataset."""
    eval_steps_per_iteration: int = 8
    """Greedy steps of each env per iteration: the episodes whose returns the run reports."""

    def __post_init__(self):
        if self.dataset and not self.dataset_digest:  # a fresh config: pin the file
            path = Path(self.dataset).expanduser()
            if not path.is_file():
                raise ValueError(
                    f"dataset {self.dataset} does not exist (write one with `jrl collect "
                    "RUN_DIR --steps N --out PATH`)"
                )
            object.__setattr__(self, "dataset", str(path.resolve()))
            object.__setattr__(self, "dataset_digest", file_digest(path))

    def env_checks(self, action_space: Any, agent: str = "this agent") -> list[Check]:
        """Also that a dataset is given (checked when a run is made, before its folder)."""
        return super().env_checks(action_space, agent) + [
            (bool(self.dataset), f"{agent} {NO_DATASET}")
        ]

    def check_env(self, env: Any, env_params: Any) -> None:
        """The dataset read and checked against the env's spaces before any run folder is
        touched (``ValueError`` in one line: another env's shapes, an unreadable or changed
        file)."""
        if self.dataset:
            data = load_dataset(self.dataset, self.dataset_digest or None)
            obs_space, act_space = env.observation_space(env_params), env.action_space(env_params)
            check_dataset(data, obs_space, act_space, self.dataset)

    @property
    def env_steps_per_iteration(self) -> int:
        """Greedy env steps one iteration takes: num_envs * eval_steps_per_iteration."""
        return self.num_envs * self.eval_steps_per_iteration

    @property
    def num_updates(self) -> int:
        """Gradient updates in a run: num_iterations * updates_per_iteration."""
        return self.num_iterations * self.updates_per_iteration

    def checks(self) -> list[Check]:
        positive = [
            (getattr(self, n) > 0, f"{n} must be positive, got {getattr(self, n)}")
            for n in ("updates_per_iteration", "batch_size", "eval_steps_per_iteration")
        ]
        return (
            super().checks()
            + positive
            + [
                self._one_iteration("num_envs * eval_steps_per_iteration"),
            ]
        )


def obs_ndim(observation_space) -> int:
    """How many trailing axes one observation of the space has (at least 1)."""
    return max(len(observation_space.shape), 1)


def taken(values: jax.Array, actions: jax.Array) -> jax.Array:
    """``values [B, A]`` at the integer ``actions [B]``: ``[B]``."""
    return jnp.take_along_axis(values, actions.astype(jnp.int32)[:, None], axis=-1)[:, 0]


def log_likelihood_loss(log_probs: jax.Array, actions: jax.Array) -> jax.Array:
    """Behaviour cloning's cross-entropy: ``-mean_b log pi(a_b | s_b)`` from ``log_probs
    [B, A]`` (normalised) and the dataset's ``actions [B]``."""
    return -jnp.mean(taken(log_probs, actions))


def weighted_log_likelihood_loss(
    log_probs: jax.Array, actions: jax.Array, advantages: jax.Array, beta, max_weight: float
) -> tuple[jax.Array, jax.Array]:
    """Advantage-weighted regression (IQL's policy extraction): ``-mean_b w_b log pi(a_b|s_b)``
    with ``w_b = min(exp(beta * A_b), max_weight)`` (``advantages [B]``, no gradient through
    them). Returns ``(loss, w [B])``."""
    w = jnp.minimum(jnp.exp(beta * jax.lax.stop_gradient(advantages)), max_weight)
    return -jnp.mean(w * taken(log_probs, actions)), w


def expectile_loss(diff: jax.Array, expectile) -> jax.Array:
    """The asymmetric squared loss of expectile regression (IQL's value loss):
    ``mean |expectile - 1(diff < 0)| * diff ** 2`` for ``diff = target - prediction [B]``."""
    weight = jnp.where(diff < 0, 1.0 - expectile, expectile)
    return jnp.mean(weight * diff**2)


def cql_penalty(q: jax.Array, actions: jax.Array) -> jax.Array:
    """CQL(H)'s conservative term for discrete actions: ``mean_b (logsumexp_a Q(s_b, a) -
    Q(s_b, a_b))`` from ``q [B, A]`` and the dataset's ``actions [B]`` (>= 0; it pushes down
    the values of actions the data did not take)."""
    return jnp.mean(jax.nn.logsumexp(q, axis=-1) - taken(q, actions))


def gradient_step(
    tx, config: OfflineConfig, loss_fn: Callable, state: Any, *args
) -> tuple[Any, Any, dict[str, jax.Array]]:
    """One step on ``loss_fn(params, *args) -> (loss, metrics)`` from ``state`` (with
    ``params``, ``opt_state``, ``hparams.learning_rate`` and ``num_updates``): the gradient
    averaged over devices, the scheduled learning rate. Returns ``(params, opt_state,
    metrics)``, ``metrics`` with ``train/loss`` (and ``train/grad_norm`` when clipping)."""
    (loss, metrics), grads = jax.value_and_grad(loss_fn, has_aux=True)(state.params, *args)
    grads = parallel.pmean(grads)
    total = max(config.num_updates, 1)
    lr = scheduled_lr(state.hparams.learning_rate, state.num_updates, total, config.anneal_lr)
    params, opt_state = apply_gradients(tx, state.params, state.opt_state, grads, lr)
    metrics = {"train/loss": loss, **metrics, **grad_norm_metric(grads, config.max_grad_norm)}
    return params, opt_state, parallel.pmean(metrics)


def build_offline(
    config: OfflineConfig,
    env,
    env_params,
    num_devices: int,
    make_agent: Callable[[OfflineConfig, EnvSpec], tuple[Agent, Any]],
    discount: Callable | None = None,
) -> Built:
    """The training env (``num_envs`` envs of greedy episodes), the agent and the network
    from ``make_agent(config, spec) -> (agent, network)``, and the offline loop over the
    config's dataset, read and checked when training first traces a step (so evaluation needs
    no dataset; a fresh run has checked it before its folder, :meth:`OfflineConfig.check_env`).
    ``ValueError`` in one line when the config names no dataset."""
    if not config.dataset:
        raise ValueError(f"{type(config).__name__[:-6].lower()} {NO_DATASET}")
    env, spec = training_env(config, env, env_params, num_devices)
    spec.value_based(type(config).__name__[:-6])  # a Discrete action space, no odd mask
    agent, network = make_agent(config, spec)
    schedule = OfflineSchedule(
        config.updates_per_iteration, config.batch_size, config.eval_steps_per_iteration
    )
    source = DatasetSource(config.dataset, config.dataset_digest)
    algorithm = offline(agent, env, source, schedule, discount=discount, env_params=env_params)
    return Built(algorithm, agent, env, env_params, spec, network)
