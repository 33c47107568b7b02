"""AlphaZero: self-play with tree search over the game's rules and a policy-value network.

Silver et al. (2018). Each of ``num_envs`` game slots plays moves chosen by a search
(:func:`jrl.agents.search.mcts.search`, ``mctx`` PUCT or Gumbel MuZero, the env's real step as the
search model) guided by the network; a finished game is replaced by a new one. Every move
records the observation, the search's improved policy and the player to move. After
``num_steps`` moves per slot, the value target of each move is the outcome of its game for
the player who moved (:func:`alphazero_targets`). The last ``replay_rollouts`` rollouts are
kept, and the targets are computed over all of them in the order they were played, so a game
that began in one rollout and ended in a later one gives every one of its moves a target;
only the moves of games still running at the end of the latest rollout get none (until a
later iteration, while they are still replayed). The replay is learned from in
``num_epochs`` passes of env-stratified minibatches: cross-entropy to the search policy
plus ``vf_coef`` times the squared value error (:func:`alphazero_loss`).

The first ``temperature_moves`` moves of each game are sampled from the search's improved
policy (in proportion to the visit counts for PUCT); later moves are its most likely move.
Only two-player turn-based games (:class:`jrl.core.two_player_env.TwoPlayerEnv`) are accepted.
"""

from __future__ import annotations

import dataclasses
from typing import ClassVar

import jax
import jax.numpy as jnp
from flax import struct
from jrl.agents.search.mcts import game_recurrent_fn, search, search_checks

from jrl.core import parallel, spaces
from jrl.core.two_player_env import CURRENT_PLAYER, PLAYER_REWARDS, is_two_player, player_returns
from jrl.core.types import ACTION_MASK, PRNGKey, PyTree, split_action_mask
from jrl.core.wrappers import VmapEnv
from jrl.ops.action_distributions import masked_argmax
from jrl.parts import networks
from jrl.parts.agent import Agent, EnvSpec, Learned
from jrl.parts.agent_config import AgentConfig, Check, LearningRate, envs_per_device
from jrl.parts.learner import apply_gradients, minibatch_epochs, scheduled_lr
from jrl.parts.optim import make_optimizer
from jrl.run.builders import Built
from jrl.run.loops import Algorithm

__all__ = [
    "AlphaZeroConfig",
    "AlphaZeroHParams",
    "Moves",
    "Played",
    "SelfPlayState",
    "alphazero_loss",
    "alphazero_targets",
    "build",
    "replay_targets",
]


@struct.dataclass
class AlphaZeroHParams:
    learning_rate: jax.Array
    vf_coef: jax.Array


