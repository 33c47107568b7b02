"""DQN: targets, target-network updates, exploration schedule, the off-policy loop, learning."""


import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jrl
import jrl.agents
import jrl.envs as jrl_envs
from jrl import experiment
from jrl import buffers
from jrl.agents import dqn
from jrl.types import Transition


def _one_step_batch(gamma):
    """Three one-step transitions through the n=1 accumulator: ongoing, terminated, truncated."""
    acc = buffers.nstep_accumulator(1, gamma)
    obs = jnp.array([[0.0], [1.0], [2.0]])
    t = Transition(obs, jnp.array([0, 1, 0]), jnp.array([1.0, 2.0, 3.0]), jnp.array([False, True, False]),
                   jnp.array([False, False, True]), obs + 10.0)
    state = acc.init(t)
    _, item, valid = acc.push(state, t)
    assert bool(valid.all())
    return item


@pytest.mark.parametrize("jit", [False, True])
def test_double_q_target_by_hand(jit):
    gamma = 0.9
    item = _one_step_batch(gamma)
    np.testing.assert_allclose(item.discount, [gamma, 0.0, gamma])  # terminated: no bootstrap
    np.testing.assert_allclose(item.next_observation[:, 0], [10.0, 11.0, 12.0])  # truncated: final obs
    q_online = jnp.array([[1.0, 5.0], [3.0, 0.0], [0.0, 2.0]])  # argmax: 1, 0, 1
    q_target = jnp.array([[7.0, 4.0], [100.0, 100.0], [6.0, 8.0]])
    fn = jax.jit(dqn.q_targets, static_argnums=4) if jit else dqn.q_targets
    double = fn(q_online, q_target, item.reward, item.discount, True)
    # ongoing: 1 + 0.9 * Qt(s', argmax Qo = 1) = 1 + 0.9 * 4; terminated: 2; truncated: 3 + 0.9 * 8
    np.testing.assert_allclose(double, [1.0 + 0.9 * 4.0, 2.0, 3.0 + 0.9 * 8.0], rtol=1e-6)
    single = fn(q_online, q_target, item.reward, item.discount, False)  # max over the target net
    np.testing.assert_allclose(single, [1.0 + 0.9 * 7.0, 2.0, 3.0 + 0.9 * 8.0], rtol=1e-6)


def test_nstep_target_truncation_bootstraps():
    """n=3: a truncation inside the window stops the sum and bootstraps from the final observation."""
    gamma = 0.5
    acc = buffers.nstep_accumulator(3, gamma)

    def step(r, term, trunc, nxt):
        return Transition(jnp.zeros((1, 1)), jnp.zeros((1,), jnp.int32), jnp.array([r]), jnp.array([term]),
                          jnp.array([trunc]), jnp.array([[nxt]]))

    state = acc.init(step(0.0, False, False, 0.0))
    for t in [step(1.0, False, False, 1.0), step(1.0, False, True, 2.0)]:
        state, _, _ = acc.push(state, t)
    state, item, valid = acc.push(state, step(1.0, False, False, 3.0))
    assert bool(valid[0])
    np.testing.assert_allclose(item.reward, [1.0 + 0.5])  # two steps, then the truncation
    np.testing.assert_allclose(item.discount, [0.25])  # gamma^2, bootstrapped
    np.testing.assert_allclose(item.next_observation, [[2.0]])
    target = dqn.q_targets(jnp.array([[0.0, 1.0]]), jnp.array([[10.0, 20.0]]), item.reward, item.discount)
    np.testing.assert_allclose(target, [1.5 + 0.25 * 20.0])


def test_target_updates_hard_and_polyak():
    target, online = {"w": jnp.array([0.0, 10.0])}, {"w": jnp.array([1.0, 20.0])}
    hard = lambda n: dqn.update_target(target, online, jnp.asarray(n), 3, jnp.asarray(1.0))  # noqa: E731
    np.testing.assert_allclose(hard(1)["w"], [0.0, 10.0])
    np.testing.assert_allclose(hard(2)["w"], [0.0, 10.0])
    np.testing.assert_allclose(hard(3)["w"], [1.0, 20.0])
    np.testing.assert_allclose(hard(6)["w"], [1.0, 20.0])
    polyak = jax.jit(lambda n: dqn.update_target(target, online, n, 1, jnp.asarray(0.1)))(jnp.asarray(7))
    np.testing.assert_allclose(polyak["w"], [0.1, 11.0], rtol=1e-6)


def test_epsilon_schedule():
    values = [float(dqn.epsilon_schedule(n, 1.0, 0.05, 100)) for n in (0, 50, 100, 1000)]
    np.testing.assert_allclose(values, [1.0, 0.525, 0.05, 0.05], rtol=1e-6)


def test_epsilon_greedy_per_env_draws():
    """With epsilon 1 the envs' actions are independent uniform draws; with epsilon 0, greedy."""
    cfg = experiment.make_config("dqn", "CartPole-v1", epsilon_start=1.0, epsilon_end=1.0)
    env, params = jrl_envs.make("CartPole-v1")
    built = dqn.build(cfg, env, params)
    state = built.agent.init(jax.random.key(0), built.spec)
    obs = jnp.zeros((512, 4))
    actions, _ = built.agent.act(state, obs, jax.random.key(1))
    assert 0.4 < float(actions.mean()) < 0.6
    greedy_state = state.replace(hparams=state.hparams.replace(epsilon_start=jnp.zeros(()), epsilon_end=jnp.zeros(())))
    actions, _ = built.agent.act(greedy_state, obs, jax.random.key(1))
    np.testing.assert_array_equal(actions, built.agent.policy(state.params, obs, None))


