"""IPPO and MAPPO (agents/multi_agent/ippo.py, agents/multi_agent/mappo.py,
agents/multi_agent/common.py): per-agent GAE by
hand, the team network (shared or per-agent parameters, local or centralised critic), action
masks, the config and the single-/multi-agent checks, learning Coordination-v0's optimum,
the truncation probe, exact resume with `jrl eval` and `jrl render` on the run folder, and
device-count invariance; one `learn` call of each against a reference written in the test."""

import itertools
import json
import os
import subprocess
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import jrl.agents
import jrl.envs as jrl_envs
import numpy as np
import pytest
from jrl.agents.multi_agent import ippo
from jrl.agents.multi_agent.common import MultiAgentActorCritic, agent_gae

import jrl
from jrl.app import api as experiment
from jrl.core.multi_agent_env import GLOBAL_STATE
from jrl.core.types import ACTION_MASK, OBSERVATION, Transition

QUIET = dict(progress=False)


def numpy_gae(reward, value, bootstrap, terminated, truncated, gamma, lam):
    """GAE of one column ``[T]``, written out."""
    adv = np.zeros_like(reward)
    nxt = 0.0
    for t in reversed(range(len(reward))):
        delta = reward[t] + gamma * (1.0 - terminated[t]) * bootstrap[t] - value[t]
        done = max(terminated[t], truncated[t])
        nxt = delta + gamma * lam * (1.0 - done) * nxt
        adv[t] = nxt
    return adv, adv + value


def test_agent_gae_by_hand():
    """Every (env, agent) column is its own GAE: agent 0 of env 0 terminates at t=2 while agent 1
    goes on; the rollout of env 1 is truncated at t=3 for both."""
    t, n, a = 6, 2, 2
    rng = np.random.default_rng(0)
    reward = rng.normal(size=(t, n, a)).astype(np.float32)
    value = rng.normal(size=(t, n, a)).astype(np.float32)
    bootstrap = rng.normal(size=(t, n, a)).astype(np.float32)
    terminated = np.zeros((t, n, a), np.float32)
    truncated = np.zeros((t, n, a), np.float32)
    terminated[2:, 0, 0] = 1.0  # agent 0 of env 0 stays terminated (absorbing)
    truncated[3, 1, :] = 1.0
    rollout = Transition(
        observation=jnp.zeros((t, n, 1)),
        action=jnp.zeros((t, n, a), jnp.int32),
        reward=jnp.asarray(reward),
        terminated=jnp.asarray(terminated, bool),
        truncated=jnp.asarray(truncated, bool),
        next_observation=jnp.zeros((t, n, 1)),
        extras={"value": jnp.asarray(value)},
    )
    hp = ippo.IPPOConfig(gamma=0.9, gae_lambda=0.8).hparams()
    adv, target = jax.jit(agent_gae)(rollout, jnp.asarray(bootstrap), hp)
    assert adv.shape == target.shape == (t, n, a)
    for i in range(n):
        for j in range(a):
            col = lambda x, i=i, j=j: x[:, i, j]
            want_adv, want_target = numpy_gae(
                *(col(x) for x in (reward, value, bootstrap, terminated, truncated)), 0.9, 0.8
            )
            np.testing.assert_allclose(adv[:, i, j], want_adv, rtol=1e-5, atol=1e-6)
            np.testing.assert_allclose(target[:, i, j], want_target, rtol=1e-5, atol=1e-6)


def _team_obs(batch=(5,), agents=3, size=4, key=0, state_size=7):
    k1, k2 = jax.random.split(jax.random.key(key))
    x = jax.random.normal(k1, (*batch, 1, size))
    return {
        OBSERVATION: jnp.broadcast_to(x, (*batch, agents, size)),  # every agent sees the same
        GLOBAL_STATE: jax.random.normal(k2, (*batch, state_size)),
    }


