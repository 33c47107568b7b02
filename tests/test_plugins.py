"""Plugins: a user's module that registers an env and an agent, used through the CLI with
``--import`` (train) and then, recorded in the run folder, by resume, eval, render and export
in fresh processes that are not told about it; ``JRL_PLUGINS``; clear errors."""

import json
import os
import subprocess
import sys
import textwrap

import jrl.agents
import pytest

import jrl
from jrl.run import plugins

PLUGIN = textwrap.dedent(
    '''
    """A user's plugin: the Corridor-v0 env, the 'wide' torso and the 'corridor_pg' agent."""
    import dataclasses

    import flax.linen as nn
    import jax.numpy as jnp
    from flax import struct

    import jrl.agents
    import jrl.envs
    import jrl.parts.torsos
    from jrl.core import spaces
    from jrl.agents.actor_critic import reinforce
    from jrl.core.env import Environment


    @struct.dataclass
    class Params:
        length: int = 6


    @struct.dataclass
    class State:
        pos: jnp.ndarray


    class Corridor(Environment):
        """Walk right (action 1) to the end: reward 1 there, -0.01 per step."""

        @property
        def default_params(self):
            return Params()

        def reset_env(self, key, params):
            state = State(jnp.zeros((), jnp.int32))
            return state, self._obs(state, params)

        def step_env(self, key, state, action, params):
            pos = jnp.clip(state.pos + 2 * action - 1, 0, params.length)
            done = pos >= params.length
            reward = jnp.where(done, 1.0, -0.01).astype(jnp.float32)
            new = State(pos.astype(jnp.int32))
            return new, self._obs(new, params), reward, done, {}

        def _obs(self, state, params):
            return jnp.reshape(state.pos / params.length, (1,)).astype(jnp.float32)

        def observation_space(self, params=None):
            return spaces.Box(0.0, 1.0, (1,), jnp.float32)

        def action_space(self, params=None):
            return spaces.Discrete(2)

        def render(self, state, params=None):
            here = (jnp.arange(8 * 7) // 8 == state.pos)[None, :, None]  # the walker's cell
            return jnp.broadcast_to(jnp.where(here, 255, 0), (8, 8 * 7, 3)).astype(jnp.uint8)


    @dataclasses.dataclass(frozen=True)
    class CorridorPGConfig(reinforce.REINFORCEConfig):
        """REINFORCE for corridors: 4 envs x 32 steps."""

        num_envs: int = 4
        num_steps: int = 32
        torso: str = "wide"


    class Wide(nn.Module):
        """The user's torso: one wide tanh layer."""

        obs_ndim: int = 1

        @nn.compact
        def __call__(self, x):
            x = x.reshape(x.shape[: x.ndim - self.obs_ndim] + (-1,))
            return nn.tanh(nn.Dense(48)(x))


    def wide(hidden_sizes, activation, obs_ndim, orthogonal):
        return Wide(obs_ndim)


    jrl.parts.torsos.register_torso("wide", wide, overwrite=True)
    jrl.envs.register("Corridor-v0", Corridor, max_episode_steps=50, overwrite=True)
    jrl.agents.register("corridor_pg", CorridorPGConfig, reinforce.build, overwrite=True)
    '''
)


def run(*args, cwd, env_extra=None, timeout=600):
    env = {k: v for k, v in os.environ.items() if k != plugins.ENV_VAR}
    env.update({"JAX_PLATFORMS": "cpu", "MPLBACKEND": "Agg", **(env_extra or {})})
    return subprocess.run(
        [sys.executable, "-m", "jrl.app.cli", *map(str, args)],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
        cwd=cwd,
    )


@pytest.fixture
def plugin_dir(tmp_path):
    (tmp_path / "myplug.py").write_text(PLUGIN)
    return tmp_path


def test_a_plugin_env_and_agent_through_the_cli(plugin_dir):
    cwd = plugin_dir
    steps = ["--total-steps", str(4 * 32 * 6), "--num-reports", "6"]
    out = run(
        "train",
        "corridor_pg",
        "--env",
        "Corridor-v0",
        "--import",
        "myplug",
        *steps,
        "--out",
        "run",
        "--quiet",
        "--stop-at-steps",
        "256",
        "--seeds",
        "2",
        "--log",
        "tensorboard",
        cwd=cwd,
    )
    assert out.returncode == 0, out.stderr
    record = json.loads((cwd / "run" / "config.json").read_text())
    assert record["agent"] == "corridor_pg" and record["run"]["plugins"] == ["myplug"]
    assert record["config"]["torso"] == "wide"  # the plugin's network
    # without --import: the run folder's record brings the plugin back
    for args in (
        ["train", "--resume", "run", "--quiet"],
        ["eval", "run", "--episodes", "3"],
        ["render", "run", "--out", "ep.gif"],
        ["export", "run", "--out", "policy"],
    ):
        out = run(*args, cwd=cwd)
        assert out.returncode == 0, (args, out.stderr)
    assert (cwd / "run" / "params.msgpack").is_file() and (cwd / "ep.gif").is_file()
    stats = json.loads((cwd / "run" / "eval.json").read_text())
    assert stats["agent"] == "corridor_pg" and stats["env_id"] == "Corridor-v0"
    assert (cwd / "policy" / "policy.jaxexport").is_file()
    for seed in (0, 1):  # one TensorBoard run per seed: the first call's file and the resume's
        assert len(list((cwd / "run" / "tb" / f"seed{seed}").glob("events.out.tfevents.*"))) == 2
    rows = (cwd / "run" / "metrics.csv").read_text().splitlines()[1:]
    assert len(rows) == 2 * 6  # every iteration of both seeds, the resumed ones included
    out = run("agents", "--import", "myplug", cwd=cwd)
    assert "corridor_pg" in out.stdout and "REINFORCE for corridors" in out.stdout
    out = run("envs", cwd=cwd, env_extra={plugins.ENV_VAR: "myplug"})
    assert out.returncode == 0 and "Corridor-v0" in out.stdout


def test_unknown_plugin_is_one_clear_line(tmp_path):
    out = run("train", "ppo", "--import", "no_such_plugin_mod", "--out", "r", cwd=tmp_path)
    assert out.returncode == 2, out.stderr
    assert "plugin 'no_such_plugin_mod' could not be imported" in out.stderr
    assert len(out.stderr.strip().splitlines()) == 1 and not (tmp_path / "r").exists()


def test_python_api_records_plugins(plugin_dir, monkeypatch):
    from jrl.envs import registry

    from jrl.parts import torsos

    monkeypatch.setattr(torsos, "TORSOS", dict(torsos.TORSOS))
    monkeypatch.syspath_prepend(str(plugin_dir))  # the user's PYTHONPATH holds their module
    monkeypatch.setattr(jrl.agents, "_ENTRIES", dict(jrl.agents._ENTRIES))  # registered for
    monkeypatch.setattr(registry, "_REGISTRY", dict(registry._REGISTRY))  # this test only
    monkeypatch.delitem(sys.modules, "myplug", raising=False)
    res = jrl.train(
        "corridor_pg",
        "Corridor-v0",
        plugins=["myplug"],
        total_steps=256,
        progress=False,
        out=plugin_dir / "api",
    )
    assert res.agent == "corridor_pg"
    assert json.loads((plugin_dir / "api" / "config.json").read_text())["run"]["plugins"] == [
        "myplug"
    ]
    with pytest.raises(plugins.PluginError, match="could not be imported"):
        plugins.load(["no_such_plugin_mod"])
