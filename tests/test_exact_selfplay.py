"""Exact checks of AlphaZero's self-play (agents/search/alphazero.py): one move of every game
slot (which of the uniform, sampled and greedy moves is played, what is recorded, how a
finished game is replaced), the iteration around it, the replay slot written, the finished
games' metrics, the network agent's greedy policy and its annealed learning rate, and the
Gumbel search's cap on the moves it considers; all with stand-ins whose results are worked
out by hand (tools/mutation.py's targets)."""

from types import SimpleNamespace

import jax
import jax.numpy as jnp
import mctx
import numpy as np
import pytest

from jrl.agents.search import alphazero
from jrl.agents.search.alphazero import AlphaZeroConfig, Moves, Played, SelfPlayState
from jrl.core import spaces
from jrl.core.two_player_env import CURRENT_PLAYER, PLAYER_REWARDS
from jrl.core.types import TimeStep
from conftest import gumbel_search_config

A = 4
MASK = np.array([True, True, True, False])  # move 3 is never legal
POLICY = np.array(  # the stand-in search's improved policy of each of the 6 slots
    [
        [0.3, 0.3, 0.4, 0.0],
        [0.3, 0.3, 0.4, 0.0],
        [0.3, 0.3, 0.4, 0.0],
        [0.2, 0.3, 0.5, 0.0],
        [0.2, 0.3, 0.5, 0.0],
        [0.1, 0.6, 0.3, 0.0],
    ],
    np.float32,
)
FRESH = 11  # a new game's state: 11 moves counted, so player 1 moves first
LIMIT = 5  # a game is cut (truncated) when its count reaches 5


def _obs(x, n):
    return {"observation": x, "action_mask": jnp.tile(jnp.asarray(MASK), (n, 1))}


class _Counter:
    """A stand-in game whose state is a move count ``s`` (player ``s % 2`` to move): a move
    adds 1; move 2 ends the game (terminated) and wins it for its player; the count reaching
    LIMIT cuts it (truncated). The observation is ``10 * new count + move``."""

    def current_player(self, s):
        return (s % 2).astype(jnp.int32)

    def step(self, key, s, a, params):
        assert key.shape == () and s.shape == () and a.shape == ()  # one slot at a time
        new = s + 1
        win = a == 2
        mover = s % 2
        rewards = jnp.where(win, jnp.where(mover == 0, 1.0, -1.0) * jnp.array([1.0, -1.0]), 0.0)
        obs = {
            "observation": (10.0 * new + a).astype(jnp.float32)[None],
            "action_mask": jnp.asarray(MASK),
        }
        info = {CURRENT_PLAYER: (new % 2).astype(jnp.int32), PLAYER_REWARDS: rewards}
        return new, TimeStep(obs, rewards[mover], win, new >= LIMIT, info)


def _reset(keys, params):
    n = keys.shape[0]
    info = {CURRENT_PLAYER: jnp.ones((n,), jnp.int32), PLAYER_REWARDS: jnp.zeros((n, 2))}
    obs = _obs(jnp.full((n, 1), -1.0), n)
    return jnp.full((n,), FRESH, jnp.int32), TimeStep(obs, jnp.zeros(n), False, False, info)


def _draws(key, n):
    """The keys the move derives (``local_keys``: ``split(key, n)`` on one device; then
    five per slot: search, sample, random, step, reset) and jax.random.categorical's draws on
    them: the sampled move (the search's policy over the legal moves) and the uniform one."""
    per_slot = jax.vmap(lambda k: jax.random.split(k, 5))(jax.random.split(key, n))
    sample, random = per_slot[:, 1], per_slot[:, 2]
    logits = jnp.where(MASK, jnp.log(POLICY), -jnp.inf)
    sampled = jax.vmap(jax.random.categorical)(sample, logits)
    legal = jnp.tile(jnp.where(MASK, 0.0, -jnp.inf), (n, 1))
    uniform = jax.vmap(jax.random.categorical)(random, legal)
    return per_slot[:, 0], sampled, uniform


SEED = 2
"""A key whose draws tell every choice apart (the test checks that they do)."""