def _network(share, central, agents=3):
    return MultiAgentActorCritic(
        jrl.core.spaces.Discrete(4),
        agents,
        (16,),
        share_parameters=share,
        centralised_critic=central,
    )


@pytest.mark.parametrize("share", [True, False])
def test_network_shares_or_splits_parameters(share):
    """Shared: one actor and one critic, so agents that see the same observation get the same
    policy and value. Per agent: one each, and agent i's outputs depend on its own only."""
    net = _network(share, central=False)
    obs = _team_obs(batch=(2, 5))
    params = net.init(jax.random.key(1), obs)
    dist, value = net.apply(params, obs)
    assert dist.logits.shape == (2, 5, 3, 4) and value.shape == (2, 5, 3)
    copies = {k for k in params["params"] if k.startswith(("actors_", "critics_"))}
    assert copies == (
        {"actors_0", "critics_0"}
        if share
        else {f"actors_{i}" for i in range(3)} | {f"critics_{i}" for i in range(3)}
    )
    logits, values = np.asarray(dist.logits), np.asarray(value)
    for j in (1, 2):  # agent j against agent 0
        assert np.allclose(logits[:, :, 0], logits[:, :, j]) == share
        assert np.allclose(values[..., 0], values[..., j]) == share
    if not share:  # scaling agent 1's parameters changes agent 1's outputs only
        bumped = jax.tree.map(lambda x: x, params)
        bumped["params"]["actors_1"] = jax.tree.map(lambda x: 2.0 * x, params["params"]["actors_1"])
        bumped["params"]["critics_1"] = jax.tree.map(
            lambda x: 2.0 * x, params["params"]["critics_1"]
        )
        dist2, value2 = net.apply(bumped, obs)
        changed = np.abs(np.asarray(dist2.logits - dist.logits)).max(axis=(0, 1, 3))
        assert changed[1] > 0 and changed[0] == changed[2] == 0
        changed = np.abs(np.asarray(value2 - value)).max(axis=(0, 1))
        assert changed[1] > 0 and changed[0] == changed[2] == 0


def test_centralised_critic_reads_the_global_state_only():
    """MAPPO's critic: one value per agent from the global state; the agents' own observations
    do not enter it, the global state does."""
    net = _network(share=True, central=True)
    obs = _team_obs()
    params = net.init(jax.random.key(1), obs)
    value = net.apply(params, obs, method=net.value)
    assert value.shape == (5, 3)
    other_obs = {**obs, OBSERVATION: obs[OBSERVATION] + 1.0}
    np.testing.assert_array_equal(net.apply(params, other_obs, method=net.value), value)
    other_state = {**obs, GLOBAL_STATE: obs[GLOBAL_STATE] + 1.0}
    assert np.abs(np.asarray(net.apply(params, other_state, method=net.value) - value)).max() > 0
    assert params["params"]["critic"]["Dense_0"]["kernel"].shape == (16, 3)  # one per agent
    assert not any(k.startswith("critics_") for k in params["params"])


@pytest.mark.parametrize("agent", ["ippo", "mappo"])
def test_only_a_centralised_critic_gets_the_global_state(agent):
    """MAPPO's rollout carries the global state; IPPO's, whose critics are local, leaves it out
    (of its training env's observations and of the run's carried observation)."""
    config = jrl.agents.get(agent).config_cls()
    env, params = jrl_envs.make("Coordination-v0")
    built = jrl.agents.get(agent).build(config, env, params)
    state = built.algorithm.init(jax.random.key(0))
    want = agent == "mappo"
    assert (GLOBAL_STATE in built.env.observation_space(params).spaces) == want
    assert (GLOBAL_STATE in state.observation) == want
    assert OBSERVATION in state.observation and ACTION_MASK in state.observation


