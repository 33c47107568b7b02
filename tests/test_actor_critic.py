"""The agent contract, on-policy loop and Anakin runner (fast, small budgets)."""

import dataclasses
import os
import subprocess
import sys
import textwrap

import jax
import jax.numpy as jnp
import jrl.agents as jrl_agents
import jrl.envs
import numpy as np
import pytest
from jrl.agents.actor_critic import a2c, ppo

import jrl
from jrl.app import api as experiment
from jrl.run import anakin


def small_ppo(env_id="CartPole-v1", **kw):
    env, params = jrl.envs.make(env_id)
    cfg = dataclasses.replace(
        experiment.make_config("ppo", env_id),
        **{"total_steps": 4096, "num_envs": 4, "num_steps": 32, **kw},
    )
    return cfg, ppo.build(cfg, env, params)


def test_public_api_imports():
    assert {"Agent", "EnvSpec", "Environment", "TimeStep", "Transition", "train"} <= set(
        jrl.__all__
    )
    assert callable(jrl.train)
    assert jrl_agents.names() == [
        "a2c",
        "alphazero",
        "apex",
        "bc",
        "c51",
        "cma_es",
        "cql",
        "ddpg",
        "dqn",
        "impala",
        "ippo",
        "iql",
        "mappo",
        "muzero",
        "openai_es",
        "ppo",
        "pqn",
        "qrdqn",
        "rainbow",
        "reinforce",
        "sac",
        "sac_discrete",
        "snes",
        "td3",
    ]


def test_act_and_learn_shapes():
    cfg, built = small_ppo()
    state = jax.jit(built.algorithm.init)(jax.random.key(0))
    action, info = built.agent.act(state.agent_state, state.observation, jax.random.key(1))
    assert action.shape == (4,) and action.dtype == jnp.int32
    # acting runs the actor only: learn evaluates the critic on the whole rollout
    assert set(info) == {"log_prob"} and info["log_prob"].shape == (4,)
    new_state, metrics = jax.jit(built.algorithm.step)(state)
    assert int(new_state.iteration) == 1 and int(new_state.env_steps) == 4 * 32
    for name in (
        "train/loss",
        "train/policy_loss",
        "train/value_loss",
        "train/entropy",
        "train/episode_return",
    ):
        assert metrics[name].shape == ()
    changed = jax.tree.map(
        lambda a, b: bool(jnp.any(a != b)), state.agent_state.params, new_state.agent_state.params
    )
    assert all(jax.tree.leaves(changed))
    greedy = built.agent.policy(new_state.agent_state.params, state.observation, jax.random.key(2))
    assert greedy.shape == (4,)


@pytest.mark.parametrize(
    "env_id,shape", [("Pendulum-v1", (4, 1)), ("MountainCarContinuous-v0", (4, 1))]
)
def test_continuous_actions(env_id, shape):
    cfg, built = small_ppo(env_id)
    state = jax.jit(built.algorithm.init)(jax.random.key(0))
    action, info = built.agent.act(state.agent_state, state.observation, jax.random.key(1))
    assert action.shape == shape
    state, metrics = jax.jit(built.algorithm.step)(state)
    assert np.isfinite(float(metrics["train/loss"]))


def test_multidiscrete_actions():
    from jrl.core import spaces
    from jrl.core.env import Environment

    class TwoKnobs(Environment):
        """Reward 1 when action == (2, 0), observation constant."""

        id = "TwoKnobs"

        def reset_env(self, key, params):
            return jnp.zeros(()), jnp.zeros((2,))

        def step_env(self, key, state, action, params):
            r = jnp.all(action == jnp.array([2, 0])).astype(jnp.float32)
            return state, jnp.zeros((2,)), r, jnp.ones((), bool), {}

        def observation_space(self, params=None):
            return spaces.Box(-1.0, 1.0, (2,))

        def action_space(self, params=None):
            return spaces.MultiDiscrete([3, 2])

    cfg = ppo.PPOConfig(
        total_steps=4096 * 4, num_envs=8, num_steps=16, learning_rate=3e-3, ent_coef=0.0
    )
    built = ppo.build(cfg, TwoKnobs(), None)
    res = anakin.run(
        built.algorithm, jax.random.split(jax.random.key(0), 1), cfg.num_iterations, num_reports=2
    )
    assert res.metrics["train/episode_return"][0, -5:].mean() > 0.9


