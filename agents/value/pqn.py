"""PQN: parallelised Q-learning (Gallici et al., 2024).

"Simplifying Deep Temporal Difference Learning".

Q-learning made on-policy-shaped: many vmapped envs act epsilon-greedily
for a short rollout, then the Q-network is fitted to Q(lambda) targets over
that rollout for a few epochs of minibatches and the rollout is thrown away.
No replay buffer and no target network; a LayerNorm after every hidden layer
keeps the bootstrapped regression stable (the paper's central point).

Loop (:func:`jrl.run.loops.on_policy`): each iteration collects ``num_steps``
steps from each of ``num_envs`` envs, then ``learn`` does ``num_epochs``
passes of ``num_minibatches`` minibatches with the loss
``0.5 * (Q(s_t, a_t) - G_t)^2``, global-norm gradient clipping and Adam or
RAdam (learning rate optionally annealed linearly to 0).

Targets (:func:`q_lambda_targets`), computed backwards over the ``[T, N]``
rollout with the episode handling of :func:`jrl.ops.returns.lambda_returns`::

    G_t = r_t + gamma * (1 - terminated_t) * [(1 - lambda) * max_a Q(s'_t, a) + lambda * next_t]
    next_t = max_a Q(s'_t, a)  if done_t or t = T - 1,  else G_{t+1}

where ``s'_t`` is ``Transition.next_observation`` (the episode's final
observation where it ended), so a truncated step bootstraps from its true last
state and the lambda chain never crosses into the next episode. The Q-values
for the targets are computed **once per rollout, with the parameters from
before the update** (as in the paper): the targets stay fixed during the
epochs, which plays the part of a target network for one iteration. The max
is masked for envs with action masks.

Exploration: epsilon decays linearly from ``epsilon_start`` to
``epsilon_end`` over the first ``exploration_fraction`` of the iterations
(the agent counts its ``learn`` calls).

Action masks: an env whose observation is ``{"observation": x,
"action_mask": bool[A]}`` (see :func:`jrl.core.types.split_action_mask`) gets
masked epsilon-greedy actions (the random branch included) and a masked max
in the targets; the network sees only ``x``.
"""

from __future__ import annotations

import dataclasses
from typing import Callable, ClassVar

import jax
import jax.numpy as jnp
from flax import struct

from jrl.core import parallel, spaces
from jrl.core.types import PyTree, Transition, split_action_mask
from jrl.ops import returns
from jrl.ops.action_distributions import epsilon_greedy, masked_argmax, masked_max
from jrl.parts import networks
from jrl.parts.agent import Agent, EnvSpec, Learned
from jrl.parts.agent_config import (
    MINATAR_ENVS,
    MINATAR_NETWORK,
    UNIT_INTERVAL,
    Check,
    EpsilonGreedyConfig,
    LearningRate,
    Range,
    RolloutConfig,
    presets_for,
)
from jrl.parts.learner import apply_gradients, epsilon_schedule, minibatch_epochs, scheduled_lr
from jrl.parts.optim import grad_norm_metric, make_optimizer
from jrl.run.builders import Built, training_env
from jrl.run.loops import on_policy

__all__ = ["PQNConfig", "PQNHParams", "PQNState", "build", "make_pqn", "q_lambda_targets"]


@struct.dataclass
class PQNHParams:
    """Hyperparameters that may be vmapped (swept) without recompiling; all [] float32."""

    learning_rate: jax.Array
    gamma: jax.Array
    q_lambda: jax.Array
    epsilon_start: jax.Array
    epsilon_end: jax.Array
    exploration_fraction: jax.Array
    reward_scale: jax.Array


@struct.dataclass
class PQNState:
    params: PyTree  # Q-network parameters
    opt_state: PyTree  # optax state (clipping + Adam/RAdam, without the learning rate)
    hparams: PQNHParams
    num_updates: jax.Array  # [] int32 calls to learn so far (drives epsilon and lr annealing)