@pytest.mark.parametrize("agent", ["ippo", "mappo"])
def test_acting_honours_every_agents_mask(agent):
    """On Coordination-v0 one action per agent is masked; sampled and greedy actions avoid it."""
    config = experiment.make_config(agent, "Coordination-v0", share_parameters=False)
    env, params = jrl_envs.make("Coordination-v0")
    built = jrl.agents.get(agent).build(config, env, params)
    state = built.algorithm.init(jax.random.key(0))
    obs = state.observation
    mask = np.asarray(obs[ACTION_MASK])  # [N, A, 3]
    assert mask.shape == (16, 2, 3)
    for k in range(20):
        action, info = built.agent.act(state.agent_state, obs, jax.random.key(k))
        assert action.shape == (16, 2) and info["log_prob"].shape == (16, 2)
        assert np.take_along_axis(mask, np.asarray(action)[..., None], -1).all()
    greedy = built.agent.policy(state.agent_state.params, obs, None)
    assert np.take_along_axis(mask, np.asarray(greedy)[..., None], -1).all()


def test_config_refuses_what_a_team_learner_does_not_do():
    for bad, match in [
        (dict(recurrent="lstm"), "recurrent"),
        (dict(normalize_observations=True), "normalise"),
        (dict(shared_torso=True), "shared_torso"),
    ]:
        for agent in ("ippo", "mappo"):
            with pytest.raises(ValueError, match=match):
                experiment.make_config(agent, "Coordination-v0", **bad)
    assert jrl.agents.get("ippo").sweepable == jrl.agents.get("ppo").sweepable


def test_single_and_multi_agent_mismatches_are_refused():
    with pytest.raises(ValueError, match="single-agent agent.*agents for multi-agent envs: ippo"):
        jrl.agents.check_kind("ppo", "team", "Coordination-v0")
    with pytest.raises(ValueError, match="trains a team of agents, but CartPole-v1"):
        jrl.agents.check_kind("mappo", "single", "CartPole-v1")
    jrl.agents.check_kind("ppo", "single", "CartPole-v1")
    jrl.agents.check_kind("ippo", "team", "Coordination-v0")
    env, params = jrl_envs.make("CartPole-v1")  # the build refuses too (Python API)
    with pytest.raises(ValueError, match="needs a multi-agent env"):
        ippo.build(ippo.IPPOConfig(), env, params)


