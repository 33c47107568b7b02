"""What jax's random draws cost a one-seed PPO or DQN run on CPU: paired A/B programs.

On CPU, jax lowers its threefry generator as a loop of 5 rounds (its other backends get the
20 rounds unrolled). This script builds jrl's whole training program (``paired.jrl_program``,
one seed, one device) several times in one process, each variant traced under a different
patch, then times them in rounds with the order rotated:

- ``base``: jrl as it is;
- ``unrolled``: jax's unrolled threefry lowering registered for the CPU while the variant is
  traced (every random draw of the program: splits, exploration, env resets, replay
  indices). It reaches into ``jax._src``: a measurement, not something jrl can ship;
- ``jnp-indices`` (DQN): the replay buffer's ``jax.random.randint`` replaced by the same
  generator written with ``jnp`` ops, unrolled (:func:`randint`, checked here to give the
  same indices as jax's);
- ``fixed-indices`` (DQN): the replay indices not drawn at all (a fixed stride): what
  drawing them costs. Not a valid DQN.

Each variant's final parameters are compared with ``base``'s bit for bit (``fixed-indices``
differs by design). The result is the median over rounds of ``base`` time / variant time
(> 1: the variant is faster). Run with jrl's interpreter::

    python benchmarks/threefry_ab.py --rounds 6
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import time

import jax
import jax.numpy as jnp
import numpy as np

ROTATIONS = ((13, 15, 26, 6), (17, 29, 16, 24))
"""Threefry-2x32's rotation constants (Salmon et al., 2011), by group of four rounds."""


def threefry2x32(k1, k2, x1, x2):
    """Threefry-2x32, 20 rounds, unrolled: the key ``(k1, k2)`` (``[]`` uint32 each) applied
    to the counters ``(x1, x2)`` (uint32, any equal shapes)."""
    ks = (k1, k2, k1 ^ k2 ^ jnp.uint32(0x1BD11BDA))
    x1, x2 = x1 + ks[0], x2 + ks[1]
    for i in range(5):
        for r in ROTATIONS[i % 2]:
            x1 = x1 + x2
            x2 = (x2 << jnp.uint32(r)) | (x2 >> jnp.uint32(32 - r))
            x2 = x2 ^ x1
        x1 = x1 + ks[(i + 1) % 3]
        x2 = x2 + ks[(i + 2) % 3] + jnp.uint32(i + 1)
    return x1, x2


def bits32(key, n: int):
    """``[n]`` uint32 random bits from ``key`` as jax's partitionable threefry draws them."""
    data = jax.random.key_data(key) if jnp.issubdtype(key.dtype, jax.dtypes.prng_key) else key
    counters = jnp.arange(n, dtype=jnp.uint32)
    y1, y2 = threefry2x32(data[0], data[1], jnp.zeros_like(counters), counters)
    return y1 ^ y2


def randint(key, shape, minval, maxval, dtype=jnp.int32):
    """``jax.random.randint`` for a 1-d int32 ``shape``, with the bits from :func:`bits32`."""
    (n,) = shape
    k1, k2 = jax.random.split(key)
    high, low = bits32(k1, n), bits32(k2, n)
    lo, hi = jnp.asarray(minval, jnp.int32), jnp.asarray(maxval, jnp.int32)
    span = jnp.where(hi <= lo, 1, hi - lo).astype(jnp.uint32)
    multiplier = jnp.uint32(2**16) % span
    multiplier = (multiplier * multiplier) % span
    offset = ((high % span) * multiplier + (low % span)) % span
    return (lo + offset.astype(jnp.int32)).astype(dtype)


def check_randint() -> None:
    """:func:`randint` gives ``jax.random.randint``'s indices (raises otherwise)."""
    for seed in range(8):
        key = jax.random.key(seed)
        for n, high in ((128, 10_000), (64, 7), (256, 1_000_000), (5, 2**31 - 1)):
            ours = randint(key, (n,), 0, high)
            if not np.array_equal(jax.random.randint(key, (n,), 0, high, jnp.int32), ours):
                raise SystemExit(f"randint differs from jax's at seed {seed}, n {n}, high {high}")


@contextlib.contextmanager
def variant(name: str):
    """Patches in place while a variant is traced and compiled."""
    from jax._src.interpreters import mlir
    from jax._src.random import threefry2x32 as tf

    saved = jax.random.randint
    if name == "unrolled":
        mlir.register_lowering(tf.threefry2x32_p, tf._threefry2x32_lowering_rule, platform="cpu")
    elif name == "jnp-indices":
        jax.random.randint = randint
    elif name == "fixed-indices":
        jax.random.randint = lambda key, shape, lo, hi, dtype=jnp.int32: (
            (jnp.arange(shape[0], dtype=dtype) * 37) % hi
        )
    try:
        yield
    finally:
        jax.random.randint = saved
        mlir.register_lowering(
            tf.threefry2x32_p, tf._threefry2x32_cpu_lowering_rule, platform="cpu"
        )


def measure(agent: str, steps: int, rounds: int) -> list[str]:
    from paired import jrl_program

    from jrl.run import anakin

    names = ["base", "unrolled"] + (["jnp-indices", "fixed-indices"] if agent == "dqn" else [])
    keys = jax.random.split(jax.random.PRNGKey(0), 1)
    programs, params, compile_s = {}, {}, {}
    for name in names:
        with variant(name):
            train, _, _ = jrl_program(agent, steps)
            start = time.perf_counter()
            programs[name] = jax.jit(train).lower(keys).compile(anakin.compiler_options())
            compile_s[name] = time.perf_counter() - start
        params[name] = jax.block_until_ready(programs[name](keys))[0]
    times = {name: [] for name in names}
    for r in range(rounds):
        for name in names[r % len(names) :] + names[: r % len(names)]:
            start = time.perf_counter()
            jax.block_until_ready(programs[name](keys))
            times[name].append(time.perf_counter() - start)
        print(f"  {agent} round {r + 1}: " + ", ".join(f"{n} {times[n][-1]:.3f} s" for n in names))
    rows = []
    for name in names:
        same = all(
            np.array_equal(a, b)
            for a, b in zip(jax.tree.leaves(params["base"]), jax.tree.leaves(params[name]))
        )
        ratios = [b / v for b, v in zip(times["base"], times[name])]
        rows.append(
            f"| {agent.upper()} | {name} | {statistics.median(times[name]):.3f} "
            f"| {statistics.median(ratios):.3f}x | {compile_s[name]:.1f} "
            f"| {'yes' if same else 'no'} |"
        )
    return rows


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--agents", nargs="+", choices=["ppo", "dqn"], default=["ppo", "dqn"])
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--ppo-steps", type=int, default=204_800)
    parser.add_argument("--dqn-steps", type=int, default=100_000)
    args = parser.parse_args(argv)
    if args.rounds < 1:
        parser.error("--rounds must be positive")
    check_randint()
    rows = []
    for agent in args.agents:
        rows += measure(agent, args.ppo_steps if agent == "ppo" else args.dqn_steps, args.rounds)
    print(
        "\n| agent | variant | s (median) | speed vs base (median of rounds) | compile s "
        "| parameters equal to base |\n|---|---|---:|---:|---:|---|"
    )
    print("\n".join(rows))


if __name__ == "__main__":
    main()
