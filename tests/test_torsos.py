"""Networks as config values: the torsos of jrl.parts.torsos.TORSOS (MLP, LayerNorm MLP, MinAtar
and Nature CNNs, IMPALA ResNet), a shared actor-critic torso, a user's own torso, end to end."""

import json

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jrl
from jrl.app import api as experiment
from jrl.core import spaces
from jrl.parts import networks, torsos

SHAPES = {
    "mlp": (4,),
    "layernorm_mlp": (4,),
    "minatar_cnn": (10, 10, 4),
    "nature_cnn": (84, 84, 4),
    "impala_resnet": (64, 64, 3),
}


@pytest.mark.parametrize("torso", sorted(SHAPES))
def test_every_torso_in_actor_critic_and_q_networks(torso):
    shape = SHAPES[torso]
    obs = jnp.ones((2, 5) + shape)  # two leading batch dims
    separate = networks.ActorCritic(spaces.Discrete(3), (32,), "relu", len(shape), torso=torso)
    shared = separate.clone(shared_torso=True)
    p_sep = separate.init(jax.random.key(0), jnp.zeros((1,) + shape))
    p_shared = shared.init(jax.random.key(0), jnp.zeros((1,) + shape))
    dist, value = separate.apply(p_sep, obs)
    assert value.shape == (2, 5) and dist.logits.shape == (2, 5, 3)
    assert "critic_torso" in p_sep["params"] and "critic_torso" not in p_shared["params"]
    count = lambda p: sum(x.size for x in jax.tree.leaves(p))  # noqa: E731
    heads = count(p_sep["params"]["policy_head"]) + count(p_sep["params"]["value_head"])
    torso_size = count(p_sep["params"]["actor_torso"])
    assert count(p_sep) == heads + 2 * torso_size and count(p_shared) == heads + torso_size
    q = networks.QNetwork(3, (32,), "relu", len(shape), torso=torso)
    assert q.apply(q.init(jax.random.key(0), jnp.zeros((1,) + shape)), obs).shape == (2, 5, 3)


def test_impala_resnet_shapes_and_residual_blocks():
    """Three stages (16, 32, 32 channels): 64x64 halves to 32, 16, 8; each stage has a conv and
    two blocks of two convs (15 convs); extra leading dims pass through."""
    net = torsos.make_torso("impala_resnet", (256,), "relu", 3)
    x = jnp.zeros((2, 5, 64, 64, 3))
    params = net.init(jax.random.key(0), x)
    convs = [k for k in params["params"] if k.startswith("Conv_")]
    assert len(convs) == 15
    assert params["params"]["Conv_14"]["kernel"].shape == (3, 3, 32, 32)
    dense = params["params"]["MLP_0"]["Dense_0"]["kernel"]
    assert dense.shape == (8 * 8 * 32, 256)
    assert net.apply(params, x).shape == (2, 5, 256)


def test_layer_norm_reaches_the_cnn_torso_or_is_refused():
    """PQN's layer_norm switch puts a LayerNorm after each conv and hidden Dense of a CNN torso
    too; a torso without the option is refused rather than built without it."""
    q = networks.QNetwork(3, (32,), "relu", 3, layer_norm=True, torso="minatar_cnn")
    p = q.init(jax.random.key(0), jnp.zeros((1, 10, 10, 4)))["params"]["ConvTorso_0"]
    assert "LayerNorm_0" in p and "LayerNorm_0" in p["MLP_0"]
    plain = networks.QNetwork(3, (32,), "relu", 3, torso="minatar_cnn")
    assert (
        "LayerNorm_0"
        not in plain.init(jax.random.key(0), jnp.zeros((1, 10, 10, 4)))["params"]["ConvTorso_0"]
    )
    resnet = networks.QNetwork(3, (32,), "relu", 3, layer_norm=True, torso="impala_resnet")
    with pytest.raises(ValueError, match="'impala_resnet' torso has no layer_norm option"):
        resnet.init(jax.random.key(0), jnp.zeros((1, 16, 16, 3)))