def _cli(*args, cwd):
    env = {**os.environ, "JAX_PLATFORMS": "cpu"}
    jrl_bin = str(Path(sys.executable).parent / "jrl")
    return subprocess.run(
        [jrl_bin, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=600
    )


def test_cli_refuses_mismatched_agent_and_env(tmp_path):
    out = _cli("train", "ppo", "--env", "Coordination-v0", cwd=tmp_path)
    assert out.returncode == 2, out.stderr
    assert "ppo is a single-agent agent, but Coordination-v0 is a multi-agent env" in out.stderr
    out = _cli("train", "ippo", "--env", "CartPole-v1", cwd=tmp_path)
    assert out.returncode == 2, out.stderr
    assert "ippo trains a team of agents, but CartPole-v1 is a single-agent env" in out.stderr
    assert not list(tmp_path.iterdir())  # refused before anything is written


def _greedy_returns(res):
    """Each run's mean greedy return at the last evaluation."""
    return np.asarray(res.evals[-1]["returns"])


@pytest.mark.learning
@pytest.mark.parametrize("agent", ["ippo", "mappo"])
def test_learns_the_optimal_joint_return(agent, learning_seed):
    """4 seeds, 20k steps on Coordination-v0: every seed's greedy team return is the optimum,
    16 (8 rounds, 2 agents paid 1 each); random valid play gets 4. The per-agent returns add up
    to the team's."""
    res = jrl.train(
        agent,
        "Coordination-v0",
        seeds=4,
        seed=learning_seed,
        total_steps=20_000,
        eval_every=20_000,
        eval_episodes=16,
        num_reports=2,
        **QUIET,
    )
    # measured 2026-12-01, 4 seeds: greedy 16.0 for every seed (training return >= 15.9 after
    # 8k steps); the optimum is exact, so no margin below it. 2026-12-05, seeds 2000-2007: 16.0
    # for every seed, IPPO and MAPPO (`benchmarks/seed_checks.py ippo-coordination --seeds
    # 2000:8`, and mappo-coordination)
    np.testing.assert_array_equal(_greedy_returns(res), 16.0)
    m = res.metrics
    team = np.asarray(m["train/episode_return"])[:, -1]
    per_agent = sum(np.asarray(m[f"train/episode_return/agent_{i}"])[:, -1] for i in range(2))
    np.testing.assert_allclose(per_agent, team, rtol=1e-5)


@pytest.mark.learning
def test_truncation_probe():
    """Every agent paid 1 forever, cut every 20 steps: each agent's value is 1/(1-gamma)
    at every step of the episode."""
    gamma = 0.9
    res = jrl.train(
        "ippo",
        "TeamTruncationProbe-v0",
        seeds=2,
        total_steps=60_000,
        gamma=gamma,
        ent_coef=0.0,
        num_reports=2,
        **QUIET,
    )
    env, params = jrl_envs.make("TeamTruncationProbe-v0")
    built = ippo.build(res.config, env, params)
    t = jnp.arange(20, dtype=jnp.float32)[:, None, None] / 20.0
    obs = {OBSERVATION: jnp.broadcast_to(t, (20, 2, 1)), GLOBAL_STATE: jnp.zeros((20, 2))}
    target = 1.0 / (1.0 - gamma)
    for r in range(res.num_runs):
        p = jax.tree.map(lambda x, r=r: x[r], res.final_params)
        v = np.asarray(built.network.apply(p, obs, method=built.network.value))
        # measured 2026-12-01 (60k steps, 2 seeds): within 2.1% of 10 everywhere; treating
        # truncation as termination would give 6.5 at t = 10 and 1 at the last step.
        # 2026-12-05, seeds 0-1 and 2000-2007: 9.749 .. 10.124, margin 0.75 inside the 10%
        # bounds (`benchmarks/seed_checks.py ippo-probe --seeds 0:2 2000:8`)
        np.testing.assert_allclose(v, target, rtol=0.1, err_msg=f"run {r}")


def test_interrupted_run_resumes_bit_identical_and_evaluates(tmp_path, capsys):
    """MAPPO with one network per agent, 2 seeds, stopped after 2 of 4 iterations and resumed:
    the same parameters and metrics as an uninterrupted run. Then `jrl eval` and `jrl render`
    (in this process: the CLI's own functions) work on the run folder."""
    from jrl.app import cli

    kw = dict(total_steps=4 * 512, share_parameters=False, num_reports=4, **QUIET)
    whole = jrl.train("mappo", "Coordination-v0", 2, out=tmp_path / "whole", **kw)
    with pytest.raises(experiment.TrainingInterrupted):
        jrl.train("mappo", "Coordination-v0", 2, out=tmp_path / "split", stop_at_steps=1024, **kw)
    resumed = experiment.resume(tmp_path / "split", progress=False)
    for x, y in zip(jax.tree.leaves(whole.final_params), jax.tree.leaves(resumed.final_params)):
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))
    for k in whole.metrics:
        np.testing.assert_array_equal(whole.metrics[k], resumed.metrics[k], err_msg=k)
    assert "train/episode_return/agent_1" in whole.metrics
    capsys.readouterr()
    assert cli.main(["eval", str(tmp_path / "split"), "--episodes", "4"]) == 0
    assert "mappo on Coordination-v0" in capsys.readouterr().out
    report = json.loads((tmp_path / "split" / "eval.json").read_text())
    assert len(report["runs"]) == 2
    gif = tmp_path / "episode.gif"
    assert cli.main(["render", str(tmp_path / "split"), "--out", str(gif)]) == 0
    assert "over 8 steps" in capsys.readouterr().out and gif.stat().st_size > 0


