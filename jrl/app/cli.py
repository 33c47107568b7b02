"""The ``jrl`` command line.

    jrl envs                                  list registered environments
    jrl agents                                list agents
    jrl train AGENT [--env ENV] [--seeds N] [--total-steps N] [--out DIR] [config fields ...]
    jrl train AGENT --search-space FIELD=SPEC [--trials N] [--search-batch B]   a search
    jrl train --resume RUN_DIR                continue an interrupted run (or search) exactly
    jrl eval RUN_DIR [--episodes N] [--greedy | --stochastic]
    jrl render RUN_DIR [--out episode.gif] [--run R]
    jrl export RUN_DIR --out DIR [--run R]    one run's policy for inference (jrl.load_policy)
    jrl collect RUN_DIR --steps N [--out PATH] [--epsilon E]   a dataset for offline agents

``jrl train AGENT --help`` lists every config field with its docstring and
the defaults of the chosen env's preset. Bad input (unknown agent or env,
unknown or ill-typed field, out-of-range value, an output folder that holds
another run, a checkpoint of another run or a corrupt one) ends with a
one-line error and exit code 2; ``--debug`` shows the traceback. A loss or
parameter that turns NaN/inf stops training with exit code 3; an I/O error
while training (a full disk) with 1, after checkpointing the last good chunk. Ctrl-C or
SIGTERM finish the current chunk, write a checkpoint and exit with 130 or
143, printing how to resume; a second one aborts at once, and every wait is bounded
(:mod:`jrl.app.stopping`). A multi-process ``jrl train`` whose peer dies ends with one line
and exit code 75 (:mod:`jrl.app.supervisor`); it resumes from its last complete checkpoint.
Output to a reader that went away (``jrl envs | head -1``) ends the command quietly with 141.
"""

import argparse
import dataclasses
import os
import sys
import traceback
import typing
from pathlib import Path
from typing import Annotated, Sequence

import jax

import jrl.app.distributed
import jrl.app.peers
from jrl.app import supervisor
from jrl import __version__
from jrl.app.cli_commands import (
    CLIError,
    cmd_agents,
    cmd_collect,
    cmd_envs,
    cmd_eval,
    cmd_export,
    cmd_render,
)
from jrl.core import parallel
from jrl.run import plugins
from jrl.util import names

USAGE = __doc__.split("\n\n")[1]


def _fail(message: str) -> int:
    print(f"jrl: error: {message}", file=sys.stderr)
    return 2


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
    search_space: tuple[str, ...] = ()
    """Hyperparameter search (pip install jrl-jax[search]): FIELD=SPEC per sweepable field, SPEC
    log:LO:HI, uniform:LO:HI, int:LO:HI or choice:a,b,c; TPE proposes each batch of trials."""
    trials: int = 16
    """With --search-space: trials in all (each trains --seeds seeds)."""
    search_batch: int | None = None
    """With --search-space: trials per batch, trained as one program (default: --trials)."""
    search_metric: typing.Literal["final_return", "eval_return"] = "final_return"
    """With --search-space: a trial's value (eval_return needs --eval-every), seeds' mean."""
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
    # tyro and the run options (with the agents and runners) only for `jrl train`: not
    # imported by `jrl --help`
    import tyro

    from jrl.app.run_options import RunOptions  # as tyro

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
    import tyro  # the training stack, as in _train_args

    import jrl.agents  # as tyro

    agent, rest, saved, preset = _agent_and_preset(args)
    config_cls = jrl.agents.get(agent).config_cls
    TrainArgs = _train_args(config_cls, preset)
    ns = tyro.cli(
        TrainArgs,
        args=rest,
        prog=f"jrl train {agent}",
        description=f"Train {agent}: {jrl.agents.summary(agent)}",
        default=TrainArgs(config=preset, cli=CLIOptions(env=_env_of(rest, saved))),
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
        dataclasses.replace(
            ns.cli,
            sweep=_flag_values(rest, "--sweep"),
            search_space=_flag_values(rest, "--search-space"),
        ),
        dataclasses.replace(ns.options, plugins=_flag_values(rest, "--import")),
        overrides,
        saved,
        given,
    )


def _agent_and_preset(args: list[str]):
    """``(agent, its arguments, saved spec or None, the config's defaults)`` of ``jrl train``'s
    arguments: the saved run's agent and configuration with ``--resume``, else the agent named
    first and its preset for the env."""
    import jrl.agents  # the training stack, as in _train_args
    import jrl.envs  # as jrl.agents
    from jrl.app import api as experiment  # as jrl.agents
    from jrl.app import search  # as jrl.agents

    resume_dir, saved = _resume_target(args), None
    if resume_dir is not None:
        try:  # a search's folder (jrl.app.search), else a run's
            saved = search.saved_spec(resume_dir) or experiment.read_spec(resume_dir)
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
    jrl.agents.get(agent)  # unknown agent: clear error before the env is looked at
    env_id = _env_of(rest, saved)
    jrl.envs.entry(env_id)  # unknown env: clear error before anything else
    if saved is not None and agent == saved.agent and env_id == saved.env_id:
        preset = saved.config  # defaults: the saved configuration, so only fields given differ
    else:
        preset = experiment.make_config(agent, env_id)
    return agent, rest, saved, preset