MINATAR = {
    **MINATAR_NETWORK,
    "total_steps": 10_000_000,
    "num_envs": 128,
    "num_steps": 32,
    "num_epochs": 2,
    "num_minibatches": 32,
    "learning_rate": 5e-4,
    "q_lambda": 0.65,
    "reward_scale": 1.0,
    "epsilon_end": 0.05,
    "exploration_fraction": 0.1,
}
"""PQN's MinAtar preset: the paper authors' MinAtar configuration (purejaxql's
``pqn_minatar.yaml``: 1e7 steps, 128 envs x 32 steps, 2 epochs of 32 minibatches, LayerNorm,
lr 5e-4 annealed, max grad norm 10, lambda 0.65, epsilon 1 -> 0.05 over 10%) on the MinAtar
network, rewards unscaled."""


@dataclasses.dataclass(frozen=True)
class PQNConfig(EpsilonGreedyConfig, RolloutConfig):
    """PQN settings; the defaults solve CartPole-v1 in about 1.3e5 steps.

    Started from the paper authors' CartPole configuration (purejaxql's ``pqn_cartpole.yaml``:
    32 envs x 64 steps, 4 epochs x 16 minibatches, 2 x 256 LayerNorm ReLU MLP, RAdam, lr 1e-4
    annealed, max grad norm 10, rewards x 0.1, gamma 0.99, lambda 0.95, epsilon 1 -> 0.2 over 20%,
    5e5 steps) and retuned for a small budget: 16 envs (twice the updates per env step), lr 1e-3,
    2 x 128 hidden units, epsilon_end 0.01 (training returns are measured with exploration on)."""

    HPARAMS: ClassVar[type] = PQNHParams
    ACTION_SPACES: ClassVar[tuple[type, ...]] = (spaces.Discrete,)
    PRESETS: ClassVar[dict[str, dict]] = {
        "CartPole-v1": {},
        **presets_for(MINATAR_ENVS, MINATAR),
    }
    OPTIMIZERS: ClassVar[tuple[str, ...]] = ("radam", "adam")
    RANGES: ClassVar[dict[str, Range]] = {"q_lambda": UNIT_INTERVAL}

    total_steps: int = 200_000
    num_envs: int = 16
    num_steps: int = 64
    num_minibatches: int = 16
    learning_rate: LearningRate = 1e-3
    optimizer: str = "radam"
    max_grad_norm: float = 10.0
    hidden_sizes: tuple[int, ...] = (128, 128)
    activation: str = "relu"
    q_lambda: float = 0.95
    """Q(lambda) trace parameter in [0, 1]; 0 gives one-step Q-learning targets (sweepable)."""
    reward_scale: float = 0.1
    """Rewards are multiplied by this in the targets (sweepable)."""
    layer_norm: bool = True
    """LayerNorm after every hidden layer (what makes PQN stable without a target network)."""

    def checks(self) -> list[Check]:
        return super().checks() + [
            (self.reward_scale > 0, f"reward_scale must be positive, got {self.reward_scale}"),
        ]


def q_lambda_targets(
    q_next: jax.Array,  # [T, N, A] Q(s'_t, .) on the true successors (next_observation)
    rewards: jax.Array,  # [T, N]
    terminated: jax.Array,  # [T, N] bool
    truncated: jax.Array,  # [T, N] bool
    gamma,
    lambda_,
    next_mask: jax.Array | None = None,  # [T, N, A] bool valid actions in s'_t, or None
) -> jax.Array:
    """Peng's Q(lambda) targets ``[T, N]`` (see the module docstring for the equation):
    :func:`jrl.ops.returns.lambda_returns` with ``bootstrap_t = max_a Q(s'_t, a)`` over the
    valid actions. No gradient is stopped."""
    return returns.lambda_returns(
        rewards, masked_max(q_next, next_mask), terminated, truncated, gamma, lambda_
    )


@struct.dataclass
class _Samples:
    """Rollout items with their targets, ``[T, N, ...]`` or flat ``[M, ...]``."""

    observation: PyTree  # network input (mask split off)
    action: jax.Array  # int32
    target: jax.Array  # Q(lambda) return


def _masked_q_values(network: networks.QNetwork) -> Callable:
    """``q_values(params, obs) -> (q [..., A], mask [..., A] or None)`` of possibly masked
    observations."""

    def q_values(params, obs):
        x, mask = split_action_mask(obs)
        return network.apply(params, x), mask

    return q_values


