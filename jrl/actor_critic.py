"""The on-policy actor-critic agent shared by PPO and A2C.

Everything but the loss is common: acting (sample an action, keep its
log-prob and the critic's value), advantage estimation with GAE
(bootstrapping truncated episodes from their final observation), and the
update (``num_epochs`` passes over the rollout in ``num_minibatches``
shuffled minibatches, global-norm gradient clipping, an optional linearly
annealed learning rate). An algorithm supplies only a :data:`LossFn`.
"""

from __future__ import annotations

import dataclasses
from typing import Annotated, Any, Callable

import flax.linen as nn
import jax
import jax.numpy as jnp
import optax
import tyro
from flax import struct

from jrl import config as cfg
from jrl import buffers, networks, parallel, returns
from jrl.agent import Agent, EnvSpec
from jrl.losses import normalize
from jrl.optim import grad_norm_metric, linear_schedule, make_optimizer
from jrl.types import PRNGKey, PyTree, Transition

__all__ = ["ActorCriticHParams", "ActorCriticState", "Minibatch", "LossFn", "make_actor_critic"]


@struct.dataclass
class ActorCriticHParams:
    """Hyperparameters that may be vmapped (swept) without recompiling; all [] float32."""

    learning_rate: jax.Array
    gamma: jax.Array
    gae_lambda: jax.Array
    clip_eps: jax.Array  # PPO's ratio clip (also the value clip); unused by A2C
    ent_coef: jax.Array
    vf_coef: jax.Array


@struct.dataclass
class ActorCriticState:
    params: PyTree  # network parameters
    opt_state: PyTree  # optax state of the gradient transformation (without the learning rate)
    hparams: ActorCriticHParams
    num_learn_steps: jax.Array  # [] int32 calls to learn so far (drives annealing)


@struct.dataclass
class Minibatch:
    """A flat batch ``[M, ...]`` of rollout samples with their targets."""

    observation: PyTree  # [M, *obs_shape]
    action: jax.Array  # [M, *act_shape]
    old_log_prob: jax.Array  # [M] log-prob under the behaviour policy
    old_value: jax.Array  # [M] critic value at acting time
    advantage: jax.Array  # [M] (normalised if requested) advantage
    target: jax.Array  # [M] value target (GAE return)


LossFn = Callable[
    [Any, Any, jax.Array, Minibatch, ActorCriticHParams], tuple[jax.Array, dict[str, jax.Array]]
]
"""``loss_fn(dist, values, entropy, minibatch, hparams) -> (loss, metrics)``: the
network's distribution and values ``[M]`` on the minibatch are given."""


def make_actor_critic(
    network: nn.Module,
    loss_fn: LossFn,
    hparams: ActorCriticHParams,
    *,
    num_epochs: int,
    num_minibatches: int,
    total_learn_steps: int,
    anneal_lr: bool = True,
    normalize_advantages: bool = True,
    max_grad_norm: float = 0.5,
    optimizer: str = "adam",
) -> Agent:
    """Builds the agent. ``network`` maps observations to ``(distribution, value)``
    and has ``policy`` and ``value`` methods (see :class:`jrl.networks.ActorCritic`)."""
    tx = make_optimizer(optimizer, max_grad_norm)

    def init(key: PRNGKey, spec: EnvSpec) -> ActorCriticState:
        params = network.init(key, networks.example_observation(spec.observation_space))
        return ActorCriticState(params, tx.init(params), hparams, jnp.zeros((), jnp.int32))

    def act(state: ActorCriticState, obs, key: PRNGKey):
        """``obs [N, ...] -> action [N, ...]``; one key per env (see jrl.parallel.local_keys)."""
        num = jax.tree.leaves(obs)[0].shape[0]
        dist, value = network.apply(state.params, obs)  # one batched forward pass
        action = jax.vmap(lambda d, k: d.sample(k))(dist, parallel.local_keys(key, num))
        # log-prob of the stored action by the same function learn uses, so the first ratio is exactly 1
        # (a tanh-normal's exact sample-time log-prob differs from log_prob(action) where tanh saturates)
        return action, {"log_prob": dist.log_prob(action), "value": value}

    def policy(params, obs, key: PRNGKey):
        del key
        return network.apply(params, obs, method=network.policy).mode()

    def loss(params, mb: Minibatch, hp: ActorCriticHParams):
        dist, values = network.apply(params, mb.observation)
        return loss_fn(dist, values, dist.entropy(), mb, hp)

    def sgd_step(state: ActorCriticState, mb: Minibatch, lr):
        if normalize_advantages:  # over the whole minibatch, on every device
            mb = mb.replace(advantage=normalize(mb.advantage))
        (total, metrics), grads = jax.value_and_grad(loss, has_aux=True)(
            state.params, mb, state.hparams
        )
        grads = parallel.pmean(grads)  # equal sample counts per device: the global mean gradient
        updates, opt_state = tx.update(grads, state.opt_state, state.params)
        params = optax.apply_updates(state.params, jax.tree.map(lambda u: -lr * u, updates))
        metrics = {**metrics, "train/loss": total, **grad_norm_metric(grads, max_grad_norm)}
        return state.replace(params=params, opt_state=opt_state), metrics

    def learn(state: ActorCriticState, batch: Transition, key: PRNGKey):
        hp = state.hparams
        bootstrap = network.apply(state.params, batch.next_observation, method=network.value)
        adv, target = returns.gae_advantages(
            batch.reward,
            batch.extras["value"],
            bootstrap,
            batch.terminated,
            batch.truncated,
            hp.gamma,
            hp.gae_lambda,
        )
        data = Minibatch(
            batch.observation,
            batch.action,
            batch.extras["log_prob"],
            batch.extras["value"],
            adv,
            target,
        )
        lr = hp.learning_rate * (
            linear_schedule(state.num_learn_steps, 1.0, 0.0, total_learn_steps)
            if anneal_lr
            else 1.0
        )

        def epoch(st, k):
            return jax.lax.scan(
                lambda s, mb: sgd_step(s, mb, lr),
                st,
                buffers.rollout_minibatches(data, k, num_minibatches),
            )

        state, metrics = jax.lax.scan(epoch, state, jax.random.split(key, num_epochs))
        metrics = parallel.pmean(jax.tree.map(jnp.mean, metrics))
        metrics["train/learning_rate"] = lr
        metrics["train/value_target"] = parallel.pmean(target.mean())
        return state.replace(num_learn_steps=state.num_learn_steps + 1), metrics

    return Agent(init=init, act=act, learn=learn, policy=policy)