def test_sweep_equals_separate_runs():
    """A vmapped learning-rate sweep gives the same results as separate programs."""
    cfg, built = small_ppo()
    keys = jax.random.split(jax.random.key(3), 1)
    n = cfg.num_iterations
    swept = anakin.run(
        built.algorithm,
        jnp.concatenate([keys, keys]),
        n,
        num_reports=1,
        hparams={"learning_rate": np.array([1e-3, 1e-4], np.float32)},
    )
    for i, lr in enumerate([1e-3, 1e-4]):
        single = anakin.run(
            built.algorithm, keys, n, num_reports=1, hparams={"learning_rate": np.array([lr])}
        )
        for a, b in zip(
            jax.tree.leaves(swept.final_state.agent_state.params),
            jax.tree.leaves(single.final_state.agent_state.params),
        ):
            np.testing.assert_allclose(a[i], b[0], atol=1e-5)
    p = swept.final_state.agent_state.params
    assert any(bool(jnp.any(x[0] != x[1])) for x in jax.tree.leaves(p))


def test_set_hparams_rejects_unknown_field():
    cfg, built = small_ppo()
    st = anakin.init_runs(built.algorithm, jax.random.split(jax.random.key(0), 2))
    with pytest.raises(ValueError, match="sweepable fields"):
        anakin.set_hparams(built.algorithm, st, {"num_envs": [1, 2]})


def test_determinism_bitwise():
    """The same seed gives bitwise-identical final parameters and metrics."""
    a = jrl.train("ppo", "CartPole-v1", seeds=2, seed=7, total_steps=4096, progress=False)
    b = jrl.train("ppo", "CartPole-v1", seeds=2, seed=7, total_steps=4096, progress=False)
    c = jrl.train("ppo", "CartPole-v1", seeds=2, seed=8, total_steps=4096, progress=False)
    for x, y in zip(jax.tree.leaves(a.final_params), jax.tree.leaves(b.final_params)):
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))
    np.testing.assert_array_equal(a.metrics["train/loss"], b.metrics["train/loss"])
    assert any(
        not np.array_equal(x, y)
        for x, y in zip(jax.tree.leaves(a.final_params), jax.tree.leaves(c.final_params))
    )
    # the two seeds of one run differ from each other
    assert any(not np.array_equal(x[0], x[1]) for x in jax.tree.leaves(a.final_params))


def test_chunk_lengths_cover_all_iterations():
    for n, r in [(976, 20), (97, 20), (5, 20), (1, 1), (1000, 7), (64, 64)]:
        lengths = anakin.chunk_lengths(n, r)
        assert sum(lengths) == n
        assert len(set(lengths)) <= 2
        assert len(lengths) <= 2 * r + 1


def test_reports_and_result_fields():
    cfg, built = small_ppo()
    reports = []
    res = anakin.run(
        built.algorithm,
        jax.random.split(jax.random.key(0), 3),
        cfg.num_iterations,
        num_reports=4,
        hooks=anakin.RunHooks(on_report=reports.append),
    )
    assert [r.iteration for r in reports][-1] == cfg.num_iterations
    assert len(reports) == len(anakin.chunk_lengths(cfg.num_iterations, 4))
    assert res.metrics["train/loss"].shape == (3, cfg.num_iterations)
    assert res.compile_seconds > 0 and res.run_seconds > 0 and res.steps_per_second > 0
    assert reports[-1].metrics["train/loss"].shape == (3,)


def test_config_validation_and_overrides():
    with pytest.raises(ValueError, match="learning_rate must be positive"):
        experiment.make_config("ppo", "CartPole-v1", learning_rate=-1.0)
    with pytest.raises(ValueError, match="gamma must lie in"):
        experiment.make_config("ppo", "CartPole-v1", gamma=1.5)
    with pytest.raises(ValueError, match="num_envs must be positive"):
        experiment.make_config("ppo", "CartPole-v1", num_envs=0)
    with pytest.raises(ValueError, match="not divisible by num_minibatches"):
        experiment.make_config("ppo", "CartPole-v1", num_minibatches=3)
    with pytest.raises(TypeError, match="did you mean learning_rate"):
        experiment.make_config("ppo", "CartPole-v1", learning_rat=1e-3)
    with pytest.raises(TypeError, match="expects int"):
        experiment.make_config("ppo", "CartPole-v1", num_envs=2.5)
    cfg = experiment.make_config("ppo", "Pendulum-v1", learning_rate="3e-4")
    assert (
        cfg.learning_rate == 3e-4
        and cfg.num_envs == ppo.PPOConfig.PRESETS["Pendulum-v1"]["num_envs"]
    )
    assert isinstance(experiment.make_config("a2c", "CartPole-v1"), a2c.A2CConfig)


