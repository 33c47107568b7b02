"""Jumanji environments (the optional ``jumanji`` extra): ``jumanji:<name>`` ids for jumanji's
single-agent envs with one discrete action, bit for bit jumanji's own reset and step, the time
limit moved from jumanji into jrl's TimeLimit (a truncation, not a termination), the refusals
(unknown, multi-discrete, multi-agent, Sokoban's levels offline, no jumanji), and PQN learning
Game2048-v1 beyond the random policy."""

import os
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

jumanji = pytest.importorskip("jumanji")

import jrl  # noqa: E402
import jrl.envs as jrl_envs  # noqa: E402
from jrl.core import wrappers  # noqa: E402
from jrl.core.types import FINAL_OBSERVATION  # noqa: E402
from jrl.envs import jumanji_adapter  # noqa: E402

JRL = [sys.executable, "-m", "jrl.app.cli"]
LAST = 2  # jumanji's StepType.LAST

LAYOUTS = {
    "Snake-v1": (721, lambda o: [o.grid, o.step_count]),
    "Maze-v0": (
        105,
        lambda o: [
            o.agent_position.row,
            o.agent_position.col,
            o.target_position.row,
            o.target_position.col,
            o.walls,
            o.step_count,
        ],
    ),
    "Game2048-v1": (16, lambda o: [o.board]),
    "TSP-v1": (61, lambda o: [o.coordinates, o.position, o.trajectory]),
}
"""The documented observation of each env: its size and jumanji's fields in order."""


def _flat(parts):
    return jnp.concatenate([jnp.ravel(jnp.asarray(p, jnp.float32)) for p in parts])


def run(*args, cwd, env=None):
    env = {**os.environ, "JAX_PLATFORMS": "cpu", "MPLBACKEND": "Agg", **(env or {})}
    return subprocess.run(
        JRL + [str(a) for a in args], capture_output=True, text=True, timeout=600, cwd=cwd, env=env
    )


@pytest.fixture
def fresh_make():
    """The adapter's cache of built envs emptied before and after the test."""
    jumanji_adapter._make.cache_clear()
    yield
    jumanji_adapter._make.cache_clear()


def test_spaces_reset_and_step():
    """Each adapted env (Sokoban aside: its levels are downloaded) resets and steps under jit:
    a masked observation ``{"observation": float32[n], "action_mask": bool[A]}`` inside its
    space, a Discrete action, float32 reward, bool flags; the time limits are jumanji's."""
    limits = {"Snake-v1": 4000, "Maze-v0": 100, "PacMan-v1": 1000, "SlidingTilePuzzle-v0": 500}
    names = jumanji_adapter.jumanji_names()
    assert set(names) == set(jumanji_adapter.ADAPTED)
    for name in (n for n in names if n != "Sokoban-v0"):
        env, params = jrl_envs.make(f"jumanji:{name}")
        assert params is None and jrl_envs.entry(f"jumanji:{name}").source == "jumanji"
        assert jrl_envs.entry(f"jumanji:{name}").max_episode_steps == limits.get(name), name
        space, action = env.observation_space(params), env.action_space(params)
        assert isinstance(action, jrl.core.spaces.Discrete)
        box, mask = space.spaces["observation"], space.spaces["action_mask"]
        assert box.dtype == jnp.float32 and len(box.shape) == 1 and mask.shape == (action.n,)

        def reset_and_step(key, env=env):
            state, ts = env.reset(key, params)
            a = jnp.argmax(ts.observation["action_mask"]).astype(jnp.int32)
            return ts, env.step(key, state, a, params)[1]

        ts, ts2 = jax.jit(reset_and_step)(jax.random.key(0))
        for t in (ts, ts2):
            assert bool(space.contains(t.observation)), name
            assert t.observation["observation"].dtype == jnp.float32
            assert t.observation["action_mask"].dtype == jnp.bool_
            assert t.reward.dtype == jnp.float32 and t.terminated.dtype == jnp.bool_
        assert jax.tree.structure(ts) == jax.tree.structure(ts2), name  # info included
        if name in LAYOUTS:
            assert box.shape == (LAYOUTS[name][0],), name
    _, ts = jrl_envs.make("jumanji:Game2048-v1")[0].reset(jax.random.key(0))
    assert set(ts.info) == {"highest_tile"}


