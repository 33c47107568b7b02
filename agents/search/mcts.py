"""Monte Carlo tree search over a two-player game's own rules, with ``mctx``.

The search tree's embeddings are the game's states and its recurrent function is the
game's real ``step`` (:func:`game_recurrent_fn`): a step pays the reward of the player who
moved, and its discount is ``-gamma`` when the turn passes to the other player (values are
always from the view of the player to move), ``+gamma`` when the same player moves again,
and 0 when the game ends. :func:`search` runs one search per game of a batch, each with its
own key (so a game's search does not depend on which other games share its batch or its
device), as ``mctx.muzero_policy`` (PUCT, Dirichlet noise at the root) or
``mctx.gumbel_muzero_policy`` (Gumbel, sequential halving at the root).
"""

from __future__ import annotations

import functools
from typing import Callable

import jax
import jax.numpy as jnp
import mctx

from jrl.core.two_player_env import CURRENT_PLAYER, PLAYER_REWARDS
from jrl.core.types import PRNGKey, PyTree, split_action_mask

__all__ = [
    "SEARCHES",
    "Evaluate",
    "game_recurrent_fn",
    "q_bounds_check",
    "q_transform",
    "search",
    "search_from_roots",
    "uniform_evaluate",
]

SEARCHES = ("gumbel", "puct")
"""The search variants :func:`search` runs."""

Evaluate = Callable[[PyTree, PyTree], tuple[jax.Array, jax.Array]]
"""``evaluate(net_params, obs [B, ...]) -> (prior logits [B, A], value [B])``: logits of
illegal moves already masked, the value from the view of the player to move."""


def uniform_evaluate(num_actions: int) -> Evaluate:
    """A uniform prior over the legal moves and value 0 everywhere (the plain MCTS
    baseline, whose only knowledge is the game's outcomes)."""

    def evaluate(net_params, obs):
        _, mask = split_action_mask(obs)
        logits = jnp.where(mask, 0.0, -1e9).astype(jnp.float32)
        return logits, jnp.zeros(mask.shape[:-1], jnp.float32)

    return evaluate


def game_recurrent_fn(env, env_params: PyTree, evaluate: Evaluate, gamma=1.0):
    """``mctx`` recurrent function stepping ``env`` (a
    :class:`~jrl.core.two_player_env.TwoPlayerEnv`)
    from the embedded states ``[B]``: ``(net_params, key, action [B], state [B]) ->
    (RecurrentFnOutput, state)``."""

    def recurrent_fn(net_params, key, action, state):
        batch = action.shape[0]
        mover = jax.vmap(env.current_player)(state)
        state, ts = jax.vmap(env.step, in_axes=(0, 0, 0, None))(
            jax.random.split(key, batch), state, action, env_params
        )
        logits, value = evaluate(net_params, ts.observation)
        rewards = ts.info[PLAYER_REWARDS]
        reward = jnp.take_along_axis(rewards, mover[:, None], axis=1).reshape(mover.shape)
        same = ts.info[CURRENT_PLAYER] == mover
        discount = jnp.where(ts.terminated, 0.0, jnp.where(same, 1.0, -1.0) * gamma)
        out = mctx.RecurrentFnOutput(
            reward=reward.astype(jnp.float32),
            discount=discount.astype(jnp.float32),
            prior_logits=logits,
            value=jnp.where(ts.terminated, 0.0, value).astype(jnp.float32),
        )
        return out, state

    return recurrent_fn