# --------------------------------------------------------------------------
# Configuration and assembly shared by the on-policy agents
# --------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class ActorCriticConfig:
    """Settings shared by on-policy actor-critic agents (PPO, A2C)."""

    total_steps: int = 500_000
    """Environment steps to train for, summed over envs (per seed)."""
    num_envs: int = 4
    """Parallel environments per seed."""
    num_steps: int = 128
    """Steps collected from each env per iteration (rollout length T)."""
    num_epochs: int = 4
    """Passes over each rollout."""
    num_minibatches: int = 4
    """Minibatches per pass; num_steps must be divisible by it (each holds num_steps/num_minibatches steps of every env)."""
    learning_rate: Annotated[float, tyro.conf.arg(aliases=("--lr",))] = 2.5e-4
    """Optimizer step size (sweepable)."""
    anneal_lr: bool = True
    """Decay the learning rate linearly to 0 over training."""
    optimizer: str = "adam"
    """'adam' or 'rmsprop'."""
    gamma: float = 0.99
    """Discount factor in [0, 1] (sweepable)."""
    gae_lambda: float = 0.95
    """GAE lambda in [0, 1] (sweepable)."""
    clip_eps: float = 0.2
    """PPO ratio clip (and value clip when clip_value) (sweepable)."""
    ent_coef: float = 0.01
    """Entropy bonus coefficient (sweepable)."""
    vf_coef: float = 0.5
    """Value loss coefficient (sweepable)."""
    max_grad_norm: float = 0.5
    """Global-norm gradient clipping threshold (0: no clipping, and no train/grad_norm metric)."""
    normalize_advantages: bool = True
    """Normalise advantages per minibatch."""
    clip_value: bool = True
    """Clip the value update around the old value (PPO)."""
    hidden_sizes: tuple[int, ...] = (64, 64)
    """Hidden layer widths of the actor and critic MLPs."""
    activation: str = "tanh"
    """Hidden activation: tanh, relu, gelu, silu or elu."""
    continuous: str = "normal"
    """Distribution for Box actions: 'normal' (env clips actions) or 'tanh_normal'."""
    init_log_std: float = 0.0
    """Initial log standard deviation of Gaussian policies."""
    normalize_observations: bool = False
    """Normalise observations by running statistics (NormalizeObservation)."""
    normalize_rewards: bool = False
    """Scale rewards by the running std of the discounted return (NormalizeReward)."""

    @property
    def batch_size(self) -> int:
        """Samples per iteration: num_envs * num_steps."""
        return self.num_envs * self.num_steps

    @property
    def num_iterations(self) -> int:
        """Iterations (collect + learn) in a run: total_steps // batch_size."""
        return self.total_steps // self.batch_size

    def validate(self) -> None:
        """Raises ValueError naming the first inconsistent or out-of-range field."""
        cfg.check(
            cfg.common_checks(self)
            + [
                (self.num_steps > 0, f"num_steps must be positive, got {self.num_steps}"),
                (self.num_epochs > 0, f"num_epochs must be positive, got {self.num_epochs}"),
                (
                    self.num_minibatches > 0,
                    f"num_minibatches must be positive, got {self.num_minibatches}",
                ),
                (
                    self.num_steps % max(self.num_minibatches, 1) == 0,
                    f"num_steps = {self.num_steps} is not divisible by num_minibatches = {self.num_minibatches} "
                    "(each minibatch holds num_steps / num_minibatches steps of every env)",
                ),
                (
                    self.total_steps >= self.batch_size,
                    f"total_steps = {self.total_steps} is less than one iteration (num_envs * num_steps = {self.batch_size})",
                ),
                (
                    0.0 <= self.gae_lambda <= 1.0,
                    f"gae_lambda must lie in [0, 1], got {self.gae_lambda}",
                ),
                (self.clip_eps > 0, f"clip_eps must be positive, got {self.clip_eps}"),
                (self.ent_coef >= 0, f"ent_coef must be >= 0, got {self.ent_coef}"),
                (self.vf_coef >= 0, f"vf_coef must be >= 0, got {self.vf_coef}"),
                (
                    self.continuous in ("normal", "tanh_normal"),
                    f"continuous must be 'normal' or 'tanh_normal', got {self.continuous!r}",
                ),
                (
                    self.optimizer in ("adam", "rmsprop"),
                    f"optimizer must be 'adam' or 'rmsprop', got {self.optimizer!r}",
                ),
            ]
        )

    def hparams(self) -> ActorCriticHParams:
        """The sweepable fields as traced-ready float32 scalars."""
        return cfg.hparams_from(self, ActorCriticHParams)


SWEEPABLE = tuple(f.name for f in dataclasses.fields(ActorCriticHParams))
"""Config fields that can take several values in one compiled program."""
