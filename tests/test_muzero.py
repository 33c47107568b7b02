"""MuZero: value transform, n-step value targets, the unrolled loss, search over the learned
model, the agent through the CLI (resume, devices, eval, render) and learning."""

import os
import subprocess
import sys

import jax
import jax.numpy as jnp
import jrl.agents
import jrl.envs
import numpy as np
import pytest
from jrl.agents.search import muzero
from jrl.agents.search.muzero import MuZeroHParams, Unrolled, muzero_loss, muzero_value_targets

from jrl.app import api as experiment
from jrl.ops.return_distributions import (
    scalar_to_two_hot,
    two_hot_to_scalar,
    value_transform,
    value_transform_inverse,
)

QUIET = dict(progress=False, compile_cache=False)
LEARNING_SEED = int(os.environ.get("JRL_LEARNING_SEED", "0"))
"""The learning tests' first seed (tests/conftest.py's JRL_LEARNING_SEED, default 0)."""
TINY = dict(
    num_envs=4,
    steps_per_iteration=2,
    updates_per_iteration=2,
    batch_size=8,
    buffer_size=64,
    learning_starts=20,
    unroll_steps=2,
    td_steps=2,
    num_simulations=4,
    hidden_sizes=(16,),
    latent_size=8,
    support_size=3,
)


def _h(x, eps=1e-3):
    return np.sign(x) * (np.sqrt(np.abs(x) + 1) - 1) + eps * x


