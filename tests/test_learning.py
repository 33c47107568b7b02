"""Learning tests: each agent reaches a return threshold on its reference env.

Several seeds are vmapped in one compiled program; budgets are sized for a
2-core CPU. The truncation probe guards every agent against treating a
time-limit truncation as termination.

Every test takes its base seed from the ``learning_seed`` fixture (``JRL_LEARNING_SEED``,
default 0; tests/conftest.py), so ``JRL_LEARNING_SEED=100 pytest -m learning`` runs them on
seeds 100, 101, ... A threshold must hold for whichever seeds a test is given: it is set from
>= 8 seeds that are not the test's own (``benchmarks/learning_reach.py``, BENCHMARKS.md
"Learning reach", seeds from 1000), below the worst group of the test's seed count among them
(the test's statistic over the lowest measured seeds) by the margin written beside it, so a
clearly degraded agent still fails. Where 8-16 seeds were vmapped only to steady the mean, the
test runs 2-4 with a threshold set that way.
"""

import jax
import jax.numpy as jnp
import jrl.envs as jrl_envs
import numpy as np
import pytest
from jrl.agents.actor_critic import a2c, ppo

import jrl

pytestmark = pytest.mark.learning


def test_ppo_cartpole_475(learning_seed):
    """PPO, PureJaxRL's CartPole configuration, 4 seeds, 5e5 steps."""
    res = jrl.train(
        "ppo",
        "CartPole-v1",
        seeds=4,
        seed=learning_seed,
        total_steps=500_000,
        progress=False,
        num_reports=4,
    )
    final = res.final_returns()
    # measured 2026-12-04, 8 seeds from 1000 (BENCHMARKS.md "Learning reach"): 500.0 +- 0.0
    # (every seed 500; 2026-12-01, seeds 0-7: the same), worst 4: 500, margin 25 to 475, "solved"
    assert final.mean() >= 475, (final, res.summary())


def test_ppo_pendulum_continuous(learning_seed):
    """Continuous PPO (Gaussian policy, obs/reward normalisation), 8 seeds, 1.5e5 steps."""
    res = jrl.train(
        "ppo",
        "Pendulum-v1",
        seeds=8,
        seed=learning_seed,
        total_steps=150_000,
        progress=False,
        num_reports=4,
    )
    final = res.final_returns()
    # measured 2026-12-01 on an AMD EPYC, 8 seeds: -168.1 +- 18.9 (-201.9 .. -139.4). On an
    # Intel Xeon (AVX-512: other float rounding, so other trajectories) 2026-12-02: one of the
    # same 8 seeds stays at -468.6 (mean -205.6, median -166.8; 16 seeds: 2 of them below -250,
    # median -167.7). 2026-12-04 (AMD EPYC), 8 seeds from 1000 (BENCHMARKS.md "Learning reach"):
    # mean -217.0, median -162.9 (-623.9 .. -139.2): one seed at -623.9 again. About 1 seed in 8
    # does not learn at this budget, so "at most 1 of 8" would fail for about a quarter of the
    # seed sets; the median (robust to 3 such seeds) must reach -200, a margin of 37, and a
    # majority, 5 of 8, -250 (7 of 8 reach it on each set measured)
    assert np.median(final) >= -200, (final, res.summary())
    assert np.sum(final >= -250) >= 5, (final, res.summary())


def test_a2c_cartpole(learning_seed):
    """A2C, its CartPole-v1 defaults, 4 seeds, 5e5 steps."""
    res = jrl.train(
        "a2c",
        "CartPole-v1",
        seeds=4,
        seed=learning_seed,
        total_steps=500_000,
        progress=False,
        num_reports=4,
    )
    final = res.final_returns()
    # measured 2026-12-04, 8 seeds from 1000 (BENCHMARKS.md "Learning reach"): 407.5 +- 160.3
    # (114.8 .. 500): 2 of 8 stall below 150, the rest reach 500 (2026-12-01: seeds 0-15 all
    # 500; of seeds 0-7 vmapped as 8, one stalls at 192). The worst 4: 315.1, threshold 260, a
    # margin of 55 (17%); an untrained policy returns about 22
    assert final.mean() >= 260, (final, res.summary())