def _env_of(rest: list[str], saved) -> str:
    """The ``--env`` among ``jrl train AGENT``'s arguments (default: the saved run's env, else
    CartPole-v1)."""
    pre = argparse.ArgumentParser(add_help=False)
    pre.add_argument("--env", default=saved.env_id if saved is not None else "CartPole-v1")
    return pre.parse_known_args(rest)[0].env


def _given_fields(config_cls: type, given: set[str]) -> set[str]:
    """The config fields that the flags in ``given`` (``--name`` spellings) set: each field's
    ``--field-name`` and ``--field_name``, ``--no-field-name`` of a bool, and its aliases
    (``--lr``)."""
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
    from jrl.app.run_options import RECORDED  # as in _train_args

    if cli.resume is None:
        if cli.resume_step is not None:
            raise CLIError("--resume-step goes with --resume RUN_DIR")
        return
    flags = {name: f"--{name.replace('_', '-')}" for name in RECORDED}  # sweep: checked below
    # --devices may change: the state moves onto the new device count (jrl.app.reshard)
    asked = [name for name in RECORDED if name not in ("sweep", "devices") and flags[name] in given]
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
    from jrl.app import api as experiment  # the training stack, as in _train_args
    from jrl.app import search  # as api

    try:
        agent, cli, options, overrides, saved, given = _parse_train(list(args))
    except SystemExit as e:
        if e.code == 0:
            return 0
        raise
    _check_pbt_flags(cli, given)
    _check_resume_flags(cli, options, saved, given)
    overrides = {**overrides, **search.cli_keywords(cli, given)}  # --search-space: a search
    cache = cli.compile_cache and (cli.compile_cache_dir or True)
    options = dataclasses.replace(options, progress=not cli.quiet, compile_cache=cache)
    multi_process = cli.multihost or any(
        v is not None for v in (cli.num_processes, cli.coordinator, cli.process_id)
    )
    if multi_process and not supervisor.supervised():  # one line if a peer dies, not a dump
        return supervisor.supervise(["train", *args], folder=cli.resume or cli.out)
    if (saved.options if saved is not None else options).runner == "anakin" and not multi_process:
        # one CPU device per core, before jax starts: the runner spreads the runs over them
        # (ARCHITECTURE.md, "Runs spread over the CPU's cores")
        parallel.use_cpu_cores()
        learner = (saved.options if saved is not None else options).devices
        if "--devices" in given:  # a resume may move its state onto another device count
            learner = options.devices
        if learner is not None and learner > 1:  # their collectives must not starve the pool
            parallel.size_cpu_thread_pool(learner)
    try:
        if multi_process:
            jrl.app.distributed.initialize(cli.coordinator, cli.num_processes, cli.process_id)
        devices = options.devices if "--devices" in given else None
        try:
            result = _train_or_resume(agent, cli, options, overrides, devices)
        except (jax.errors.JaxRuntimeError, jrl.app.peers.PeerError) as e:
            if multi_process and _peer_may_have_died(e):  # see await_peer_verdict
                jrl.app.distributed.await_peer_verdict()
            raise
    except experiment.TrainingInterrupted as e:
        print(f"jrl: {e}", file=sys.stderr)
        return e.exit_code
    except experiment.NonFiniteError as e:
        return _error(e, cli.debug, code=3)
    except experiment.ActorError as e:  # a host env (or an actor) failed: every thread stopped
        _LEFT_ALONE.append(multi_process)  # this process's own failure (see _exit)
        return _error(e, cli.debug, code=1)
    except USER_ERRORS as e:
        if cli.debug:
            raise
        raise CLIError(str(e)) from e
    except OSError as e:  # e.g. a full disk while writing logs or a checkpoint (one was kept)
        _LEFT_ALONE.append(multi_process)
        return _error(e, cli.debug, code=1)
    except jrl.app.peers.PeerError as e:  # another process failed, or did not come
        return _error(e, cli.debug, code=1)
    return _print_result(result)


def _peer_may_have_died(e: BaseException) -> bool:
    """Whether a failure of a multi-process run may be a peer's death that the coordination
    service has not judged yet: a collective or the key-value store lost its connection (not
    a refusal another process reported, nor an error of the program itself)."""
    if isinstance(e, jrl.app.peers.PeerError):
        return e.process is None
    text = str(e)
    return any(s in text for s in ("Gloo", "Connection", "Socket", "UNAVAILABLE", "DEADLINE"))