def test_value_transform_and_two_hot_by_hand():
    x = np.array([-30.0, -1.0, 0.0, 0.5, 3.0, 100.0], np.float32)
    np.testing.assert_allclose(value_transform(jnp.asarray(x)), _h(x), rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(
        value_transform_inverse(value_transform(jnp.asarray(x))), x, rtol=1e-4, atol=1e-4
    )
    # h(3) = 1.003: atom 1 (index S + 1) gets 0.997, atom 2 gets 0.003; h(100) clips to S = 3
    probs = np.asarray(scalar_to_two_hot(jnp.asarray(x), 3))
    assert probs.shape == (6, 7)
    np.testing.assert_allclose(probs.sum(-1), 1.0, rtol=1e-6)
    np.testing.assert_allclose(probs[4, 4:6], [1 - (_h(3.0) - 1), _h(3.0) - 1], rtol=1e-5)
    np.testing.assert_allclose(probs[5], [0, 0, 0, 0, 0, 0, 1])
    np.testing.assert_allclose(probs[2], [0, 0, 0, 1, 0, 0, 0])
    frac = _h(-1.0) - np.floor(_h(-1.0))  # h(-1) = -0.415: atoms -1 and 0
    np.testing.assert_allclose(probs[1, 2:4], [1 - frac, frac], rtol=1e-5)
    # the scalar of a two-hot's logits is h^-1 of its mean atom: x back where not clipped
    back = two_hot_to_scalar(jnp.log(jnp.asarray(probs) + 1e-30), 3)
    np.testing.assert_allclose(back[1:5], x[1:5], rtol=1e-4, atol=1e-4)
    # leading dimensions: [2, 3, 7] logits give [2, 3] scalars, each from its own atoms
    stacked = two_hot_to_scalar(jnp.log(jnp.asarray(probs) + 1e-30).reshape(2, 3, 7), 3)
    np.testing.assert_allclose(stacked, np.asarray(back).reshape(2, 3), rtol=1e-6)


def _targets_reference(reward, discount, done, bootstrap, final, n):
    """A direct loop over every start and every step (NumPy)."""
    L, B = reward.shape
    out = np.zeros((L - n, B), np.float64)
    for b in range(B):
        for t in range(L - n):
            total, coef = 0.0, 1.0
            for i in range(n):
                total += coef * reward[t + i, b]
                if done[t + i, b]:  # bootstrap from the successor: 0 where terminated
                    total += coef * discount[t + i, b] * final[t + i, b]
                    break
                coef *= discount[t + i, b]
            else:
                total += coef * bootstrap[t + n, b]
            out[t, b] = total
    return out


def test_value_targets_by_hand():
    # env 0, single-player, gamma 0.9: rewards 1, a termination at t = 2, a new episode
    # truncated at t = 5 (bootstrap from its final observation's value 7)
    # env 1, a two-player game (discount -1): the player moving at t = 3 wins (+1)
    reward = np.array([[1, 0], [1, 0], [1, 0], [1, 1], [1, 0], [1, 0], [1, 0]], np.float32)
    term = np.zeros((7, 2), bool)
    term[2, 0] = term[3, 1] = True
    trunc = np.zeros((7, 2), bool)
    trunc[5, 0] = True
    gamma = np.array([0.9, -1.0], np.float32)
    discount = np.where(term, 0.0, gamma).astype(np.float32)
    done = term | trunc
    bootstrap = np.arange(14, dtype=np.float32).reshape(7, 2) / 10
    final = np.full((7, 2), 7.0, np.float32)
    args = [jnp.asarray(a) for a in (reward, discount, done, bootstrap, final)]
    got = np.asarray(muzero_value_targets(*args, 3))
    np.testing.assert_allclose(got, _targets_reference(reward, discount, done, bootstrap, final, 3))
    # by hand: env 0 at t = 0: 1 + 0.9 + 0.81 (terminated); at t = 3: three rewards, then
    # the truncation's bootstrap 0.9^3 * 7
    np.testing.assert_allclose(got[0, 0], 1 + 0.9 + 0.81, rtol=1e-6)
    np.testing.assert_allclose(got[3, 0], 1 + 0.9 + 0.81 + 0.729 * 7, rtol=1e-6)
    # env 1: the winner's +1 is -1 for the player moving one step earlier, +1 two earlier;
    # at t = 0 no end within 3 steps: bootstrap[3] = 0.7 seen after 3 turns, -0.7
    np.testing.assert_allclose(got[:4, 1], [-0.7, 1.0, -1.0, 1.0], rtol=1e-6)
    with pytest.raises(ValueError, match="no 3-step"):
        muzero_value_targets(*[a[:3] for a in args], 3)


def test_value_targets_bootstrap_without_an_end():
    rng = np.random.default_rng(1)
    reward = rng.normal(size=(8, 3)).astype(np.float32)
    discount = np.full((8, 3), 0.95, np.float32)
    done = np.zeros((8, 3), bool)
    bootstrap = rng.normal(size=(8, 3)).astype(np.float32)
    final = rng.normal(size=(8, 3)).astype(np.float32)
    got = muzero_value_targets(
        *[jnp.asarray(a) for a in (reward, discount, done, bootstrap, final)], 4
    )
    want = sum(0.95**i * reward[i : i + 4] for i in range(4)) + 0.95**4 * bootstrap[4:8]
    np.testing.assert_allclose(got, want, rtol=1e-5)


def _ce(target, logits):
    logits = logits - logits.max(-1, keepdims=True)
    log_p = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
    return -(target * log_p).sum(-1)


def _two_hot_np(x, S):
    y = np.clip(_h(x), -S, S)
    out = np.zeros(x.shape + (2 * S + 1,))
    for idx in np.ndindex(x.shape):
        lo = int(np.floor(y[idx]))
        f = y[idx] - lo
        out[idx + (lo + S,)] += 1 - f
        if f > 0:
            out[idx + (lo + S + 1,)] += f
    return out


def test_unrolled_loss_by_hand():
    rng = np.random.default_rng(0)
    K, B, A, S = 2, 4, 5, 2  # every axis of its own size
    Z = 2 * S + 1
    f = lambda *s: rng.normal(size=s).astype(np.float32)
    out = Unrolled(
        policy_logits=f(K + 1, B, A),
        value_logits=f(K + 1, B, Z),
        reward_logits=f(K, B, Z),
        policy=rng.dirichlet(np.ones(A), size=(K + 1, B)).astype(np.float32),
        value=f(K + 1, B) * 3,
        reward=f(K, B),
        alive=np.array([[1, 1, 1, 1], [1, 0, 1, 1], [1, 0, 0, 1]], np.float32),
        similarity=rng.uniform(-1, 1, size=(K, B)).astype(np.float32),
    )
    hp = MuZeroHParams(jnp.float32(1e-3), jnp.float32(0.25))
    total, m = muzero_loss(jax.tree.map(jnp.asarray, out), hp, S, consistency_coef=2.0)
    policy = (out.alive * _ce(out.policy, out.policy_logits)).sum(0).mean() / (K + 1)
    value = _ce(_two_hot_np(out.value, S), out.value_logits).sum(0).mean() / (K + 1)
    reward = _ce(_two_hot_np(out.reward, S), out.reward_logits).sum(0).mean() / (K + 1)
    np.testing.assert_allclose(m["train/policy_loss"], policy, rtol=1e-5)
    np.testing.assert_allclose(m["train/value_loss"], value, rtol=1e-5)
    np.testing.assert_allclose(m["train/reward_loss"], reward, rtol=1e-5)
    # the consistency term counts unroll steps 1..K inside the episode: alive[1:]
    consistency = (out.alive[1:] * out.similarity).sum(0).mean() / (K + 1)
    np.testing.assert_allclose(m["train/consistency"], consistency, rtol=1e-5)
    np.testing.assert_allclose(total, policy + 0.25 * value + reward - 2.0 * consistency, rtol=1e-5)
    off, m_off = muzero_loss(jax.tree.map(jnp.asarray, out), hp, S)  # coefficient 0: no term
    np.testing.assert_allclose(off, policy + 0.25 * value + reward, rtol=1e-5)
    assert "train/consistency" not in m_off  # runs without it keep their metrics


def test_registry_entry_kinds_and_checks():
    entry = jrl.agents.get("muzero")
    assert entry.sweepable == ("learning_rate", "vf_coef")
    assert jrl.agents.env_kinds(entry.config_cls) == ("single", "game")
    jrl.agents.check_kind("muzero", "single", "CartPole-v1")
    jrl.agents.check_kind("muzero", "game", "TicTacToe-v0")
    with pytest.raises(ValueError, match="muzero trains on single-agent envs and games, but"):
        jrl.agents.check_kind("muzero", "team", "Coordination-v0")
    for bad, msg in [
        (dict(search="beam"), "search must be one of"),
        (dict(torso="nature_cnn"), "torso must be 'mlp'"),
        (dict(value_bootstrap="x"), "value_bootstrap"),
        (dict(consistency_coef=-1.0), "consistency_coef must be >= 0"),
        (dict(batch_size=100), "multiple of num_envs"),
        (dict(learning_starts=16), "learning_starts"),
        (dict(buffer_size=16 * 10, batch_size=32), "cannot hold a sequence"),
        (dict(q_bounds=(1.0, -1.0)), "q_bounds"),
        (dict(q_bounds=(0.0,)), "q_bounds"),
    ]:
        with pytest.raises(ValueError, match=msg):
            experiment.make_config("muzero", "CartPole-v1", **bad).validate()


def _jrl(args, cwd):
    return subprocess.run(
        [sys.executable, "-m", "jrl.app.cli", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        env={**os.environ, "JAX_PLATFORMS": "cpu"},
        timeout=600,
    )


def test_cli_refuses_a_team_env_and_a_box_action_space(tmp_path):
    out = _jrl(["train", "muzero", "--env", "Coordination-v0", "--out", "a"], tmp_path)
    assert out.returncode == 2, out.stderr
    assert "muzero trains on single-agent envs and games, but Coordination-v0 is a" in out.stderr
    out = _jrl(["train", "muzero", "--env", "Pendulum-v1", "--out", "b"], tmp_path)
    assert out.returncode == 2, out.stderr
    assert "muzero needs a Discrete action space" in out.stderr
    out = _jrl(["train", "muzero", "--env", "TicTacToe-v0", "--q-bounds", "1", "-1"], tmp_path)
    assert out.returncode == 2, out.stderr
    assert "q_bounds must be () or (lo, hi) with lo < hi, got (1, -1)" in out.stderr
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()


def test_resumed_run_equals_uninterrupted_and_eval_render(tmp_path):
    """2 seeds on CartPole stopped half way and resumed end with the same bits as an
    uninterrupted run; then ``jrl eval`` and ``jrl render`` work on the run."""
    kw = dict(TINY, total_steps=4 * 2 * 8, **QUIET)
    whole = experiment.train("muzero", "CartPole-v1", 2, out=tmp_path / "whole", **kw)
    with pytest.raises(experiment.TrainingInterrupted):
        experiment.train("muzero", "CartPole-v1", 2, out=tmp_path / "split", stop_at_steps=32, **kw)
    resumed = experiment.resume(tmp_path / "split", progress=False)
    for x, y in zip(jax.tree.leaves(whole.final_params), jax.tree.leaves(resumed.final_params)):
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))
    for k in whole.metrics:
        np.testing.assert_array_equal(whole.metrics[k], resumed.metrics[k], err_msg=k)
    leaves = jax.tree.leaves(whole.final_params)
    assert max(float(np.abs(x[0] - x[1]).max()) for x in leaves) > 1e-4
    assert int(whole.metrics["train/updates"][0, -1]) > 0
    out = _jrl(["eval", "whole", "--episodes", "2"], tmp_path)
    assert out.returncode == 0, out.stderr[-3000:]
    assert (tmp_path / "whole" / "eval.json").exists()
    out = _jrl(["render", "whole", "--out", "ep.gif"], tmp_path)
    assert out.returncode == 0, out.stderr[-3000:]
    assert (tmp_path / "ep.gif").stat().st_size > 0


