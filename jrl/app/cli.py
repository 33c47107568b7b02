"""The ``jrl`` command line.

    jrl envs                                  list registered environments
    jrl agents                                list agents
    jrl train AGENT [--env ENV] [--seeds N] [--total-steps N] [--out DIR] [config fields ...]
    jrl train --resume RUN_DIR                continue an interrupted run exactly
    jrl eval RUN_DIR [--episodes N] [--greedy | --stochastic]
    jrl render RUN_DIR [--out episode.gif] [--run R]
    jrl export RUN_DIR --out DIR [--run R]    one run's policy for inference (jrl.load_policy)

``jrl train AGENT --help`` lists every config field with its docstring and
the defaults of the chosen env's preset. Bad input (unknown agent or env,
unknown or ill-typed field, out-of-range value, an output folder that holds
another run, a checkpoint of another run or a corrupt one) ends with a
one-line error and exit code 2; ``--debug`` shows the traceback. A loss or
parameter that turns NaN/inf stops training with exit code 3; an I/O error
while training (a full disk) with 1, after checkpointing the last good chunk. Ctrl-C or
SIGTERM finish the current chunk, write a checkpoint and exit with 130 or
143, printing how to resume; a second one aborts at once, and every wait is bounded
(:mod:`jrl.app.stopping`).
"""

import argparse
import dataclasses
import json
import os
import sys
from pathlib import Path
from typing import Annotated, Sequence

USAGE = __doc__.split("\n\n")[1]


class CLIError(Exception):
    """A user error: printed as one line, exit code 2."""


def _fail(message: str) -> int:
    print(f"jrl: error: {message}", file=sys.stderr)
    return 2


