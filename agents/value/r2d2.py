"""R2D2 (Kapturowski et al., 2019): DQN's recurrent form, ``recurrent`` 'lstm' or 'gru' in a
:class:`jrl.agents.value.dqn.DQNConfig` (the ``dqn`` agent builds it from here).

The Q-network is a :class:`jrl.parts.networks.RecurrentQNetwork` and the agent acts from a per-env
core state (:class:`jrl.parts.agent.Recurrent`; the loop resets it where an episode starts and
keeps it in the train state). Each step stores the state it was acted from in its extras;
replay is a :func:`jrl.parts.buffers.trajectory_buffer` of the envs' steps in time order, sampled
as ``sequence_length`` consecutive steps of one env (``batch_size / num_envs`` sequences
from every env), so a sequence's first step holds its stored state. The learner unrolls the
online and the target network over each sequence from that state (back to the initial state
where an episode starts inside it), warms the state up on the first ``burn_in`` steps (no
loss, no gradient there) and fits the rest to ``n_step`` double-Q returns computed inside
the sequence (:func:`sequence_q_targets`).
"""

from __future__ import annotations

from typing import Callable

import jax
import jax.numpy as jnp

from jrl.agents.value.common import (
    DQNState,
    Head,
    acting_epsilon,
    greedy_next_actions,
    update_target,
)
from jrl.core import parallel
from jrl.core.types import PyTree, split_action_mask
from jrl.ops import returns
from jrl.ops.action_distributions import epsilon_greedy, masked_argmax
from jrl.parts import buffers, networks
from jrl.parts.agent import Agent, EnvSpec, Learned, Recurrent
from jrl.parts.agent_config import Check, ReplayConfig
from jrl.parts.learner import apply_gradients, scheduled_lr
from jrl.parts.optim import grad_norm_metric, make_optimizer

__all__ = [
    "make_r2d2",
    "recurrent_checks",
    "q_unroll",
    "recurrent_q_network",
    "sequence_buffer",
    "sequence_loss",
    "sequence_q_targets",
]


def sequence_q_targets(
    q_next_online,
    q_next_target,
    reward,
    terminated,
    truncated,
    gamma,
    n: int,
    double_q: bool = True,
    next_mask=None,
):
    """``[L, B]`` n-step double-Q targets along sequences (time-major):

        G_t = sum_{k<m} gamma^k r_{t+k} + gamma^m (1 - terminated_{t+m-1}) b_{t+m-1},
        b_t = Q_target(s'_t, a*_t),  a*_t = argmax_a Q_online(s'_t, a) (double Q)

    with ``m = min(n, L - t, j - t + 1)``, ``j >= t`` the first step ending an episode
    (:func:`jrl.ops.returns.n_step_returns`): the sum stops at an episode's end and at the
    sequence's. ``q_next_*`` ``[L, B, A]`` are the values of step ``t``'s successor ``s'_t``
    (the final observation where the episode ended) from the state after step ``t``;
    ``reward``, ``terminated``, ``truncated`` ``[L, B]``; ``next_mask`` ``[L, B, A]``."""
    greedy = greedy_next_actions(q_next_online, q_next_target, double_q, next_mask)
    bootstrap = jnp.take_along_axis(q_next_target, greedy[..., None], axis=-1).squeeze(-1)
    return returns.n_step_returns(reward, bootstrap, terminated, truncated, gamma, n)


def q_unroll(network: networks.RecurrentQNetwork, initial: Callable[[int], PyTree]):
    """``unroll(params, state, obs, next_obs, episode_start) -> (q, q_next, state)``: the
    recurrent Q-network replayed over ``obs`` ``[L, B, ...]`` from ``state`` (``[B, ...]`` per
    leaf), the state put back to ``initial(B)`` before every step whose ``episode_start``
    ``[L, B]`` is set. ``q`` ``[L, B, A]`` are the values of ``obs[t]``, ``q_next`` those of
    ``next_obs[t]`` seen from the state after step ``t`` (the same episode's successor, or its
    final observation), ``state`` the state after the last step."""

    def unroll(params, state, obs, next_obs, episode_start):
        apply = lambda method, *a: network.apply(params, *a, method=method)
        feats, next_feats = apply(network.embed, obs), apply(network.embed, next_obs)
        init = initial(episode_start.shape[1])

        def step(h, x):
            feat, next_feat, start = x
            h, out = apply(network.core_step, networks.reset_core_state(h, init, start), feat)
            return h, (out, apply(network.core_step, h, next_feat)[1])

        state, (outs, next_outs) = jax.lax.scan(step, state, (feats, next_feats, episode_start))
        return apply(network.q_values, outs), apply(network.q_values, next_outs), state

    return unroll