@pytest.mark.parametrize("agent", ["ppo", "a2c"])
def test_truncation_probe(agent, learning_seed):
    """Reward 1 forever, truncated (never terminated) every 20 steps: V(s) = 1/(1-gamma)
    everywhere."""
    gamma = 0.9
    res = jrl.train(
        agent,
        "TruncationProbe-v0",
        seeds=2,
        seed=learning_seed,
        total_steps=60_000,
        gamma=gamma,
        ent_coef=0.0,
        progress=False,
        num_reports=2,
    )
    module = {"ppo": ppo, "a2c": a2c}[agent]
    env, params = jrl_envs.make("TruncationProbe-v0")
    built = module.build(res.config, env, params)
    obs = jnp.arange(20, dtype=jnp.float32)[:, None] / 20.0  # every state of an episode
    # A learner that treated truncation as termination would learn (1 - gamma^(20 - t)) /
    # (1 - gamma) at step t of 20: 6.5 at t = 10, 1.0 at the last step, outside the 10% below.
    target = 1.0 / (1.0 - gamma)
    for r in range(res.num_runs):
        p = jax.tree.map(lambda x: x[r], res.final_params)
        values = np.asarray(built.network.apply(p, obs, method=built.network.value))
        np.testing.assert_allclose(values, target, rtol=0.10, err_msg=f"{agent} run {r}: {values}")


def test_sweep_learning_rate_in_one_program(learning_seed):
    """A learning-rate sweep runs every value for every seed in one program; a useless
    (tiny) learning rate does not learn while a good one does."""
    res = jrl.train(
        "ppo",
        "CartPole-v1",
        seeds=4,
        seed=learning_seed,
        total_steps=100_000,
        sweep={"learning_rate": [1e-7, 2.5e-3]},
        progress=False,
        num_reports=2,
    )
    groups = dict(res.groups())
    final = res.final_returns()
    tiny, good = final[groups["learning_rate=1e-07"]], final[groups["learning_rate=0.0025"]]
    # measured 2026-12-04, 8 seeds from 1000 each (BENCHMARKS.md "Learning reach"): 1e-7: 22.6
    # +- 0.8 (21.4 .. 23.9; an untrained policy's return), the highest 4: 23.3, margin 6.7;
    # 2.5e-3: 500.0 +- 0.0, the worst 4: 500, margin 50 (2026-12-01, seeds 0-7: the same)
    assert good.mean() >= 450 and tiny.mean() < 30, (tiny, good)


# ---------------------------------------------------------------------------
# The value-based family (presets: agents/value/dqn.py CLASSIC_CONTROL, agents/value/pqn.py)
# ---------------------------------------------------------------------------