def _both(env, theirs, steps, key):
    """``steps`` uniformly random actions (legal or not) in jrl's ``env`` and in jumanji's
    ``theirs``, both reset with the same key whenever jumanji ends an episode: (jrl's time
    steps, jumanji's, the step in the episode), each stacked ``[steps]``."""
    params = None
    n = env.action_space(params).n

    def step(carry, k):
        s1, s2, t = carry
        k_a, k_r = jax.random.split(k)
        a = jax.random.randint(k_a, (), 0, n)
        s1, ts1 = env.step(k_a, s1, a, params)
        s2, ts2 = theirs.step(s2, a)
        done = ts2.step_type == LAST
        r1, _ = env.reset(k_r, params)
        r2, _ = theirs.reset(jax.random.key_data(k_r))
        pick = lambda new, old: jax.tree.map(lambda x, y: jnp.where(done, x, y), new, old)
        return (pick(r1, s1), pick(r2, s2), jnp.where(done, 0, t + 1)), (ts1, ts2, t + 1)

    s1, first1 = env.reset(key, params)
    s2, first2 = theirs.reset(jax.random.key_data(key))
    _, out = jax.lax.scan(step, (s1, s2, jnp.int32(0)), jax.random.split(key, steps))
    return (first1, first2), out


@pytest.mark.parametrize("name", sorted(LAYOUTS))
def test_equal_to_jumanji_step_for_step(name):
    """300 random steps (with resets) of the adapter and of jumanji's own env: the same
    observation (jumanji's fields in the documented order, as float32), action mask and
    reward, bit for bit; jrl's episode ends where jumanji's does, as ``terminated`` before
    jumanji's time limit and as ``truncated`` (never terminated) on the step reaching it
    (where jumanji reports a termination, discount 0). Every observation is in the space."""
    env, params = jrl_envs.make(f"jumanji:{name}")
    limit = jrl_envs.entry(f"jumanji:{name}").max_episode_steps
    layout = LAYOUTS[name][1]
    theirs = jumanji.make(name)
    first, (ts1, ts2, t) = jax.jit(lambda k: _both(env, theirs, 300, k))(jax.random.key(7))
    np.testing.assert_array_equal(
        first[0].observation["observation"], _flat(layout(first[1].observation))
    )
    obs = jax.vmap(lambda o: _flat(layout(o)))(ts2.observation)
    np.testing.assert_array_equal(ts1.observation["observation"], obs)
    np.testing.assert_array_equal(ts1.observation["action_mask"], ts2.observation.action_mask)
    np.testing.assert_array_equal(ts1.reward, ts2.reward)
    done = np.asarray(ts2.step_type == LAST)
    at_limit = np.asarray(t) == (limit or -1)
    np.testing.assert_array_equal(np.asarray(ts1.terminated | ts1.truncated), done)
    np.testing.assert_array_equal(np.asarray(ts1.truncated), at_limit)
    assert not np.asarray(ts1.terminated)[at_limit].any()
    assert done.sum() >= 2 and np.asarray(ts1.terminated).any(), done.sum()
    if name == "Maze-v0":  # random walks end by the time limit too
        assert at_limit.any() and np.all(np.asarray(ts2.discount)[at_limit] == 0.0)
    space = env.observation_space(params)
    assert bool(jax.vmap(space.contains)(ts1.observation).all())


