"""Replay-buffer throughput: add + sample (+ priority update) of jrl's buffers.

Measures ``jrl.parts.buffers.uniform_buffer`` and ``jrl.parts.buffers.prioritized_buffer``
at a DQN-like workload: capacity 1e6 CartPole transitions (observation
float32[4], action int32, reward, discount, next observation float32[4]),
``B`` new items added per step (the envs of one step; default 10), and a
batch of 256 sampled per step.

Method. One timed call is ``jit(lax.scan(body))`` over ``K`` steps, the
buffer state donated in and out. ``body`` splits the carried key, adds ``B``
items (made by arithmetic from a step counter: no random draws), samples 256,
folds the sample into a carried checksum (so nothing is dead code) and, for
the prioritised buffer, writes new random priorities for the sampled
indices (``update_priorities``, as a learner does with its TD errors). The
uniform buffer's body makes the same key splits and draws the same random
numbers, so the two differ only in the buffer.

Both buffers are filled to capacity before timing (random items, and
random priorities for the prioritised one), so every add overwrites old
slots and every sample draws from 1e6 slots: the steady state of a long run.
Each function is compiled and run once before timing (compile excluded);
then the buffers are timed in turn, ``rounds`` rounds interleaved (the order
alternating each round) so that background load hits both alike, each call
ended by ``block_until_ready``; the best round is reported.

Usage::

    python benchmarks/buffers.py            # full run, writes BENCHMARKS.md
    python benchmarks/buffers.py --quick    # smoke run, prints only
    PYTHONPATH=/work/peers/flashbax python benchmarks/buffers.py  # with flashbax's row

flashbax (a peer, never a jrl dependency) is timed in the same rounds when it can be
imported: ``pip install --no-deps --target /work/peers/flashbax flashbax``.
"""

from __future__ import annotations

import argparse
import datetime
import importlib.metadata
import math
import os
import re
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
from common import default_output, machine, rate, timed, write_section

from jrl.parts import buffers, sum_tree

HEADING = "## Replay buffers"
CAPACITY = 1_000_000
SAMPLE_BATCH = 256
PER_ALPHA, PER_BETA = 0.6, 0.4


class Item(NamedTuple):
    """One CartPole transition as a DQN buffer stores it (44 bytes)."""

    observation: jax.Array  # [4] float32
    action: jax.Array  # [] int32
    reward: jax.Array  # [] float32
    discount: jax.Array  # [] float32
    next_observation: jax.Array  # [4] float32


def example_item() -> Item:
    return Item(
        jnp.zeros(4, jnp.float32),
        jnp.zeros((), jnp.int32),
        jnp.zeros((), jnp.float32),
        jnp.zeros((), jnp.float32),
        jnp.zeros(4, jnp.float32),
    )


def counter_items(step: jax.Array, batch: int) -> Item:
    """``batch`` distinct items derived from the step counter (cheap: no random draws)."""
    n = (step * batch + jnp.arange(batch, dtype=jnp.int32)).astype(jnp.float32)  # [B]
    obs = n[:, None] * 1e-6 + jnp.arange(4, dtype=jnp.float32)  # [B, 4]
    return Item(
        obs, (n % 2).astype(jnp.int32), jnp.ones_like(n), jnp.full_like(n, 0.99), obs + 0.01
    )


def random_items(key: jax.Array, batch: int) -> Item:
    k_obs, k_act, k_next = jax.random.split(key, 3)
    obs = jax.random.normal(k_obs, (batch, 4), jnp.float32)
    return Item(
        obs,
        jax.random.randint(k_act, (batch,), 0, 2, jnp.int32),
        jnp.ones((batch,), jnp.float32),
        jnp.full((batch,), 0.99, jnp.float32),
        obs + 0.01 * jax.random.normal(k_next, (batch, 4)),
    )


# --------------------------------------------------------------------------
# Timed units
# --------------------------------------------------------------------------


@dataclass
class Runner:
    """A compiled ``carry -> carry`` doing ``iterations`` buffer steps; its timings."""

    name: str
    run: Callable[[Any], Any]
    carry: Any
    iterations: int
    add_batch: int
    compile_seconds: float
    copy_shapes: list[
        str
    ]  # shapes of the full-size copies (storage or sum tree) in the compiled program
    full: bool  # the full add + sample (+ update) step, not a breakdown row
    times: list[float] = field(default_factory=list)  # wall seconds per timed call
    cpu_times: list[float] = field(
        default_factory=list
    )  # this process's CPU seconds per timed call

    def time_once(self) -> None:
        self.carry, wall, cpu = timed(self.run, self.carry)
        self.times.append(wall)
        self.cpu_times.append(cpu)

    @property
    def best(self) -> float:
        return min(self.times)

    def summary(self) -> dict[str, Any]:
        t = self.best
        return {
            "name": self.name,
            "best_s": t,
            "median_s": statistics.median(self.times),
            "cpu_s": min(self.cpu_times),
            "us_per_step": 1e6 * t / self.iterations,
            "items_per_s": self.iterations * self.add_batch / t,
            "samples_per_s": self.iterations * SAMPLE_BATCH / t,
            "compile_s": self.compile_seconds,
            "copies": len(self.copy_shapes),
            "copy_shapes": self.copy_shapes,
            "full": self.full,
        }