@dataclasses.dataclass(frozen=True)
class AlphaZeroConfig(AgentConfig):
    """AlphaZero settings: 64 games x 32 moves per iteration, Gumbel search with 32
    simulations, the first 2 moves of a game uniformly random and the next ones up to the
    10th sampled from the search's policy, replay of the last 4 rollouts learned in 2 passes
    of 16 minibatches, a 128x128 ReLU policy-value network."""

    HPARAMS: ClassVar[type] = AlphaZeroHParams
    ACTION_SPACES: ClassVar[tuple[type, ...]] = (spaces.Discrete,)
    TURN_BASED: ClassVar[bool] = True
    PRESETS: ClassVar[dict[str, dict]] = {
        # 64 simulations: with 32, 3 of 14 seeds (49,152 moves) kept one line they lose as
        # second player against minimax; with 64 none of 10 on 2026-12-01 (BENCHMARKS.md) and
        # 1 of 8 on 2026-12-04 (3 of 100 games lost as second; tests/test_alphazero.py)
        "TicTacToe-v0": {"num_simulations": 64},
        "pgx:tic_tac_toe": {"num_simulations": 64},
        # a board image: one 3x3 conv before the MLP, and Q-values scaled by the outcome's
        # bounds (an untrained value's noise is not stretched to [0, 1]); on 8 seeds of 16
        # smoke-sized iterations these took the win rate against random (64 simulations)
        # from 0.85 to 0.97 (BENCHMARKS.md "AlphaZero on connect four")
        "pgx:connect_four": {
            "num_steps": 64,
            "total_steps": 400_000,
            "torso": "minatar_cnn",
            "q_bounds": (-1.0, 1.0),
        },
        "pgx:othello": {"num_steps": 128, "hidden_sizes": (256, 256), "total_steps": 1_000_000},
        "pgx:go_9x9": {"num_steps": 128, "hidden_sizes": (256, 256), "total_steps": 1_000_000},
    }

    total_steps: int = 65_536
    num_envs: int = 64
    learning_rate: LearningRate = 1e-3
    anneal_lr: bool = False
    gamma: float = 1.0
    max_grad_norm: float = 1.0
    hidden_sizes: tuple[int, ...] = (128, 128)
    activation: str = "relu"

    num_steps: int = 32
    """Moves played in each game slot per iteration (a finished game is replaced)."""
    search: str = "gumbel"
    """Tree search: 'gumbel' (mctx.gumbel_muzero_policy) or 'puct' (mctx.muzero_policy)."""
    num_simulations: int = 32
    """Simulations per search (self-play and evaluation games)."""
    max_num_considered_actions: int = 16
    """Gumbel: moves considered at the root (sequential halving)."""
    value_scale: float = 0.1
    """Gumbel: weight of the searched Q-values against the prior logits in the improved
    policy, (50 + max visits) * value_scale * q with q rescaled to [0, 1] (0.1, mctx's
    default; larger trusts the search more than the prior)."""
    q_bounds: tuple[float, ...] = ()
    """How the search rescales Q-values (:func:`jrl.agents.search.mcts.q_transform`): ``()`` by each
    node's own min and max (mctx's default, the one the tic-tac-toe presets were measured
    with), ``(lo, hi)`` by these fixed bounds of a game's outcome (``(-1.0, 1.0)``: win and
    loss), so that an untrained network's near-equal values do not decide the search."""
    random_opening_moves: int = 2
    """Moves at the start of each self-play game played uniformly at random (the search's
    policy is still the target), so the games cover openings the policy would not choose."""
    dirichlet_alpha: float = 0.3
    """PUCT: Dirichlet noise concentration at the root."""
    dirichlet_fraction: float = 0.25
    """PUCT: weight of the Dirichlet noise in the root prior."""
    temperature_moves: int = 10
    """Moves at the start of each game sampled from the search's policy; later moves are its
    most likely move."""
    replay_rollouts: int = 4
    """Rollouts of self-play kept for learning (the latest included)."""
    num_epochs: int = 2
    """Passes over the replayed moves per iteration."""
    num_minibatches: int = 16
    """Minibatches per pass; num_steps * replay_rollouts must be divisible by it."""
    vf_coef: float = 1.0
    """Weight of the value loss (sweepable)."""

    @property
    def env_steps_per_iteration(self) -> int:
        """Moves one iteration plays: num_envs * num_steps."""
        return self.num_envs * self.num_steps

    def checks(self) -> list[Check]:
        c = self
        return super().checks() + [
            (c.num_steps > 0, f"num_steps must be positive, got {c.num_steps}"),
            *search_checks(c),
            (
                c.temperature_moves >= 0,
                f"temperature_moves must be >= 0, got {c.temperature_moves}",
            ),
            (c.replay_rollouts > 0, f"replay_rollouts must be positive, got {c.replay_rollouts}"),
            (c.num_epochs > 0, f"num_epochs must be positive, got {c.num_epochs}"),
            (c.num_minibatches > 0, f"num_minibatches must be positive, got {c.num_minibatches}"),
            (
                (c.num_steps * c.replay_rollouts) % max(c.num_minibatches, 1) == 0,
                f"num_steps * replay_rollouts = {c.num_steps * c.replay_rollouts} is not "
                f"divisible by num_minibatches = {c.num_minibatches}",
            ),
            (c.vf_coef >= 0, f"vf_coef must be >= 0, got {c.vf_coef}"),
            self._one_iteration("num_envs * num_steps"),
        ]


@struct.dataclass
class AlphaZeroState:
    params: PyTree
    opt_state: PyTree
    hparams: AlphaZeroHParams
    updates: jax.Array  # [] int32 gradient updates done