def sequence_loss(unroll, head: Head, burn_in: int, n: int, double_q: bool = True):
    """R2D2's loss ``loss(params, target_params, seq, gamma) -> (loss, q_taken)`` on a
    time-major ``NStepTransition`` ``seq`` ``[L, B]`` of one-step transitions whose
    ``extras["core"]`` is the core state each step was acted from (``unroll``:
    :func:`q_unroll`'s function).

    Both networks start from the stored state of step 0 and go back to the initial state
    where an episode starts (after a step with ``terminated | truncated``). The online network
    warms up on steps ``0..burn_in-1`` without gradient; on steps ``burn_in..L-1`` its value of
    the action taken is fitted to :func:`sequence_q_targets` (the target network's values,
    n-step returns within the sequence) by ``head.loss``, averaged over ``B * (L - burn_in)``
    items; ``q_taken`` ``[L - burn_in, B]``."""

    def loss_fn(params, target_params, seq, gamma):
        obs, _ = split_action_mask(seq.observation)
        next_obs, next_mask = split_action_mask(seq.next_observation)
        done = seq.terminated | seq.truncated
        start = jnp.concatenate([jnp.zeros_like(done[:1]), done[:-1]])  # the loop reset there
        stored = jax.tree.map(lambda x: x[0], seq.extras["core"])
        cut = lambda x: x[burn_in:]
        online = stored
        if burn_in:  # warm the state up on the first steps: no gradient, no loss
            warm = jax.tree.map(lambda x: x[:burn_in], (obs, next_obs, start))
            online = unroll(jax.lax.stop_gradient(params), stored, *warm)[2]
        rest = jax.tree.map(cut, (obs, next_obs, start))
        q, q_next_online, _ = unroll(params, online, *rest)
        _, q_next_target, _ = unroll(target_params, stored, obs, next_obs, start)
        target = sequence_q_targets(  # no gradient: target params, an argmax, head.loss
            q_next_online,
            cut(q_next_target),
            cut(seq.reward),
            cut(seq.terminated),
            cut(seq.truncated),
            gamma,
            n,
            double_q,
            None if next_mask is None else cut(next_mask),
        )
        action = cut(seq.action).astype(jnp.int32)
        taken = jnp.take_along_axis(q, action[..., None], axis=-1).squeeze(-1)
        flat = lambda x: x.reshape(-1)
        zeros = jnp.zeros_like(flat(target))  # the n-step return enters as the reward
        per_item, _ = head.loss(flat(taken), zeros, flat(target), zeros)
        return per_item.mean(), taken

    return loss_fn