def test_layernorm_torso_normalises_hidden_layers():
    mlp = torsos.make_torso("layernorm_mlp", (8,), "tanh", 1)
    p = mlp.init(jax.random.key(0), jnp.zeros((1, 3)))
    assert "LayerNorm_0" in p["params"]
    with pytest.raises(ValueError, match="unknown torso 'resnet50'"):
        torsos.make_torso("resnet50", (8,), "tanh", 1)
    with pytest.raises(ValueError, match="needs image observations"):
        torsos.make_torso("nature_cnn", (8,), "relu", 1).init(jax.random.key(0), jnp.zeros((1, 4)))


def test_torso_is_a_config_value_with_a_clear_error():
    config = experiment.make_config("ppo", "CartPole-v1", torso="layernorm_mlp", shared_torso=True)
    assert config.torso == "layernorm_mlp" and config.shared_torso
    with pytest.raises(ValueError, match="torso must be one of"):
        experiment.make_config("dqn", "CartPole-v1", torso="resnet50")


def test_a_users_flax_torso_trains_and_is_recorded(tmp_path, monkeypatch):
    monkeypatch.setattr(torsos, "TORSOS", dict(torsos.TORSOS))  # registered for this test

    class Tiny(nn.Module):
        obs_ndim: int = 1

        @nn.compact
        def __call__(self, x):
            return nn.tanh(nn.Dense(16)(x.reshape(x.shape[: x.ndim - self.obs_ndim] + (-1,))))

    def tiny(hidden_sizes, activation, obs_ndim, orthogonal):
        return Tiny(obs_ndim)

    res = jrl.train(
        "a2c", "CartPole-v1", torso=tiny, total_steps=1024, progress=False, out=tmp_path / "r"
    )
    assert res.config.torso == "tiny"
    assert json.loads((tmp_path / "r" / "config.json").read_text())["config"]["torso"] == "tiny"
    kernel = res.final_params["params"]["actor_torso"]["Dense_0"]["kernel"]
    assert kernel.shape == (1, 4, 16)  # [runs, obs, 16]: the user's layer, not an MLP's 64


def test_ppo_with_a_minatar_cnn_end_to_end(tmp_path):
    """Pixels: gymnax's MinAtar Breakout with the MinAtar CNN, through the run folder,
    evaluation and export."""
    from jrl.app import export

    run = tmp_path / "run"
    res = jrl.train(
        "ppo",
        "gymnax:Breakout-MinAtar",
        torso="minatar_cnn",
        hidden_sizes=(32,),
        num_envs=4,
        num_steps=32,
        total_steps=256,
        progress=False,
        out=run,
    )
    assert np.isfinite(res.metrics["train/loss"]).all()
    stats = experiment.evaluate_run(run, episodes=2)
    assert stats["env_id"] == "gymnax:Breakout-MinAtar" and len(stats["runs"]) == 1
    policy = jrl.load_policy(export.export_policy(run, tmp_path / "policy"))
    assert policy(jnp.zeros((3, 10, 10, 4), bool)).shape == (3,)


@pytest.mark.parametrize("agent", ["ppo", "dqn", "pqn"])
def test_minatar_presets_pick_the_minatar_network_and_train(agent):
    """Every MinAtar env has a preset with the MinAtar network (a CNN torso on the 10x10
    images); one short run of each agent on it trains and gives finite losses."""
    from jrl.parts.agent_config import MINATAR_ENVS

    for env_id in MINATAR_ENVS:
        config = experiment.make_config(agent, env_id)
        assert (config.torso, config.hidden_sizes, config.activation) == (
            "minatar_cnn",
            (128,),
            "relu",
        )
    short = {"ppo": {"num_envs": 8, "num_steps": 32}, "pqn": {"num_envs": 8, "num_steps": 32}}
    short["dqn"] = {"learning_starts": 64, "buffer_size": 1024}
    res = jrl.train(
        agent, "gymnax:Breakout-MinAtar", total_steps=512, progress=False, **short[agent]
    )
    assert res.config.torso == "minatar_cnn"
    assert np.isfinite(res.metrics["train/loss"]).all()