def test_train_rejects_bad_input():
    with pytest.raises(jrl_agents.UnknownAgentError, match="did you mean 'ppo'|Did you mean 'ppo'"):
        jrl.train("ppoo", "CartPole-v1")
    with pytest.raises(jrl.envs.UnknownEnvError, match="CartPole-v1"):
        jrl.train("ppo", "CartPole-v2", total_steps=512, progress=False)
    with pytest.raises(ValueError, match="cannot sweep"):
        jrl.train("ppo", "CartPole-v1", sweep={"num_envs": [2, 4]}, progress=False)
    with pytest.raises(ValueError, match="seeds must be"):
        jrl.train("ppo", "CartPole-v1", seeds=0)
    with pytest.raises(ValueError, match="cannot sweep gamma with normalize_rewards"):
        jrl.train("ppo", "Pendulum-v1", sweep={"gamma": [0.9, 0.99]}, progress=False)


def test_run_folder(tmp_path):
    out = tmp_path / "run"
    res = jrl.train(
        "ppo", "CartPole-v1", seeds=2, total_steps=4096, out=out, progress=False, num_reports=4
    )
    for name in experiment.RUN_FILES:
        assert (out / name).is_file(), name
    rows = (out / "metrics.csv").read_text().strip().splitlines()
    assert rows[0].startswith("run,seed,iteration,env_steps")
    assert len(rows) - 1 == 2 * res.config.num_iterations  # every iteration of both runs
    import json

    cfg = json.loads((out / "config.json").read_text())
    assert cfg["agent"] == "ppo" and cfg["config"]["total_steps"] == 4096
    with pytest.raises(FileExistsError, match="already holds a run"):
        jrl.train("ppo", "CartPole-v1", total_steps=4096, out=out, progress=False)
    from flax import serialization

    restored = serialization.msgpack_restore((out / "params.msgpack").read_bytes())
    leaves = jax.tree.leaves(restored)
    assert leaves and all(x.shape[0] == 2 for x in leaves)
    assert "final return" in res.summary()


def test_vmapped_seed_init_never_hangs():
    """Initialising many seeds (orthogonal init) completes, repeatedly (DESIGN.md pitfall)."""
    code = textwrap.dedent("""
        import jax, jrl.envs
        from jrl.agents.actor_critic import ppo
        from jrl.run import anakin
        env, params = jrl.envs.make("CartPole-v1")
        built = ppo.build(ppo.PPOConfig(), env, params)
        for i in range(8):
            st = anakin.init_runs(built.algorithm, jax.random.split(jax.random.key(i), 16))
            jax.block_until_ready(st)
        print("ok")
    """)
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=240,
        env={**os.environ, "JAX_PLATFORMS": "cpu"},
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip().endswith("ok")


def test_run_refuses_states_larger_than_free_memory(monkeypatch):
    """The runner sizes R runs' train states before allocating and refuses with the numbers."""
    from jrl.parts import buffers

    cfg, built = small_ppo()
    monkeypatch.setattr(buffers, "available_memory_bytes", lambda device=None: 1000)
    with pytest.raises(MemoryError, match=r"train states need .* \(3 runs x .*only 0.00 GiB free"):
        anakin.run(built.algorithm, jax.random.split(jax.random.key(0), 3), 1)


def test_memory_check_shapes_and_init_share_one_trace():
    """check_memory, abstract_states and init_runs trace the algorithm's init once between them."""
    cfg, built = small_ppo()
    calls = []

    def counting_init(key):
        calls.append(1)
        return built.algorithm.init(key)

    algorithm = built.algorithm._replace(init=counting_init)
    keys = jax.random.split(jax.random.key(0), 3)
    anakin.check_memory(algorithm, keys)
    like = anakin.abstract_states(algorithm, keys)
    states = anakin.init_runs(algorithm, keys)
    assert len(calls) == 1
    assert jax.tree.map(lambda x: (x.shape, x.dtype), like) == jax.tree.map(
        lambda x: (x.shape, x.dtype), states
    )
    assert jax.tree.leaves(like)[0].shape[0] == 3