def test_device_count_invariance(tmp_path):
    """IPPO with one network per agent: the same global batch on 1 and 2 (fake) devices gives
    the same parameters."""
    worker = str(Path(__file__).parent / "dist_worker.py")
    results = []
    for name, devices, fake in [("plain", "0", "1"), ("2dev", "2", "2")]:
        out = subprocess.run(
            [sys.executable, worker, str(tmp_path / f"{name}.npz"), "ippo", devices]
            + ["--fake-devices", fake],
            capture_output=True,
            text=True,
            env={**os.environ, "JAX_PLATFORMS": "cpu"},
            timeout=600,
        )
        assert out.returncode == 0, out.stderr[-3000:]
        data = np.load(tmp_path / f"{name}.npz")
        results.append([data[k] for k in data.files if k.startswith("arr_")])
    assert max(float(np.abs(x - y).max()) for x, y in zip(*results)) <= 1e-5
    assert max(float(np.abs(x[0] - x[1]).max()) for x in results[0]) > 1e-3  # seeds differ


# --------------------------------------------------------------------------------- learn
# One `learn` call of IPPO and MAPPO against a reference written here from the papers (PPO:
# Schulman et al., 2017; GAE: Schulman et al., 2016; MAPPO: Yu et al., 2022): a hand-written
# forward pass over the agent's parameter tree (tanh MLPs; one actor/critic for all agents or
# one per agent; MAPPO's critic on the global state with one output per agent), GAE per
# (env, agent) column, advantages normalised over the whole minibatch, PPO's loss as a mean
# over steps, envs and agents, and two hand-written Adam steps after global-norm clipping.


EPISODE_ENDS = {  # T -> (terminated, truncated) (step, env, agent) of a team rollout
    8: ([(2, 0, 0), (5, 1, 0), (5, 1, 1)], [(4, 0, 0), (4, 0, 1), (1, 1, 1)]),
    4: ([(2, 0, 0), (1, 1, 0)], [(3, 0, 1), (1, 1, 1)]),
}


def _team_rollout(key, central, t=8, n=2, a=2, obs_size=6, state_size=4, k=3):
    """A Coordination-v0-shaped team rollout ``[T, N, A]``: random observations and masks (one
    or two invalid actions per agent), valid actions, per-agent episode ends of both kinds
    (:data:`EPISODE_ENDS`: agent 0 of env 0 terminates while agent 1 goes on), behaviour
    log-probs unlike the network's, and "value" extras that ``learn`` must ignore."""
    ks = jax.random.split(key, 9)
    mask = jax.random.uniform(ks[0], (2, t, n, a, k)) < 0.7
    mask = mask.at[..., 0].set(~mask[..., 1] | mask[..., 0])  # at least one valid action
    score = jax.random.uniform(ks[1], (t, n, a, k)) + 2.0 * mask[0]
    action = jnp.argmax(score, axis=-1)  # a valid action
    terminated = np.zeros((t, n, a), bool)
    truncated = np.zeros((t, n, a), bool)
    for flags, ends in zip((terminated, truncated), EPISODE_ENDS[t]):
        flags[tuple(np.transpose(ends))] = True

    def obs(i, m):
        o = {
            OBSERVATION: jax.random.normal(ks[2 + i], (t, n, a, obs_size)),
            ACTION_MASK: m,
        }
        if central:
            o[GLOBAL_STATE] = jax.random.normal(ks[4 + i], (t, n, state_size))
        return o

    return Transition(
        observation=obs(0, mask[0]),
        action=action,
        reward=jax.random.uniform(ks[6], (t, n, a), minval=-1.0, maxval=2.0),
        terminated=jnp.asarray(terminated),
        truncated=jnp.asarray(truncated),
        next_observation=obs(1, mask[1]),
        extras={
            "log_prob": jnp.log(jax.random.uniform(ks[7], (t, n, a), minval=0.2, maxval=0.8)),
            "value": jax.random.normal(ks[8], (t, n, a)),
        },
    )