def make_r2d2(network: networks.RecurrentQNetwork, config: ReplayConfig, head: Head) -> Agent:
    """:func:`jrl.agents.value.dqn.make_dqn` with memory (see the module docstring; ``config``: a
    recurrent :class:`jrl.agents.value.dqn.DQNConfig`): ``learn`` takes a
    :class:`jrl.parts.buffers.Sample` of sequences ``[B, L]`` of one-step ``NStepTransition``s whose
    ``extras["core"]`` is the core state each step was acted from."""
    hparams, total_updates, double_q = config.hparams(), max(config.num_updates, 1), config.double_q
    tx = make_optimizer("adam", config.max_grad_norm, eps=config.adam_eps)
    core, size, burn_in, n = config.recurrent, config.core_size, config.burn_in, config.n_step
    initial = lambda num: networks.initial_core_state(core, size, num)
    loss_fn = sequence_loss(q_unroll(network, initial), head, burn_in, n, double_q)

    def init(key, spec: EnvSpec) -> DQNState:
        obs_space, _ = split_action_mask(spec.observation_space)
        obs = jax.tree.map(lambda x: x[None], networks.example_observation(obs_space))
        params = network.init(key, initial(1), obs)
        return DQNState(params, params, tx.init(params), hparams, jnp.zeros((), jnp.int32))

    epsilon = acting_epsilon(config)

    def act(state: DQNState, core_state, obs, key):
        """Epsilon-greedy on ``[N]`` observations from ``core_state`` (``[N, core_size]`` per
        leaf): ``(action, {"core": core_state}, next core state)``."""
        obs, mask = split_action_mask(obs)
        new_state, q = network.apply(state.params, core_state, obs)
        keys = parallel.local_keys(key, q.shape[0])
        return epsilon_greedy(keys, q, epsilon(state), mask), {"core": core_state}, new_state

    def policy(params, core_state, obs, key):
        del key
        obs, mask = split_action_mask(obs)
        core_state, q = network.apply(params, core_state, obs)
        return masked_argmax(q, mask), core_state

    def learn(state: DQNState, sample: buffers.Sample, key) -> Learned:
        del key
        hp = state.hparams
        seq = jax.tree.map(lambda x: jnp.swapaxes(x, 0, 1), sample.items)  # [L, B, ...]
        (value, q), grads = jax.value_and_grad(loss_fn, has_aux=True)(
            state.params, state.target_params, seq, hp.gamma
        )
        grads = parallel.pmean(grads)
        lr = scheduled_lr(hp.learning_rate, state.num_updates, total_updates, config.anneal_lr)
        params, opt_state = apply_gradients(tx, state.params, state.opt_state, grads, lr)
        num_updates = state.num_updates + 1
        target_params = update_target(
            state.target_params, params, num_updates, config.target_update_interval, hp.tau
        )
        metrics = {
            **parallel.pmean({"train/loss": value, "train/q": q.mean()}),
            **grad_norm_metric(grads, config.max_grad_norm),
            "train/epsilon": epsilon(state),
        }
        return Learned(DQNState(params, target_params, opt_state, hp, num_updates), metrics)

    def memoryless_act(state, obs, key):
        raise TypeError("a recurrent agent acts from a core state: use agent.recurrent.act")

    recurrent = Recurrent(initial, act, policy)
    return Agent(init=init, act=memoryless_act, learn=learn, policy=None, recurrent=recurrent)


def recurrent_q_network(
    config: ReplayConfig, num_actions: int, obs_space
) -> networks.RecurrentQNetwork:
    """The recurrent Q-network a recurrent DQN config asks for."""
    return networks.RecurrentQNetwork(
        num_actions,
        config.recurrent,
        config.core_size,
        tuple(config.hidden_sizes),
        config.activation,
        max(len(obs_space.shape), 1),
        config.dueling,
        torso=config.torso,
    )


def sequence_buffer(config: ReplayConfig, num_devices: int = 1):
    """This device's share of R2D2's replay: time-major steps of this device's envs, sampled as
    sequences of ``sequence_length`` steps, ``batch_size / num_envs`` from every env."""
    local_envs = config.num_envs // num_devices
    steps = config.buffer_size // config.num_envs
    return buffers.trajectory_buffer(steps, local_envs, config.sequence_length, stratify=True)


def recurrent_checks(config: ReplayConfig) -> list[Check]:
    """The recurrent options of a :class:`jrl.agents.value.dqn.DQNConfig`, and with a core what
    recurrent replay (R2D2) needs: a scalar head without noise, uniform replay stratified by env,
    and a full sequence of every env before the first update."""
    steps = config.buffer_size // config.num_envs
    options = [
        (
            config.recurrent in ("none", *networks.CORES),
            f"recurrent must be 'none', 'lstm' or 'gru', got {config.recurrent!r}",
        ),
        (config.core_size > 0, f"core_size must be positive, got {config.core_size}"),
        (
            0 <= config.burn_in < config.sequence_length,
            f"burn_in must lie in [0, sequence_length), got {config.burn_in} with "
            f"sequence_length {config.sequence_length}",
        ),
    ]
    if config.recurrent == "none":
        return options
    return options + [
        (
            config.distribution == "none" and not config.noisy and not config.prioritized,
            "recurrent DQN has a scalar Q head, no noisy layers and uniform replay: set "
            "distribution 'none', noisy and prioritized off",
        ),
        (
            config.batch_size % config.num_envs == 0 and config.buffer_size % config.num_envs == 0,
            f"recurrent DQN samples the same number of sequences from every env: "
            f"batch_size ({config.batch_size}) and buffer_size ({config.buffer_size}) must be "
            f"multiples of num_envs ({config.num_envs})",
        ),
        (
            steps >= config.sequence_length,
            f"buffer_size / num_envs = {steps} steps per env cannot hold a sequence of "
            f"{config.sequence_length}",
        ),
        (
            config.learning_starts >= config.sequence_length * config.num_envs,
            f"learning_starts = {config.learning_starts} starts updates before every env has "
            f"a sequence: it must be at least sequence_length * num_envs = "
            f"{config.sequence_length * config.num_envs}",
        ),
    ]