def test_one_move_of_every_slot_by_hand():
    """6 slots at moves 0..5 of their games, random_opening_moves = 1, temperature_moves =
    3: slot 0 plays the uniform draw, slots 1-2 the draw from the search's policy, slots 3-5
    the policy's most likely move (2, 2, 1). Move 2 ends a game (slots 3 and 4, and any
    earlier slot that drew it), the count reaching 5 cuts one (slots 4 and 5): the finished
    games are replaced by fresh ones (state 11, player 1 first, 0 moves), the others move on.
    The record keeps the move's observation, policy, player, rewards, end, the first
    mover's reward and the game's length so far."""
    n = 6
    config = SimpleNamespace(temperature_moves=3, random_opening_moves=1)
    searches = []

    def run_search(params, keys, state, obs, greedy):
        searches.append((greedy, keys))
        return jnp.zeros((n,), jnp.int32), jnp.asarray(POLICY)

    move = alphazero._self_play_move(_Counter(), None, config, n, run_search, _reset)
    moves = jnp.arange(n, dtype=jnp.int32)
    state = moves  # each game's count is its moves played
    obs = _obs(jnp.arange(n, dtype=jnp.float32)[:, None], n)
    starter = jnp.array([0, 1, 0, 0, 0, 1], jnp.int32)
    key = jax.random.key(SEED)
    carry, rec = move(SimpleNamespace(params=None), (state, obs, moves, starter), key)

    k_search, sampled, uniform = _draws(key, n)
    greedy = np.array([2, 2, 2, 2, 2, 1])  # the policy's most likely legal move
    # the draws tell the choices apart: uniform != sampled where the opening ends, the
    # sampled move != the greedy one where sampling stops, no draw is move 0 or illegal
    assert uniform[0] not in (0, sampled[0]) and uniform[1] != sampled[1]
    assert sampled[1] not in (0, greedy[1]) and sampled[3] != greedy[3]
    action = np.concatenate([uniform[:1], sampled[1:3], greedy[3:]])
    assert set(action) <= {0, 1, 2}

    assert [g for g, _ in searches] == [False]  # self-play searches with exploration noise
    np.testing.assert_array_equal(
        jax.random.key_data(searches[0][1]), jax.random.key_data(k_search)
    )
    terminated = action == 2
    truncated = np.arange(n) + 1 >= LIMIT
    done = terminated | truncated
    assert terminated[3] and not truncated[3] and truncated[5] and not terminated[5]
    mover = np.arange(n) % 2
    rewards = np.zeros((n, 2), np.float32)
    rewards[terminated, :] = np.where(mover[terminated, None] == 0, 1.0, -1.0) * [1.0, -1.0]

    np.testing.assert_array_equal(rec["observation"]["observation"], obs["observation"])
    np.testing.assert_array_equal(rec["policy"], POLICY)
    np.testing.assert_array_equal(rec["player"], mover)
    np.testing.assert_array_equal(rec["rewards"], rewards)
    np.testing.assert_array_equal(rec["done"], done)
    np.testing.assert_array_equal(rec["first_outcome"], rewards[np.arange(n), starter])
    np.testing.assert_array_equal(rec["length"], np.arange(n) + 1)

    new_state, new_obs, new_moves, new_starter = carry
    np.testing.assert_array_equal(new_state, np.where(done, FRESH, np.arange(n) + 1))
    stepped = 10.0 * (np.arange(n) + 1) + action
    np.testing.assert_array_equal(new_obs["observation"][:, 0], np.where(done, -1.0, stepped))
    np.testing.assert_array_equal(new_moves, np.where(done, 0, np.arange(n) + 1))
    np.testing.assert_array_equal(new_starter, np.where(done, 1, starter))
    assert new_moves.dtype == jnp.int32 and new_starter.dtype == jnp.int32


def _played(K, T, N, fill):
    return Played(
        jnp.full((K, T, N, 1), fill, jnp.float32),
        jnp.full((K, T, N, 2), fill, jnp.float32),
        jnp.full((K, T, N), int(fill), jnp.int32),
        jnp.full((K, T, N, 2), fill, jnp.float32),
        jnp.zeros((K, T, N), bool),
        jnp.zeros((K, T, N), jnp.float32),
    )


def _record(T, N, start):
    x = start + jnp.arange(T * N, dtype=jnp.float32).reshape(T, N)
    return dict(
        observation=x[..., None],
        policy=jnp.stack([x, -x], -1),
        player=x.astype(jnp.int32) % 2,
        rewards=jnp.stack([x, 2 * x], -1),
        done=x.astype(jnp.int32) % 3 == 0,
        first_outcome=x,
        length=x.astype(jnp.int32),
    )


def test_stored_writes_the_rollout_in_slot_iteration_mod_k():
    """K = 3 slots of T = 2 moves of N = 2 games: iteration 4 writes slot 4 % 3 = 1 (its
    weight becomes 1) and leaves slots 0 and 2 as they were."""
    K, T, N = 3, 2, 2
    replay = _played(K, T, N, 7.0)
    rec = _record(T, N, 1.0)
    out, slot = alphazero._stored(replay, rec, jnp.int32(4), K)
    assert int(slot) == 1
    for name, got in zip(Played.__dataclass_fields__, jax.tree.leaves(out)):
        want = np.array(getattr(replay, name))
        want[1] = 1.0 if name == "weight" else rec[name]
        np.testing.assert_array_equal(got, want, err_msg=name)