@struct.dataclass
class Moves:
    """Replayed moves, ``[..., ]`` leading axes (``[K * T, N]`` when learned from)."""

    observation: PyTree  # [..., *obs] masked observation of the player to move
    policy: jax.Array  # [..., A] the search's improved policy (the policy target)
    value: jax.Array  # [...] the game's outcome for the player to move (the value target)
    value_weight: jax.Array  # [...] 1 where the value target is known (game ended), else 0
    weight: jax.Array  # [...] 1 for moves played, 0 for replay slots not yet filled


@struct.dataclass
class Played:
    """Self-play moves as the replay keeps them, ``[K, T, N]`` leading axes (rollout, move,
    game slot); the value targets are computed from them each iteration
    (:func:`replay_targets`)."""

    observation: PyTree  # [K, T, N, *obs] masked observation of the player to move
    policy: jax.Array  # [K, T, N, A] the search's improved policy
    player: jax.Array  # [K, T, N] int32 the player who moved
    rewards: jax.Array  # [K, T, N, 2] the move's reward to each player
    done: jax.Array  # [K, T, N] bool the move ended its game
    weight: jax.Array  # [K, T, N] 1 for moves played, 0 for replay slots not yet filled


def replay_targets(replay: Played, latest: jax.Array, gamma=1.0) -> Moves:
    """The replay as learned from: ``Moves`` with ``[K * T, N]`` leading axes, the ``K``
    rollouts in the order they were played (``latest`` is the slot written last), and each
    move's value target the outcome of its game for its player wherever that game ended by
    the end of the latest rollout (:func:`alphazero_targets` over all ``K * T`` moves)."""
    K, T = replay.done.shape[:2]
    order = (latest + 1 + jnp.arange(K)) % K  # oldest first
    flat = jax.tree.map(
        lambda x: jnp.take(x, order, axis=0).reshape((K * T,) + x.shape[2:]), replay
    )
    value, known = alphazero_targets(flat.rewards, flat.done, flat.player, gamma)
    return Moves(flat.observation, flat.policy, value, known * flat.weight, flat.weight)


@struct.dataclass
class SelfPlayState:
    """Everything an AlphaZero run carries from one iteration to the next."""

    agent_state: AlphaZeroState
    env_state: PyTree  # [N] game states
    observation: PyTree  # [N] their observations
    moves: jax.Array  # [N] int32 moves played in each current game
    starter: jax.Array  # [N] int32 the player who moved first in each current game
    replay: Played  # [K, T, N] the last K rollouts
    key: PRNGKey
    iteration: jax.Array  # [] int32
    env_steps: jax.Array  # [] int32 moves played (all slots, all devices)
    last_episode_return: jax.Array  # [] float32 mean outcome for the first mover
    last_episode_length: jax.Array  # [] float32 mean game length


def alphazero_targets(
    player_rewards: jax.Array, done: jax.Array, player: jax.Array, gamma=1.0
) -> tuple[jax.Array, jax.Array]:
    """Value targets of a time-major rollout of self-play moves.

    ``player_rewards [T, N, 2]`` are the rewards of each move to both players, ``done [T,
    N]`` marks the moves that ended a game and ``player [T, N]`` is the player who made
    each move. The target of move t is its player's return from t to the end of the game
    (:func:`jrl.core.two_player_env.player_returns`): the game's outcome for that player when
    ``gamma = 1``. Returns ``(value [T, N], known [T, N] float32)``: known is 1 where the
    game ended within the rollout.
    """
    returns, complete = player_returns(player_rewards, done, gamma)
    # the return of the player who moved (player is 0 or 1, returns' last axis the two players)
    value = jnp.take_along_axis(returns, player[..., None], axis=-1).reshape(player.shape)
    return value, complete.astype(jnp.float32)


def alphazero_loss(log_probs: jax.Array, value: jax.Array, mb: Moves, hp: AlphaZeroHParams):
    """``(loss, metrics)`` on a minibatch of ``M`` moves: the network's masked
    ``log_probs [M, A]`` and ``value [M]``;
    ``loss = mean(weight * CE(policy, probs)) + vf_coef * mean(value_weight * (value -
    target)^2)``, both means over all ``M`` moves (so every device's minibatch weighs the
    same and the device mean of gradients is the global one)."""
    cross_entropy = -jnp.sum(mb.policy * log_probs, axis=-1)
    policy_loss = jnp.mean(mb.weight * cross_entropy)
    value_loss = jnp.mean(mb.value_weight * jnp.square(value - mb.value))
    total = policy_loss + hp.vf_coef * value_loss
    return total, {"train/policy_loss": policy_loss, "train/value_loss": value_loss}