FULL = ("add", "sample", "update")  # the timed unit; subsets of it are the breakdown rows
BREAKDOWN = {
    "uniform": (("add",), ("sample",)),
    "prioritized": (("add",), ("sample",), ("update",)),
}


def large_copies(hlo_text: str) -> list[str]:
    """Shapes of the ``copy`` instructions in compiled HLO whose result has >= CAPACITY elements
    (a copy of the storage or of the sum tree, which XLA adds when it cannot update in place)."""
    shapes = []
    for match in re.finditer(r"= (\w+\[([0-9,]+)\])\S* copy\(", hlo_text):
        if math.prod(int(d) for d in match.group(2).split(",")) >= CAPACITY:
            shapes.append(match.group(1))
    return shapes


def make_runner(
    kind: str, ops: tuple[str, ...], add_batch: int, iterations: int, seed: int
) -> Runner:
    """Builds, fills and compiles a timed unit of ``kind`` ('uniform' or 'prioritized') doing
    ``ops`` each step (``FULL``, or one of them for the breakdown)."""
    prioritized = kind == "prioritized"
    buf = (
        buffers.prioritized_buffer(CAPACITY, PER_ALPHA, PER_BETA)
        if prioritized
        else buffers.uniform_buffer(CAPACITY)
    )
    k_items, k_prio, k_run = jax.random.split(jax.random.key(seed), 3)

    @jax.jit
    def fill(k_items, k_prio):
        state = buf.add(buf.init(example_item()), random_items(k_items, CAPACITY))
        if prioritized:
            priorities = jax.random.uniform(k_prio, (CAPACITY,), jnp.float32, 0.01, 2.0)
            state = buf.update_priorities(state, jnp.arange(CAPACITY, dtype=jnp.int32), priorities)
        return state

    def body(carry, _):
        state, step, key, checksum = carry
        key, k_sample, k_prio = jax.random.split(key, 3)
        priorities = jax.random.uniform(
            k_prio, (SAMPLE_BATCH,), jnp.float32, 0.01, 2.0
        )  # |TD errors|
        if "add" in ops:
            state = buf.add(state, counter_items(step, add_batch))
        if "sample" in ops:
            sample = buf.sample(state, k_sample, SAMPLE_BATCH)
            items = sample.items
            checksum = (
                checksum
                + items.observation.sum()
                + items.next_observation.sum()
                + items.reward.sum()
                + items.discount.sum()
                + items.action.sum()
                + sample.weights.sum()
            )
            indices = sample.indices
        else:
            indices = jax.random.randint(k_sample, (SAMPLE_BATCH,), 0, CAPACITY, jnp.int32)
        if "update" in ops and prioritized:
            state = buf.update_priorities(state, indices, priorities)
        else:
            checksum = (
                checksum + priorities.sum() + indices.sum()
            )  # same random draws as the full body
        return (state, step + 1, key, checksum), None

    def unit(carry):
        return jax.lax.scan(body, carry, None, length=iterations)[0]

    run = jax.jit(unit, donate_argnums=0)
    carry = (fill(k_items, k_prio), jnp.zeros((), jnp.int32), k_run, jnp.zeros((), jnp.float32))
    jax.block_until_ready(carry)
    t0 = time.perf_counter()
    compiled = run.lower(carry).compile()
    compile_s = time.perf_counter() - t0
    carry = jax.block_until_ready(compiled(carry))  # first call (warm-up)
    name = kind if ops == FULL else f"{kind}: {ops[0]} only"
    return Runner(
        name,
        compiled,
        carry,
        iterations,
        add_batch if "add" in ops else 0,
        compile_s,
        large_copies(compiled.as_text()),
        ops == FULL,
    )