def _mlp(p, x):
    """Flax's ``MLP`` torso by hand: ``tanh(x W + b)`` per hidden layer."""
    for i in range(len(p)):
        x = jnp.tanh(x @ p[f"Dense_{i}"]["kernel"] + p[f"Dense_{i}"]["bias"])
    return x


def _dense(p, x):
    return x @ p["kernel"] + p["bias"]


def _reference_outputs(params, obs, share, central, num_agents=2):
    """``(masked log-probs [..., A, k], values [..., A])`` from the parameter tree by hand."""
    p = params["params"]
    x, mask = obs[OBSERVATION], obs[ACTION_MASK]
    logits, values = [], []
    for i in range(num_agents):
        actor = p["actors_0" if share else f"actors_{i}"]
        logits.append(_dense(actor["PolicyHead_0"]["Dense_0"], _mlp(actor["MLP_0"], x[..., i, :])))
        if not central:
            critic = p["critics_0" if share else f"critics_{i}"]
            values.append(_dense(critic["Dense_0"], _mlp(critic["MLP_0"], x[..., i, :]))[..., 0])
    logits = jnp.stack(logits, axis=-2)
    if central:  # one critic on the global state, one output per agent
        critic = p["critic"]
        value = _dense(critic["Dense_0"], _mlp(critic["MLP_0"], obs[GLOBAL_STATE]))
    else:
        value = jnp.stack(values, axis=-1)
    # log-softmax over the valid actions only (no infinities, so no NaN gradients)
    top = jnp.max(jnp.where(mask, logits, -1e30), axis=-1, keepdims=True)
    z = jnp.sum(jnp.where(mask, jnp.exp(logits - top), 0.0), axis=-1, keepdims=True)
    log_p = jnp.where(mask, logits - top - jnp.log(z), 0.0)
    return log_p, mask, value


def _reference_update(learn_reference, params, batch, share, central, c):
    """``(update, value targets)``: ``update(schedule)`` makes one gradient step of the
    reference PPO loss with Adam per minibatch of ``schedule`` (``[S, k, N]``: the steps of
    every env each minibatch holds) and returns ``(params, metrics averaged over the steps,
    fraction of samples whose value the clip moves at the last step)``. The advantages and
    targets are the whole rollout's, from the parameters ``params`` it starts from."""
    out = lambda p, o: _reference_outputs(p, o, share, central)  # noqa: E731
    v_old = np.asarray(out(params, batch.observation)[2], np.float64)
    boot = np.asarray(out(params, batch.next_observation)[2], np.float64)
    t = v_old.shape[0]
    cols = lambda x: np.asarray(x, np.float64).reshape(t, -1)  # noqa: E731  (env, agent) columns
    adv, target = learn_reference.gae(
        cols(batch.reward),
        cols(v_old),
        cols(boot),
        cols(batch.terminated),
        cols(batch.truncated),
        c["gamma"],
        c["gae_lambda"],
    )
    adv, g = (jnp.asarray(x.reshape(v_old.shape), jnp.float32) for x in (adv, target))
    whole = (batch, adv, g, jnp.asarray(v_old))
    eps = c["clip_eps"]

    def loss(p, steps):  # steps [k, N]
        envs = jnp.arange(steps.shape[1])
        mb, adv, g, v_old = jax.tree.map(lambda x: x[steps, envs], whole)
        adv, old_lp = learn_reference.normalize(adv), mb.extras["log_prob"]
        log_p, mask, values = out(p, mb.observation)
        lp = jnp.take_along_axis(log_p, mb.action[..., None], axis=-1)[..., 0]
        ratio = jnp.exp(lp - old_lp)
        pg = -jnp.mean(jnp.minimum(ratio * adv, jnp.clip(ratio, 1 - eps, 1 + eps) * adv))
        v_err = (values - g) ** 2
        v_clip = v_old + jnp.clip(values - v_old, -eps, eps)
        if c["clip_value"]:
            v_err = jnp.maximum(v_err, (v_clip - g) ** 2)
        v_loss = 0.5 * jnp.mean(v_err)
        entropy = jnp.mean(-jnp.sum(jnp.where(mask, jnp.exp(log_p) * log_p, 0.0), axis=-1))
        parts = {
            "train/policy_loss": pg,
            "train/value_loss": v_loss,
            "train/entropy": entropy,
            "train/clip_fraction": jnp.mean(jnp.abs(ratio - 1) > eps),
            "train/approx_kl": jnp.mean(old_lp - lp),
        }
        total = pg + c["vf_coef"] * v_loss - c["ent_coef"] * entropy
        return total, (parts, jnp.mean(v_clip != values))

    b1, b2, adam_eps, lr = 0.9, 0.999, 1e-5, c["learning_rate"]
    grad, start = jax.value_and_grad(loss, has_aux=True), params

    @jax.jit
    def update(schedule):
        params, history = start, []
        m = v = jax.tree.map(jnp.zeros_like, params)
        for step in range(1, schedule.shape[0] + 1):
            (total, (parts, v_clipped)), grads = grad(params, schedule[step - 1])
            norm = jnp.sqrt(sum(jnp.sum(x**2) for x in jax.tree.leaves(grads)))
            grads = jax.tree.map(lambda x: x * jnp.minimum(1.0, c["max_grad_norm"] / norm), grads)
            m = jax.tree.map(lambda m, x: b1 * m + (1 - b1) * x, m, grads)
            v = jax.tree.map(lambda v, x: b2 * v + (1 - b2) * x**2, v, grads)
            params = jax.tree.map(
                lambda p, m, v: (
                    p - lr * (m / (1 - b1**step)) / (jnp.sqrt(v / (1 - b2**step)) + adam_eps)
                ),
                params,
                m,
                v,
            )
            history.append({**parts, "train/loss": total, "train/grad_norm": norm})
        metrics = {k: jnp.mean(jnp.stack([h[k] for h in history])) for k in history[0]}
        return params, metrics, v_clipped

    return update, target