@pytest.mark.parametrize("case", ["muzero", "muzero-game"])
def test_device_count_invariance(tmp_path, case):
    """1 device and 2 fake devices give the same parameters (per-env search keys, sequences
    stratified by env, gradients averaged over devices), on CartPole and on tic-tac-toe. On
    the game an untrained model's values are all near 0: rescaled by each node's min and max
    their last-bit differences between the two programs changed the search's moves; the
    preset's fixed bounds (``q_bounds``) keep them last-bit differences."""
    worker = os.path.join(os.path.dirname(__file__), "dist_worker.py")
    results = []
    for name, devices, fake in [("plain", 0, 1), ("2dev", 2, 2)]:
        out = subprocess.run(
            [sys.executable, worker, str(tmp_path / f"{name}.npz"), case, str(devices)]
            + ["--fake-devices", str(fake)],
            capture_output=True,
            text=True,
            timeout=600,
        )
        assert out.returncode == 0, out.stderr[-3000:]
        with np.load(tmp_path / f"{name}.npz") as f:
            results.append([f[k] for k in f.files if k.startswith("arr_")])
    assert max(float(np.abs(x - y).max()) for x, y in zip(*results)) <= 1e-5
    assert max(float(np.abs(x[0] - x[1]).max()) for x in results[0]) > 1e-4


