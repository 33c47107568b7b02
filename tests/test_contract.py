"""The agent-module contract and the run options: the registry entry type, presets and
sweepable fields from the config class, the with_hparams hook, Learned, RunOptions
(validation, the config.json record, the keyword split of jrl.train), atomic writes."""

import dataclasses
import json

import jax
import jax.numpy as jnp
import jrl.agents
import jrl.envs
import numpy as np
import pytest

import jrl
from jrl.app import api as experiment
from jrl.app.run_options import RECORDED, RunOptions
from jrl.parts.agent import Agent, Learned, replace_hparams
from jrl.parts.agent_config import AgentConfig
from jrl.run import anakin
from jrl.util import files

AGENTS = jrl.agents.names()


@pytest.mark.parametrize("agent", AGENTS)
def test_every_agent_entry_follows_the_contract(agent):
    entry = jrl.agents.get(agent)
    cls = entry.config_cls
    assert issubclass(cls, AgentConfig) and dataclasses.is_dataclass(cls)
    assert cls.__dataclass_params__.frozen
    # sweepable fields are exactly the HPARAMS fields, and each is a config field
    hp_fields = tuple(f.name for f in dataclasses.fields(cls.HPARAMS))
    assert entry.sweepable == hp_fields
    assert set(hp_fields) <= {f.name for f in dataclasses.fields(cls)}
    # presets only name config fields, and give valid configs
    for env_id, preset in cls.PRESETS.items():
        assert set(preset) <= {f.name for f in dataclasses.fields(cls)}, env_id
        experiment.make_config(agent, env_id)
    # run options and config fields never share a name (jrl.train tells them apart by name)
    assert not {f.name for f in dataclasses.fields(cls)} & experiment.OPTION_NAMES


@pytest.mark.parametrize("agent", AGENTS)
def test_hparams_reach_the_state_through_the_algorithms_hook(agent, env_for, dataset_for):
    """The runner sets swept values through Algorithm.with_hparams (vmapped over runs); the
    agent state then holds each run's own value."""
    config = experiment.make_config(agent, env_for(agent), total_steps=20_000, **dataset_for(agent))
    env, params = jrl.envs.make(env_for(agent))
    built = jrl.agents.get(agent).build(config, env, params)
    keys = jax.random.split(jax.random.key(0), 3)
    states = anakin.init_runs(built.algorithm, keys)
    values = {"learning_rate": np.asarray([1e-3, 2e-3, 3e-3], np.float32)}
    states = anakin.set_hparams(built.algorithm, states, values)
    np.testing.assert_array_equal(states.agent_state.hparams.learning_rate, values["learning_rate"])
    with pytest.raises(ValueError, match="sweepable fields"):
        anakin.set_hparams(built.algorithm, states, {"num_envs": np.ones(3)})


def test_a_custom_with_hparams_hook_replaces_the_default():
    """An agent whose state keeps its hyperparameters elsewhere supplies its own hook."""
    calls = []

    def hook(agent_state, values):
        calls.append(sorted(values))
        return {**agent_state, "lr": values["learning_rate"]}

    agent = Agent(init=None, act=None, learn=None, with_hparams=hook)
    assert agent.with_hparams({"lr": 0.0}, {"learning_rate": 2.0})["lr"] == 2.0
    assert calls == [["learning_rate"]]
    assert Agent(None, None, None).with_hparams is replace_hparams


def test_learned_carries_optional_priorities():
    out = Learned({"p": 1}, {"train/loss": 0.5})
    assert out.priorities is None
    state, metrics, priorities = Learned({}, {}, jnp.ones(3))
    assert priorities.shape == (3,)


def test_register_a_user_agent(tmp_path):
    from jrl.agents.actor_critic import reinforce

    @dataclasses.dataclass(frozen=True)
    class MyConfig(reinforce.REINFORCEConfig):
        """My agent: REINFORCE with 4 envs."""

        num_envs: int = 4

    entry = jrl.agents.register("test-my-agent", MyConfig, reinforce.build)
    try:
        assert "test-my-agent" in jrl.agents.names() and jrl.agents.get("test-my-agent") is entry
        assert jrl.agents.summary("test-my-agent") == "My agent: REINFORCE with 4 envs."
        with pytest.raises(ValueError, match="already registered"):
            jrl.agents.register("test-my-agent", MyConfig, reinforce.build)
        res = jrl.train("test-my-agent", "CartPole-v1", total_steps=4 * 256 * 2, progress=False)
        assert res.config.num_envs == 4 and res.metrics["train/loss"].shape == (1, 2)
    finally:
        jrl.agents._ENTRIES.pop("test-my-agent")
    with pytest.raises(TypeError, match="AgentConfig"):
        jrl.agents.register("bad", dict, reinforce.build)
    with pytest.raises(jrl.agents.UnknownAgentError, match="Did you mean .reinforce."):
        jrl.agents.get("reinforse")