def _pqn_init(network: networks.QNetwork, tx, hparams: PQNHParams) -> Callable:
    """PQN's ``init(key, spec) -> PQNState``."""

    def init(key, spec: EnvSpec) -> PQNState:
        x, _ = split_action_mask(networks.example_observation(spec.observation_space))
        params = network.init(key, x)
        return PQNState(params, tx.init(params), hparams, jnp.zeros((), jnp.int32))

    return init


def _acting(q_values: Callable, epsilon: Callable) -> tuple[Callable, Callable]:
    """PQN's ``act``, epsilon-greedy over the valid actions of ``[N]`` observations (one draw
    per env), and its greedy ``policy``."""

    def act(state: PQNState, obs, key):
        q, mask = q_values(state.params, obs)
        return epsilon_greedy(parallel.local_keys(key, q.shape[0]), q, epsilon(state), mask), {}

    def policy(params, obs, key):
        del key
        return masked_argmax(*q_values(params, obs))

    return act, policy


def make_pqn(network: networks.QNetwork, config: PQNConfig) -> Agent:
    """The PQN agent; ``learn`` takes a time-major rollout ``Transition [T, N]``."""
    # optax's default eps, which the preset was tuned with
    tx = make_optimizer(config.optimizer, config.max_grad_norm, eps=1e-8)
    hparams, total_updates = config.hparams(), max(config.num_iterations, 1)
    q_values, init = _masked_q_values(network), _pqn_init(network, tx, hparams)

    def epsilon(state: PQNState):
        return epsilon_schedule(state.hparams, state.num_updates, total_updates)

    act, policy = _acting(q_values, epsilon)

    def loss_fn(params, mb: _Samples):
        q = network.apply(params, mb.observation)
        q_taken = jnp.take_along_axis(q, mb.action[:, None], axis=-1).reshape(mb.action.shape)
        return 0.5 * jnp.mean(jnp.square(q_taken - mb.target)), q_taken

    def sgd_step(state: PQNState, mb: _Samples, lr):
        (loss, q), grads = jax.value_and_grad(loss_fn, has_aux=True)(state.params, mb)
        grads = parallel.pmean(grads)  # equal sample counts per device: the global mean gradient
        params, opt_state = apply_gradients(tx, state.params, state.opt_state, grads, lr)
        metrics = {
            "train/loss": loss,
            "train/q": q.mean(),
            **grad_norm_metric(grads, config.max_grad_norm),
        }
        return state.replace(params=params, opt_state=opt_state), metrics

    def learn(state: PQNState, batch: Transition, key) -> Learned:
        hp = state.hparams
        # the targets' Q-values: once, with the parameters from before the update
        q_next, next_mask = q_values(state.params, batch.next_observation)
        target = q_lambda_targets(
            q_next,
            batch.reward * hp.reward_scale,
            batch.terminated,
            batch.truncated,
            hp.gamma,
            hp.q_lambda,
            next_mask,
        )
        x, _ = split_action_mask(batch.observation)
        data = _Samples(x, batch.action.astype(jnp.int32), jax.lax.stop_gradient(target))
        lr = scheduled_lr(hp.learning_rate, state.num_updates, total_updates, config.anneal_lr)
        step = lambda s, mb: sgd_step(s, mb, lr)
        new_state, metrics = minibatch_epochs(step, state, data, key, config)
        metrics.update(
            {
                "train/learning_rate": lr,
                "train/epsilon": epsilon(state),
                "train/q_target": parallel.pmean(target.mean()),
            }
        )
        return Learned(new_state.replace(num_updates=state.num_updates + 1), metrics)

    return Agent(init=init, act=act, learn=learn, policy=policy)


def build(config: PQNConfig, env, env_params, num_devices: int = 1) -> Built:
    """Assembles PQN on ``env`` (a jrl env with a Discrete action space, optionally
    action-masked)."""
    obs_space, num_actions = EnvSpec.from_env(env, env_params).value_based("PQN")
    env, spec = training_env(config, env, env_params, num_devices)
    network = networks.QNetwork(
        num_actions,
        tuple(config.hidden_sizes),
        config.activation,
        max(len(obs_space.shape), 1),
        layer_norm=config.layer_norm,
        torso=config.torso,
    )
    agent = make_pqn(network, config)
    algorithm = on_policy(agent, env, config.num_steps, env_params, num_devices)
    return Built(algorithm, agent, env, env_params, spec, network)
