"""Off-policy continuous control: what SAC, TD3 and DDPG share.

- :class:`ActionScale`: actions in the env's Box bounds and in ``[-1, 1]``. The
  actors act in ``[-1, 1]`` (a tanh output); :meth:`ActionScale.to_env` maps their
  actions onto the bounds in ``act`` and ``policy``, and :meth:`ActionScale.to_unit`
  maps a replayed action back before the critics see it. This is the one place
  where actions are rescaled, so the replay buffer, evaluation, rendering and
  exported policies all hold the env's own actions;
- :func:`polyak`: ``target <- tau * online + (1 - tau) * target``;
- :func:`critic_target`: ``r + discount * (min_n Q_target_n(s', a') - entropy_term)``,
  the clipped (ensemble-minimum) bootstrap of TD3 and SAC (DDPG: one critic);
- :func:`critic_loss`: the squared TD error of every critic of the ensemble;
- :func:`critic_subset`: a random subset of the ensemble for the bootstrap's minimum
  (REDQ's in-target minimisation);
- :func:`ou_step`: one step of Ornstein-Uhlenbeck exploration noise (DDPG's original,
  temporally correlated noise; an option of TD3 and DDPG);
- :func:`item_normals`: standard normals drawn per env or per replayed item from
  :func:`jrl.core.parallel.local_keys`, so a run on D devices draws what one device does;
- :func:`init_networks`: the actor's and critics' parameters;
- :class:`ContinuousConfig`: the config base (replay, critic ensemble, Polyak rate);
- :func:`make_deterministic_losses` and :func:`make_deterministic`: the losses and the agent
  of TD3 and DDPG (a deterministic actor,
  Gaussian exploration noise, target policy smoothing, delayed actor and target
  updates; DDPG is the case of one critic, no smoothing and no delay);
- :func:`build_continuous` and :func:`build_replay_agent`: the assembly on
  :func:`jrl.run.loops.off_policy` (the second, without an action scale, also builds
  discrete SAC).

SAC's agent (a squashed-Gaussian actor and the entropy temperature) is in
``agents/continuous/sac.py``, discrete SAC's in ``agents/continuous/sac_discrete.py``; they
use the same pieces.
"""

from __future__ import annotations

import dataclasses
from typing import ClassVar

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from jrl.core import parallel, spaces
from jrl.core.types import PyTree
from jrl.parts import buffers, networks
from jrl.parts.agent import Agent, EnvSpec, Learned, Recurrent
from jrl.parts.agent_config import Check, LearningRate, Range, ReplayConfig, envs_per_device
from jrl.parts.learner import apply_gradients, scheduled_lr
from jrl.parts.optim import grad_norm_metric, make_optimizer
from jrl.run.builders import Built, training_env
from jrl.run.loops import ReplaySchedule, off_policy

__all__ = [
    "build_continuous",
    "build_replay_agent",
    "ActionScale",
    "ContinuousConfig",
    "DeterministicConfig",
    "DeterministicHParams",
    "DeterministicState",
    "critic_loss",
    "critic_subset",
    "critic_target",
    "item_normals",
    "init_networks",
    "make_deterministic",
    "make_deterministic_losses",
    "ou_step",
    "polyak",
    "subset_key",
    "uniform_warmup",
]


@dataclasses.dataclass(frozen=True)
class ActionScale:
    """The affine map between ``[-1, 1]^A`` and a bounded Box ``[low, high]`` (1-D actions)."""

    low: np.ndarray  # [A] float32
    high: np.ndarray  # [A] float32

    @classmethod
    def from_space(cls, space: spaces.Space, agent: str = "this agent") -> "ActionScale":
        """The scale of a Box action space; ``ValueError`` for any other space, for a Box that
        is not 1-D, and for one with an infinite bound (the actor's tanh cannot reach it)."""
        if not isinstance(space, spaces.Box):
            raise ValueError(f"{agent} needs a Box action space, got {space!r}")
        if len(space.shape) != 1:
            raise ValueError(f"{agent} needs 1-D Box actions, got shape {space.shape}")
        if not space.bounded:
            raise ValueError(
                f"{agent} squashes its actions into the action space's bounds, which must be "
                f"finite; got {space!r} (wrap the env in jrl.core.wrappers.ClipAction over a "
                "bounded Box, or give the env finite action bounds)"
            )
        return cls(space.low.astype(np.float32), space.high.astype(np.float32))

    @property
    def dim(self) -> int:
        return int(self.low.shape[0])

    def to_env(self, unit: jax.Array) -> jax.Array:
        """``[..., A]`` actions in ``[-1, 1]`` -> the env's bounds: ``low + (u + 1) (high - low)
        / 2``."""
        return self.low + (unit + 1.0) * 0.5 * (self.high - self.low)

    def to_unit(self, action: jax.Array) -> jax.Array:
        """The inverse of :meth:`to_env`: ``2 (a - low) / (high - low) - 1``."""
        return 2.0 * (action - self.low) / (self.high - self.low) - 1.0