def search(
    kind: str,
    recurrent_fn,
    evaluate: Evaluate,
    net_params: PyTree,
    keys: PRNGKey,
    state: PyTree,
    observation: PyTree,
    num_simulations: int,
    *,
    greedy: bool = False,
    dirichlet_alpha: float = 0.3,
    dirichlet_fraction: float = 0.25,
    max_num_considered_actions: int = 16,
    value_scale: float = 0.1,
    q_bounds: tuple[float, ...] = (),
) -> tuple[jax.Array, jax.Array]:
    """One search from each of ``B`` game states.

    Args:
      kind: ``"gumbel"`` or ``"puct"`` (:data:`SEARCHES`).
      recurrent_fn: :func:`game_recurrent_fn` of the game.
      evaluate: the prior and value at the root (see :data:`Evaluate`).
      keys: ``[B]`` keys, one per game.
      state, observation: ``[B]`` game states and their observations.
      greedy: no exploration noise (no Dirichlet noise at a PUCT root, no Gumbel noise);
        the action is then the most visited move (PUCT) or Gumbel's deterministic choice.
      value_scale: Gumbel: the scale of the completed Q-values added to the prior logits,
        ``(50 + max visits) * value_scale * q`` with ``q`` rescaled to [0, 1] (mctx's
        default 0.1 lets a confident prior outweigh a won move; 1.0 is the Gumbel MuZero
        paper's ``c_scale``).
      q_bounds: ``()``: each node's Q-values are rescaled to [0, 1] by their own min and max
        (mctx's default); ``(lo, hi)``: by the fixed bounds of the returns instead, ``(q -
        lo) / (hi - lo)`` (e.g. ``(-1, 1)`` for a game's outcome), so that Q-values that
        differ only by noise (an untrained model's, all near 0) are not stretched over the
        whole [0, 1] and do not decide the search's choice (see :func:`q_transform`).

    Returns:
      ``(action int32[B], policy float32[B, A])``: the move the search picks (sampled in
      proportion to the visit counts for PUCT unless ``greedy``) and its improved policy
      (visit counts for PUCT, Gumbel MuZero's completed-Q policy), zero on illegal moves.
    """
    if kind not in SEARCHES:
        raise ValueError(f"search must be one of {SEARCHES}, got {kind!r}")
    _, mask = split_action_mask(observation)
    options = dict(
        greedy=greedy,
        dirichlet_alpha=dirichlet_alpha,
        dirichlet_fraction=dirichlet_fraction,
        max_num_considered_actions=max_num_considered_actions,
        value_scale=value_scale,
        q_bounds=tuple(q_bounds),
    )

    one = _root_search(kind, recurrent_fn, evaluate, net_params, num_simulations, options)
    action, policy = jax.vmap(one)(keys, state, observation, mask)
    return action.astype(jnp.int32), jnp.where(mask, policy, 0.0)


def _root_search(
    kind: str, recurrent_fn, evaluate: Evaluate, net_params, num_simulations: int, options: dict
) -> Callable:
    """``one(key, state, obs, legal) -> (action, policy)``: :func:`search` from one game state
    (a batch of one root)."""

    def one(key, s, obs, legal):
        add = lambda x: x[None]
        logits, value = evaluate(net_params, jax.tree.map(add, obs))
        root = mctx.RootFnOutput(prior_logits=logits, value=value, embedding=jax.tree.map(add, s))
        action, weights, _ = _one_search(
            kind, recurrent_fn, net_params, key, root, legal, num_simulations, **options
        )
        return action, weights

    return one


def q_bounds_check(q_bounds: tuple[float, ...]) -> tuple[bool, str]:
    """``(ok, message)`` for a ``q_bounds`` value: ``()`` or ``(lo, hi)`` with ``lo < hi``
    (a config's check, see :func:`q_transform`)."""
    ok = len(q_bounds) == 0 or (len(q_bounds) == 2 and q_bounds[0] < q_bounds[1])
    return ok, f"q_bounds must be () or (lo, hi) with lo < hi, got {q_bounds}"


def search_checks(c) -> list[tuple[bool, str]]:
    """The checks of the search fields AlphaZero's and MuZero's configs share (``search``,
    ``num_simulations``, ``max_num_considered_actions``, ``value_scale``, ``q_bounds``,
    ``dirichlet_alpha``, ``dirichlet_fraction``), as ``(ok, message)`` pairs."""
    return [
        (c.search in SEARCHES, f"search must be one of {SEARCHES}, got {c.search!r}"),
        (c.num_simulations > 0, f"num_simulations must be positive, got {c.num_simulations}"),
        (
            c.max_num_considered_actions > 0,
            f"max_num_considered_actions must be positive, got {c.max_num_considered_actions}",
        ),
        (c.value_scale > 0, f"value_scale must be positive, got {c.value_scale}"),
        q_bounds_check(tuple(c.q_bounds)),
        (c.dirichlet_alpha > 0, f"dirichlet_alpha must be positive, got {c.dirichlet_alpha}"),
        (
            0.0 <= c.dirichlet_fraction <= 1.0,
            f"dirichlet_fraction must lie in [0, 1], got {c.dirichlet_fraction}",
        ),
    ]