@pytest.mark.learning
def test_muzero_learns_cartpole(tmp_path):
    """Gumbel MuZero, the CartPole-v1 preset (16 envs, 8 simulations per step, 8 updates of
    256 sequences per iteration of 128 steps, learning rate 3e-3), 2 seeds vmapped
    (JRL_LEARNING_SEED and the next) for 32,768 steps: the noise-free search's return over 8
    episodes per seed (``jrl eval``), averaged over the 2 seeds, >= 150."""
    # measured 2026-12-04, seeds 0-15 (two programs of 8 vmapped runs). Greedy search, 8
    # episodes (seeds 8-15): 412 +- 133, min .. max 179 .. 500 (500, 186, 488, 480, 500, 466,
    # 500, 179); worst adjacent pair 337, worst of all 28 pairs 182 (the two low seeds
    # together). Threshold 150: margin 32 below the worst pair, 187 below the worst adjacent
    # one (a random policy scores ~22). The final training return (last iteration, the
    # measure before; Gumbel-sampled actions) is noisier: 16 seeds 295 +- 141, 59 .. 500,
    # worst adjacent pair 202, so the old threshold of 400 held for the chosen pair only. Not
    # every seed learns CartPole within this budget (2 of 8 stay below 200 greedily);
    # BENCHMARKS.md "MuZero on CartPole-v1" lists the settings tried
    run = tmp_path / "run"
    res = experiment.train("muzero", "CartPole-v1", 2, out=run, seed=LEARNING_SEED, **QUIET)
    assert res.config.num_simulations == 8 and res.config.search == "gumbel"
    stats = experiment.evaluate_run(run, episodes=8)
    returns = np.asarray(stats["returns"])
    assert returns.shape == (2, 8) and stats["policy"] == "greedy"
    assert float(returns.mean()) >= 150, (returns.mean(axis=1), res.summary())


