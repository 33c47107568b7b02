"""The ``jrl`` command line.

    jrl envs                                  list registered environments
    jrl agents                                list agents
    jrl train AGENT [--env ENV] [--seeds N] [--total-steps N] [--out DIR] [config fields ...]

``jrl train AGENT --help`` lists every config field with its docstring and
the defaults of the chosen env's preset. Bad input (unknown agent or env,
unknown or ill-typed field, out-of-range value, an output folder that holds
another run) ends with a one-line error and exit code 2; ``--debug`` shows
the traceback.
"""



import argparse
import dataclasses
import sys
from typing import Annotated, Sequence

USAGE = __doc__.split("\n\n")[1]


class CLIError(Exception):
    """A user error: printed as one line, exit code 2."""


def _fail(message: str) -> int:
    print(f"jrl: error: {message}", file=sys.stderr)
    return 2


def cmd_envs(args: Sequence[str]) -> int:
    """Prints a table of registered envs: id, observation space, action space, source."""
    import jrl.envs

    p = argparse.ArgumentParser(prog="jrl envs", description="List registered environments.")
    p.add_argument("--gymnax", action="store_true", help="also list gymnax environments (as gymnax:<name>)")
    ns = p.parse_args(list(args))
    rows = [("id", "observation space", "action space", "source")]
    ids = jrl.envs.list()
    if ns.gymnax:
        import gymnax

        ids = ids + [f"gymnax:{n}" for n in gymnax.registered_envs]
    for env_id in ids:
        try:
            env, params = jrl.envs.make(env_id)
            rows.append((env_id, repr(env.observation_space(params)), repr(env.action_space(params)),
                         jrl.envs.spec(env_id).source))
        except Exception as e:  # an env that cannot be built here (missing optional dependency)
            rows.append((env_id, "-", "-", f"unavailable: {type(e).__name__}: {e}"[:80]))
    widths = [max(len(r[i]) for r in rows) for i in range(4)]
    for i, r in enumerate(rows):
        print("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip())
        if i == 0:
            print("  ".join("-" * w for w in widths))
    return 0


def cmd_agents(args: Sequence[str]) -> int:
    import jrl.agents

    for name in jrl.agents.names():
        print(f"{name:8s} {jrl.agents.summary(name)}")
    return 0


def _parse_sweep(items: Sequence[str]) -> dict[str, list[float]]:
    sweep: dict[str, list[float]] = {}
    for item in items:
        name, sep, values = item.partition("=")
        if not sep or not values:
            raise CLIError(f"--sweep expects FIELD=v1,v2,..., got {item!r}")
        try:
            sweep[name.replace("-", "_")] = [float(v) for v in values.split(",")]
        except ValueError:
            raise CLIError(f"--sweep {name}: values must be numbers, got {values!r}") from None
    return sweep


def cmd_train(args: Sequence[str]) -> int:
    """``jrl train AGENT ...``: trains and writes a run folder."""
    import tyro

    import jrl.agents
    import jrl.envs
    from jrl import experiment

    args = list(args)
    if not args or args[0].startswith("-"):
        if any(a in ("-h", "--help") for a in args):
            print(f"usage: jrl train AGENT [options]\n\nagents: {', '.join(jrl.agents.names())}\n"
                  "'jrl train AGENT --help' lists the agent's options.")
            return 0
        raise CLIError(f"train needs an agent name first: one of {', '.join(jrl.agents.names())}")
    agent, rest = args[0], args[1:]
    module, config_cls = jrl.agents.get(agent)

    pre = argparse.ArgumentParser(add_help=False)
    pre.add_argument("--env", default="CartPole-v1")
    env_id = pre.parse_known_args(rest)[0].env
    jrl.envs.spec(env_id)  # unknown env: clear error before anything else
    preset = experiment.make_config(agent, env_id)

    @dataclasses.dataclass
    class TrainArgs:
        config: Annotated[config_cls, tyro.conf.arg(name="")] = preset  # type: ignore[valid-type]
        """Agent configuration (defaults shown are the env's preset)."""
        env: str = "CartPole-v1"
        """Environment id (see `jrl envs`), or gymnax:<name>."""
        seeds: int = 1
        """Independent seeds trained together in one compiled program."""
        seed: int = 0
        """Base random seed."""
        out: str | None = None
        """Run folder to write (default runs/AGENT-ENV-seedS)."""
        overwrite: bool = False
        """Replace a run already in --out."""
        sweep: tuple[str, ...] = ()
        """Sweep a hyperparameter in the same program: FIELD=v1,v2 (a field of the agent's SWEEPABLE,
        e.g. learning_rate or gamma)."""
        num_reports: int = 20
        """Progress reports (chunks) over the run."""
        quiet: bool = False
        """No progress line."""
        devices: int | None = None
        """Data-parallel over this many devices (num_envs divisible by it); default: one device, or every
        device of every process in a multi-host run."""
        num_processes: int | None = None
        """Multi-host: number of processes (with --process-id and --coordinator)."""
        process_id: int | None = None
        """Multi-host: this process's index, 0 .. num_processes-1."""
        coordinator: str | None = None
        """Multi-host: HOST:PORT of process 0."""
        multihost: bool = False
        """Multi-host with jax's cluster auto-detection (TPU pods, SLURM, Open MPI): no other flags needed."""
        compile_cache: bool = True
        """Use JAX's persistent compilation cache: a second run of the same program skips most of its compile."""
        compile_cache_dir: str | None = None
        """Its directory (default: $JRL_COMPILE_CACHE, else ~/.cache/jrl/jax-cache)."""
        debug: bool = False
        """Show tracebacks on errors."""

    ns = tyro.cli(TrainArgs, args=rest, prog=f"jrl train {agent}",
                  description=f"Train {agent}: {jrl.agents.summary(agent)}",
                  default=TrainArgs(config=preset, env=env_id), config=(tyro.conf.OmitArgPrefixes,))
    overrides = {f.name: getattr(ns.config, f.name) for f in dataclasses.fields(ns.config)
                 if getattr(ns.config, f.name) != getattr(preset, f.name)}
    out = ns.out or f"runs/{agent}-{env_id.replace(':', '_')}-seed{ns.seed}"
    try:
        if ns.multihost or any(v is not None for v in (ns.num_processes, ns.coordinator, ns.process_id)):
            import jrl.distributed

            jrl.distributed.initialize(ns.coordinator, ns.num_processes, ns.process_id)
        result = experiment.train(agent, env_id, seeds=ns.seeds, seed=ns.seed, sweep=_parse_sweep(ns.sweep),
                                  out=out, overwrite=ns.overwrite, num_reports=ns.num_reports,
                                  progress=not ns.quiet, devices=ns.devices,
                                  compile_cache=ns.compile_cache and (ns.compile_cache_dir or True),
                                  **overrides)
    except (ValueError, TypeError, FileExistsError, KeyError, ConnectionError) as e:
        if ns.debug:
            raise
        raise CLIError(str(e)) from e
    import jax

    if jax.process_index() != 0:
        return 0
    print(result.summary())
    print(f"run folder: {result.out_dir} (learning_curve.png, metrics.csv, config.json, params.msgpack)")
    return 0


COMMANDS = {"envs": cmd_envs, "agents": cmd_agents, "train": cmd_train}


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    debug = "--debug" in argv
    if not argv or argv[0] in ("-h", "--help"):
        print(f"usage:\n{USAGE.rstrip()}", file=sys.stdout if argv else sys.stderr)
        return 0 if argv else 2
    if argv[0] in ("-V", "--version"):
        from jrl import __version__

        print(f"jrl {__version__}")
        return 0
    command = COMMANDS.get(argv[0])
    if command is None:
        from jrl import names

        hint = "".join(f" (did you mean {c!r}?)" for c in names.closest(argv[0], COMMANDS, n=1))
        return _fail(f"unknown command {argv[0]!r}{hint}; commands: {', '.join(COMMANDS)}")
    try:
        return command(argv[1:])
    except CLIError as e:
        return _fail(str(e))
    except (KeyError, ValueError, TypeError) as e:
        if debug:
            raise
        return _fail(str(e).strip("'\""))


if __name__ == "__main__":
    sys.exit(main())