def test_time_limit_is_jrls_truncation():
    """Maze-v0 walked "up" for 150 steps from a start where that never reaches the target:
    ``jrl.envs.make`` truncates at step 100 (jumanji's limit), not terminated, and AutoReset's
    final observation is the bare env's 100th; the bare adapter, built with the lifted limit,
    goes on past 100 (jumanji's own env ends there); ``max_episode_steps=30`` cuts at 30."""
    env, params = jrl_envs.make("jumanji:Maze-v0")
    bare = env.unwrapped
    assert bare.jumanji_env.time_limit == jumanji_adapter.LIFTED_TIME_LIMIT

    def walk(e, steps):
        def step(s, k):
            s, ts = e.step(k, s, jnp.int32(0), params)
            return s, ts

        s, _ = e.reset(jax.random.key(3), params)
        return jax.lax.scan(step, s, jax.random.split(jax.random.key(4), steps))[1]

    ts = jax.jit(lambda: walk(bare, 150))()
    assert not np.asarray(ts.terminated | ts.truncated).any()  # never ends by itself
    assert float(ts.observation["observation"][-1, -1]) == 150.0  # step_count goes on
    limited = jax.jit(lambda: walk(wrappers.AutoReset(env), 150))()
    trunc = np.asarray(limited.truncated)
    assert np.flatnonzero(trunc).tolist() == [99] and not np.asarray(limited.terminated).any()
    final = limited.info[FINAL_OBSERVATION]["observation"]
    np.testing.assert_array_equal(final[99], ts.observation["observation"][99])
    assert not np.array_equal(limited.observation["observation"][99], final[99])  # a reset
    theirs = jumanji.make("Maze-v0")
    s, _ = theirs.reset(jax.random.key_data(jax.random.key(3)))
    up = lambda s, _: theirs.step(s, jnp.int32(0))
    jts = jax.jit(lambda s: jax.lax.scan(up, s, length=100)[1])(s)
    assert np.flatnonzero(np.asarray(jts.step_type) == LAST).tolist() == [99]
    assert float(jts.discount[99]) == 0.0  # jumanji's time limit: a termination
    short, _ = jrl_envs.make("jumanji:Maze-v0", max_episode_steps=30)
    cut = jax.jit(lambda: walk(wrappers.AutoReset(short), 40))()
    assert np.flatnonzero(np.asarray(cut.truncated)).tolist() == [29]


def test_jumanjis_own_truncation_is_reported_as_truncated():
    """An episode jumanji ends with a discount above 0 (none of the adapted envs does in
    jumanji 1.1; here Snake's step made to say so) is ``truncated``, not ``terminated``, also
    under jrl's TimeLimit."""
    env, params = jrl_envs.make("jumanji:Snake-v1")

    class Truncating:
        def __getattr__(self, attr):
            return getattr(jumanji_adapter._make("Snake-v1")[0], attr)

        def step(self, state, action):
            state, ts = jumanji_adapter._make("Snake-v1")[0].step(state, action)
            return state, jumanji.types.truncation(ts.reward, ts.observation, extras={})

    bare = jumanji_adapter.JumanjiEnv("Snake-v1")
    bare.jumanji_env = Truncating()
    for e in (bare, wrappers.TimeLimit(bare, 4000)):
        s, ts = e.reset(jax.random.key(0), params)
        _, ts = e.step(jax.random.key(1), s, jnp.argmax(ts.observation["action_mask"]), params)
        assert bool(ts.truncated) and not bool(ts.terminated)


def test_unknown_and_refused_names(tmp_path):
    """A typo: UnknownEnvError naming the closest adapted id, and `jrl train` exits 2 with one
    line, writing nothing. Registered but not adapted: one line saying why (a multi-discrete
    action, several agents)."""
    with pytest.raises(jrl_envs.UnknownEnvError, match="Did you mean 'jumanji:Snake-v1'"):
        jrl_envs.make("jumanji:Snek-v1")
    with pytest.raises(jumanji_adapter.JumanjiUnsupportedError, match="multi-discrete"):
        jrl_envs.make("jumanji:Minesweeper-v0")
    with pytest.raises(jumanji_adapter.JumanjiUnsupportedError, match="multi-agent"):
        jrl_envs.make("jumanji:RobotWarehouse-v0")
    out = run("train", "ppo", "--env", "jumanji:Snek-v1", "--out", tmp_path / "x", cwd=tmp_path)
    assert out.returncode == 2, (out.stdout, out.stderr)
    assert len(out.stderr.strip().splitlines()) == 1 and "jumanji:Snake-v1" in out.stderr
    assert not (tmp_path / "x").exists()


def test_sokoban_offline_is_one_line(tmp_path):
    """Sokoban-v0 downloads its levels from Hugging Face when built: offline, with no cached
    copy, `jrl train` exits 2 with one line saying so, writing nothing."""
    hf = {"HF_HUB_OFFLINE": "1", "HF_HOME": str(tmp_path / "hf")}
    out = run(
        "train", "pqn", "--env", "jumanji:Sokoban-v0", "--out", tmp_path / "x", cwd=tmp_path, env=hf
    )
    assert out.returncode == 2, (out.stdout, out.stderr)
    assert len(out.stderr.strip().splitlines()) == 1 and "Hugging Face" in out.stderr
    assert not (tmp_path / "x").exists()