LEARN_CASES = [  # (agent, share_parameters, clip_value)
    ("ippo", True, True),
    ("ippo", False, True),
    ("mappo", True, True),
    ("mappo", False, False),
]


def _learn_case(agent, share, c, t, **cfg):
    """The agent built on Coordination-v0 (2 envs, ``t`` steps, 8x8 networks, ``c``'s
    hyperparameters), its initial state, a team rollout ``[t, 2, 2]``, and a check that the
    reference network is the agent's (values and log-probs of the actions taken)."""
    central = agent == "mappo"
    config_cls = jrl.agents.get(agent).config_cls
    cfg = config_cls(
        total_steps=32 * 10,
        num_envs=2,
        num_steps=t,
        hidden_sizes=(8, 8),
        share_parameters=share,
        **c,
        **cfg,
    )
    env, env_params = jrl_envs.make("Coordination-v0")
    built = jrl.agents.get(agent).build(cfg, env, env_params)
    state = built.agent.init(jax.random.key(0), built.spec)
    batch = _team_rollout(jax.random.key(1), central, t=t)
    dist, value = built.network.apply(state.params, batch.observation)
    log_p, mask, ref_value = _reference_outputs(state.params, batch.observation, share, central)
    np.testing.assert_allclose(value, ref_value, rtol=1e-5, atol=1e-6)
    lp = dist.log_prob(batch.action)
    ref_lp = jnp.take_along_axis(log_p, batch.action[..., None], -1)[..., 0]
    np.testing.assert_allclose(lp, ref_lp, rtol=1e-5, atol=1e-6)
    assert not bool(mask.all())  # some actions are masked
    return built, state, batch


def _coefficients(clip_value=True):
    return dict(
        gamma=0.9,
        gae_lambda=0.8,
        clip_eps=0.2,
        vf_coef=0.7,
        ent_coef=0.05,
        learning_rate=0.03,
        max_grad_norm=0.5,
        clip_value=clip_value,
    )


