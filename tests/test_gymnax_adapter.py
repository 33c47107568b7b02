"""The gymnax adapter: registry entry, spaces, and parity with gymnax itself.

Parity is checked two ways: the adapter's single transitions equal gymnax's
``step_env`` from the same state and key, and a batched auto-resetting
rollout under jrl's wrappers equals gymnax's own auto-resetting ``step``
(same keys, time limit moved into our TimeLimit). CartPole is also checked
against our own ``CartPole-v1``.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

gymnax = pytest.importorskip("gymnax")

import jrl.envs
from jrl.envs.gymnax_adapter import GymnaxEnv, to_jrl_space

from jrl.core import spaces
from jrl.core.types import FINAL_OBSERVATION
from jrl.core.wrappers import wrap_for_training

pytestmark = pytest.mark.parity


def _assert_trees_equal(a, b, **tol):
    la, ta = jax.tree.flatten(a)
    lb, tb = jax.tree.flatten(b)
    assert ta == tb, f"{ta} != {tb}"
    for x, y in zip(la, lb):
        x, y = np.asarray(x), np.asarray(y)
        assert x.shape == y.shape and x.dtype == y.dtype, (x.shape, x.dtype, y.shape, y.dtype)
        if tol:
            np.testing.assert_allclose(x, y, **tol)
        else:
            np.testing.assert_array_equal(x, y)


# --------------------------------------------------------------------------
# Registry
# --------------------------------------------------------------------------


def test_spec_takes_gymnax_time_limit():
    for name, limit in [("CartPole-v1", 500), ("Breakout-MinAtar", 1000), ("Pendulum-v1", 200)]:
        s = jrl.envs.entry(f"gymnax:{name}")
        assert s.source == "gymnax" and s.id == f"gymnax:{name}"
        assert s.max_episode_steps == limit == gymnax.make(name)[1].max_steps_in_episode
    env, params = jrl.envs.make(
        "gymnax:Breakout-MinAtar", max_episode_steps=7, max_steps_in_episode=7
    )
    assert env.max_episode_steps == 7 and params.max_steps_in_episode == 7
    assert isinstance(env.unwrapped, GymnaxEnv) and env.id == "gymnax:Breakout-MinAtar"


def test_unknown_gymnax_name_lists_close_matches():
    with pytest.raises(jrl.envs.UnknownEnvError) as info:
        jrl.envs.make("gymnax:Breakout-Minatar")
    msg = str(info.value)
    assert "'gymnax:Breakout-MinAtar'" in msg and "Did you mean" in msg
    assert isinstance(info.value, KeyError)
    with pytest.raises(jrl.envs.UnknownEnvError, match="gymnax:CartPole-v1"):
        jrl.envs.entry("gymnax:cartpole-v1")


def test_space_mapping():
    gs = gymnax.environments.spaces
    f32max = float(np.finfo(np.float32).max)
    box = to_jrl_space(
        gs.Box(jnp.array([-1.0, -f32max]), jnp.array([2.0, f32max]), (2,), jnp.float32)
    )
    assert box == spaces.Box(np.array([-1.0, -np.inf]), np.array([2.0, np.inf]), (2,), jnp.float32)
    assert to_jrl_space(gs.Box(0, 255, (3, 3), jnp.uint8)) == spaces.Box(0, 255, (3, 3), jnp.uint8)
    assert to_jrl_space(gs.Discrete(5)) == spaces.Discrete(5)
    nested = gs.Dict(
        {"a": gs.Discrete(2), "b": gs.Tuple([gs.Discrete(3), gs.Box(0.0, 1.0, (), jnp.float32)])}
    )
    assert to_jrl_space(nested) == spaces.Dict(
        {
            "a": spaces.Discrete(2),
            "b": spaces.Tuple([spaces.Discrete(3), spaces.Box(0.0, 1.0, (), jnp.float32)]),
        }
    )


def test_adapts_an_instance_and_keeps_timestep_structure():
    genv, gparams = gymnax.make("CartPole-v1")
    env = GymnaxEnv(genv)
    assert env.id == "gymnax:CartPole-v1" and env.gymnax_env is genv
    state, ts0 = jax.jit(env.reset)(jax.random.key(0), gparams)
    state, ts1 = jax.jit(env.step)(jax.random.key(1), state, jnp.int32(1), gparams)
    assert jax.tree.structure(ts0) == jax.tree.structure(ts1)  # a scan can carry either
    assert not bool(ts1.truncated)

    def spaces_in_jit(params):  # traced params fall back to the default bounds
        assert env.observation_space(params) == env.observation_space(gparams)
        return params

    jax.jit(spaces_in_jit)(gparams)


# --------------------------------------------------------------------------
# CartPole: gymnax's vs ours
# --------------------------------------------------------------------------

N_CARTPOLE_STEPS = 600


def test_cartpole_matches_jrl_cartpole():
    ours, our_params = jrl.envs.make("CartPole-v1")
    theirs, their_params = jrl.envs.make("gymnax:CartPole-v1")
    assert ours.observation_space(our_params) == theirs.observation_space(their_params)
    assert ours.action_space(our_params) == theirs.action_space(their_params)
    assert ours.max_episode_steps == theirs.max_episode_steps == 500
    ours, theirs = ours.unwrapped, theirs.unwrapped
    our_template, _ = ours.reset(jax.random.key(0), our_params)
    fields = [f.name for f in dataclasses.fields(our_template)]

    def body(carry, key):
        g_state = carry
        k_act, k_step, k_reset = jax.random.split(key, 3)
        action = jax.random.randint(k_act, (), 0, 2)
        o_state = our_template.replace(
            **{f: getattr(g_state, f) for f in fields}
        )  # copy the state across
        _, o_ts = ours.step(k_step, o_state, action, our_params)
        g_next, g_ts = theirs.step(k_step, g_state, action, their_params)
        g_reset, _ = theirs.reset(k_reset, their_params)
        g_next = jax.tree.map(lambda r, s: jnp.where(g_ts.terminated, r, s), g_reset, g_next)
        out = (
            o_ts.observation,
            g_ts.observation,
            o_ts.reward,
            g_ts.reward,
            o_ts.terminated,
            g_ts.terminated,
        )
        return g_next, out

    g_state, _ = theirs.reset(jax.random.key(1), their_params)
    keys = jax.random.split(jax.random.key(2), N_CARTPOLE_STEPS)
    _, (o_obs, g_obs, o_rew, g_rew, o_term, g_term) = jax.jit(
        lambda s: jax.lax.scan(body, s, keys)
    )(g_state)
    assert o_obs.dtype == g_obs.dtype == jnp.float32
    np.testing.assert_allclose(o_obs, g_obs, rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(o_rew, g_rew)
    np.testing.assert_array_equal(o_term, g_term)
    assert int(g_term.sum()) >= 10  # many episodes, each from a fresh reset


# --------------------------------------------------------------------------
# MinAtar
# --------------------------------------------------------------------------

MINATAR = ["Breakout-MinAtar", "SpaceInvaders-MinAtar"]


@pytest.mark.parametrize("name", MINATAR)
def test_minatar_spaces(name):
    genv, gparams = gymnax.make(name)
    env, params = jrl.envs.make(f"gymnax:{name}")
    g_obs = genv.observation_space(gparams)
    obs, act = env.observation_space(params), env.action_space(params)
    assert isinstance(obs, spaces.Box) and obs.shape == tuple(g_obs.shape) == genv.obs_shape
    assert obs.shape[:2] == (10, 10) and (name != "Breakout-MinAtar" or obs.shape == (10, 10, 4))
    assert obs.dtype == jnp.dtype(g_obs.dtype)
    assert (obs.low == 0).all() and (obs.high == 1).all()
    assert act == spaces.Discrete(genv.num_actions)
    _, ts = jax.jit(env.reset)(jax.random.key(0), params)
    assert ts.observation.dtype == obs.dtype and bool(obs.contains(ts.observation))


@pytest.mark.parametrize("name", MINATAR)
def test_minatar_step_equals_gymnax_step_env(name):
    genv, gparams = gymnax.make(name)
    env = GymnaxEnv(name)
    n_act = genv.num_actions

    def body(g_state, key):
        k_act, k_step, k_reset = jax.random.split(key, 3)
        action = jax.random.randint(k_act, (), 0, n_act)
        a_state, a_ts = env.step(k_step, g_state, action, gparams)
        g_obs, g_next, g_rew, g_term, _ = genv.step_env(k_step, g_state, action, gparams)
        same = jax.tree.map(
            lambda x, y: jnp.all(x == y), (a_state, a_ts.observation), (g_next, g_obs)
        )
        g_reset = genv.reset_env(k_reset, gparams)[1]
        g_next = jax.tree.map(lambda r, s: jnp.where(g_term, r, s), g_reset, g_next)
        return g_next, (
            jnp.all(jnp.stack(jax.tree.leaves(same))),
            a_ts.reward,
            g_rew,
            a_ts.terminated,
            g_term,
            a_ts.truncated,
        )

    g_state = genv.reset_env(jax.random.key(0), gparams)[1]
    keys = jax.random.split(jax.random.key(1), 300)
    _, (same, a_rew, g_rew, a_term, g_term, a_trunc) = jax.jit(
        lambda s: jax.lax.scan(body, s, keys)
    )(g_state)
    assert bool(same.all())
    np.testing.assert_array_equal(a_rew, g_rew)
    np.testing.assert_array_equal(a_term, g_term)
    assert not a_trunc.any()  # the bare adapter never truncates
    assert g_rew.sum() >= 1 and (name != "Breakout-MinAtar" or g_term.sum() >= 3)


def test_breakout_batched_rollout_equals_gymnax_autoreset():
    """wrap_for_training(adapter, 8) vs vmapped gymnax ``step`` (which auto-resets and truncates).

    Random play ends a Breakout episode after 6 to ~30 steps, so a limit of 12
    gives both terminated and truncated episodes.
    """
    num_envs, limit, num_steps = 8, 12, 80
    env, params = jrl.envs.make(
        "gymnax:Breakout-MinAtar", max_episode_steps=limit, max_steps_in_episode=limit
    )
    benv = wrap_for_training(env, num_envs)
    genv = env.unwrapped.gymnax_env
    n_act = env.action_space(params).n

    def rollout(key):
        k_reset, k_run = jax.random.split(key)
        state, _ = benv.reset(k_reset, params)
        g_obs, g_state = jax.vmap(genv.reset, in_axes=(0, None))(
            jax.random.split(k_reset, num_envs), params
        )

        def body(carry, key):
            state, g_state = carry
            k_act, k_step = jax.random.split(key)
            action = jax.random.randint(k_act, (num_envs,), 0, n_act)
            state, ts = benv.step(k_step, state, action, params)
            g_out = jax.vmap(genv.step, in_axes=(0, 0, 0, None))(
                jax.random.split(k_step, num_envs), g_state, action, params
            )
            g_obs, g_state, g_rew, g_term, g_trunc, g_info = g_out
            ours = (
                ts.observation,
                ts.info[FINAL_OBSERVATION],
                ts.reward,
                ts.terminated,
                ts.truncated,
            )
            theirs = (g_obs, g_info["final_observation"], g_rew, g_term, g_trunc)
            return (state, g_state), (
                ours,
                theirs,
                ts.info["episode_length"],
                ts.info["episode_done"],
            )

        (state, g_state), out = jax.lax.scan(
            body, (state, g_state), jax.random.split(k_run, num_steps)
        )
        return out, state, g_state, g_obs

    (ours, theirs, ep_len, ep_done), _, _, _ = jax.jit(rollout)(jax.random.key(3))
    _assert_trees_equal(ours, theirs)
    _, _, _, term, trunc = ours
    assert term.shape == (num_steps, num_envs)
    assert term.any() and trunc.any()  # both kinds of episode end happen and auto-reset
    assert (
        ep_len[trunc & ~term] == limit
    ).all()  # truncation comes from our TimeLimit, at the limit
    assert (ep_len[term] <= limit).all() and (ep_len[ep_done] > 0).all()
    assert int(ep_done.sum()) == int((term | trunc).sum())