@pytest.mark.parametrize(
    "done_at, outcome, length",
    [
        ([(0, 1), (1, 0)], (1.0 + 0.5) / 2, (2 + 4) / 2),  # two games end: their means
        ([(1, 1)], 0.25, 3),  # one game ends: its own values
        ([], -0.75, 6.5),  # none ends: the last values are kept
    ],
)
def test_finished_games_by_hand(done_at, outcome, length):
    """The rollout's finished games: how many, the mean of the first mover's outcome and
    the mean length over them (the moves of games still running count for nothing, their
    values are 9); where none finished, the state's last values (-0.75, 6.5)."""
    done = np.zeros((2, 2), bool)
    for t, i in done_at:
        done[t, i] = True
    rec = dict(
        done=jnp.asarray(done),
        first_outcome=jnp.array([[9.0, 1.0], [0.5, 0.25]]),
        length=jnp.array([[9, 2], [4, 3]], jnp.int32),
    )
    state = SimpleNamespace(
        last_episode_return=jnp.float32(-0.75), last_episode_length=jnp.float32(6.5)
    )
    games, ret, got_length = alphazero._finished_games(rec, state)
    assert int(games) == len(done_at)
    assert float(ret) == outcome and float(got_length) == length


def test_iteration_carries_counts_and_learns_on_the_replay():
    """One iteration of T = 2 moves in 3 slots on (nominally) 2 devices: the carry after the
    second move becomes the state's games (each of its four parts in its own field), the
    iteration count goes 4 -> 5, the moves played 5 -> 5 + 2 * 3 * 2 = 17 (int32), the
    rollout lands in replay slot 4 % 2 = 0, and learn sees it as the replay's latest."""
    T, N, K = 2, 3, 2
    config = SimpleNamespace(num_steps=T, replay_rollouts=K, gamma=1.0)

    def move(agent_state, carry, key):
        e, o, m, s = carry
        rec = dict(
            observation=o,
            policy=jnp.ones((N, 2)) / 2,
            player=m % 2,
            rewards=jnp.zeros((N, 2)),
            done=jnp.zeros((N,), bool),
            first_outcome=jnp.zeros((N,)),
            length=m + 1,
        )
        return (e + 1, o + 2.0, m + 3, s + 4), rec

    learned = []

    def learn(agent_state, data, key):
        learned.append(data)
        return agent_state + 1, {"train/loss": jnp.float32(0.5)}, None

    agent = SimpleNamespace(learn=learn)
    step = alphazero._self_play_step(agent, move, config, N, 2)
    zeros = jnp.zeros((N,), jnp.int32)
    state = SelfPlayState(
        agent_state=jnp.int32(10),
        env_state=zeros,
        observation=jnp.full((N,), 0.5),
        moves=zeros,
        starter=zeros,
        replay=_played(K, T, N, 0.0).replace(observation=jnp.zeros((K, T, N))),
        key=jax.random.key(0),
        iteration=jnp.int32(4),
        env_steps=jnp.int32(5),
        last_episode_return=jnp.float32(0.0),
        last_episode_length=jnp.float32(0.0),
    )
    new, metrics = step(state)
    np.testing.assert_array_equal(new.env_state, [2, 2, 2])
    np.testing.assert_array_equal(new.observation, [4.5, 4.5, 4.5])
    np.testing.assert_array_equal(new.moves, [6, 6, 6])
    np.testing.assert_array_equal(new.starter, [8, 8, 8])
    assert int(new.agent_state) == 11 and int(new.iteration) == 5
    assert new.env_steps.dtype == jnp.int32 and int(new.env_steps) == 17
    assert int(metrics["train/env_steps"]) == 17 and float(metrics["train/loss"]) == 0.5
    # the rollout (observations 0.5 then 2.5) is in slot 0, learned from last (oldest first)
    np.testing.assert_array_equal(new.replay.observation[0], [[0.5] * N, [2.5] * N])
    (data,) = learned
    np.testing.assert_array_equal(data.observation[:, 0], [0.0, 0.0, 0.5, 2.5])
    np.testing.assert_array_equal(data.weight[:, 0], [0.0, 0.0, 1.0, 1.0])


C = np.array([1.0, 2.0, 0.5], np.float32)  # the stand-in network's logits are w * C


def _linear_agent(**overrides):
    """The network agent over a stand-in evaluate, ``log_probs = w * x`` (x: the
    observation) and value 0, so that with a policy target p the loss is ``-w * p . x``:
    its gradient is the same at every step, Adam's step is then ``lr_t * |g| / (|g| +
    eps)`` (m = g, v = g^2 after bias correction, up to ~2e-5 from float32's 1 - 0.999;
    eps = 1e-5), and the steps give the learning rates (to rtol 1e-4)."""
    config = AlphaZeroConfig(
        anneal_lr=True, learning_rate=0.01, max_grad_norm=10.0, replay_rollouts=1, **overrides
    )
    network = SimpleNamespace(init=lambda key, x, mask: {"w": jnp.float32(0.0)})

    def evaluate(params, obs):
        x = obs["observation"]
        return params["w"] * x, jnp.zeros(x.shape[:-1])

    space = spaces.Box(-1.0, 1.0, (3,))
    return alphazero._alphazero_agent(network, evaluate, space, config), config