def _assert_learned(learned, c, want, metrics, target):
    """``learn``'s result is the reference's: metrics, value targets and parameters."""
    m = learned.metrics
    for name, x in metrics.items():
        np.testing.assert_allclose(m[name], x, rtol=1e-5, atol=1e-6, err_msg=name)
    np.testing.assert_allclose(m["train/value_target"], target.mean(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(m["train/learning_rate"], c["learning_rate"], rtol=1e-6)
    assert int(learned.agent_state.num_updates) == 1
    for path, x in jax.tree_util.tree_leaves_with_path(learned.agent_state.params):
        y = want
        for k in path:
            y = y[k.key]
        np.testing.assert_allclose(x, y, rtol=1e-5, atol=1e-5, err_msg=jax.tree_util.keystr(path))


@pytest.mark.parametrize("agent,share,clip_value", LEARN_CASES)
def test_learn_matches_a_reference(agent, share, clip_value, learn_reference):
    """Two epochs of one minibatch (the whole ``[8, 2, 2]`` rollout): ``learn``'s parameters
    are two Adam steps down the reference loss's gradient (the second from the first's
    parameters, with the old values and log-probs kept), and its metrics the reference's means
    over both steps. The case is not degenerate: some ratios are clipped and some not, and
    some values move past the value clip's range at the second step."""
    c = _coefficients(clip_value)
    built, state, batch = _learn_case(agent, share, c, 8, num_epochs=2, num_minibatches=1)
    update, target = _reference_update(
        learn_reference, state.params, batch, share, agent == "mappo", c
    )
    want, metrics, v_clipped = update(jnp.broadcast_to(jnp.arange(8)[:, None], (2, 8, 2)))
    assert 0.0 < float(metrics["train/clip_fraction"]) < 1.0
    assert v_clipped > 0
    learned = jax.jit(built.agent.learn)(state, batch, jax.random.key(2))
    _assert_learned(learned, c, want, metrics, target)


@pytest.mark.parametrize("agent,share", [("ippo", False), ("mappo", True)])
def test_learn_with_two_minibatches_matches_a_reference(agent, share, learn_reference):
    """One epoch of two minibatches of a ``[4, 2, 2]`` rollout: each minibatch holds 2 steps
    of every env (and every agent of them), drawn by ``learn``'s key. Of the 36 ways to split
    every env's 4 steps in two, exactly one gives ``learn``'s parameters (two reference Adam
    steps, advantages normalised per minibatch), and its metrics are the reference's."""
    c = _coefficients()
    built, state, batch = _learn_case(agent, share, c, 4, num_epochs=1, num_minibatches=2)
    learned = jax.jit(built.agent.learn)(state, batch, jax.random.key(2))
    update, target = _reference_update(
        learn_reference, state.params, batch, share, agent == "mappo", c
    )
    halves = [(h, sorted(set(range(4)) - set(h))) for h in itertools.combinations(range(4), 2)]
    splits = list(itertools.product(halves, repeat=2))  # env -> (steps in mb 0, steps in mb 1)
    schedules = jnp.asarray([np.transpose(split, (1, 2, 0)) for split in splits])  # [36, 2, 2, N]
    want, metrics, _ = jax.vmap(update)(schedules)
    gap = jax.tree.map(
        lambda x, y: jnp.abs(x[None] - y).reshape(len(splits), -1).max(1),
        learned.agent_state.params,
        want,
    )
    gap = np.max(jax.tree.leaves(gap), axis=0)  # [36]
    # measured 2026-12-04: the split learn drew within 3e-6, the next nearest 0.086 away
    matches = np.flatnonzero(gap < 1e-4)
    assert len(matches) == 1, (matches, np.sort(gap)[:3])
    i = int(matches[0])
    pick = lambda tree: jax.tree.map(lambda x: x[i], tree)  # noqa: E731
    _assert_learned(learned, c, pick(want), pick(metrics), target)