def q_transform(kind: str, value_scale: float = 0.1, q_bounds: tuple[float, ...] = ()):
    """The ``mctx`` Q-transform of a search: how a node's Q-values ``q [A]`` become scores.

    Gumbel: ``(50 + max visits) * value_scale * q_hat`` for the visited moves (unvisited ones
    completed by mctx's mixed value), PUCT: ``q_hat`` itself, where ``q_hat`` is ``q``
    rescaled to [0, 1] by the node's own min and max over its moves (and, for PUCT, its
    value), or with ``q_bounds = (lo, hi)`` the fixed ``(q - lo) / (hi - lo)``. With fixed
    bounds the Gumbel transform is mctx's unrescaled one with ``value_scale / (hi - lo)``:
    the ``-lo / (hi - lo)`` it leaves out is the same for every move of a node, and both the
    improved policy (a softmax) and the root's choice (an argmax) ignore such a shift.
    """
    if kind not in SEARCHES:
        raise ValueError(f"search must be one of {SEARCHES}, got {kind!r}")
    ok, message = q_bounds_check(tuple(q_bounds))
    if not ok:
        raise ValueError(message)
    if kind == "gumbel":
        if q_bounds:
            lo, hi = q_bounds
            return functools.partial(
                mctx.qtransform_completed_by_mix_value,
                value_scale=value_scale / (hi - lo),
                rescale_values=False,
            )
        return functools.partial(mctx.qtransform_completed_by_mix_value, value_scale=value_scale)
    if q_bounds:
        return functools.partial(
            mctx.qtransform_by_min_max, min_value=q_bounds[0], max_value=q_bounds[1]
        )
    return mctx.qtransform_by_parent_and_siblings


def _one_search(
    kind,
    recurrent_fn,
    net_params,
    key,
    root,
    legal,
    num_simulations,
    *,
    greedy,
    dirichlet_alpha,
    dirichlet_fraction,
    max_num_considered_actions,
    value_scale,
    q_bounds,
):
    """One mctx search from a batch-of-one ``root``; ``(action [], policy [A], root value [])``."""
    args = (net_params, key, root, recurrent_fn, num_simulations)
    if kind == "gumbel":
        out = mctx.gumbel_muzero_policy(
            *args,
            invalid_actions=~legal[None],
            max_num_considered_actions=max_num_considered_actions,
            gumbel_scale=0.0 if greedy else 1.0,
            qtransform=q_transform("gumbel", value_scale, q_bounds),
        )
        return _unbatched(out)
    out = mctx.muzero_policy(
        *args,
        invalid_actions=~legal[None],
        dirichlet_fraction=0.0 if greedy else dirichlet_fraction,
        dirichlet_alpha=dirichlet_alpha,
        qtransform=q_transform("puct", value_scale, q_bounds),
    )
    action, weights, value = _unbatched(out)
    if greedy:
        return jnp.argmax(jnp.where(legal, weights, -1.0)).astype(jnp.int32), weights, value
    return action, weights, value


def _unbatched(out):
    """``(action [], action weights [A], root value [])`` of a batch-of-one search's
    output (unpacked: a batch of any other size is an error, not a silently clamped index)."""
    (action,), (weights,) = out.action, out.action_weights
    (value,) = out.search_tree.summary().value  # node_values[:, ROOT_INDEX]
    return action, weights, value


def search_from_roots(
    kind: str,
    recurrent_fn,
    net_params: PyTree,
    keys: PRNGKey,
    prior_logits: jax.Array,
    value: jax.Array,
    embedding: PyTree,
    legal: jax.Array,
    num_simulations: int,
    *,
    greedy: bool = False,
    dirichlet_alpha: float = 0.3,
    dirichlet_fraction: float = 0.25,
    max_num_considered_actions: int = 16,
    value_scale: float = 0.1,
    q_bounds: tuple[float, ...] = (),
) -> tuple[jax.Array, jax.Array, jax.Array]:
    """:func:`search` from roots already evaluated, over any model: ``prior_logits [B, A]``,
    ``value [B]`` and ``embedding [B, ...]`` of each root, ``legal [B, A]`` its legal moves
    (a learned model's search: the embedding is a latent state and ``recurrent_fn`` steps the
    learned dynamics). Each root is searched alone with its own key of ``keys [B]``.

    Returns ``(action int32[B], policy float32[B, A], root value float32[B])``: as
    :func:`search`'s, plus the search's value of each root (its visit-weighted mean return).
    """
    if kind not in SEARCHES:
        raise ValueError(f"search must be one of {SEARCHES}, got {kind!r}")
    options = dict(
        greedy=greedy,
        dirichlet_alpha=dirichlet_alpha,
        dirichlet_fraction=dirichlet_fraction,
        max_num_considered_actions=max_num_considered_actions,
        value_scale=value_scale,
        q_bounds=tuple(q_bounds),
    )

    def one(key, logits, v, emb, ok):
        add = lambda x: x[None]
        root = mctx.RootFnOutput(
            prior_logits=add(jnp.where(ok, logits, jnp.finfo(logits.dtype).min)),
            value=add(v),
            embedding=jax.tree.map(add, emb),
        )
        return _one_search(
            kind, recurrent_fn, net_params, key, root, ok, num_simulations, **options
        )

    action, policy, root_value = jax.vmap(one)(keys, prior_logits, value, embedding, legal)
    return action.astype(jnp.int32), jnp.where(legal, policy, 0.0), root_value