def polyak(target: PyTree, online: PyTree, tau) -> PyTree:
    """``tau * online + (1 - tau) * target``, leaf by leaf (``tau`` may be traced)."""
    return jax.tree.map(lambda t, p: tau * p + (1.0 - tau) * t, target, online)


def critic_target(reward, discount, next_q, entropy_term=0.0) -> jax.Array:
    """``[B]`` bootstrap targets ``reward + discount * (min_n next_q[n] - entropy_term)``.

    ``next_q [N, B]``: the N target critics at the next observation and the next action;
    ``discount [B]`` is ``gamma^m`` (0 after a termination, so a truncated episode
    bootstraps from its final observation); ``entropy_term [B]``: SAC's ``alpha * log
    pi(a' | s')`` (0 for TD3 and DDPG)."""
    return reward + discount * (jnp.min(next_q, axis=0) - entropy_term)


def critic_loss(q, target) -> jax.Array:
    """``sum_n mean_b 0.5 (q[n, b] - target[b])^2``: each critic of the ensemble ``q [N, B]``
    regresses on the same target (which takes no gradient)."""
    td = q - jax.lax.stop_gradient(target)[None]
    return jnp.sum(jnp.mean(0.5 * jnp.square(td), axis=-1))


def critic_subset(next_q, key, size: int) -> jax.Array:
    """``[size, B]``: ``size`` of the N rows of ``next_q [N, B]``, drawn without replacement
    from ``key`` (one draw for the whole batch, as REDQ draws its subset once per update);
    ``size`` of 0 or N returns ``next_q`` as it is. The same ``key`` on every device draws the
    same subset, so a sharded update takes the minimum over the critics one device would."""
    num = next_q.shape[0]
    if size in (0, num):
        return next_q
    return next_q[jax.random.choice(key, num, (size,), replace=False)]


def subset_key(key, size: int):
    """``(key, subset_key)``: ``key`` split in two when the bootstrap takes a subset of the
    critics (``size`` > 0; the first half stays the caller's), else ``(key, None)``, so a run
    without subsets draws what it always drew."""
    return tuple(jax.random.split(key)) if size else (key, None)


def ou_step(x, normals, theta, sigma, dt) -> jax.Array:
    """One Euler step of the Ornstein-Uhlenbeck process ``dx = -theta x dt + sigma dW`` (mean
    0): ``x - theta x dt + sigma sqrt(dt) normals`` (``x``, ``normals`` ``[N, A]``). Its
    stationary standard deviation is about ``sigma / sqrt(2 theta)``."""
    return x - theta * x * dt + sigma * jnp.sqrt(dt) * normals


def item_normals(key, num: int, dim: int) -> jax.Array:
    """``[num, dim]`` standard normals, row i from this device's i-th key of
    :func:`jrl.core.parallel.local_keys` (rows are envs in ``act``, replayed items in ``learn``)."""
    return jax.vmap(lambda k: jax.random.normal(k, (dim,)))(parallel.local_keys(key, num))


def uniform_warmup(state, unit_action, key) -> jax.Array:
    """``unit_action [N, A]`` once the agent has made an update, uniform actions in
    ``[-1, 1]`` (one draw per env) before: the first ``learning_starts`` steps explore the
    whole action space, whatever the initial policy."""
    n, dim = unit_action.shape
    keys = parallel.local_keys(key, n)
    uniform = jax.vmap(lambda k: jax.random.uniform(k, (dim,), minval=-1.0, maxval=1.0))(keys)
    return jnp.where(state.num_updates > 0, unit_action, uniform)


