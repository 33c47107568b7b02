"""Start-up: importing the CLI loads only what every command needs.

Heavy or optional libraries (checkpointing, plotting, logging back-ends, tree search,
evolution strategies, other env suites, the optimiser library) and jrl's training modules
are imported where they are used, so ``jrl --help`` and the first lines of ``jrl train`` do
not pay for them. Structure, not timing: the test checks ``sys.modules`` in a fresh
interpreter (speed is in benchmarks/startup.py and BENCHMARKS.md "Start-up").
"""

import json
import subprocess
import sys

LAZY = (
    "orbax",
    "matplotlib",
    "tensorboardX",
    "wandb",
    "mctx",
    "evosax",
    "pgx",
    "brax",
    "gymnasium",
    "gymnax",
    "jaxmarl",
    "envpool",
    "optax",
    "scipy",
    "jrl.app.execution",
    "jrl.app.checkpoint",
    "jrl.run.loops",
    "jrl.agents.search.mcts",
    "agents",
)


def test_importing_the_cli_leaves_heavy_modules_unimported(tmp_path):
    code = (
        "import json, sys\n"
        "import jrl.app.cli\n"
        f"lazy = {LAZY!r}\n"
        "loaded = sorted(m for m in sys.modules\n"
        "                if any(m == n or m.startswith(n + '.') for n in lazy))\n"
        "print(json.dumps([loaded, 'jrl.app.cli' in sys.modules, 'jax' in sys.modules]))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path, timeout=300
    )
    assert done.returncode == 0, done.stderr[-3000:]
    loaded, cli, jax = json.loads(done.stdout.strip().splitlines()[-1])
    assert loaded == [] and cli and jax  # the check itself sees what the CLI imported