def make_flashbax_runner(add_batch: int, iterations: int, seed: int) -> Runner | None:
    """The same full step with flashbax's prioritised flat buffer (``None`` when flashbax is
    not importable): capacity, add batch, sample batch and priority exponent as jrl's; the
    checksum folds in the sampled items and their probabilities (flashbax returns those, not
    importance weights). flashbax is a peer, not a jrl dependency: install it outside the
    repository and put it on ``PYTHONPATH`` (see BENCHMARKS.md)."""
    try:
        import flashbax
    except ImportError:
        return None
    buf = flashbax.make_prioritised_flat_buffer(
        max_length=CAPACITY,
        min_length=SAMPLE_BATCH,
        sample_batch_size=SAMPLE_BATCH,
        add_batch_size=add_batch,
        priority_exponent=PER_ALPHA,
    )
    k_prio, k_run = jax.random.split(jax.random.key(seed + 1))

    @jax.jit
    def fill(k_prio):
        def add(state, step):
            return buf.add(state, counter_items(step, add_batch)), None

        state = buf.init(jax.tree.map(lambda x: x, example_item()))
        steps = jnp.arange(CAPACITY // add_batch, dtype=jnp.int32)
        state = jax.lax.scan(add, state, steps)[0]
        priorities = jax.random.uniform(k_prio, (CAPACITY,), jnp.float32, 0.01, 2.0)
        return buf.set_priorities(state, jnp.arange(CAPACITY, dtype=jnp.int32), priorities)

    def body(carry, _):
        state, step, key, checksum = carry
        key, k_sample, k_prio = jax.random.split(key, 3)
        priorities = jax.random.uniform(k_prio, (SAMPLE_BATCH,), jnp.float32, 0.01, 2.0)
        state = buf.add(state, counter_items(step, add_batch))
        sample = buf.sample(state, k_sample)
        first = sample.experience.first
        checksum = (
            checksum
            + first.observation.sum()
            + sample.experience.second.observation.sum()
            + first.reward.sum()
            + first.discount.sum()
            + first.action.sum()
            + sample.probabilities.sum()
        )
        state = buf.set_priorities(state, sample.indices, priorities)
        return (state, step + 1, key, checksum), None

    run = jax.jit(lambda c: jax.lax.scan(body, c, None, length=iterations)[0], donate_argnums=0)
    carry = (fill(k_prio), jnp.zeros((), jnp.int32), k_run, jnp.zeros((), jnp.float32))
    jax.block_until_ready(carry)
    t0 = time.perf_counter()
    compiled = run.lower(carry).compile()
    compile_s = time.perf_counter() - t0
    carry = jax.block_until_ready(compiled(carry))
    name = f"flashbax {importlib.metadata.version('flashbax')} prioritised"
    return Runner(
        name,
        compiled,
        carry,
        iterations,
        add_batch,
        compile_s,
        large_copies(compiled.as_text()),
        True,
    )


def measure(
    add_batch: int, iterations: int, rounds: int, seed: int, breakdown: bool
) -> list[Runner]:
    """Builds every unit, then times them in interleaved rounds (order reversed every other
    round)."""
    units = [(kind, FULL) for kind in ("uniform", "prioritized")]
    if breakdown:
        units += [(kind, ops) for kind in ("uniform", "prioritized") for ops in BREAKDOWN[kind]]
    runners = []
    for kind, ops in units:  # one at a time: each holds a full buffer (~50 MB)
        runners.append(make_runner(kind, ops, add_batch, iterations, seed))
    peer = make_flashbax_runner(add_batch, iterations, seed)
    if peer is not None:
        runners.insert(2, peer)
    for r in range(rounds):
        for runner in runners if r % 2 == 0 else runners[::-1]:
            runner.time_once()
    return runners


# --------------------------------------------------------------------------
# Report
# --------------------------------------------------------------------------


def table(rows: list[dict[str, Any]]) -> str:
    """The full-step table: one row per buffer."""
    full = [r for r in rows if r["full"]]
    uniform = next(r for r in full if r["name"] == "uniform")
    lines = [
        (
            "| buffer | µs per step | items added/s | samples/s | time vs uniform "
            "| CPU time vs uniform | median round / best | full-size copies | compile s |"
        ),
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in full:
        lines.append(
            f"| {r['name']} | {r['us_per_step']:.1f} | {rate(r['items_per_s'])} "
            f"| {rate(r['samples_per_s'])} "
            f"| {r['best_s'] / uniform['best_s']:.2f}x | {r['cpu_s'] / uniform['cpu_s']:.2f}x "
            f"| {r['median_s'] / r['best_s']:.2f}x | {r['copies']} | {r['compile_s']:.2f} |"
        )
    return "\n".join(lines)


def breakdown_table(rows: list[dict[str, Any]]) -> str:
    """Each part of the step timed alone, their sum, and the full step (empty without breakdown
    rows)."""
    parts = [r for r in rows if not r["full"]]
    if not parts:
        return ""
    lines = ["| buffer | part | µs per step | full-size copies |", "|---|---|---:|---:|"]
    for kind in ("uniform", "prioritized"):
        mine = [r for r in parts if r["name"].startswith(kind + ":")]
        for r in mine:
            lines.append(
                f"| {kind} | {r['name'].split(': ', 1)[1]} | {r['us_per_step']:.1f} "
                f"| {r['copies']} |"
            )
        full = next(r for r in rows if r["full"] and r["name"] == kind)
        lines.append(f"| {kind} | sum of the parts | {sum(r['us_per_step'] for r in mine):.1f} | |")
        lines.append(
            f"| {kind} | **full step** | **{full['us_per_step']:.1f}** | {full['copies']} |"
        )
    return "\n".join(lines)


def copies_note(rows: list[dict[str, Any]]) -> str:
    """A sentence on full-size copies in the compiled steps, from the measured rows."""
    full = {r["name"]: r for r in rows if r["full"]}
    with_copies = [n for n, r in full.items() if r["copies"]]
    if not with_copies:
        return "XLA compiled every full step without copying the storage or the sum tree."
    notes = []
    for name in with_copies:
        r = full[name]
        parts = [p for p in rows if not p["full"] and p["name"].startswith(name + ":")]
        clean = [
            p["name"].split(": ", 1)[1].removesuffix(" only") for p in parts if p["copies"] == 0
        ]
        listed = (
            ", ".join(clean[:-1]) + (" and " if len(clean) > 1 else "") + clean[-1] if clean else ""
        )
        alone = (
            f" Timed alone, the {listed} each compile without copies; the parts together cost "
            f"{sum(p['us_per_step'] for p in parts):.0f} µs per step, against "
            f"{r['us_per_step']:.0f} µs for the full step."
            if clean
            else ""
        )
        tree = f"f32[{sum_tree.sum_tree_size(CAPACITY)}]"
        what = (
            "the sum tree"
            if all(x == tree for x in r["copy_shapes"])
            else "full-size arrays (" + ", ".join(r["copy_shapes"]) + ")"
        )
        notes.append(
            f"The compiled {name} step holds {r['copies']} HLO `copy` instruction(s) of {what},"
            " made on every step: XLA does not update it in place when the step combines the"
            f" parts.{alone}"
        )
    return " ".join(notes)


def sum_tree_depth(capacity: int, arity: int = 8) -> int:
    """Levels below the root of jrl's sum tree over ``capacity`` leaves: each level above
    the leaves has ``ceil(n / arity)`` nodes of the level below (``arity = 8``, as
    ``sum_tree.sum_tree_size`` documents), up to the single root."""
    depth, nodes = 0, capacity
    while nodes > 1:
        nodes = -(-nodes // arity)
        depth += 1
    return depth


def section(rows, add_batch: int, iterations: int, rounds: int, command: str, load: str) -> str:
    breakdown = breakdown_table(rows)
    breakdown_txt = (
        f"""
Each part alone (same scan, same random draws, the other parts left out;
"update only" writes priorities at random indices). The parts each include
the key split and draws, so their sum counts those more than once:

{breakdown}
"""
        if breakdown
        else ""
    )
    tree_size = sum_tree.sum_tree_size(CAPACITY)
    depth = sum_tree_depth(CAPACITY)
    peer = next((r for r in rows if r["name"].startswith("flashbax")), None)
    ours = next(r for r in rows if r["full"] and r["name"] == "prioritized")
    peer_txt = (
        f"Side by side, in the same rounds: {peer['name']} "
        "(`make_prioritised_flat_buffer` at the same capacity, add batch, sample batch and "
        f"priority exponent; its own sum tree and priority update), installed outside the "
        "repository (`pip install --no-deps --target /work/peers/flashbax flashbax`, run with "
        "`PYTHONPATH=/work/peers/flashbax`). jrl's prioritised step is "
        f"**{peer['best_s'] / ours['best_s']:.2f}x** flashbax's speed (best rounds; CPU time "
        f"{peer['cpu_s'] / ours['cpu_s']:.2f}x)."
        if peer
        else "flashbax was not importable in this run: no side-by-side row."
    )
    return f"""{HEADING}

Add + sample throughput of `jrl.parts.buffers` at capacity {CAPACITY:,}, items shaped
like CartPole transitions (observation float32[4], action int32, reward,
discount, next observation: 44 bytes), {add_batch} items added and {SAMPLE_BATCH}
sampled per step. Best of {rounds} interleaved rounds, compile excluded. Reproduce with:

    {command}

Measured {datetime.date.today().isoformat()} on {machine()}.

- One timed call is `jit(lax.scan(...))` of {iterations:,} steps, the buffer state
  donated: each step adds {add_batch} items, samples {SAMPLE_BATCH} and, for the
  prioritised buffer, writes new random priorities for the sampled indices
  (`update_priorities`, as a learner does with |TD errors|). The uniform step
  draws the same random numbers.
- Both buffers are full before timing (every add overwrites, every sample draws
  from {CAPACITY:,} slots); the prioritised one starts with random priorities.
  `prioritized_buffer(capacity, alpha={PER_ALPHA}, beta={PER_BETA})` keeps a flat 8-ary sum
  tree of {tree_size:,} float32 ({tree_size * 4 / 2**20:.1f} MiB, stored leaves first, each
  node the pairwise sum of its 8 children), sampled stratified: one descent per draw down
  its {depth} levels, each level one gather of a node's 8 children, the child chosen by
  halving them as a binary descent would. An update recomputes the parents on the levels
  of more than 4096 entries one level per loop step (one gather of 8 children each), then
  rebuilds the levels above in one dense pass. Until issue #25 (2026-12-02) the tree was
  binary (2^21 float32, 20 levels per descent, 8 climbed per update): 143.8 µs per full
  step, 2.50x the uniform step, in the run then recorded here (AMD EPYC); 152.4 µs, 2.64x,
  in a run on the Intel machine just before the change (no breakdown, no flashbax).
- {peer_txt}
- Rates are wall clock of the best round: items added/s = steps x {add_batch} / s,
  samples/s = steps x {SAMPLE_BATCH} / s. "time vs uniform" is the ratio of
  best-round times (the prioritised/uniform time ratio); the CPU-time ratio uses this
  process's CPU seconds (less moved by other processes). 1-minute load average during
  this run: {load}.
- {copies_note(rows)} Until 2026-12-02 jrl's own full step also held two copies of its
  sum tree (16.4x the uniform step, against 319 µs for its parts timed alone): sampling
  read the tree's total and the drawn leaves outside the descent loop, XLA fused those
  reads into the importance weights' consumers, which an update need not wait for, and
  so copied the tree before writing it in place. The descent now returns those values
  (tests/test_buffers.py checks the compiled step has no tree-sized copy).

{table(rows)}
{breakdown_txt}"""


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--quick", action="store_true", help="smoke run: few steps and rounds, prints only"
    )
    parser.add_argument(
        "--add-batch", type=int, default=10, help="items added per step (default 10)"
    )
    parser.add_argument(
        "--iterations", type=int, help="steps per timed call (default 2000; quick: 500)"
    )
    parser.add_argument("--rounds", type=int, help="timed rounds per buffer (default 15; quick: 3)")
    parser.add_argument(
        "--no-breakdown", action="store_true", help="time only the full step, not each part alone"
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--output", type=Path, help="markdown file to update (default BENCHMARKS.md; quick: none)"
    )
    args = parser.parse_args(argv)

    iterations = args.iterations or (500 if args.quick else 2000)
    rounds = args.rounds or (3 if args.quick else 15)
    load0 = os.getloadavg()[0]
    runners = measure(args.add_batch, iterations, rounds, args.seed, not args.no_breakdown)
    load = f"{load0:.1f} at the start, {os.getloadavg()[0]:.1f} at the end"
    rows = [r.summary() for r in runners]
    for r in rows:
        print(
            f"{r['name']:26s} best {r['best_s']:.3f} s  median {r['median_s']:.3f} s  "
            f"{r['us_per_step']:7.1f} us/step  copies {r['copies']}  compile {r['compile_s']:.2f} s"
        )
    print(table(rows))
    print(breakdown_table(rows))
    print(copies_note(rows))
    print(f"load: {load}")

    output = default_output(args.output, args.quick)
    if output is not None:
        command = "python benchmarks/buffers.py"
        if any(r["name"].startswith("flashbax") for r in rows):
            command = "PYTHONPATH=/work/peers/flashbax " + command
        if args.add_batch != 10:
            command += f" --add-batch {args.add_batch}"
        if args.iterations:
            command += f" --iterations {args.iterations}"
        if args.rounds:
            command += f" --rounds {args.rounds}"
        if args.no_breakdown:
            command += " --no-breakdown"
        write_section(
            output, HEADING, section(rows, args.add_batch, iterations, rounds, command, load)
        )
        print(f"wrote {output}")


if __name__ == "__main__":
    main()