def test_sokoban_without_a_mask(monkeypatch, fresh_make):
    """Sokoban-v0 (built here on jumanji's toy levels, as its own levels are downloaded): no
    action mask, so the observation is the float32 vector alone (grid [10, 10, 2] then
    step_count), its limit 120 moved into the TimeLimit."""
    from jumanji.environments.routing.sokoban import Sokoban  # jumanji's toy levels
    from jumanji.environments.routing.sokoban.generator import ToyGenerator

    make = jumanji.make
    monkeypatch.setattr(
        jumanji,
        "make",
        lambda name, **kw: (
            Sokoban(generator=ToyGenerator(), **kw) if name == "Sokoban-v0" else make(name, **kw)
        ),
    )
    env, params = jrl_envs.make("jumanji:Sokoban-v0")
    assert jrl_envs.entry("jumanji:Sokoban-v0").max_episode_steps == 120
    space = env.observation_space(params)
    assert isinstance(space, jrl.core.spaces.Box) and space.shape == (201,)
    s, ts = env.reset(jax.random.key(0), params)
    s, ts = env.step(jax.random.key(1), s, jnp.int32(1), params)
    assert ts.observation.shape == (201,) and float(ts.observation[-1]) == 1.0
    assert bool(space.contains(ts.observation))


def test_built_inside_a_trace(fresh_make):
    """An env first built inside a jitted function (jumanji computes its specs with jnp ops,
    which the adapter runs eagerly) works, and its spaces hold no tracers."""

    def first_reward(key):
        env, params = jrl_envs.make("jumanji:Maze-v0")
        state, ts = env.reset(key, params)
        return env.step(key, state, jnp.argmax(ts.observation["action_mask"]), params)[1].reward

    assert float(jax.jit(first_reward)(jax.random.key(0))) == 0.0
    env, params = jrl_envs.make("jumanji:Maze-v0")
    box = env.observation_space(params).spaces["observation"]
    assert box.low[:104].tolist() == [0.0] * 104 and box.high[:4].tolist() == [9.0] * 4


def test_without_jumanji_the_message_names_the_extra(monkeypatch, fresh_make):
    monkeypatch.setitem(sys.modules, "jumanji", None)
    with pytest.raises(
        jumanji_adapter.JumanjiMissingError, match=r"pip install jrl-jax\[jumanji\]"
    ):
        jrl_envs.make("jumanji:Snake-v1")
    with pytest.raises(ImportError):
        jumanji_adapter.jumanji_names()


def test_no_params_and_no_render():
    """jumanji configures envs through constructors: no params to override; jumanji draws with
    matplotlib on the host, so there is no (jittable) render."""
    env, params = jrl_envs.make("jumanji:Snake-v1")
    with pytest.raises(TypeError, match="no parameters"):
        jrl_envs.make("jumanji:Snake-v1", num_rows=8)
    state, _ = env.reset(jax.random.key(0), params)
    with pytest.raises(NotImplementedError):
        env.render(state, params)


def test_jrl_envs_lists_the_jumanji_envs(tmp_path):
    out = run("envs", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    rows = {line.split()[0] for line in out.stdout.splitlines() if line.startswith("jumanji:")}
    assert rows == {f"jumanji:{n}" for n in jumanji_adapter.ADAPTED}


SMALL = dict(total_steps=65_536)
"""PQN's defaults (16 envs x 64 steps, 16 minibatches, lr 1e-3, 128x128 relu with layer norm)
for 64 iterations."""

RANDOM_RETURN = 1059.0
"""The uniform random policy's (over the legal moves) mean score on Game2048-v1: 1059 (std
511, 1060 episodes of 64 envs x 2000 steps)."""


@pytest.mark.learning
def test_pqn_game2048_beats_random(learning_seed):
    """PQN (its default config, 65,536 env steps, 2 seeds vmapped) on Game2048-v1 scores far
    above the uniform random policy (1059), its illegal moves masked by jumanji's action mask.

    Measured 2026-12-05 on 8 seeds from 1000 (``final_returns()``): 2521 +- 457 (1560 ..
    3149), the worst pair's mean 1892 (8 seeds from 2000: 2507, 1914 .. 3193). So the two
    seeds' mean must reach 1500 (1.4 times random's; margin 392 over the worst pair) and each
    seed 1200 (margin 360 under the lowest seed, still above random's mean)."""
    result = jrl.train("pqn", "jumanji:Game2048-v1", 2, seed=learning_seed, progress=False, **SMALL)
    final = result.final_returns()
    assert (final >= 1200).all() and final.mean() >= 1500, final
    assert final.mean() >= 1.4 * RANDOM_RETURN