def _train_or_resume(
    agent: str, cli: CLIOptions, options, overrides: dict, devices: int | None = None
):
    """``jrl train``'s run: ``resume`` with ``--resume`` (on ``devices`` when given), else
    ``train`` into ``--out`` (by default a new folder under runs/, which runs/latest then
    points at)."""
    from jrl.app import search  # the training stack (jrl.app.api), as in _train_args

    if cli.resume is not None:
        invocation = ("progress", "compile_cache", "keep_checkpoints", "stop_at_steps")
        kw = {k: getattr(options, k) for k in invocation}
        if devices is not None:
            kw["devices"] = devices
        return search.resume(  # a run's folder, or a search's (jrl.app.search)
            cli.resume, step=cli.resume_step, agent=agent, env=cli.env, **kw, **overrides
        )
    out = cli.out or default_run_folder(agent, cli.env, options.seed, options.seeds)
    group = jrl.app.peers.group()
    if cli.out is None and group is not None:  # process 0 picks the folder every process uses
        out = group.gather("the default run folder", out)[0]
    options = dataclasses.replace(options, sweep=_parse_sweep(cli.sweep))
    if cli.pbt:
        from jrl.run.pbt import PBT  # with tyro: not imported by `jrl --help`

        pbt = PBT(cli.pbt_interval, cli.pbt_fraction, cli.pbt_perturb, cli.pbt_fields)
        options = dataclasses.replace(options, pbt=pbt)
    try:
        return search.train(  # a run, or with --search-space a search
            agent, cli.env, options.seeds, out=out, options=options, **overrides
        )
    finally:
        if cli.out is None and jax.process_index() == 0:
            _point_latest(Path(out))


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
    if jax.process_index() != 0:
        return 0
    print(result.summary())
    if result.out_dir is None:
        return 0
    names = ["learning_curve.png", "metrics.csv", "config.json", "params.msgpack", "checkpoints"]
    out = Path(result.out_dir)
    # what this run wrote (a search: its study and the batches' run folders)
    names += ["videos", "search"] + sorted(p.name for p in out.glob("batch-*"))
    made = [n + ("/" if (out / n).is_dir() else "") for n in names if (out / n).exists()]
    print(f"run folder: {out} ({', '.join(made)})")
    return 0


COMMANDS = {
    "envs": cmd_envs,
    "agents": cmd_agents,
    "train": cmd_train,
    "eval": cmd_eval,
    "render": cmd_render,
    "export": cmd_export,
    "collect": cmd_collect,
}


EXIT_CLOSED_PIPE = 141
"""Exit code when the reader of the output went away (``jrl envs | head -1``): 128 + SIGPIPE,
what a shell reports for a command that SIGPIPE ended."""


def main(argv: Sequence[str] | None = None) -> int:
    """The ``jrl`` command (see the module docstring); returns its exit code. A reader that
    closes the output early ends the command quietly with :data:`EXIT_CLOSED_PIPE`."""
    try:
        return _main(argv)
    except BrokenPipeError:
        try:  # the interpreter's last flush of stdout would fail again on exit
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
        except (OSError, ValueError, AttributeError):  # a stdout without a descriptor
            pass
        return EXIT_CLOSED_PIPE


def _main(argv: Sequence[str] | None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    debug = "--debug" in argv
    if not argv or argv[0] in ("-h", "--help"):
        print(f"usage:\n{USAGE.rstrip()}", file=sys.stdout if argv else sys.stderr)
        return 0 if argv else 2
    if argv[0] in ("-V", "--version"):
        print(f"jrl {__version__}")
        return 0
    try:  # before any name is looked up: plugins register envs and agents
        plugins.load([*_flag_values(argv, "--import"), *plugins.from_environment()])
    except ImportError as e:
        return _fail(str(e))
    command = COMMANDS.get(argv[0])
    if command is None:
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


_LEFT_ALONE: list[bool] = []
"""Set when this process of a multi-process run failed on its own (its actors, a write):
the others go on, see :func:`_exit`."""


def _exit(code: int) -> None:
    """Ends the process with ``code``. The trainer of a multi-process run that failed on its
    own (its actors, a write; or an unexpected error), while the others go on, leaves at
    once: jax's exit would wait at its shutdown barrier for the others, which wait in the
    next collective for this process, both for minutes. Leaving ends its heartbeats, so the
    others end within $JRL_PEER_TIMEOUT with one line (jrl.app.supervisor). A failure every
    process shares (a refusal, an agreement) exits as usual, all together."""
    if supervisor.supervised() and any(_LEFT_ALONE):
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    sys.exit(code)


if __name__ == "__main__":
    try:
        _code = main()
    except Exception:  # an unexpected error: its traceback, then the same exit as any failure
        if not supervisor.supervised():
            raise
        traceback.print_exc()
        _LEFT_ALONE.append(True)
        _code = 1
    _exit(_code)