def cmd_envs(args: Sequence[str]) -> int:
    """Prints a table of registered envs: id, observation space, action space, source (and the
    brax and JaxMARL envs, by name, when their extras are installed)."""
    import jrl.envs
    from jrl.envs.registry import BRAX_PREFIX, JAXMARL_PREFIX

    p = argparse.ArgumentParser(prog="jrl envs", description="List registered environments.")
    p.add_argument(
        "--all",
        "--gymnax",
        dest="all",
        action="store_true",
        help="also list the gymnax environments (as gymnax:<name>)",
    )
    p.add_argument("--import", action="append", default=[], metavar="MODULE", help="a plugin")
    ns = p.parse_args(list(args))
    rows = [("id", "observation space", "action space", "source")]
    ids = jrl.envs.names()
    if ns.all:
        import gymnax

        ids = ids + [f"gymnax:{n}" for n in gymnax.registered_envs]
    try:  # the optional brax extra: its envs as brax:<name> when it is installed
        from jrl.envs.brax_adapter import brax_names

        ids = ids + [BRAX_PREFIX + n for n in brax_names()]
    except ImportError:
        pass
    try:  # the optional jaxmarl extra: its envs as jaxmarl:<name> when it is installed
        from jrl.envs.jaxmarl_adapter import jaxmarl_names

        ids = ids + [JAXMARL_PREFIX + n for n in jaxmarl_names()]
    except ImportError:
        pass
    for env_id in ids:
        if env_id.startswith(BRAX_PREFIX):  # building one takes seconds: listed by name
            rows.append((env_id, "(built on first use)", "Box", "brax"))
            continue
        if env_id.startswith(JAXMARL_PREFIX):  # some build for seconds: listed by name
            rows.append((env_id, "(built on first use)", "per agent", "jaxmarl"))
            continue
        try:
            env, params = jrl.envs.make(env_id)
            observation, action = env.observation_space(params), env.action_space(params)
            source = jrl.envs.entry(env_id).source
            rows.append((env_id, _short_space(observation), _short_space(action), source))
        except Exception as e:  # an env that cannot be built here (missing optional dependency)
            rows.append((env_id, f"({type(e).__name__})", "-", "unavailable"))
    # ids whole; the observation column gives way so that the table fits 100 columns
    id_width = max(len(r[0]) for r in rows)
    limits = (id_width, 100 - id_width - 16 - 11 - 6, 16, 11)
    rows = [tuple(_clip(c, n) for c, n in zip(r, limits)) for r in rows]
    widths = [max(len(r[i]) for r in rows) for i in range(4)]
    for i, r in enumerate(rows):
        print("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip())
        if i == 0:
            print("  ".join("-" * w for w in widths))
    print(
        "\nHost envs, stepped outside the program (--runner sebulba):\n"
        "  gymnasium:<id>  any Gymnasium id (pip install jrl-jax[gymnasium])\n"
        "  envpool:<id>    any EnvPool id (pip install jrl-jax[envpool])"
    )
    return 0


def _short_space(space) -> str:
    """A space without its bounds: ``Box(6,) float32``, ``Discrete(3)``, ``Dict(a: ..., ...)``."""
    import numpy as np

    from jrl.core import spaces

    if isinstance(space, spaces.Box):
        return f"Box{tuple(space.shape)} {np.dtype(space.dtype).name}"
    if isinstance(space, spaces.Dict):
        inner = ", ".join(f"{k}: {_short_space(v)}" for k, v in space.spaces.items())
        return f"Dict({inner})"
    return repr(space)


def _clip(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 3] + "..."


def cmd_agents(args: Sequence[str]) -> int:
    import jrl.agents

    for name in jrl.agents.names():
        print(f"{name:10s} {jrl.agents.summary(name)}")
    return 0


def _parse_sweep(items: Sequence[str]) -> dict[str, list[float]]:
    sweep: dict[str, list[float]] = {}
    for item in items:
        name, sep, values = item.partition("=")
        if not sep or not values:
            raise CLIError(f"--sweep expects FIELD=v1,v2,..., got {item!r}")
        name = name.replace("-", "_")
        if name in sweep:
            raise CLIError(f"--sweep {name} is given twice: put every value in one FIELD=v1,v2")
        try:
            sweep[name] = [float(v) for v in values.split(",")]
        except ValueError:
            raise CLIError(f"--sweep {name}: values must be numbers, got {values!r}") from None
    return sweep


def _resume_target(args: list[str]) -> str | None:
    """The RUN_DIR of ``--resume RUN_DIR`` / ``--resume=RUN_DIR`` in ``args``, if any."""
    for i, a in enumerate(args):
        if a == "--resume":
            if i + 1 >= len(args) or args[i + 1].startswith("-"):
                raise CLIError("--resume needs a run folder: jrl train --resume RUN_DIR")
            return args[i + 1]
        if a.startswith("--resume="):
            return a.split("=", 1)[1]
    return None


@dataclasses.dataclass(frozen=True)
class CLIOptions:
    """``jrl train``'s own flags (the run options and the config come from their dataclasses)."""

    env: str = "CartPole-v1"
    """Environment id (see `jrl envs`), gymnax:<name>, brax:<name> (the brax extra) or
    jaxmarl:<name> (the jaxmarl extra, for ippo and mappo)."""
    out: str | None = None
    """Run folder to write (default runs/AGENT-ENV-seedS, or -seedsS-T for several seeds, with
    -2, -3... when it exists; runs/latest points at the newest)."""
    sweep: tuple[str, ...] = ()
    """Sweep a hyperparameter in the same program: FIELD=v1,v2 (a sweepable field of the agent,
    e.g. learning_rate or gamma)."""
    quiet: bool = False
    """No progress line."""
    num_processes: int | None = None
    """Multi-host: number of processes (with --process-id and --coordinator)."""
    process_id: int | None = None
    """Multi-host: this process's index, 0 .. num_processes-1."""
    coordinator: str | None = None
    """Multi-host: HOST:PORT of process 0."""
    multihost: bool = False
    """Multi-host with jax's cluster auto-detection (TPU pods, SLURM, Open MPI): no other flags
    needed."""
    compile_cache: bool = True
    """Use JAX's persistent compilation cache: a second run of the same program skips most of
    its compile."""
    compile_cache_dir: str | None = None
    """Its directory (default: $JRL_COMPILE_CACHE, else ~/.cache/jrl/jax-cache)."""
    resume: str | None = None
    """Continue the interrupted run in this folder from its latest checkpoint, exactly as if it
    had not stopped (its saved configuration; options given must agree with it)."""
    resume_step: int | None = None
    """With --resume: the checkpoint (iteration) to continue from instead of the latest."""
    debug: bool = False
    """Show tracebacks on errors."""
    pbt: bool = False
    """Population-based training of the runs (seeds x --sweep values) in the program: every
    --pbt-interval env steps the worst runs copy the best and perturb their hyperparameters."""
    pbt_interval: int = 10_000
    """With --pbt: env steps per run between exploit/explore steps."""
    pbt_fraction: float = 0.25
    """With --pbt: the bottom fraction of runs copies the top fraction."""
    pbt_perturb: tuple[float, float] = (0.8, 1.2)
    """With --pbt: the factors a copied run's hyperparameters are multiplied by."""
    pbt_fields: tuple[str, ...] = ()
    """With --pbt: the hyperparameters to perturb (default: the swept ones, else
    learning_rate)."""


def _train_args(config_cls: type, preset):
    """The dataclass ``jrl train AGENT`` parses: the agent's config (defaults: ``preset``),
    the run options and the command's own flags, all flattened."""
    import tyro

    from jrl.app.run_options import RunOptions

    @dataclasses.dataclass
    class TrainArgs:
        config: Annotated[config_cls, tyro.conf.arg(name="")] = preset  # type: ignore[valid-type]
        """Agent configuration (defaults shown are the env's preset)."""
        options: Annotated[RunOptions, tyro.conf.arg(name="")] = RunOptions()
        """Run options."""
        cli: Annotated[CLIOptions, tyro.conf.arg(name="")] = CLIOptions()
        """Command-line options."""

    return TrainArgs


def _parse_train(args: list[str]):
    """``(agent, cli options, run options, config overrides, saved spec or None, given flags)``."""
    import tyro

    import jrl.agents
    import jrl.envs
    from jrl.app import api as experiment

    resume_dir, saved = _resume_target(args), None
    if resume_dir is not None:
        try:
            saved = experiment.read_spec(resume_dir)
        except (ValueError, FileNotFoundError) as e:
            raise CLIError(str(e)) from e
        if not args or args[0].startswith("-"):
            args = [saved.agent, *args]
    if not args or args[0].startswith("-"):
        if any(a in ("-h", "--help") for a in args):
            print(
                f"usage: jrl train AGENT [options]\n\nagents: {', '.join(jrl.agents.names())}\n"
                "'jrl train AGENT --help' lists the agent's options."
            )
            raise SystemExit(0)
        raise CLIError(f"train needs an agent name first: one of {', '.join(jrl.agents.names())}")
    agent, rest = args[0], args[1:]
    config_cls = jrl.agents.get(agent).config_cls
    pre = argparse.ArgumentParser(add_help=False)
    pre.add_argument("--env", default=saved.env_id if saved is not None else "CartPole-v1")
    env_id = pre.parse_known_args(rest)[0].env
    jrl.envs.entry(env_id)  # unknown env: clear error before anything else
    if saved is not None and agent == saved.agent and env_id == saved.env_id:
        preset = saved.config  # defaults: the saved configuration, so only fields given differ
    else:
        preset = experiment.make_config(agent, env_id)

    TrainArgs = _train_args(config_cls, preset)
    ns = tyro.cli(
        TrainArgs,
        args=rest,
        prog=f"jrl train {agent}",
        description=f"Train {agent}: {jrl.agents.summary(agent)}",
        default=TrainArgs(config=preset, cli=CLIOptions(env=env_id)),
        config=(tyro.conf.OmitArgPrefixes,),
    )
    given = {a.split("=", 1)[0] for a in rest if a.startswith("--")}
    # the fields that differ from the preset, and those given at all: a field given and swept
    # is refused (RunSpec.check_sweep) even when its value is the preset's
    named = _given_fields(config_cls, given)
    overrides = {
        f.name: getattr(ns.config, f.name)
        for f in dataclasses.fields(ns.config)
        if f.name in named or getattr(ns.config, f.name) != getattr(preset, f.name)
    }
    # every --sweep and --import occurrence (tyro keeps only the last one of a repeated flag)
    return (
        agent,
        dataclasses.replace(ns.cli, sweep=_flag_values(rest, "--sweep")),
        dataclasses.replace(ns.options, plugins=_flag_values(rest, "--import")),
        overrides,
        saved,
        given,
    )


def _given_fields(config_cls: type, given: set[str]) -> set[str]:
    """The config fields that the flags in ``given`` (``--name`` spellings) set: each field's
    ``--field-name`` and ``--field_name``, ``--no-field-name`` of a bool, and its aliases
    (``--lr``)."""
    import typing

    hints = typing.get_type_hints(config_cls, include_extras=True)
    out = set()
    for f in dataclasses.fields(config_cls):
        spellings = {f.name, f.name.replace("_", "-")}
        flags = {f"--{n}" for n in spellings} | {f"--no-{n}" for n in spellings}
        for meta in getattr(hints.get(f.name), "__metadata__", ()):
            flags.update(getattr(meta, "aliases", None) or ())
        if flags & given:
            out.add(f.name)
    return out


def _flag_values(args: Sequence[str], flag: str) -> tuple[str, ...]:
    """The values of every occurrence of ``flag`` in ``args`` (``flag V W`` or ``flag=V``)."""
    items, taking = [], False
    for a in args:
        if a.startswith("--"):
            taking = a == flag
            if a.startswith(flag + "="):
                items.append(a.split("=", 1)[1])
        elif taking:
            items.append(a)
    return tuple(items)


PBT_FLAGS = ("--pbt-interval", "--pbt-fraction", "--pbt-perturb", "--pbt-fields")
"""The flags that set PBT's settings (they need ``--pbt``)."""


def _check_pbt_flags(cli: CLIOptions, given: set[str]) -> None:
    """Refuses a PBT setting without ``--pbt``, and PBT flags with ``--resume`` (a resumed
    run keeps the PBT settings it was started with)."""
    named = [f for f in PBT_FLAGS if f in given or "--" + f[2:].replace("-", "_") in given]
    if cli.resume is not None:
        if cli.pbt or named:
            flag = "--pbt" if cli.pbt else named[0]
            raise CLIError(
                f"{flag} does not apply with --resume: the run keeps the PBT settings it was "
                "started with"
            )
        return
    if named and not cli.pbt:
        raise CLIError(f"{named[0]} sets population-based training: add --pbt")


def _check_resume_flags(cli: CLIOptions, options, saved, given: set[str]) -> None:
    """Refuses run options that differ from the saved run's, and flags that do not apply."""
    from jrl.app.run_options import RECORDED

    if cli.resume is None:
        if cli.resume_step is not None:
            raise CLIError("--resume-step goes with --resume RUN_DIR")
        return
    flags = {name: f"--{name.replace('_', '-')}" for name in RECORDED}  # sweep: checked below
    asked = [name for name in RECORDED if name != "sweep" and flags[name] in given]
    for name in options.normalized().changed_from(saved.options, asked):
        value = getattr(saved.options, name)
        raise CLIError(f"{flags[name]} cannot change when resuming (the run has {value!r})")
    if cli.sweep and _parse_sweep(cli.sweep) != {
        k: list(v) for k, v in saved.options.sweep.items()
    }:
        raise CLIError(f"--sweep cannot change when resuming (the run has {saved.options.sweep})")
    if cli.out is not None or options.overwrite:
        raise CLIError("--resume continues the run in its own folder: drop --out/--overwrite")


USER_ERRORS = (
    ValueError,
    TypeError,
    FileExistsError,
    FileNotFoundError,
    KeyError,
    ConnectionError,
    ImportError,
)
"""Exceptions ``jrl train`` reports as one-line user errors (exit code 2)."""


def cmd_train(args: Sequence[str]) -> int:
    """``jrl train AGENT ...``: trains and writes a run folder."""
    from jrl.app import api as experiment

    try:
        agent, cli, options, overrides, saved, given = _parse_train(list(args))
    except SystemExit as e:
        if e.code == 0:
            return 0
        raise
    _check_pbt_flags(cli, given)
    _check_resume_flags(cli, options, saved, given)
    cache = cli.compile_cache and (cli.compile_cache_dir or True)
    options = dataclasses.replace(options, progress=not cli.quiet, compile_cache=cache)
    multi_process = cli.multihost or any(
        v is not None for v in (cli.num_processes, cli.coordinator, cli.process_id)
    )
    if (saved.options if saved is not None else options).runner == "anakin" and not multi_process:
        from jrl.core import parallel

        # one CPU device per core, before jax starts: the runner spreads the runs over them
        # (ARCHITECTURE.md, "Runs spread over the CPU's cores")
        parallel.use_cpu_cores()
    try:
        if multi_process:
            import jrl.app.distributed

            jrl.app.distributed.initialize(cli.coordinator, cli.num_processes, cli.process_id)
        if cli.resume is not None:
            invocation = ("progress", "compile_cache", "keep_checkpoints", "stop_at_steps")
            kw = {k: getattr(options, k) for k in invocation}
            result = experiment.resume(
                cli.resume, step=cli.resume_step, agent=agent, env=cli.env, **kw, **overrides
            )
        else:
            out = cli.out or default_run_folder(agent, cli.env, options.seed, options.seeds)
            options = dataclasses.replace(options, sweep=_parse_sweep(cli.sweep))
            if cli.pbt:
                from jrl.run.pbt import PBT

                pbt = PBT(cli.pbt_interval, cli.pbt_fraction, cli.pbt_perturb, cli.pbt_fields)
                options = dataclasses.replace(options, pbt=pbt)
            try:
                result = experiment.train(
                    agent, cli.env, options.seeds, out=out, options=options, **overrides
                )
            finally:
                if cli.out is None:
                    _point_latest(Path(out))
    except experiment.TrainingInterrupted as e:
        print(f"jrl: {e}", file=sys.stderr)
        return e.exit_code
    except experiment.NonFiniteError as e:
        return _error(e, cli.debug, code=3)
    except experiment.ActorError as e:  # a host env (or an actor) failed: every thread stopped
        return _error(e, cli.debug, code=1)
    except USER_ERRORS as e:
        if cli.debug:
            raise
        raise CLIError(str(e)) from e
    except OSError as e:  # e.g. a full disk while writing logs or a checkpoint (one was kept)
        return _error(e, cli.debug, code=1)
    return _print_result(result)


def _error(e: Exception, debug: bool, code: int) -> int:
    if debug:
        raise e
    print(f"jrl: error: {e}", file=sys.stderr)
    return code


def default_run_folder(agent: str, env: str, seed: int, seeds: int, root: str = "runs") -> str:
    """``runs/AGENT-ENV-seedS`` (``-seedsS-T`` for several seeds), with ``-2``, ``-3``...
    appended when that folder exists, so running the same command twice keeps both runs."""
    seeds_txt = f"seed{seed}" if seeds == 1 else f"seeds{seed}-{seed + seeds - 1}"
    base = Path(root) / f"{agent}-{env.replace(':', '_')}-{seeds_txt}"
    out, n = base, 1
    while out.exists():
        n += 1
        out = base.with_name(f"{base.name}-{n}")
    return str(out)


def _point_latest(out: Path) -> None:
    """Points ``runs/latest`` at ``out`` (a relative symlink, replaced atomically)."""
    if not out.is_dir():
        return
    latest = out.parent / "latest"
    tmp = out.parent / f".latest.{os.getpid()}"
    try:
        tmp.unlink(missing_ok=True)
        tmp.symlink_to(out.name)
        os.replace(tmp, latest)
    except OSError:  # e.g. a filesystem without symlinks: the run itself is unaffected
        tmp.unlink(missing_ok=True)


def _print_result(result) -> int:
    import jax

    if jax.process_index() != 0:
        return 0
    print(result.summary())
    if result.out_dir is None:
        return 0
    names = ["learning_curve.png", "metrics.csv", "config.json", "params.msgpack", "checkpoints"]
    out = Path(result.out_dir)
    # what this run wrote (a multi-process run writes no checkpoints)
    made = [n + ("/" if n == "checkpoints" else "") for n in names if (out / n).exists()]
    print(f"run folder: {out} ({', '.join(made)})")
    return 0


def _run_dir_parser(prog: str, description: str) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=prog, description=description)
    p.add_argument("run_dir", help="a run folder written by `jrl train`")
    p.add_argument(
        "--step", type=int, default=None, help="checkpoint (iteration) to load; default: the latest"
    )
    p.add_argument("--seed", type=int, default=0, help="seed of the evaluation episodes")
    mode = p.add_mutually_exclusive_group()
    mode.add_argument(
        "--greedy",
        dest="greedy",
        action="store_true",
        default=True,
        help="the agent's greedy policy (default)",
    )
    mode.add_argument(
        "--stochastic",
        dest="greedy",
        action="store_false",
        help="the behaviour policy (sampled actions; epsilon-greedy for value-based agents)",
    )
    p.add_argument("--debug", action="store_true", help="show tracebacks on errors")
    p.add_argument(
        "--import",
        action="append",
        default=[],
        metavar="MODULE",
        help="a module that registers envs or agents (the run's own are imported anyway)",
    )
    return p


