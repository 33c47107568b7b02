"""Exact exploit/explore of PBT (jrl/run/pbt.py) where the former equivalents file relied on a
fair coin and on CPU's sort keeping ties in order: ties are ranked by run index, and the
perturbation multiplies by the high factor exactly where the run's coin says up
(tools/mutation.py's targets)."""

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from jrl.parts.agent import replace_hparams
from jrl.run import anakin, pbt
from jrl.run.loops import Algorithm


@struct.dataclass
class HP:
    learning_rate: jax.Array


@struct.dataclass
class Member:
    params: jax.Array  # [] the run's return
    hparams: HP


@struct.dataclass
class Loop:
    agent_state: Member
    env_state: tuple
    key: jax.Array
    iteration: jax.Array
    last_episode_return: jax.Array


def constant_returns(value: float) -> Algorithm:
    """Every run returns ``value`` on every step (10 env steps an iteration)."""

    def init(key):
        member = Member(jnp.float32(value), HP(jnp.float32(1.0)))
        return Loop(member, (), key, jnp.zeros((), jnp.int32), jnp.float32(value))

    def step(s):
        return s.replace(iteration=s.iteration + 1), {"train/episode_return": s.agent_state.params}

    def with_hparams(s, v):
        return s.replace(agent_state=replace_hparams(s.agent_state, v))

    return Algorithm(init, step, 10, with_hparams)


def run_pbt(num_runs: int, lrs):
    spec = pbt.PBT(20, 0.5, (0.5, 3.0), ("learning_rate",))  # due every 2 iterations
    algorithm = pbt.with_pbt(constant_returns(1.0), spec, num_runs)
    keys = jax.random.split(jax.random.key(0), num_runs)
    states = anakin.set_hparams(
        algorithm, anakin.init_runs(algorithm, keys), {"learning_rate": jnp.asarray(lrs)}
    )
    res = anakin.run(algorithm, keys, 2, num_reports=1, initial_state=states)
    return res, keys


def test_tied_returns_rank_by_run_index_so_the_first_half_copies_the_second():
    """64 runs, all returning 1.0, fraction 0.5: ties are ranked by run index (a stable sort),
    so runs 0-31 are the worst and copy runs drawn from 32-63, which keep their own state."""
    res, _ = run_pbt(64, np.full(64, 10.0, np.float32))
    source = np.asarray(res.metrics[pbt.SOURCE][:, 1])
    np.testing.assert_array_equal(source[32:], np.arange(32, 64))
    assert np.all(source[:32] >= 32), source[:32]


def test_a_copy_takes_the_high_factor_exactly_where_its_coin_says_up():
    """8 runs, learning rates 10..17, all returning 1.0: runs 0-3 copy one of runs 4-7; each
    copy's learning rate is its source's times 3 where the run's coin (bernoulli(0.5) of the
    perturb half of its key folded with the iteration, 2) is up, times 0.5 where it is down."""
    lrs = 10.0 + np.arange(8, dtype=np.float32)
    res, keys = run_pbt(8, lrs)
    source = np.asarray(res.metrics[pbt.SOURCE][:, 1])
    final = np.asarray(res.final_state.agent_state.hparams.learning_rate)
    for r in range(4):
        _, k_perturb = jax.random.split(jax.random.fold_in(keys[r], 2))
        up = bool(jax.random.bernoulli(k_perturb, 0.5, (1,))[0])
        want = lrs[source[r]] * (3.0 if up else 0.5)
        np.testing.assert_allclose(final[r], want, rtol=1e-6, err_msg=f"run {r}, up={up}")
    np.testing.assert_array_equal(final[4:], lrs[4:])