@pytest.mark.learning
def test_muzero_plays_tictactoe(tmp_path):
    """MuZero on a two-player game (the TicTacToe-v0 preset: gamma 1, 9-step targets, 8
    simulations, Q-values rescaled by the outcome's bounds, 16,384 moves), 2 seeds
    (JRL_LEARNING_SEED and the next): over 100 games each (half as first player) it wins
    >= 50% against the random player and wins >= 10 points more often than it loses (the
    random player against itself: win 0.44, loss 0.44); ``jrl eval`` reports the minimax
    games too, none won."""
    # measured 2026-12-04, seeds 0-7 (8 runs vmapped), 100 games each against random: win
    # 0.62 +- 0.05 (0.55 .. 0.70), loss 0.28 +- 0.04, win - loss 0.34 +- 0.08 (0.23 .. 0.44);
    # adjacent pairs (the test's 200 games): worst win 0.585, worst win - loss 0.26.
    # Thresholds 0.5 (margin 0.085) and 0.10 (margin 0.16), about 2.5 standard errors of 200
    # games each. Against minimax: win 0, loss 0.89 (0.82 as first, 0.955 as second)
    run = tmp_path / "run"
    experiment.train("muzero", "TicTacToe-v0", 2, out=run, seed=LEARNING_SEED, **QUIET)
    stats = experiment.evaluate_run(run, episodes=100)
    assert set(stats["opponents"]) == {"random", "minimax"}
    for opponent in ("random", "minimax"):
        for r in stats["opponents"][opponent]["runs"]:  # 50 games as first, 50 as second
            assert r["as_first"]["games"] == 50 and r["as_second"]["games"] == 50, r
            assert abs(r["win"] + r["draw"] + r["loss"] - 1.0) < 1e-9, r
    minimax = stats["opponents"]["minimax"]
    # exact minimax is never beaten: a win here would mean the games or the report are wrong
    assert minimax["win"] == 0.0 and minimax["games"] == 200, minimax
    rand = stats["opponents"]["random"]
    assert rand["win"] >= 0.5 and rand["win"] - rand["loss"] >= 0.1, rand


@pytest.mark.learning
def test_muzero_truncation_probe(tmp_path):
    """The truncation probe (reward 1 every step, cut after 20 steps, never terminated), gamma
    0.9: the learned value of every state is 1 / (1 - gamma) = 10, the last state's too (a
    truncation bootstraps; treated as an end, the last state would be worth 1)."""
    # measured 2026-12-05, seeds 0-1 (this test) and 2000-2007: values 9.24 .. 10.10 over the
    # 20 states (`benchmarks/seed_checks.py muzero-probe --seeds 0:2 2000:8`); the bounds
    # 9 .. 11 leave 0.24 at the lower one, the bound that tells truncation (10 at the last
    # state) from termination (1)
    res = experiment.train(
        "muzero",
        "TruncationProbe-v0",
        2,
        out=tmp_path / "run",
        total_steps=8192,
        gamma=0.9,
        num_simulations=2,
        learning_starts=512,
        updates_per_iteration=8,
        learning_rate=3e-3,
        hidden_sizes=(32,),
        latent_size=16,
        support_size=5,
        td_steps=3,
        unroll_steps=3,
        **QUIET,
    )
    net = muzero.build(res.config, *jrl.envs.make("TruncationProbe-v0")).network
    obs = jnp.arange(20, dtype=jnp.float32)[:, None] / 20.0
    for r in range(2):
        params = jax.tree.map(lambda x: x[r], res.final_params)
        _, logits = net.apply(
            params, net.apply(params, obs, method=net.represent), method=net.predict
        )
        values = np.asarray(two_hot_to_scalar(logits, 5))
        np.testing.assert_allclose(values, 10.0, atol=1.0)