def _parse(p: argparse.ArgumentParser, args: Sequence[str]) -> argparse.Namespace:
    try:
        return p.parse_args(list(args))
    except SystemExit as e:  # argparse printed its message
        if e.code == 0:
            raise
        raise CLIError("see the usage above") from None


def cmd_eval(args: Sequence[str]) -> int:
    """``jrl eval RUN_DIR``: episode-return statistics of a trained run, written to
    RUN_DIR/eval.json."""
    import json
    from pathlib import Path

    p = _run_dir_parser(
        "jrl eval",
        "Evaluate a trained run on fresh, vmapped episodes (normalisers frozen) and "
        "write RUN_DIR/eval.json.",
    )
    p.add_argument("--episodes", type=int, default=100, help="episodes per run (seed)")
    ns = _parse(p, args)
    from jrl.app import api as experiment
    from jrl.app import compile_cache
    from jrl.util import files

    compile_cache.enable()
    try:
        stats = experiment.evaluate_run(
            ns.run_dir, episodes=ns.episodes, greedy=ns.greedy, seed=ns.seed, step=ns.step
        )
    except (ValueError, FileNotFoundError, KeyError, TypeError) as e:
        if ns.debug:
            raise
        raise CLIError(str(e)) from e
    out = files.write_atomic(Path(ns.run_dir) / "eval.json", json.dumps(stats, indent=2))
    if "opponents" in stats:  # a two-player game: win/draw/loss rates per opponent
        print(
            f"{stats['agent']} on {stats['env_id']} (checkpoint at iteration "
            f"{stats['checkpoint_iteration']}), {stats['games_per_run']} games per run and "
            "opponent, half as first player:"
        )
        for name, r in stats["opponents"].items():
            print(
                f"  vs {name}: win {r['win']:.1%}  draw {r['draw']:.1%}  loss {r['loss']:.1%}"
                f"  (as first: loss {r['as_first']['loss']:.1%}; as second: loss "
                f"{r['as_second']['loss']:.1%})"
            )
        print(f"written: {out}")
        return 0
    n = len(stats["runs"]) * stats["episodes_per_run"]
    print(
        f"{stats['agent']} on {stats['env_id']} ({stats['policy']}, checkpoint at iteration "
        f"{stats['checkpoint_iteration']}), {n} episodes over {len(stats['runs'])} run(s):"
    )
    print(
        f"  return mean {stats['mean']:.2f}  std {stats['std']:.2f}  median {stats['median']:.2f}  "
        f"IQM {stats['iqm']:.2f}  (min {stats['min']:.2f}, max {stats['max']:.2f}; mean length "
        f"{stats['mean_length']:.1f})"
    )
    for g in stats["sweep_groups"]:
        print(f"  [{g['sweep']}] mean {g['mean']:.2f}  std {g['std']:.2f}  IQM {g['iqm']:.2f}")
    base = ("run", "seed", "mean", "std")
    for r in stats["runs"]:
        swept = "".join(f", {k}={v:g}" for k, v in r.items() if k not in base)
        print(f"  run {r['run']} (seed {r['seed']}{swept}): {r['mean']:.2f} ± {r['std']:.2f}")
    print(f"written: {out}")
    return 0