def test_run_keeps_the_callers_initial_state():
    """Resuming from a state does not consume it (the chunk programs donate their input)."""
    cfg, built = small_ppo()
    first = anakin.run(built.algorithm, jax.random.split(jax.random.key(0), 2), 2, num_reports=1)
    anakin.run(
        built.algorithm,
        jax.random.split(jax.random.key(0), 2),
        2,
        num_reports=1,
        initial_state=first.final_state,
    )
    assert all(
        np.isfinite(np.asarray(x)).all()
        for x in jax.tree.leaves(first.final_state.agent_state.params)
    )
    # a given state carries its own hyperparameters: setting others on it is refused
    with pytest.raises(ValueError, match="an initial_state carries its own"):
        anakin.run(
            built.algorithm,
            jax.random.split(jax.random.key(0), 2),
            2,
            hparams={"learning_rate": np.asarray([1e-3, 1e-4], np.float32)},
            initial_state=first.final_state,
        )


def test_compiler_options_lower_the_cpu_backend_level_only(monkeypatch):
    monkeypatch.delenv(anakin.CPU_OPT_LEVEL_ENV, raising=False)
    assert anakin.compiler_options("cpu") == {"xla_backend_optimization_level": 2}
    assert anakin.compiler_options("gpu") is None and anakin.compiler_options("tpu") is None
    monkeypatch.setenv(anakin.CPU_OPT_LEVEL_ENV, "3")
    assert anakin.compiler_options("cpu") == {"xla_backend_optimization_level": 3}
    assert anakin.compiler_options("gpu") is None
    monkeypatch.setenv(anakin.CPU_OPT_LEVEL_ENV, "fast")
    for platform in ("cpu", "gpu"):
        with pytest.raises(ValueError, match="JRL_CPU_OPT_LEVEL must be 0, 1, 2 or 3"):
            anakin.compiler_options(platform)


def test_runner_compiles_init_and_chunks_with_its_options(monkeypatch):
    """Every program the runner compiles (init and each chunk length) gets compiler_options()."""
    seen = []
    real = jax.stages.Lowered.compile

    def recording(self, compiler_options=None, **kwargs):
        seen.append(compiler_options)
        return real(self, compiler_options, **kwargs)

    monkeypatch.setattr(jax.stages.Lowered, "compile", recording)
    cfg, built = small_ppo()
    anakin.run(built.algorithm, jax.random.split(jax.random.key(0), 1), 4, num_reports=3)
    programs = 1 + len(set(anakin.chunk_lengths(4, 3)))  # init, then one program per chunk length
    assert seen == [anakin.compiler_options()] * programs


@pytest.mark.parametrize("agent", ["ppo", "dqn"])
def test_init_values_do_not_depend_on_the_cpu_opt_level(agent):
    """The runner's init (LLVM level 2 on CPU) gives bitwise the train states of XLA's default
    build, so a run's starting point does not move with JRL_CPU_OPT_LEVEL."""
    env, params = jrl.envs.make("CartPole-v1")
    built = jrl_agents.get(agent).build(
        experiment.make_config(agent, "CartPole-v1", total_steps=20_000), env, params
    )
    keys = jax.random.split(jax.random.key(5), 2)
    ours = anakin.init_runs(built.algorithm, keys)
    default = jax.jit(lambda ks: jax.lax.map(built.algorithm.init, ks))(keys)

    def raw(x):
        return np.asarray(
            jax.random.key_data(x) if jnp.issubdtype(x.dtype, jax.dtypes.prng_key) else x
        )

    for a, b in zip(jax.tree.leaves(ours), jax.tree.leaves(default), strict=True):
        np.testing.assert_array_equal(raw(a), raw(b))