def test_config_validation_and_registry():
    assert "dqn" in jrl.agents.names()
    with pytest.raises(ValueError, match="learning_starts"):
        experiment.make_config("dqn", "CartPole-v1", total_steps=1000, learning_starts=1000)
    with pytest.raises(ValueError, match="cannot sweep"):
        jrl.train("dqn", "CartPole-v1", total_steps=1000, learning_starts=100, sweep={"gae_lambda": [0.9]},
                  progress=False)


def test_off_policy_loop_counts_and_determinism():
    kwargs = dict(total_steps=2_048, learning_starts=512, num_envs=4, steps_per_iteration=8, updates_per_iteration=2,
                  buffer_size=1_000, batch_size=32, n_step=1, progress=False, num_reports=2)
    a = jrl.train("dqn", "CartPole-v1", seeds=2, **kwargs)
    b = jrl.train("dqn", "CartPole-v1", seeds=2, **kwargs)
    for k in a.metrics:
        np.testing.assert_array_equal(a.metrics[k], b.metrics[k], err_msg=k)
    # 64 iterations of 32 steps; updates from iteration 16 on (env_steps >= 512), 2 each
    np.testing.assert_array_equal(a.metrics["train/env_steps"][0], np.arange(1, 65) * 32)
    assert int(a.metrics["train/updates"][0, -1]) == 49 * 2 == a.config.num_updates
    assert int(a.final_state.buffer_state.size[0]) == 1_000
    assert not np.array_equal(a.metrics["train/loss"][0], a.metrics["train/loss"][1])  # seeds differ


def test_prioritized_dueling_nstep_sweep_runs(tmp_path):
    """Every flag together, with a sweep over a DQN hparam, in one program; the run folder is written."""
    res = jrl.train("dqn", "CartPole-v1", seeds=1, total_steps=2_048, learning_starts=520, num_envs=4,
                    steps_per_iteration=8, buffer_size=1_000, batch_size=32, prioritized=True, dueling=True,
                    n_step=3, tau=0.5, double_q=False, loss="mse", sweep={"epsilon_end": [0.0, 0.1]},
                    progress=False, num_reports=2, out=tmp_path / "run")
    assert res.num_runs == 2
    assert np.isfinite(res.metrics["train/loss"]).all()
    # the n-step warm-up steps (n - 1 per env) are counted
    assert int(res.final_state.env_steps[0]) == 2_048 + 2 * 4
    np.testing.assert_array_equal(res.env_steps, res.metrics["train/env_steps"][0])
    # updates start at the first iteration whose count (warm-up included) reaches 520: 8 + 16 * 32
    assert int(res.metrics["train/updates"][0, -1]) == res.config.num_updates == (64 - 16 + 1) * 2
    tree = res.final_state.buffer_state.tree[0]
    assert float(tree[1]) > 0 and float(res.final_state.buffer_state.max_priority[0]) != 1.0
    for name in experiment.RUN_FILES:
        assert (tmp_path / "run" / name).exists()


@pytest.mark.learning
def test_dqn_truncation_probe_nstep():
    """3-step DQN on the truncation probe: Q(s, a) = 1/(1-gamma) for every state and action."""
    gamma = 0.9
    res = jrl.train("dqn", "TruncationProbe-v0", seeds=2, total_steps=30_000, learning_starts=1_000, n_step=3,
                    gamma=gamma, learning_rate=5e-4, updates_per_iteration=4, buffer_size=20_000,
                    target_update_interval=100, anneal_lr=True, progress=False, num_reports=2)
    env, params = jrl_envs.make("TruncationProbe-v0")
    built = dqn.build(res.config, env, params)
    obs = jnp.arange(20, dtype=jnp.float32)[:, None] / 20.0  # every state of an episode
    target = 1.0 / (1.0 - gamma)
    for r in range(res.num_runs):
        p = jax.tree.map(lambda x: x[r], res.final_params)
        q = np.asarray(built.network.apply(p, obs))
        np.testing.assert_allclose(q, target, rtol=0.10, err_msg=f"run {r}: {q}")


def test_sharded_two_devices_runs(tmp_path):
    """The same DQN runs data-parallel on 2 (fake CPU) devices: finite losses, global counters."""
    import os
    import subprocess
    import sys

    script = (
        "import jax, numpy as np, jrl\n"
        "res = jrl.train('dqn', 'CartPole-v1', seeds=2, devices=2, total_steps=1024, learning_starts=256,"
        " num_envs=4, steps_per_iteration=8, buffer_size=500, batch_size=32, prioritized=True, n_step=2,"
        " progress=False, num_reports=2)\n"
        "assert np.isfinite(res.metrics['train/loss']).all(), res.metrics['train/loss']\n"
        "assert int(res.metrics['train/env_steps'][0, -1]) == 1024 + 4, res.metrics['train/env_steps']\n"
        "print('OK')\n")
    env = {**os.environ, "JAX_PLATFORMS": "cpu", "XLA_FLAGS": "--xla_force_host_platform_device_count=2"}
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=600, env=env)
    assert out.returncode == 0 and "OK" in out.stdout, out.stderr[-3000:]