def cmd_render(args: Sequence[str]) -> int:
    """``jrl render RUN_DIR --out episode.gif``: one episode of a trained policy as a video."""
    from pathlib import Path

    p = _run_dir_parser(
        "jrl render",
        "Render one episode of a trained run's policy to a GIF (or an MP4 with "
        "pip install jrl-jax[video]).",
    )
    p.add_argument(
        "--out", default=None, help="video file, .gif or .mp4 (default: RUN_DIR/episode.gif)"
    )
    p.add_argument("--run", type=int, default=0, help="which run (seed) of the folder")
    p.add_argument(
        "--max-steps", type=int, default=1000, help="stop the episode after this many steps"
    )
    p.add_argument("--fps", type=int, default=30, help="frames per second of the video")
    ns = _parse(p, args)
    import jax

    from jrl.app import api as experiment
    from jrl.app import compile_cache, render
    from jrl.envs.host import host_env_of
    from jrl.run.evaluation import evaluation_env

    compile_cache.enable()
    out = Path(ns.out) if ns.out else Path(ns.run_dir) / "episode.gif"
    try:
        if out.suffix.lower() not in (".gif", ".mp4"):
            raise ValueError(f"--out must end in .gif or .mp4, got {out.name!r}")
        loaded = experiment.load_run(ns.run_dir, ns.step)
        policy = loaded.policy(ns.run, ns.greedy)
        host_env = host_env_of(loaded.built.env)
        if host_env is not None:  # a Sebulba run: the host env draws itself
            frames, ret, length = render.host_episode_frames(
                policy, host_env, jax.random.key(ns.seed), max_steps=ns.max_steps
            )
        else:
            env = evaluation_env(loaded.built.env)
            frames, ret, length = render.episode_frames(
                policy,
                env,
                jax.random.key(ns.seed),
                loaded.built.env_params,
                max_steps=ns.max_steps,
            )
        path = render.write_video(frames, out, fps=ns.fps)
    except (ValueError, FileNotFoundError, KeyError, TypeError, ImportError) as e:
        if ns.debug:
            raise
        raise CLIError(str(e)) from e
    print(
        f"{loaded.spec.agent} on {loaded.spec.env_id}, run {ns.run}: return {ret:.2f} "
        f"over {length} steps; "
        f"{len(frames)} frames written to {path}"
    )
    return 0


