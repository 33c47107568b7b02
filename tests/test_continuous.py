"""What SAC, TD3 and DDPG share (agents/continuous/common.py, the continuous networks): action
scaling,
Polyak averaging, the clipped critic target and loss by hand, per-item noise, the critic
ensemble, bad action spaces, and the truncation
probe of each agent."""

import jax
import jax.numpy as jnp
import jrl.agents
import jrl.envs as jrl_envs
import numpy as np
import pytest
from jrl.agents.continuous import common as continuous

import jrl
from jrl.core import spaces
from jrl.ops import action_distributions as distributions
from jrl.parts import networks


def test_action_scale_maps_unit_actions_onto_the_bounds_and_back():
    scale = continuous.ActionScale.from_space(
        spaces.Box(np.array([-2.0, 0.0]), np.array([2.0, 10.0]))
    )
    unit = jnp.array([[-1.0, -1.0], [0.0, 0.5], [1.0, 1.0]])
    np.testing.assert_allclose(scale.to_env(unit), [[-2.0, 0.0], [0.0, 7.5], [2.0, 10.0]])
    np.testing.assert_allclose(scale.to_unit(scale.to_env(unit)), unit, atol=1e-6)
    assert scale.dim == 2


@pytest.mark.parametrize(
    "space,message",
    [
        (spaces.Discrete(3), "needs a Box action space"),
        (spaces.Box(-1.0, 1.0, (2, 2)), "1-D Box"),
        (spaces.Box(-np.inf, np.inf, (2,)), "must be finite"),
        (spaces.Box(np.array([-1.0, -1.0]), np.array([1.0, np.inf])), "must be finite"),
    ],
)
def test_action_scale_refuses_what_it_cannot_squash_into(space, message):
    with pytest.raises(ValueError, match=message):
        continuous.ActionScale.from_space(space, "sac")


def test_polyak_by_hand():
    target, online = {"w": jnp.array([0.0, 10.0])}, {"w": jnp.array([1.0, 20.0])}
    np.testing.assert_allclose(continuous.polyak(target, online, 0.1)["w"], [0.1, 11.0], rtol=1e-6)
    np.testing.assert_allclose(continuous.polyak(target, online, 1.0)["w"], [1.0, 20.0])


@pytest.mark.parametrize("jit", [False, True])
def test_critic_target_takes_the_ensemble_minimum_and_the_entropy_term(jit):
    """Three items (ongoing, terminated, truncated: discount gamma, 0, gamma), three critics."""
    reward = jnp.array([1.0, 2.0, 3.0])
    discount = jnp.array([0.9, 0.0, 0.9])
    next_q = jnp.array([[5.0, 100.0, 8.0], [4.0, 100.0, 9.0], [7.0, 100.0, 10.0]])
    entropy = jnp.array([0.5, 7.0, -1.0])  # alpha * log pi(a'|s')
    fn = jax.jit(continuous.critic_target) if jit else continuous.critic_target
    # min over critics: 4, 100, 8; terminated: the reward alone
    np.testing.assert_allclose(
        fn(reward, discount, next_q, entropy), [1.0 + 0.9 * 3.5, 2.0, 3.0 + 0.9 * 9.0], rtol=1e-6
    )
    np.testing.assert_allclose(
        fn(reward, discount, next_q), [1.0 + 0.9 * 4.0, 2.0, 3.0 + 0.9 * 8.0], rtol=1e-6
    )


def test_critic_loss_sums_the_critics_mean_squared_errors_and_holds_the_target():
    q = jnp.array([[1.0, 2.0], [0.0, 4.0]])  # 2 critics, 2 items
    target = jnp.array([2.0, 2.0])
    # critic 0: 0.5 * mean(1, 0) = 0.25; critic 1: 0.5 * mean(4, 4) = 2
    np.testing.assert_allclose(continuous.critic_loss(q, target), 2.25)
    g_target = jax.grad(lambda t: continuous.critic_loss(q, t))(target)
    np.testing.assert_array_equal(g_target, 0.0)
    g_q = jax.grad(lambda x: continuous.critic_loss(x, target))(q)
    np.testing.assert_allclose(g_q, [[-0.5, 0.0], [-1.0, 1.0]])  # (q - target) / B