def build(config: AlphaZeroConfig, env, env_params, num_devices: int = 1) -> Built:
    """AlphaZero on ``env``, a two-player turn-based game."""
    config.validate()
    if not is_two_player(env):
        raise ValueError(
            f"alphazero plays two-player turn-based games; {env.id} is a single-player env"
        )
    local = envs_per_device(config.num_envs, num_devices)
    spec = EnvSpec.from_env(env, env_params)
    obs_space, num_actions = spec.value_based("alphazero")
    network = networks.ActorCritic(
        spec.action_space,
        tuple(config.hidden_sizes),
        config.activation,
        max(len(obs_space.shape), 1),
        torso=config.torso,
        shared_torso=True,
    )
    evaluate = _network_evaluate(network)
    recurrent_fn = game_recurrent_fn(env, env_params, evaluate, config.gamma)
    agent = _alphazero_agent(network, evaluate, obs_space, config)
    run_search = _search_runner(config, recurrent_fn, evaluate, num_actions)
    algorithm = _self_play(agent, env, env_params, config, local, num_devices, run_search)
    player = _search_player(run_search)
    return Built(algorithm, agent, VmapEnv(env, local), env_params, spec, network, player)


def _network_evaluate(network: networks.ActorCritic):
    """``evaluate(params, obs) -> (log_probs [B, A], value [B])``: the network's masked prior
    and its value (:data:`jrl.agents.search.mcts.Evaluate`)."""

    def evaluate(params, obs):
        x, mask = split_action_mask(obs)
        dist, value = network.apply(params, x, mask)
        return dist.log_probs, value

    return evaluate


def _alphazero_agent(network, evaluate, obs_space, config: AlphaZeroConfig) -> Agent:
    """The network's agent: ``act`` samples its prior (without search), ``policy`` takes the
    prior's most likely legal move, and ``learn`` fits a replay of :class:`Moves` in
    ``num_epochs`` passes of minibatches (:func:`alphazero_loss`)."""
    tx = make_optimizer("adam", config.max_grad_norm)
    total_updates = max(config.num_iterations * config.num_epochs * config.num_minibatches, 1)

    def init(key, env_spec):
        x = networks.example_observation(obs_space)
        params = network.init(key, x[None], None)
        return AlphaZeroState(params, tx.init(params), config.hparams(), jnp.zeros((), jnp.int32))

    def act(agent_state, obs, key):  # the network's prior, without search
        x, mask = split_action_mask(obs)
        dist, _ = network.apply(agent_state.params, x, mask)
        return dist.sample(key), {}

    def policy(params, obs, key):
        log_probs, _ = evaluate(params, obs)
        return masked_argmax(log_probs, split_action_mask(obs)[1])

    def loss_fn(params, mb, hp):
        log_probs, value = evaluate(params, mb.observation)
        return alphazero_loss(log_probs, value, mb, hp)

    def sgd_step(state, mb):
        grads, metrics = jax.grad(loss_fn, has_aux=True)(state.params, mb, state.hparams)
        grads = parallel.pmean(grads)
        lr = scheduled_lr(
            state.hparams.learning_rate, state.updates, total_updates, config.anneal_lr
        )
        params, opt_state = apply_gradients(tx, state.params, state.opt_state, grads, lr)
        return state.replace(params=params, opt_state=opt_state, updates=state.updates + 1), metrics

    def learn(agent_state, moves, key):
        agent_state, metrics = minibatch_epochs(sgd_step, agent_state, moves, key, config)
        return Learned(agent_state, metrics)

    return Agent(init, act, learn, policy)