def test_run_options_validate_once_with_clear_messages():
    for bad, message in [
        (dict(seeds=0), "seeds must be >= 1"),
        (dict(num_reports=0), "num_reports must be >= 1"),
        (dict(eval_every=-1), "eval_every must be >= 0"),
        (dict(eval_episodes=0), "eval_episodes must be >= 1"),
        (dict(keep_checkpoints=0), "keep_checkpoints must be >= 1"),
        (dict(stop_at_steps=-5), "stop_at_steps must be >= 0"),
        (dict(log_every=-1), "log_every must be >= 0"),
        (dict(sweep={"gamma": ()}), "has no values"),
        (dict(log=("jsonl", "jsnl")), "unknown sink"),
    ]:
        with pytest.raises(ValueError, match=message):
            RunOptions(**bad).validate()
    with pytest.raises(ValueError, match="pass out=DIR"):
        RunOptions(checkpoint_every=100).validate(has_out=False)


def test_run_record_round_trips_and_keeps_the_format_of_older_folders():
    opts = RunOptions(seeds=3, seed=5, sweep={"gamma": [0.9, 0.99]}, log=["jsonl"], devices=2)
    record = json.loads(json.dumps(opts.normalized().record()))
    assert set(record) == {
        "format_version",
        "num_seeds",
        "seed",
        "sweep_values",
        "env_overrides",
        "devices",
        "num_reports",
        "eval_every",
        "eval_episodes",
        "checkpoint_every",
        "log",
        "log_every",
        "keys",
        "plugins",
    }
    back = RunOptions.from_record(record)
    assert back.keys == "per_seed"
    assert RunOptions.from_record({k: v for k, v in record.items() if k != "keys"}).keys == "split"
    assert back.recorded() == opts.normalized().recorded()
    assert back.sweep == {"gamma": (0.9, 0.99)} and back.log == ("jsonl",)
    assert set(RECORDED) == set(back.recorded())


def test_train_splits_options_from_config_fields(tmp_path):
    res = jrl.train(
        "ppo",
        "CartPole-v1",
        2,
        options=RunOptions(seed=7, num_reports=2),
        progress=False,
        total_steps=4 * 128 * 2,
        learning_rate=1e-3,
    )
    assert res.config.learning_rate == 1e-3 and res.num_runs == 2
    saved = jrl.train(
        "ppo",
        "CartPole-v1",
        2,
        out=tmp_path / "run",
        options=RunOptions(seed=7, num_reports=2, progress=False),
        total_steps=4 * 128 * 2,
        learning_rate=1e-3,
    )
    for a, b in zip(jax.tree.leaves(res.final_params), jax.tree.leaves(saved.final_params)):
        np.testing.assert_array_equal(a, b)
    spec = experiment.read_spec(tmp_path / "run")
    assert spec.options.seed == 7 and spec.options.seeds == 2
    with pytest.raises(experiment.CheckpointError, match="seed: saved 7, given 8"):
        experiment.resume(tmp_path / "run", seed=8)
    with pytest.raises(TypeError, match="unknown ppo config field.*did you mean eval_every"):
        jrl.train("ppo", "CartPole-v1", progress=False, eval_evry=10)


def test_atomic_write_leaves_the_old_file_when_the_writer_fails(tmp_path):
    target = tmp_path / "x.json"
    files.write_atomic(target, "old")
    with pytest.raises(RuntimeError):
        with files.replacing(target) as tmp:
            assert tmp.parent == tmp_path and tmp.name.startswith(".") and tmp.suffix == ".json"
            tmp.write_text("half")
            raise RuntimeError("disk full")
    assert target.read_text() == "old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["x.json"]
    files.write_atomic(target, b"new")
    assert target.read_text() == "new"