def test_tanh_normal_rmsprop_and_init_log_std_in_a_real_run():
    """PPO on Pendulum-v1 with ``continuous="tanh_normal"``, ``optimizer="rmsprop"`` and
    ``init_log_std=-1``, through ``jrl.train``: the policy is a tanh-squashed Gaussian inside
    the torque bounds (no ClipAction in the training env), the optimiser state is RMSProp's,
    and the first iteration's entropy is that of a Gaussian with log std near -1 (the Gaussian
    entropy 0.5 + 0.5 log(2 pi) + log_std: 0.419 at -1, 1.419 at the default 0)."""
    import optax

    from jrl.core.wrappers import ClipAction
    from jrl.ops.action_distributions import TanhNormal

    res = jrl.train(
        "ppo",
        "Pendulum-v1",
        seeds=2,
        total_steps=4096,
        num_epochs=1,
        num_minibatches=4,
        continuous="tanh_normal",
        optimizer="rmsprop",
        init_log_std=-1.0,
        progress=False,
        num_reports=1,
    )
    assert np.isfinite(res.metrics["train/loss"]).all()
    entropy = res.metrics["train/entropy"][:, 0]
    np.testing.assert_allclose(entropy, 0.5 + 0.5 * np.log(2 * np.pi) - 1.0, atol=0.1)
    opt_state = res.final_state.agent_state.opt_state
    kinds = {type(s) for s in jax.tree.leaves(opt_state, is_leaf=lambda x: hasattr(x, "_fields"))}
    assert optax.ScaleByRmsState in kinds and optax.ScaleByAdamState not in kinds
    env, params = jrl.envs.make("Pendulum-v1")
    built = ppo.build(res.config, env, params)
    e, chain = built.env, []
    while hasattr(e, "env"):
        chain.append(type(e))
        e = e.env
    assert ClipAction not in chain
    p = jax.tree.map(lambda x: x[0], res.final_params)
    log_std = p["params"]["policy_head"]["log_std"]
    np.testing.assert_allclose(log_std, -1.0, atol=0.1)
    obs = 100.0 * jax.random.normal(jax.random.key(0), (256, 3))  # far outside training
    dist, _ = built.network.apply(p, obs)
    assert isinstance(dist, TanhNormal)
    actions = jax.vmap(lambda d, k: d.sample(k))(dist, jax.random.split(jax.random.key(1), 256))
    assert float(jnp.abs(actions).max()) <= 2.0 and float(jnp.abs(dist.mode()).max()) <= 2.0


@pytest.mark.parametrize("agent", ["ppo", "a2c", "impala", "reinforce"])
def test_actor_critics_honour_the_action_mask(agent):
    """On a masked env's ``{"observation", "action_mask"}`` the actor-critics sample, score and
    pick only valid actions (see :func:`_check_masked_probe`)."""
    _check_masked_probe(agent)


def test_recurrent_actor_critic_honours_the_action_mask():
    """As above for recurrent PPO (an LSTM core): acting, and the learner's replay of the
    rollout (``recurrent_unroll``), take the mask."""
    _check_masked_probe("ppo", recurrent="lstm")


def _check_masked_probe(agent, **extra):
    """At init every sampled and greedy action is valid, an invalid action's log-prob is ~ -1e9
    and the entropy is that of the valid actions alone (uniform at init: log of their count, to
    1e-2). After 12k steps on MaskedProbe-v0 (a valid action a pays (a+1)/4, an
    invalid one -10; 8 steps an episode) no episode took an invalid action (every return >= 2)
    and the greedy policy picks the highest valid action for >= 90% of 512 random masks."""
    res = jrl.train(
        agent, "MaskedProbe-v0", 2, total_steps=12_288, progress=False, num_reports=4, **extra
    )
    assert np.nanmin(res.metrics["train/episode_return"]) >= 2.0, res.metrics
    env, params = jrl.envs.make("MaskedProbe-v0")
    built = jrl_agents.get(agent).build(res.config, env, params)
    mask = jax.random.bernoulli(jax.random.key(7), 0.5, (512, 4))
    mask = mask.at[:, 0].set(mask[:, 0] | ~mask.any(axis=1))  # at least one valid action
    obs = {"observation": mask.astype(jnp.float32), "action_mask": mask}
    valid = lambda a: bool(jnp.take_along_axis(mask, a[:, None], axis=1).all())
    fresh = built.agent.init(jax.random.key(0), built.spec)
    if built.agent.recurrent is None:
        actions, info = built.agent.act(fresh, obs, jax.random.key(1))
        greedy = lambda p: built.agent.policy(p, obs, None)
        network = built.network
        dist = network.apply(fresh.params, obs, method=network.policy)
    else:
        rec = built.agent.recurrent
        actions, info, _ = rec.act(fresh, rec.initial_state(512), obs, jax.random.key(1))
        greedy = lambda p: rec.policy(p, rec.initial_state(512), obs, None)[0]
        dist = built.network.apply(fresh.params, rec.initial_state(512), obs)[1]
    assert valid(actions) and valid(greedy(fresh.params))
    np.testing.assert_allclose(info["log_prob"], dist.log_prob(actions))
    assert float(jnp.max(jnp.where(mask, -jnp.inf, dist.log_probs))) < -1e8
    count = mask.sum(axis=1)
    np.testing.assert_allclose(dist.entropy(), jnp.log(count.astype(jnp.float32)), atol=1e-2)
    best = 3 - jnp.argmax(mask[:, ::-1], axis=1)  # the highest valid index
    for r in range(res.num_runs):
        picked = greedy(jax.tree.map(lambda x: x[r], res.final_params))
        assert valid(picked) and float(jnp.mean(picked == best)) >= 0.9, (r, picked)