def _search_runner(config: AlphaZeroConfig, recurrent_fn, evaluate, num_actions: int):
    """``run_search(params, keys, state, obs, greedy) -> (action, policy)``: the config's
    search (:func:`jrl.agents.search.mcts.search`) over the game's rules."""

    def run_search(params, keys, state, obs, greedy):
        return search(
            config.search,
            recurrent_fn,
            evaluate,
            params,
            keys,
            state,
            obs,
            config.num_simulations,
            greedy=greedy,
            dirichlet_alpha=config.dirichlet_alpha,
            dirichlet_fraction=config.dirichlet_fraction,
            max_num_considered_actions=min(config.max_num_considered_actions, num_actions),
            value_scale=config.value_scale,
            q_bounds=tuple(config.q_bounds),
        )

    return run_search


def _search_player(run_search):
    """``player(agent_state) -> play(state, obs, key)``: the evaluation player, a noise-free
    search guided by the trained network."""

    def player(agent_state):
        def play(state, obs, key):
            keys = jax.random.split(key, jax.tree.leaves(obs)[0].shape[0])
            return run_search(agent_state.params, keys, state, obs, True)[0]

        return play

    return player


def _self_play(agent, env, env_params, config, local, num_devices, run_search) -> Algorithm:
    """The self-play loop (see the module docstring); ``local`` game slots per device."""
    T, K = config.num_steps, config.replay_rollouts
    spec = EnvSpec.from_env(env, env_params)
    reset = jax.vmap(env.reset, in_axes=(0, None))
    move = _self_play_move(env, env_params, config, local, run_search, reset)
    init = _self_play_init(agent, spec, env_params, local, K, T, reset)
    step = _self_play_step(agent, move, config, local, num_devices)

    def with_hparams(state, values):
        return state.replace(agent_state=agent.with_hparams(state.agent_state, values))

    return Algorithm(init, step, T * local * num_devices, with_hparams)


def _self_play_move(env, env_params, config, local, run_search, reset):
    """``move(agent_state, carry, key) -> (carry, record)``: one searched move in each of the
    ``local`` game slots, a finished game replaced by a new one; ``carry`` is ``(env_state,
    obs, moves, starter)``, ``record`` what the replay and the metrics keep of the move."""

    def move(agent_state, carry, key):
        env_state, obs, moves, starter = carry
        keys = parallel.local_keys(key, local)
        # [N] keys each; unpacked, so that a count of keys other than five fails
        k_search, k_sample, k_random, k_step, k_reset = jax.vmap(
            lambda k: tuple(jax.random.split(k, 5))
        )(keys)
        _, policy = run_search(agent_state.params, k_search, env_state, obs, False)
        mask = obs[ACTION_MASK]
        sampled = jax.vmap(jax.random.categorical)(
            k_sample, jnp.where(mask, jnp.log(policy), -jnp.inf)
        )
        greedy = masked_argmax(policy, mask)
        action = jnp.where(moves < config.temperature_moves, sampled, greedy)
        # logits log(1) = 0 on the legal moves and log(0) = -inf on the others: no constant
        # whose change (e.g. 0 -> 1) would move the draw only by rounding
        uniform = jax.vmap(jax.random.categorical)(k_random, jnp.log(mask.astype(jnp.float32)))
        action = jnp.where(moves < config.random_opening_moves, uniform, action).astype(jnp.int32)
        mover = jax.vmap(env.current_player)(env_state)
        new_state, ts = jax.vmap(env.step, in_axes=(0, 0, 0, None))(
            k_step, env_state, action, env_params
        )
        fresh_state, fresh = reset(k_reset, env_params)
        done = ts.terminated | ts.truncated
        pick = lambda a, b: jax.vmap(jnp.where)(done, a, b)
        rewards = ts.info[PLAYER_REWARDS]
        record = dict(
            observation=obs,
            policy=policy,
            player=mover,
            rewards=rewards,
            done=done,
            # reshaped, not indexed: an index past the size-1 axis would be clamped unnoticed
            first_outcome=jnp.take_along_axis(rewards, starter[:, None], axis=1).reshape(
                starter.shape
            ),
            length=moves + 1,
        )
        carry = (
            jax.tree.map(pick, fresh_state, new_state),
            jax.tree.map(pick, fresh.observation, ts.observation),
            jnp.where(done, 0, moves + 1),
            jnp.where(done, fresh.info[CURRENT_PLAYER], starter),
        )
        return carry, record

    return move