def test_critic_subset_draws_distinct_rows_once_per_batch():
    next_q = jnp.arange(20.0).reshape(5, 4)  # 5 critics, 4 items: row n holds 4n .. 4n + 3
    for seed in range(8):
        key = jax.random.key(seed)
        sub = np.asarray(continuous.critic_subset(next_q, key, 2))
        rows = sub[:, 0] / 4
        assert sub.shape == (2, 4) and len(set(rows.tolist())) == 2  # without replacement
        np.testing.assert_array_equal(sub, np.asarray(next_q)[rows.astype(int)])  # whole rows
        expected = np.asarray(jax.random.choice(key, 5, (2,), replace=False))
        np.testing.assert_array_equal(rows, expected)
    for size in (0, 5):  # 0 or all: the ensemble as it is
        assert continuous.critic_subset(next_q, jax.random.key(0), size) is next_q
    drawn = {
        tuple(np.asarray(continuous.critic_subset(next_q, jax.random.key(s), 2))[:, 0] // 4)
        for s in range(40)
    }
    assert len(drawn) > 5  # a fresh subset for every key


def test_ou_step_by_hand():
    x = jnp.array([[1.0, -2.0]])
    eps = jnp.array([[0.5, 1.0]])
    # x - 0.15 x 0.01 + 0.2 sqrt(0.01) eps = x (1 - 0.0015) + 0.02 eps
    np.testing.assert_allclose(
        continuous.ou_step(x, eps, 0.15, 0.2, 0.01), [[0.9985 + 0.01, -1.997 + 0.02]], rtol=1e-6
    )
    # no noise: the process decays towards 0 at rate theta dt per step
    y = x
    for _ in range(10):
        y = continuous.ou_step(y, jnp.zeros_like(y), 0.5, 0.2, 0.1)
    np.testing.assert_allclose(y, x * 0.95**10, rtol=1e-5)


def test_item_normals_one_key_per_row():
    key = jax.random.key(3)
    x = continuous.item_normals(key, 4, 2)
    want = jax.vmap(lambda k: jax.random.normal(k, (2,)))(jax.random.split(key, 4))
    np.testing.assert_array_equal(x, want)


def test_uniform_warmup_until_the_first_update():
    class S:
        num_updates = jnp.zeros((), jnp.int32)

    action = jnp.full((512, 2), 0.25)
    warm = continuous.uniform_warmup(S, action, jax.random.key(0))
    assert float(warm.min()) >= -1.0 and float(warm.max()) <= 1.0
    assert abs(float(warm.mean())) < 0.05 and float(warm.std()) > 0.5
    S.num_updates = jnp.ones((), jnp.int32)
    np.testing.assert_array_equal(continuous.uniform_warmup(S, action, jax.random.key(0)), action)


def test_q_ensemble_holds_independent_critics():
    net = networks.QEnsemble(3, (8,), "relu", 1)
    obs, act = jnp.ones((5, 4)), jnp.zeros((5, 2))
    params = net.init(jax.random.key(0), obs, act)
    assert all(leaf.shape[0] == 3 for leaf in jax.tree.leaves(params))
    q = net.apply(params, obs, act)
    assert q.shape == (3, 5)
    assert len(np.unique(np.asarray(q[:, 0]))) == 3  # differently initialised critics
    one = networks.ContinuousQ((8,), "relu", 1)
    for n in range(3):
        p_n = {"params": jax.tree.map(lambda x, n=n: x[n], params["params"]["VmapContinuousQ_0"])}
        np.testing.assert_allclose(one.apply(p_n, obs, act), q[n], rtol=1e-6)


def test_actors_act_in_the_unit_box():
    obs = 10.0 * jax.random.normal(jax.random.key(1), (64, 3))
    det = networks.DeterministicActor(2, (16,), "relu", 1)
    a = det.apply(det.init(jax.random.key(0), obs), obs)
    assert a.shape == (64, 2) and float(jnp.abs(a).max()) <= 1.0
    gauss = networks.SquashedGaussianActor(2, (16,), "relu", 1)
    dist = gauss.apply(gauss.init(jax.random.key(0), obs), obs)
    assert isinstance(dist, distributions.TanhNormal)
    assert float(dist.log_std.min()) >= networks.LOG_STD_MIN
    assert float(dist.log_std.max()) <= networks.LOG_STD_MAX


@pytest.mark.parametrize("agent", ["sac", "td3", "ddpg"])
def test_registry_entry_and_action_space_check(agent):
    entry = jrl.agents.get(agent)
    assert {"learning_rate", "gamma", "tau"} <= set(entry.sweepable)
    assert agent in jrl.agents.fitting(spaces.Box(-1.0, 1.0, (2,)))
    assert agent not in jrl.agents.fitting(spaces.Discrete(2))
    assert "alphazero" in jrl.agents.fitting(spaces.Discrete(9), "game")
    assert "ippo" in jrl.agents.fitting(spaces.Discrete(3), "team")
    for other in ("alphazero", "ippo", "mappo"):  # not offered for CartPole
        assert other not in jrl.agents.fitting(spaces.Discrete(2))
    with pytest.raises(ValueError, match="needs a Box action space, but CartPole-v1 has Discrete"):
        jrl.agents.check_action_space(agent, spaces.Discrete(2), "CartPole-v1")
    with pytest.raises(ValueError, match="num_critics must be >= 1"):
        jrl.app.api.make_config(agent, "Pendulum-v1", num_critics=0)
    with pytest.raises(ValueError, match="tau must lie in"):
        jrl.app.api.make_config(agent, "Pendulum-v1", tau=0.0)
    with pytest.raises(ValueError, match=r"target_critics must lie in \[0, num_critics = 2\]"):
        jrl.app.api.make_config(agent, "Pendulum-v1", num_critics=2, target_critics=3)


PROBE = dict(
    seeds=2,
    total_steps=6_000,
    learning_starts=500,
    tau=0.05,
    learning_rate=1e-3,
    anneal_lr=True,
    hidden_sizes=(32, 32),
    progress=False,
    num_reports=2,
)
"""The truncation probe's run for the continuous agents."""


@pytest.mark.learning
@pytest.mark.parametrize("agent", ["sac", "td3", "ddpg"])
def test_truncation_probe(agent, learning_seed):
    """Reward 1 forever, truncated every 20 steps: Q(s, a) = 1/(1-gamma) for every state and
    action (SAC with a nearly zero fixed temperature, so its soft Q-value is the plain one)."""
    extra = dict(alpha=1e-3, autotune=False) if agent == "sac" else {}
    res = jrl.train(
        agent, "ContinuousTruncationProbe-v0", gamma=0.9, seed=learning_seed, **PROBE, **extra
    )
    assert_probe_q(res, 0.9)


def assert_probe_q(res, gamma):
    """Every run's critics at every state of an episode and three actions are within -10% /
    +50% of 1/(1-gamma). Below is what the probe tests: a learner that treated truncation as
    termination falls far below (see the comment in the loop). Above is only a bound on
    divergence: the bootstrap takes the actor's action, which seeks where the critic errs high,
    and the last states bootstrap from the final observation (t = 20), which no update trains
    (the env resets after it), so their values are the critic's extrapolation. Measured
    2026-12-04, the test's settings, seeds 100-115 (16 runs per agent): lowest 9.89 (SAC),
    9.91 (TD3), 9.91 (DDPG); highest 11.68, 11.61, 11.78, all at the last states; seed 20:
    12.70 (SAC) and 12.17 (DDPG), where the old +15% bound failed."""
    env, params = jrl_envs.make("ContinuousTruncationProbe-v0")
    built = jrl.agents.get(res.agent).build(res.config, env, params)
    _, critic = built.network
    obs = jnp.repeat(jnp.arange(20, dtype=jnp.float32)[:, None] / 20.0, 3, axis=0)
    act = jnp.tile(jnp.array([[-0.9], [0.0], [0.9]]), (20, 1))
    target = 1.0 / (1.0 - gamma)
    # A learner that treated truncation as termination would learn (1 - gamma^(20 - t)) /
    # (1 - gamma) at step t of 20: 6.5 at t = 10, 1.0 at the last step, far below 0.9 * 10.
    for r in range(res.num_runs):
        p = jax.tree.map(lambda x: x[r], res.final_params)
        q = np.asarray(critic.apply(p["critic"], obs, act))
        assert q.min() >= 0.9 * target and q.max() <= 1.5 * target, (res.agent, r, q)


def test_sweep_eval_render_and_export_through_the_cli(tmp_path):
    """A tiny SAC run through the `jrl` command: a learning-rate sweep (2 runs in one program),
    then `jrl eval`, `jrl render` (a Pendulum GIF) and `jrl export`, whose policy acts in the
    env's bounds [-2, 2] (the rescaling lives in the agent's policy)."""
    import os
    import subprocess
    import sys

    from jrl.app.export import load_policy

    def run(*args):
        env = {**os.environ, "JAX_PLATFORMS": "cpu", "MPLBACKEND": "Agg"}
        cmd = [sys.executable, "-m", "jrl.app.cli", *map(str, args)]
        return subprocess.run(
            cmd, capture_output=True, text=True, timeout=600, cwd=tmp_path, env=env
        )

    out = run(
        "train", "sac", "--env", "Pendulum-v1", "--total-steps", "600", "--learning-starts",
        "200", "--buffer-size", "600", "--hidden-sizes", "16", "16", "--sweep",
        "learning_rate=1e-3,3e-4", "--quiet", "--out", tmp_path / "run",
    )  # fmt: skip
    assert out.returncode == 0, out.stderr[-2000:]
    out = run("eval", tmp_path / "run", "--episodes", "2")
    assert out.returncode == 0, out.stderr[-2000:]
    assert "learning_rate=0.001" in out.stdout and "learning_rate=0.0003" in out.stdout
    out = run("render", tmp_path / "run", "--out", tmp_path / "ep.gif")
    assert out.returncode == 0 and (tmp_path / "ep.gif").stat().st_size > 0, out.stderr[-2000:]
    out = run("export", tmp_path / "run", "--out", tmp_path / "policy")
    assert out.returncode == 0, out.stderr[-2000:]
    policy = load_policy(tmp_path / "policy")
    obs = 5.0 * jax.random.normal(jax.random.key(0), (64, 3))
    actions = np.asarray(policy(obs))
    assert actions.shape == (64, 1) and np.abs(actions).max() <= 2.0
    assert np.abs(actions).max() > 1.0  # not squashed into [-1, 1]: the env's own actions


def test_a_critic_ensemble_of_five_is_a_config_value():
    """REDQ-style: num_critics=5 trains five critics (every critic leaf [runs, 5, ...]) in
    the same program as two would, with finite losses."""
    res = jrl.train(
        "sac",
        "Pendulum-v1",
        seeds=2,
        total_steps=400,
        learning_starts=200,
        buffer_size=400,
        hidden_sizes=(16, 16),
        num_critics=5,
        progress=False,
        num_reports=2,
    )
    for leaf in jax.tree.leaves(res.final_params["critic"]):
        assert leaf.shape[:2] == (2, 5)
    assert np.isfinite(res.metrics["train/critic_loss"]).all()