def cmd_export(args: Sequence[str]) -> int:
    """``jrl export RUN_DIR --out DIR``: one run's policy as an inference-only artifact."""
    p = _run_dir_parser(
        "jrl export",
        "Export one run's evaluation policy (parameters and normaliser statistics inside) as a "
        "jax.export program; load it with jrl.load_policy(DIR) or jax.export.deserialize.",
    )
    p.add_argument(
        "--out",
        required=True,
        help="folder of its own to write (policy.jaxexport, ...): not a run folder, and no "
        "files but a previous export's are replaced",
    )
    p.add_argument("--run", type=int, default=0, help="which run (seed) of the folder")
    ns = _parse(p, args)
    from jrl.app import export

    try:
        out = export.export_policy(ns.run_dir, ns.out, ns.run, ns.step, ns.greedy)
    except (ValueError, FileNotFoundError, FileExistsError, KeyError, TypeError) as e:
        if ns.debug:
            raise
        raise CLIError(str(e)) from e
    info = json.loads((out / export.INFO_FILE).read_text())
    print(
        f"exported {info['agent']} on {info['env_id']}, run {info['run']} (seed {info['seed']}), "
        f"checkpoint at iteration {info['checkpoint_iteration']}, "
        f"{'greedy' if info['greedy'] else 'stochastic'} policy -> {out}"
    )
    return 0