def _moves(T, N):
    x = jnp.broadcast_to(jnp.asarray(C), (T, N, 3))
    return Moves(
        {"observation": x, "action_mask": jnp.ones((T, N, 3), bool)},
        jnp.broadcast_to(jnp.array([0.5, 0.5, 0.0]), (T, N, 3)),  # p . x = 1.5
        jnp.zeros((T, N)),
        jnp.zeros((T, N)),
        jnp.ones((T, N)),
    )


def test_greedy_policy_is_the_priors_best_legal_move():
    """w = 1: the logits are the observation (3, 1, 2); move 0 is illegal, so move 2."""
    agent, _ = _linear_agent()
    obs = {"observation": jnp.array([[3.0, 1.0, 2.0]]), "action_mask": jnp.array([[0, 1, 1]]) > 0}
    np.testing.assert_array_equal(agent.policy({"w": jnp.float32(1.0)}, obs, None), [2])


def test_annealed_learning_rate_falls_over_the_runs_updates():
    """1 iteration x 2 epochs x 3 minibatches = 6 updates in the run: update t takes
    learning rate 0.01 * (1 - t / 6), so after them w = 0.01 * (6 - 15 / 6) * r, r = 1.5 /
    (1.5 + 1e-5) (the gradient of -1.5 w). With 1 x 1 x 1 = 1 update in the run, the first
    takes 0.01 and a second (a run resumed past its end) takes 0."""
    agent, config = _linear_agent(total_steps=6, num_envs=2, num_steps=3, num_minibatches=3)
    assert (config.num_iterations, config.num_epochs) == (1, 2)
    state = agent.init(jax.random.key(0), None)
    state, metrics, _ = agent.learn(state, _moves(3, 2), jax.random.key(1))
    r = 1.5 / (1.5 + 1e-5)
    assert int(state.updates) == 6
    np.testing.assert_allclose(state.params["w"], 0.01 * (6 - 15 / 6) * r, rtol=1e-4)
    # the mean loss over the 6 updates, each -1.5 w at the w before it
    w_before = np.concatenate([[0.0], np.cumsum(0.01 * (1 - np.arange(5) / 6))]) * r
    np.testing.assert_allclose(metrics["train/policy_loss"], np.mean(-1.5 * w_before), rtol=1e-4)

    agent, config = _linear_agent(
        total_steps=1, num_envs=1, num_steps=1, num_epochs=1, num_minibatches=1
    )
    state = agent.init(jax.random.key(0), None)
    state, _, _ = agent.learn(state, _moves(1, 1), jax.random.key(1))
    np.testing.assert_allclose(state.params["w"], 0.01 * r, rtol=1e-4)
    after, _, _ = agent.learn(state, _moves(1, 1), jax.random.key(2))
    assert int(after.updates) == 2
    assert float(after.params["w"]) == float(state.params["w"])


def _win_with_move_2(params, key, action, embedding):
    """A stand-in model: every move ends the game; move 2 wins it (reward 1)."""
    n = action.shape[0]
    out = mctx.RecurrentFnOutput(
        reward=jnp.where(action == 2, 1.0, 0.0),
        discount=jnp.zeros((n,)),
        prior_logits=jnp.zeros((n, 3)),
        value=jnp.zeros((n,)),
    )
    return out, embedding


@pytest.mark.parametrize("considered, best", [(1, 0), (3, 2)])
def test_gumbel_search_considers_at_most_max_num_considered_actions(considered, best):
    """A greedy Gumbel search of 3 moves whose prior ranks them 0, 1, 2 (logits 2, 1, 0):
    considering only the prior's best one, it never tries move 2, the win, and plays move 0;
    considering all 3, it finds it."""
    config = gumbel_search_config(considered)

    def evaluate(params, obs):
        n = obs["observation"].shape[0]
        return jnp.tile(jax.nn.log_softmax(jnp.array([2.0, 1.0, 0.0])), (n, 1)), jnp.zeros(n)

    run_search = alphazero._search_runner(config, _win_with_move_2, evaluate, 3)
    obs = {"observation": jnp.zeros((2, 1)), "action_mask": jnp.ones((2, 3), bool)}
    keys = jax.random.split(jax.random.key(0), 2)
    run = jax.jit(run_search, static_argnums=4)  # one compiled search, not op by op
    action, policy = run(None, keys, jnp.zeros((2,)), obs, True)
    np.testing.assert_array_equal(action, [best, best])