def _self_play_init(agent, spec: EnvSpec, env_params, local: int, K: int, T: int, reset):
    """``init(key) -> SelfPlayState``: the agent, ``local`` fresh games and an empty replay of
    ``K`` rollouts of ``T`` moves."""

    def init(key):
        k_agent, k_env, k_loop = jax.random.split(key, 3)
        agent_state = agent.init(k_agent, spec)
        env_state, ts = reset(parallel.local_keys(k_env, local), env_params)
        example = Played(
            ts.observation,
            jnp.zeros((local, spec.action_space.n), jnp.float32),
            jnp.zeros((local,), jnp.int32),
            jnp.zeros((local, 2), jnp.float32),
            jnp.zeros((local,), bool),
            jnp.zeros((local,), jnp.float32),
        )
        replay = jax.tree.map(lambda x: jnp.zeros((K, T) + x.shape, x.dtype), example)
        nan = jnp.full((), jnp.nan, jnp.float32)
        zero = jnp.zeros((), jnp.int32)
        return SelfPlayState(
            agent_state,
            env_state,
            ts.observation,
            jnp.zeros((local,), jnp.int32),
            ts.info[CURRENT_PLAYER],
            replay,
            k_loop,
            zero,
            zero,
            nan,
            nan,
        )

    return init


def _self_play_step(agent, move, config, local: int, num_devices: int):
    """``step(state) -> (state, metrics)``: one iteration, ``T`` moves in every slot, the
    rollout stored in the replay, one ``learn`` on the whole replay."""
    T, K = config.num_steps, config.replay_rollouts

    def step(state: SelfPlayState):
        key, k_play, k_learn = jax.random.split(state.key, 3)
        carry = (state.env_state, state.observation, state.moves, state.starter)
        carry, rec = jax.lax.scan(
            lambda c, k: move(state.agent_state, c, k), carry, jax.random.split(k_play, T)
        )
        replay, slot = _stored(state.replay, rec, state.iteration, K)
        data = replay_targets(replay, slot, config.gamma)
        agent_state, metrics, _ = agent.learn(state.agent_state, data, k_learn)
        games, ret, length = _finished_games(rec, state)
        env_steps = state.env_steps + T * local * num_devices
        new = state.replace(
            agent_state=agent_state,
            env_state=carry[0],
            observation=carry[1],
            moves=carry[2],
            starter=carry[3],
            replay=replay,
            key=key,
            iteration=state.iteration + 1,
            env_steps=env_steps,
            last_episode_return=ret.astype(jnp.float32),
            last_episode_length=length.astype(jnp.float32),
        )
        metrics = {
            **metrics,
            "train/episode_return": new.last_episode_return,
            "train/episode_length": new.last_episode_length,
            "train/episodes": games,
            "train/env_steps": env_steps,
        }
        return new, metrics

    return step


def _stored(replay: Played, rec: dict, iteration, K: int) -> tuple[Played, jax.Array]:
    """``(replay, slot)``: the rollout's moves ``rec`` written in slot ``iteration % K`` of the
    replay."""
    fresh = Played(
        rec["observation"],
        rec["policy"],
        rec["player"],
        rec["rewards"],
        rec["done"],
        jnp.ones(rec["done"].shape, jnp.float32),
    )
    slot = iteration % K
    replay = jax.tree.map(
        lambda buf, x: jax.lax.dynamic_update_index_in_dim(buf, x, slot, 0), replay, fresh
    )
    return replay, slot


def _finished_games(rec: dict, state: SelfPlayState):
    """``(games, mean outcome for the first mover, mean length)`` of the games that ended in
    the rollout ``rec``, over all devices; the last values where none did."""
    done = rec["done"]
    games, outcome, length = parallel.psum(
        (
            done.sum(),
            (rec["first_outcome"] * done).sum(),
            (rec["length"] * done).sum().astype(jnp.float32),
        )
    )
    some = games > 0
    ret = jnp.where(some, outcome / jnp.maximum(games, 1), state.last_episode_return)
    length = jnp.where(some, length / jnp.maximum(games, 1), state.last_episode_length)
    return games, ret, length