# Each threshold is set from 8 seeds from 1000, not the test's (measured 2026-12-04, BENCHMARKS.md
# "Learning reach"): their mean +- std (min .. max), the worst group of the test's seed count
# (the mean of its lowest seeds) and the margin by which that group clears the threshold. The
# value-based agents spread widely from seed to seed (a seed may collapse after solving), so a
# mean over 4 seeds is judged with a threshold about 15% below the worst 4 seeds' mean (until
# 2026-12-04 DQN and QR-DQN ran 16 seeds, the others 8, to steady the mean).
@pytest.mark.parametrize(
    "agent,env_id,seeds,steps,threshold",
    [
        # 435.6 +- 77.0 (277.7 .. 500), worst 4: 379.2, margin 59.2 (2026-12-01, seeds 0-15:
        # 438.9 +- 72.4, 262.2 .. 500)
        ("dqn", "CartPole-v1", 4, 100_000, 320),
        # 449.3 +- 99.2 (192.9 .. 500), worst 4: 398.5, margin 58.5 (2026-12-01, seeds 0-7:
        # 492.7 +- 10.6)
        ("rainbow", "CartPole-v1", 4, 100_000, 340),
        # 500.0 +- 0.0 (every seed 500; 2026-12-01, seeds 0-7: the same; 2026-12-04, seeds
        # 2000-2015: the same), but seeds 26-29 (the test's pair 26): 500, 444.5, 500, 269.1, a
        # worst 4 of 428.4 among 36 seeds; threshold 15% below it, margin 68.4
        ("c51", "CartPole-v1", 4, 100_000, 360),
        # 428.3 +- 52.5 (345.8 .. 500), worst 4: 383.7, margin 63.7 (2026-12-01, seeds 0-15:
        # 447.2 +- 56.3, 318.8 .. 498.5)
        ("qrdqn", "CartPole-v1", 4, 100_000, 320),
        # -94.2 +- 5.1 (-104.1 .. -88.6), worst 4: -97.8, margin 17.2 (2026-12-01, seeds 0-7:
        # -89.3 +- 3.0, -95.9 .. -85.8; its threshold -102 had a margin of 7.8 over seeds
        # 1000-1007); an untrained policy returns about -500
        ("dqn", "Acrobot-v1", 4, 60_000, -115),
    ],
)
def test_value_based_thresholds(agent, env_id, seeds, steps, threshold, learning_seed):
    """The env's preset with ``steps`` env steps per seed, ``seeds`` seeds from
    ``learning_seed``: their mean final return reaches the threshold."""
    res = jrl.train(
        agent,
        env_id,
        seeds=seeds,
        seed=learning_seed,
        total_steps=steps,
        progress=False,
        num_reports=4,
    )
    final = res.final_returns()
    assert final.mean() >= threshold, (final, res.summary())


# ---------------------------------------------------------------------------
# Continuous control off-policy (presets: agents/continuous/sac.py, td3.py, ddpg.py PENDULUM)
# ---------------------------------------------------------------------------


# Thresholds from 8 seeds from 1000 (2026-12-04, BENCHMARKS.md "Learning reach"): mean +- std
# (min .. max), the worst pair's mean and the margin to the threshold; all within the issue's
# bounds (#18: SAC and TD3 >= -250, DDPG >= -300; an untrained policy returns about -1200). TD3's
# and DDPG's presets have no schedule tied to the budget, so a run of 20k steps is the first 2/3
# of the measured 30k run: its figures are the measurement's returns over steps 19k-20k (the
# worst pair stays within -189 .. -203 over 20k-24k steps). 2 seeds and 20k steps, not 4 and 30k;
# SAC, 2 seeds, not 4, on its preset's 20k.
@pytest.mark.parametrize(
    "agent,seeds,steps,threshold",
    [
        # -134.6 +- 34.0 (-192.0 .. -96.5), worst pair -179.1, margin 50.9 (2026-12-01, seeds
        # 0-3: -154.0 +- 30.8, -180.8 .. -101.7; its threshold -180 had a margin of 15 over the
        # worst 4 of seeds 1000-1007)
        ("sac", 2, 20_000, -230),
        # at 20k steps (of 30k): -143.0 +- 41.0 (-212.5 .. -97.7), worst pair -202.7, margin
        # 47.3 (the bound); at 30k: -147.7 +- 22.2 (-174.1 .. -107.3)
        ("td3", 2, 20_000, -250),
        # at 20k steps (of 30k): -140.3 +- 36.5 (-196.7 .. -99.8), worst pair -193.3, margin
        # 56.7 (#18's bound for DDPG is -300); at 30k: -148.7 +- 22.6 (-170.8 .. -109.2)
        ("ddpg", 2, 20_000, -250),
    ],
)
def test_continuous_pendulum_thresholds(agent, seeds, steps, threshold, learning_seed):
    """The agent's Pendulum-v1 preset (64-64 networks, 1e3 random steps first, one update per
    env step), ``steps`` env steps per seed."""
    res = jrl.train(
        agent,
        "Pendulum-v1",
        seeds=seeds,
        seed=learning_seed,
        total_steps=steps,
        progress=False,
        num_reports=4,
    )
    final = res.final_returns()
    assert final.mean() >= threshold, (final, res.summary())
