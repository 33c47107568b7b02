"""Peak resident memory of DQN training against the bytes its replay buffers hold.

Each configuration runs ``jrl.train("dqn", "CartPole-v1", seeds=S, buffer_size=C,
total_steps=T)`` in a fresh process and reports the process's peak RSS
(``ru_maxrss``), the bytes of the final buffer states (every leaf's ``nbytes``, all seeds),
and the RSS of the same run with a 1,000-slot buffer (the process's fixed cost: Python,
jax, XLA, the compiled program). "RSS above the fixed cost / buffer bytes" near 1.0 means
the buffers are held once (no host-side or device-side copy of them).

Usage::

    python benchmarks/dqn_rss.py [--seeds 16] [--total-steps 20000] [--write]
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from common import machine, run_json_worker, write_section

HEADING = "## DQN replay memory (peak RSS)"

CHILD = """
import json, resource, sys, jax, jrl
seeds, cap, steps = map(int, sys.argv[1:4])
res = jrl.train("dqn", "CartPole-v1", seeds=seeds, total_steps=steps, buffer_size=cap,
                progress=False, num_reports=2)
need = sum(x.nbytes for x in jax.tree.leaves(res.final_state.buffer_state))
print(json.dumps({"buffer_bytes": need,
                  "peak_rss": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024}))
"""


CLI_CHILD = """
import json, resource, subprocess, sys, tempfile
seeds, cap, steps = sys.argv[1:4]
with tempfile.TemporaryDirectory() as tmp:
    subprocess.run([sys.executable, "-m", "jrl.app.cli", "train", "dqn", "--env", "CartPole-v1",
                    "--seeds", seeds, "--total-steps", steps, "--buffer-size", cap,
                    "--out", tmp + "/run", "--quiet"], check=True, capture_output=True)
print(json.dumps({"peak_rss": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024}))
"""


def _child(script: str, seeds: int, capacity: int, steps: int) -> dict:
    """The JSON line of ``script`` run in a fresh interpreter (exits with its error)."""
    env = dict(os.environ, JAX_PLATFORMS=os.environ.get("JAX_PLATFORMS", "cpu"))
    cmd = [sys.executable, "-c", script, str(seeds), str(capacity), str(steps)]
    got = run_json_worker(cmd, env, timeout=3600)
    if isinstance(got, str):
        raise SystemExit(got)
    return got


def run_cli(seeds: int, capacity: int, steps: int) -> int:
    """Peak RSS of ``jrl train dqn`` (run folder, checkpoint and plot included)."""
    return _child(CLI_CHILD, seeds, capacity, steps)["peak_rss"]


def run(seeds: int, capacity: int, steps: int) -> dict:
    return _child(CHILD, seeds, capacity, steps)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--seeds", type=int, default=16)
    p.add_argument("--total-steps", type=int, default=20_000)
    p.add_argument("--write", action="store_true", help="write the table to BENCHMARKS.md")
    a = p.parse_args(argv)
    mib = 2.0**20
    base = run(a.seeds, 1_000, a.total_steps)
    aboves: list[str] = []
    cli_wholes: list[str] = []  # the command's whole peak RSS / buffer bytes
    lines = [
        "| seeds | buffer capacity | buffer MiB | peak RSS MiB | RSS / buffer "
        "| (RSS - fixed cost) / buffer | `jrl train dqn`: peak RSS MiB "
        "| `jrl train dqn`: (RSS - fixed cost) / buffer |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    cli_base = run_cli(a.seeds, 1_000, a.total_steps)
    for cap in (1_000, 1_000_000, 2_000_000):
        r = base if cap == 1_000 else run(a.seeds, cap, a.total_steps)
        above = (r["peak_rss"] - base["peak_rss"]) / r["buffer_bytes"] if cap > 1_000 else None
        cli = cli_base if cap == 1_000 else run_cli(a.seeds, cap, a.total_steps)
        cli_above = (cli - cli_base) / r["buffer_bytes"] if cap > 1_000 else None
        if above is not None:
            aboves.append(f"{above:.2f}")
            cli_wholes.append(f"{cli / r['buffer_bytes']:.2f}x")
        lines.append(
            f"| {a.seeds} | {cap:,} | {r['buffer_bytes'] / mib:.0f} | {r['peak_rss'] / mib:.0f} "
            f"| {r['peak_rss'] / r['buffer_bytes']:.2f} | "
            + (f"{above:.2f}" if above is not None else "(fixed cost)")
            + f" | {cli / mib:.0f} | "
            + (f"{cli_above:.2f}" if cli_above is not None else "(fixed cost)")
            + " |"
        )
        print(lines[-1], flush=True)
    table = "\n".join(lines)
    ratios = " and ".join(x for x in aboves)
    if a.write:
        write_section(
            Path(__file__).resolve().parent.parent / "BENCHMARKS.md",
            HEADING,
            f"""{HEADING}

Peak resident memory of `jrl.train("dqn", "CartPole-v1", seeds={a.seeds}, buffer_size=C,
total_steps={a.total_steps:,})`, one fresh process per row, against the bytes of the final
buffer states (all seeds). The 1,000-slot row is the fixed cost of the process (Python, jax,
XLA, the compiled program, loaded from a warm persistent compilation cache: a cold compile
adds the compiler's own memory, several hundred MiB, to the peak). Reproduce with:

    python benchmarks/dqn_rss.py --seeds {a.seeds} --total-steps {a.total_steps} --write

Measured on {machine()}.

{table}

Above the fixed cost ({base["peak_rss"] / mib:.0f} MiB here), the resident memory is
{ratios} times the buffers' bytes (1e6 and 2e6 slots): a ratio of 1.00 means they are held
once, with no host-side copy and no second device copy; the whole-process ratio is above 1.0
by the fixed cost alone. The command `jrl train dqn` (last two columns) also writes the run
folder: its checkpoint holds the whole train state, buffers included (exact resume), and
`jrl.app.checkpoint.Checkpointer.save` hands every leaf to orbax as a host numpy view of the
device buffer (no copy on the CPU backend). orbax's numpy handler deep-copies each array
before writing by default, which held the buffers twice while a checkpoint was written
(1.97x and 2.11x before 2026-12-02); jrl's checkpointer turns that copy off, since its save
waits until the write is committed. Where the command spreads its seeds over the CPU's cores
(ARCHITECTURE.md, "Runs spread over the CPU's cores"), each buffer leaf lives in one block per
core, and the checkpoint writes those blocks as they are (checkpoint format 4), so the leaves
are not joined into a whole host copy either. The command's whole process (fixed cost
included) is {" and ".join(cli_wholes)} the buffers' bytes at 1e6 and 2e6 slots.
""",
        )


if __name__ == "__main__":
    main()
