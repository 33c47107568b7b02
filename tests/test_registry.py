"""The environment registry: ``jrl.envs.names/register/make/entry`` and its errors."""

from __future__ import annotations

import importlib
import sys

import jax
import jax.numpy as jnp
import jrl.envs
import numpy as np
import pytest
from flax import struct
from jrl.envs import entries, registry

from jrl.core import spaces
from jrl.core.env import Environment
from jrl.core.wrappers import CheckActions, TimeLimit

BUILTIN_IDS = [
    "Acrobot-v1",
    "CartPole-v1",
    "MountainCar-v0",
    "MountainCarContinuous-v0",
    "Pendulum-v1",
]


@struct.dataclass
class CountParams:
    step_size: float = 1.0  # added to the counter on every step
    terminate_at: float = 1e9  # terminates when the counter reaches this


class Count(Environment):
    """A counter env for the registry tests; ``offset`` is a constructor argument."""

    id = "Count-v0"

    def __init__(self, offset: float = 0.0):
        self.offset = offset

    @property
    def default_params(self):
        return CountParams()

    def reset_env(self, key, params):
        x = jnp.asarray(self.offset, jnp.float32)
        return x, x[None]

    def step_env(self, key, state, action, params):
        x = state + params.step_size
        return x, x[None], jnp.asarray(1.0), x >= params.terminate_at, {}

    def observation_space(self, params=None):
        return spaces.Box(-np.inf, np.inf, (1,))

    def action_space(self, params=None):
        return spaces.Discrete(2)


class NoParams(Count):
    @property
    def default_params(self):
        return None


@pytest.fixture
def ids():
    """Registers test ids through this fixture and removes them afterwards (the registry is
    global)."""
    made = []

    def reg(id, *args, **kwargs):
        made.append(id)
        return jrl.envs.register(id, *args, **kwargs)

    yield reg
    for id in made:
        registry._REGISTRY.pop(id, None)


def test_public_api():
    assert set(jrl.envs.__all__) == {
        "EnvEntry",
        "UnknownEnvError",
        "entry",
        "make",
        "names",
        "register",
        "register_object",
        "to_gymnasium",
    }
    for name in jrl.envs.__all__:
        assert hasattr(jrl.envs, name)
    import builtins

    shadowed = [n for n in jrl.envs.__all__ if hasattr(builtins, n)]
    assert not shadowed, f"jrl.envs shadows builtins: {shadowed}"


def test_list_has_the_builtins_sorted():
    ids = jrl.envs.names()
    assert isinstance(ids, list)
    assert set(BUILTIN_IDS) <= set(ids)
    assert ids == sorted(ids)
    for id in BUILTIN_IDS:
        s = jrl.envs.entry(id)
        assert s.source == "jrl" and s.id == id
    assert jrl.envs.entry("CartPole-v1").max_episode_steps == 500
    assert jrl.envs.entry("MountainCar-v0").max_episode_steps == 200
    assert jrl.envs.entry("Pendulum-v1").max_episode_steps == 200


def test_register_and_make(ids):
    s = ids("TestCount-v0", Count, max_episode_steps=3)
    assert isinstance(s, jrl.envs.EnvEntry) and s.source == "user"
    assert "TestCount-v0" in jrl.envs.names()
    env, params = jrl.envs.make("TestCount-v0")
    assert isinstance(env, TimeLimit) and env.max_episode_steps == 3
    assert isinstance(env.unwrapped, Count) and env.id == "Count-v0"
    assert params == CountParams()
    # The time limit applies: truncated at step 3.
    state, ts = env.reset(jax.random.key(0), params)
    flags = []
    for _ in range(3):
        state, ts = env.step(jax.random.key(1), state, jnp.asarray(0), params)
        flags.append(bool(ts.truncated))
    assert flags == [False, False, True]
    assert float(ts.observation[0]) == 3.0


def test_register_with_constructor_kwargs_and_string_entry_point(ids):
    ids("TestCountOffset-v0", f"{__name__}:Count", offset=5.0)
    env, params = jrl.envs.make("TestCountOffset-v0")
    assert not isinstance(env, TimeLimit)  # registered without a time limit
    assert isinstance(env, Count) and env.offset == 5.0
    _, ts = env.reset(jax.random.key(0), params)
    assert float(ts.observation[0]) == 5.0


def test_duplicate_registration_raises(ids):
    ids("TestDup-v0", Count)
    with pytest.raises(ValueError, match="already registered"):
        jrl.envs.register("TestDup-v0", Count)
    with pytest.raises(ValueError, match="already registered"):
        jrl.envs.register("CartPole-v1", Count)
    ids("TestDup-v0", Count, overwrite=True, offset=2.0)
    env, _ = jrl.envs.make("TestDup-v0")
    assert env.offset == 2.0


def test_register_rejects_bad_ids_and_limits():
    with pytest.raises(ValueError, match="invalid env id"):
        jrl.envs.register("", Count)
    with pytest.raises(ValueError, match="invalid env id"):
        jrl.envs.register("gymnax:Mine-v0", Count)
    with pytest.raises(ValueError, match="positive"):
        jrl.envs.register("TestBadLimit-v0", Count, max_episode_steps=0)
    assert "TestBadLimit-v0" not in jrl.envs.names()