@dataclasses.dataclass(frozen=True)
class ContinuousConfig(ReplayConfig):
    """Off-policy continuous control: one env step per iteration, one update of 256 per step
    (an update-to-data ratio of ``updates_per_iteration / (num_envs * steps_per_iteration)``),
    a replay of 1e6, Adam at 3e-4 for every network, ReLU 256-256 actor and critics."""

    ACTION_SPACES: ClassVar[tuple[type, ...]] = (spaces.Box,)
    RANGES: ClassVar[dict[str, Range]] = {"tau": Range(0.0, 1.0, low_open=True)}
    Q_OF_ACTION: ClassVar[bool] = True
    """The critics take the action as an input (Q(obs, action): an MLP torso only); discrete
    SAC's critics output every action's value and take any torso."""

    total_steps: int = 1_000_000
    num_envs: int = 1
    learning_rate: LearningRate = 3e-4
    anneal_lr: bool = False
    max_grad_norm: float = 0.0
    hidden_sizes: tuple[int, ...] = (256, 256)
    activation: str = "relu"
    steps_per_iteration: int = 1
    updates_per_iteration: int = 1
    batch_size: int = 256
    buffer_size: int = 1_000_000
    learning_starts: int = 5_000
    tau: float = 0.005
    """Polyak rate of the target networks: target <- tau * online + (1 - tau) * target
    (sweepable)."""
    num_critics: int = 2
    """Q-networks in the critic ensemble (one vmapped network); the bootstrap takes their
    minimum (2: clipped double Q; more: REDQ-style ensembles)."""
    target_critics: int = 0
    """Critics in the bootstrap's minimum: 0 takes all num_critics; M < num_critics draws M of
    them at random for every update (REDQ: 10 critics, M = 2)."""

    @property
    def target_subset(self) -> int:
        """M when the bootstrap's minimum is over M critics drawn at random, 0 when it is over
        all of them (``target_critics`` 0 or ``num_critics``)."""
        return self.target_critics if self.target_critics < self.num_critics else 0

    @property
    def num_updates(self) -> int:
        """Gradient updates in a run: ``updates_per_iteration`` in every iteration whose
        env-step count has reached ``learning_starts``."""
        first = max(-(-self.learning_starts // self.env_steps_per_iteration), 1)
        return max(self.num_iterations - first + 1, 0) * self.updates_per_iteration

    def checks(self) -> list[Check]:
        return super().checks() + [
            (self.num_critics >= 1, f"num_critics must be >= 1, got {self.num_critics}"),
            (
                0 <= self.target_critics <= self.num_critics,
                f"target_critics must lie in [0, num_critics = {self.num_critics}] "
                f"(0: all critics), got {self.target_critics}",
            ),
            (
                self.torso in ("mlp", "layernorm_mlp") or not self.Q_OF_ACTION,
                f"torso must be 'mlp' or 'layernorm_mlp' for a Q(obs, action) network, "
                f"got {self.torso!r}",
            ),
        ]

    def env_checks(self, action_space, agent: str = "this agent") -> list[Check]:
        try:
            ActionScale.from_space(action_space, agent)
        except ValueError as e:
            return [(False, str(e))]
        return []

    def critic(self, obs_ndim: int) -> networks.QEnsemble:
        """The critic ensemble this config asks for."""
        return networks.QEnsemble(
            self.num_critics,
            tuple(self.hidden_sizes),
            self.activation,
            obs_ndim,
            layer_norm=self.torso == "layernorm_mlp",
        )


# ---------------------------------------------------------------------------
# TD3 and DDPG
# ---------------------------------------------------------------------------


@struct.dataclass
class DeterministicHParams:
    """TD3's and DDPG's sweepable hyperparameters; all [] float32."""

    learning_rate: jax.Array
    gamma: jax.Array
    tau: jax.Array
    exploration_noise: jax.Array
    policy_noise: jax.Array
    noise_clip: jax.Array


@struct.dataclass
class DeterministicState:
    params: PyTree  # {"actor": ..., "critic": ...} (the critic ensemble's leaves have [N, ...])
    target_params: PyTree  # the same, Polyak-averaged
    opt_state: PyTree  # {"actor": ..., "critic": ...}
    hparams: DeterministicHParams
    num_updates: jax.Array  # [] int32 critic updates so far


@dataclasses.dataclass(frozen=True)
class DeterministicConfig(ContinuousConfig):
    """A deterministic actor with Gaussian exploration noise (TD3's and DDPG's fields)."""

    HPARAMS: ClassVar[type] = DeterministicHParams

    learning_rate: LearningRate = 1e-3
    exploration_noise: float = 0.1
    """Std of the Gaussian noise added to the actor's action in [-1, 1] while collecting
    (sweepable)."""
    policy_noise: float = 0.2
    """Std of the target policy smoothing noise in [-1, 1] (0: none) (sweepable)."""
    noise_clip: float = 0.5
    """The smoothing noise is clipped to [-noise_clip, noise_clip] (sweepable)."""
    policy_delay: int = 2
    """Critic updates per actor update; the targets move with the actor."""
    noise: str = "gaussian"
    """Exploration noise: "gaussian" (independent draws, std exploration_noise) or "ou"
    (Ornstein-Uhlenbeck, sigma exploration_noise, per env, restarted at 0 with every
    episode)."""
    ou_theta: float = 0.15
    """The OU noise's rate of return to 0."""
    ou_dt: float = 1e-2
    """The OU noise's time step."""

    def checks(self) -> list[Check]:
        return super().checks() + [
            (
                min(self.exploration_noise, self.policy_noise, self.noise_clip) >= 0,
                "exploration_noise, policy_noise and noise_clip must be >= 0, got "
                f"{self.exploration_noise}/{self.policy_noise}/{self.noise_clip}",
            ),
            (self.policy_delay >= 1, f"policy_delay must be >= 1, got {self.policy_delay}"),
            (
                self.noise in ("gaussian", "ou"),
                f"noise must be 'gaussian' or 'ou', got {self.noise!r}",
            ),
            (
                self.ou_theta >= 0 and self.ou_dt > 0,
                f"ou_theta must be >= 0 and ou_dt > 0, got {self.ou_theta}/{self.ou_dt}",
            ),
        ]

    def make_agent(self, scale: ActionScale, obs_ndim: int) -> tuple[Agent, tuple]:
        """``(agent, (actor, critic ensemble))`` (what
        :func:`jrl.agents.continuous.common.build_continuous`
        asks ``make_agent`` for)."""
        actor = networks.DeterministicActor(
            scale.dim,
            tuple(self.hidden_sizes),
            self.activation,
            obs_ndim,
            self.torso,
        )
        critic = self.critic(obs_ndim)
        return make_deterministic(actor, critic, scale, self), (actor, critic)


def make_deterministic_losses(actor, critic, scale: ActionScale, target_critics: int = 0):
    """``(critic_loss_fn, actor_loss_fn)`` of TD3 and DDPG.

    ``critic_loss_fn(critic_params, target_params, batch, key, hp) -> (loss, q [N, B])``:
    the critics' squared error to ``r + discount * min_n Q'_n(s', a')``, ``a'`` the target
    actor's action smoothed by clipped noise (one draw per item), the minimum over
    ``target_critics`` critics drawn at random (:func:`critic_subset`; 0: all); ``actor_loss_fn(
    actor_params, critic_params, obs) -> -mean Q_0(s, mu(s))``."""

    def smoothed_target_action(target_actor, next_obs, key, hp):
        mu = actor.apply(target_actor, next_obs)
        noise = hp.policy_noise * item_normals(key, mu.shape[0], scale.dim)
        return jnp.clip(mu + jnp.clip(noise, -hp.noise_clip, hp.noise_clip), -1.0, 1.0)

    def critic_loss_fn(critic_params, target_params, batch, key, hp):
        next_obs = batch.next_observation
        key, k_subset = subset_key(key, target_critics)
        next_action = smoothed_target_action(target_params["actor"], next_obs, key, hp)
        next_q = critic.apply(target_params["critic"], next_obs, next_action)
        next_q = critic_subset(next_q, k_subset, target_critics)
        target = critic_target(batch.reward, batch.discount, next_q)
        q = critic.apply(critic_params, batch.observation, scale.to_unit(batch.action))
        return critic_loss(q, target), q

    def actor_loss_fn(actor_params, critic_params, obs):
        q = critic.apply(critic_params, obs, actor.apply(actor_params, obs))
        return -jnp.mean(q[0])

    return critic_loss_fn, actor_loss_fn


def init_networks(actor, critic, scale: ActionScale, spec: EnvSpec, key) -> dict:
    """``{"actor": ..., "critic": ...}`` parameters for an env's observation space and
    ``scale.dim`` actions (the actor from the first half of ``key``, the critics from the
    second)."""
    k_actor, k_critic = jax.random.split(key)
    obs = networks.example_observation(spec.observation_space)
    return {
        "actor": actor.init(k_actor, obs),
        "critic": critic.init(k_critic, obs, jnp.zeros((1, scale.dim))),
    }


def _deterministic_acting(actor, scale: ActionScale, theta: float, dt: float) -> tuple:
    """``(act, ou_initial, ou_act, policy)`` of :func:`make_deterministic`: Gaussian
    exploration, the OU noise's initial state and acting with it, and the greedy policy."""

    def explore(state, obs, noise, k_warm):
        unit = jnp.clip(actor.apply(state.params["actor"], obs) + noise, -1.0, 1.0)
        return scale.to_env(uniform_warmup(state, unit, k_warm))

    def act(state: DeterministicState, obs, key):
        k_noise, k_warm = jax.random.split(key)
        noise = item_normals(k_noise, jax.tree.leaves(obs)[0].shape[0], scale.dim)
        return explore(state, obs, state.hparams.exploration_noise * noise, k_warm), {}

    def ou_initial(num_envs: int):
        return jnp.zeros((num_envs, scale.dim), jnp.float32)

    def ou_act(state: DeterministicState, noise, obs, key):
        k_noise, k_warm = jax.random.split(key)
        normals = item_normals(k_noise, noise.shape[0], scale.dim)
        noise = ou_step(noise, normals, theta, state.hparams.exploration_noise, dt)
        return explore(state, obs, noise, k_warm), {}, noise

    def policy(params, obs, key):
        del key
        return scale.to_env(actor.apply(params["actor"], obs))

    return act, ou_initial, ou_act, policy


def _actor_update(actor_loss_fn, tx) -> tuple:
    """``(actor_step, skip_actor)``, the branches of :func:`make_deterministic`'s delayed actor
    update: ``(state, params, opt_state, obs, lr) -> (params, opt_state, target_params,
    actor_loss)``, with the actor's gradient step and the targets' Polyak move, or neither."""

    def actor_step(state, params, opt_state, obs, lr):
        loss, grads = jax.value_and_grad(actor_loss_fn)(params["actor"], params["critic"], obs)
        grads = parallel.pmean(grads)
        new_actor, opt_actor = apply_gradients(tx, params["actor"], opt_state["actor"], grads, lr)
        params = {**params, "actor": new_actor}
        target = polyak(state.target_params, params, state.hparams.tau)
        return params, {**opt_state, "actor": opt_actor}, target, loss

    def skip_actor(state, params, opt_state, obs, lr):
        return params, opt_state, state.target_params, jnp.zeros((), jnp.float32)

    return actor_step, skip_actor


def make_deterministic(actor, critic, scale: ActionScale, config: DeterministicConfig) -> Agent:
    """TD3 (Fujimoto et al., 2018) and DDPG (Lillicrap et al., 2016) on
    :func:`jrl.run.loops.off_policy`.

    ``act``: ``mu(s) + exploration_noise * N(0, 1)`` clipped to ``[-1, 1]`` and mapped to
    the env's bounds (uniform actions before the first update); with ``config.noise="ou"``
    the noise is an Ornstein-Uhlenbeck process per env (:func:`ou_step`), the agent's
    acting state (``recurrent.act``), and the greedy policy stays memoryless. ``learn``: the critics
    regress on ``r + discount * min_n Q'_n(s', a')`` with ``a' = clip(mu'(s') +
    clip(policy_noise * N(0, 1), -noise_clip, noise_clip), -1, 1)``; every
    ``config.policy_delay`` critic updates the actor ascends ``Q_0(s, mu(s))`` and both
    targets move by Polyak averaging."""
    hparams, total = config.hparams(), max(config.num_updates, 1)
    tx = make_optimizer("adam", config.max_grad_norm)
    delay = int(config.policy_delay)
    theta, dt = float(config.ou_theta), float(config.ou_dt)
    critic_loss_fn, actor_loss_fn = make_deterministic_losses(
        actor, critic, scale, config.target_subset
    )

    def init(key, spec: EnvSpec) -> DeterministicState:
        params = init_networks(actor, critic, scale, spec, key)
        opt = {k: tx.init(v) for k, v in params.items()}
        return DeterministicState(params, params, opt, hparams, jnp.zeros((), jnp.int32))

    act, ou_initial, ou_act, policy = _deterministic_acting(actor, scale, theta, dt)
    actor_step, skip_actor = _actor_update(actor_loss_fn, tx)

    def learn(state: DeterministicState, sample, key) -> Learned:
        hp, batch = state.hparams, sample.items
        lr = scheduled_lr(hp.learning_rate, state.num_updates, total, config.anneal_lr)
        (loss, q), grads = jax.value_and_grad(critic_loss_fn, has_aux=True)(
            state.params["critic"], state.target_params, batch, key, hp
        )
        grads = parallel.pmean(grads)
        new_critic, opt_critic = apply_gradients(
            tx, state.params["critic"], state.opt_state["critic"], grads, lr
        )
        params = {**state.params, "critic": new_critic}
        opt_state = {**state.opt_state, "critic": opt_critic}
        num_updates = state.num_updates + 1
        due = parallel.all_runs(num_updates % delay == 0)  # lockstep counters: a real branch
        params, opt_state, target, actor_loss = jax.lax.cond(
            due, actor_step, skip_actor, state, params, opt_state, batch.observation, lr
        )
        metrics = parallel.pmean(
            {"train/critic_loss": loss, "train/actor_loss": actor_loss, "train/q": q.mean()}
        )
        metrics = {**metrics, **grad_norm_metric(grads, config.max_grad_norm)}
        new = DeterministicState(params, target, opt_state, hp, num_updates)
        return Learned(new, metrics)

    recurrent = Recurrent(ou_initial, ou_act) if config.noise == "ou" else None
    return Agent(init=init, act=act, learn=learn, policy=policy, recurrent=recurrent)


def build_continuous(
    config: ContinuousConfig,
    env,
    env_params,
    num_devices: int = 1,
    agent_name: str = "this agent",
) -> Built:
    """Assembles an off-policy continuous-control agent (SAC, TD3, DDPG) on ``env``, whose
    action space must be a bounded 1-D Box: :func:`build_replay_agent` with the agent from
    ``config.make_agent(ActionScale, obs_ndim) -> (agent, networks)``."""
    config.validate()
    scale = ActionScale.from_space(env.action_space(env_params), agent_name)

    def make_agent(spec: EnvSpec):
        return config.make_agent(scale, max(len(spec.observation_space.shape), 1))

    return build_replay_agent(config, env, env_params, num_devices, agent_name, make_agent)


def build_replay_agent(
    config: ContinuousConfig, env, env_params, num_devices: int, agent_name: str, make_agent
) -> Built:
    """The training env, the agent from ``make_agent(spec) -> (agent, networks)``, a uniform
    replay buffer stratified by env (so D devices sample what one device does) and
    :func:`jrl.run.loops.off_policy` (SAC, TD3, DDPG and discrete SAC)."""
    local_envs = envs_per_device(config.num_envs, num_devices)
    if config.batch_size % config.num_envs or config.buffer_size % config.num_envs:
        raise ValueError(
            f"{agent_name} samples the same number of items from every env: batch_size "
            f"({config.batch_size}) and buffer_size ({config.buffer_size}) must be multiples "
            f"of num_envs ({config.num_envs})"
        )
    env, spec = training_env(config, env, env_params, num_devices)
    agent, network = make_agent(spec)
    buffer = buffers.uniform_buffer(config.buffer_size // num_devices, stratify=local_envs)
    schedule = ReplaySchedule(
        config.steps_per_iteration,
        config.updates_per_iteration,
        config.learning_starts,
        config.batch_size,
    )
    algorithm = off_policy(
        agent, env, buffer, schedule, env_params=env_params, num_devices=num_devices
    )
    return Built(algorithm, agent, env, env_params, spec, network)