COMMANDS = {
    "envs": cmd_envs,
    "agents": cmd_agents,
    "train": cmd_train,
    "eval": cmd_eval,
    "render": cmd_render,
    "export": cmd_export,
}


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
    try:  # before any name is looked up: plugins register envs and agents
        from jrl.run import plugins

        plugins.load([*_flag_values(argv, "--import"), *plugins.from_environment()])
    except ImportError as e:
        return _fail(str(e))
    command = COMMANDS.get(argv[0])
    if command is None:
        from jrl.util import names

        hint = "".join(f" (did you mean {c!r}?)" for c in names.closest(argv[0], COMMANDS, n=1))
        return _fail(f"unknown command {argv[0]!r}{hint}; commands: {', '.join(COMMANDS)}")
    try:
        return command(argv[1:])
    except CLIError as e:
        return _fail(str(e))
    except KeyboardInterrupt:  # a second Ctrl-C while a run stopped, or Ctrl-C outside training
        if debug:
            raise
        print(
            "\njrl: aborted (Ctrl-C); the last complete checkpoint, if any, is kept",
            file=sys.stderr,
        )
        return 130
    except (KeyError, ValueError, TypeError, ImportError) as e:  # a missing extra or plugin too
        if debug:
            raise
        # str() of a KeyError is its key's repr: show the message itself
        return _fail(str(e.args[0]) if isinstance(e, KeyError) and e.args else str(e))


if __name__ == "__main__":
    sys.exit(main())