def test_make_with_param_overrides(ids):
    ids("TestCount-v0", Count, max_episode_steps=100)
    env, params = jrl.envs.make("TestCount-v0", step_size=2.5, terminate_at=5.0)
    assert params == CountParams(step_size=2.5, terminate_at=5.0)
    state, ts = env.reset(jax.random.key(0), params)
    state, ts = env.step(jax.random.key(1), state, jnp.asarray(0), params)
    assert float(ts.observation[0]) == 2.5 and not bool(ts.terminated)
    state, ts = env.step(jax.random.key(1), state, jnp.asarray(0), params)
    assert float(ts.observation[0]) == 5.0 and bool(ts.terminated)
    # The env's own defaults are untouched.
    assert env.default_params == CountParams()


def test_make_unknown_override_raises_naming_the_fields(ids):
    ids("TestCount-v0", Count)
    with pytest.raises(TypeError) as e:
        jrl.envs.make("TestCount-v0", step_size=2.0, gravity=1.0)
    msg = str(e.value)
    assert "gravity" in msg and "step_size" in msg and "terminate_at" in msg
    ids("TestNoParams-v0", NoParams)
    with pytest.raises(TypeError, match="no parameters"):
        jrl.envs.make("TestNoParams-v0", step_size=1.0)


def test_make_max_episode_steps_override_and_check(ids):
    ids("TestCount-v0", Count, max_episode_steps=10)
    env, _ = jrl.envs.make("TestCount-v0", max_episode_steps=4)
    assert isinstance(env, TimeLimit) and env.max_episode_steps == 4
    env, _ = jrl.envs.make("TestCount-v0", check=True)
    assert env.wrappers == (CheckActions, TimeLimit)
    assert env.env.max_episode_steps == 10
    ids("TestCountNoLimit-v0", Count)
    env, _ = jrl.envs.make("TestCountNoLimit-v0", max_episode_steps=7)
    assert isinstance(env, TimeLimit) and env.max_episode_steps == 7


def test_unknown_id_suggests_the_closest():
    with pytest.raises(jrl.envs.UnknownEnvError) as e:
        jrl.envs.make("Cartpole-v1")
    msg = str(e.value)
    assert "'Cartpole-v1'" in msg
    assert "Did you mean 'CartPole-v1'" in msg
    # Usable as a KeyError (a lookup) and a ValueError (bad input).
    assert isinstance(e.value, KeyError) and isinstance(e.value, ValueError)
    with pytest.raises(jrl.envs.UnknownEnvError, match="Did you mean 'MountainCarContinuous-v0'"):
        jrl.envs.entry("MountainCarContinous-v0")
    with pytest.raises(jrl.envs.UnknownEnvError) as e:
        jrl.envs.make("CARTPOLE-V1")  # case-insensitive fallback
    assert "'CartPole-v1'" in str(e.value)


def test_unknown_id_without_close_match_lists_registered():
    with pytest.raises(jrl.envs.UnknownEnvError) as e:
        jrl.envs.entry("Zzzzzzzz")
    msg = str(e.value)
    assert "Did you mean" not in msg
    assert "Registered:" in msg and "CartPole-v1" in msg


def test_make_builtin_cartpole():
    from jrl.envs.cartpole import CartPole  # our own module: an import error is a failure

    env, params = jrl.envs.make("CartPole-v1")
    assert isinstance(env, TimeLimit) and env.max_episode_steps == 500
    assert isinstance(env.unwrapped, CartPole)
    assert env.id == "CartPole-v1"
    assert env.action_space(params) == spaces.Discrete(2)
    assert env.observation_space(params).shape == (4,)
    env, params = jrl.envs.make("CartPole-v1", gravity=12.0, max_episode_steps=50)
    assert float(params.gravity) == 12.0 and env.max_episode_steps == 50
    with pytest.raises(TypeError, match="gravity"):
        jrl.envs.make("CartPole-v1", gravty=12.0)


def test_a_missing_extra_is_one_line_naming_its_install(monkeypatch):
    """``import_extra``: a module that imports is returned; one that cannot be imported raises
    the adapter's error (an ImportError and a ValueError: ``jrl`` exits with 2) with one line
    naming ``pip install jrl-jax[<extra>]`` and the import's own reason, without its
    traceback."""
    assert entries.import_extra("json", "x", "y") is __import__("json")

    class DemoMissingError(entries.ExtraMissingError):
        pass

    monkeypatch.setitem(sys.modules, "demo_extra_pkg", None)
    with pytest.raises(DemoMissingError) as info:
        entries.import_extra("demo_extra_pkg", "demo", "demo environments", DemoMissingError)
    message = str(info.value)
    assert message.startswith(
        "demo environments need the optional demo extra: pip install jrl-jax[demo] ("
    )
    assert "demo_extra_pkg" in message and "\n" not in message
    assert info.value.__cause__ is None and info.value.__suppress_context__
    assert isinstance(info.value, ImportError) and isinstance(info.value, ValueError)


@pytest.mark.parametrize("extra", ["brax", "pgx", "jaxmarl", "craftax", "jumanji", "xminigrid"])
def test_every_adapter_reports_a_missing_extra_the_same_way(extra):
    """Every adapter of an optional suite builds its missing-extra error on the shared
    ``ExtraMissingError`` and names the same install command."""
    module = importlib.import_module(f"jrl.envs.{extra}_adapter")
    errors = [
        v
        for v in vars(module).values()
        if isinstance(v, type)
        and v.__name__.endswith("MissingError")
        and v.__module__ == module.__name__
    ]
    assert len(errors) == 1 and issubclass(errors[0], entries.ExtraMissingError), errors
    assert module.INSTALL == entries.install_hint(extra) == f"pip install jrl-jax[{extra}]"
