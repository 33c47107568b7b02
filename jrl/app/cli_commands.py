"""The commands of ``jrl`` besides ``train`` (:mod:`jrl.app.cli`): ``envs``, ``agents``,
and those that read a run folder: ``eval``, ``render``, ``export``, ``collect``; and
:class:`CLIError`, the user error every command reports in one line (exit code 2).

Only the standard library, numpy and jax (which ``import jrl`` loads anyway) are imported
here at the top: what a command needs beyond them (the env and agent registries, the
training stack, the renderer) is imported by that command, so ``jrl --help`` stays fast
(tests/test_startup.py, benchmarks/startup.py).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Sequence

import jax
import numpy as np

from jrl.app import compile_cache
from jrl.core import spaces
from jrl.util import files

__all__ = [
    "CLIError",
    "cmd_agents",
    "cmd_collect",
    "cmd_envs",
    "cmd_eval",
    "cmd_export",
    "cmd_render",
]


class CLIError(Exception):
    """A user error: printed as one line, exit code 2."""


def cmd_envs(args: Sequence[str]) -> int:
    """Prints a table of registered envs: id, observation space, action space, source (and the
    envs of the extras of :data:`LISTED_BY_NAME`, by name, when they are installed)."""
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
    _print_table([("id", "observation space", "action space", "source")] + _env_rows(ns.all))
    print(
        "\nHost envs, stepped outside the program (--runner sebulba):\n"
        "  gymnasium:<id>  any Gymnasium id (pip install jrl-jax[gymnasium])\n"
        "  envpool:<id>    any EnvPool id (pip install jrl-jax[envpool])"
    )
    return 0


LISTED_BY_NAME = (
    # (source, module, names function, action space): the extras whose envs `jrl envs` lists
    # by name when the extra is installed (building some takes seconds)
    ("brax", "jrl.envs.brax_adapter", "brax_names", "Box"),
    ("jaxmarl", "jrl.envs.jaxmarl_adapter", "jaxmarl_names", "per agent"),
    ("craftax", "jrl.envs.craftax_adapter", "craftax_names", "Discrete"),
    ("jumanji", "jrl.envs.jumanji_adapter", "jumanji_names", "Discrete"),
    ("xminigrid", "jrl.envs.xminigrid_adapter", "xminigrid_names", "Discrete"),
)


def _env_ids(gymnax_too: bool) -> list[tuple[str, str | None]]:
    """``(id, source)`` of the registered envs, then (``gymnax_too``) gymnax's, and those of the
    :data:`LISTED_BY_NAME` extras that are installed (source: the extra; None: build it to
    know)."""
    import importlib  # the adapters of LISTED_BY_NAME, by module name

    import jrl.envs  # the env registry (and gymnasium): not imported by `jrl --help`

    ids: list[tuple[str, str | None]] = [(i, None) for i in jrl.envs.names()]
    if gymnax_too:
        import gymnax  # only for --all (it takes a while to import)

        ids += [(f"gymnax:{n}", None) for n in gymnax.registered_envs]
    for source, module, names, _ in LISTED_BY_NAME:
        try:  # an optional extra: its envs as <source>:<name> when it is installed
            listed = getattr(importlib.import_module(module), names)()
        except ImportError:
            continue
        ids += [(f"{source}:{n}", source) for n in listed]
    return ids


def _env_rows(gymnax_too: bool) -> list[tuple[str, str, str, str]]:
    """A row of :func:`cmd_envs`'s table per env of :func:`_env_ids`."""
    import jrl.envs  # as in _env_ids

    actions = {source: action for source, _, _, action in LISTED_BY_NAME}
    rows = []
    for env_id, source in _env_ids(gymnax_too):
        if source is not None:  # listed by name: not built
            rows.append((env_id, "(built on first use)", actions[source], source))
            continue
        try:
            env, params = jrl.envs.make(env_id)
            observation, action = env.observation_space(params), env.action_space(params)
            source = jrl.envs.entry(env_id).source
            rows.append((env_id, _short_space(observation), _short_space(action), source))
        except Exception as e:  # an env that cannot be built here (missing optional dependency)
            rows.append((env_id, f"({type(e).__name__})", "-", "unavailable"))
    return rows


def _print_table(rows: list[tuple[str, ...]]) -> None:
    """Prints ``rows`` (the first is the header) as columns that fit 100 characters: the ids
    whole, the observation column gives way."""
    id_width = max(len(r[0]) for r in rows)
    limits = (id_width, 100 - id_width - 16 - 11 - 6, 16, 11)
    rows = [tuple(_clip(c, n) for c, n in zip(r, limits)) for r in rows]
    widths = [max(len(r[i]) for r in rows) for i in range(4)]
    for i, r in enumerate(rows):
        print("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip())
        if i == 0:
            print("  ".join("-" * w for w in widths))


def _short_space(space) -> str:
    """A space without its bounds: ``Box(6,) float32``, ``Discrete(3)``, ``Dict(a: ..., ...)``."""
    if isinstance(space, spaces.Box):
        return f"Box{tuple(space.shape)} {np.dtype(space.dtype).name}"
    if isinstance(space, spaces.Dict):
        inner = ", ".join(f"{k}: {_short_space(v)}" for k, v in space.spaces.items())
        return f"Dict({inner})"
    return repr(space)


def _clip(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 3] + "..."


def cmd_agents(args: Sequence[str]) -> int:
    import jrl.agents  # the agent registry: not imported by `jrl --help`

    for name in jrl.agents.names():
        print(f"{name:10s} {jrl.agents.summary(name)}")
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
    p = _run_dir_parser(
        "jrl eval",
        "Evaluate a trained run on fresh, vmapped episodes (normalisers frozen) and "
        "write RUN_DIR/eval.json.",
    )
    p.add_argument("--episodes", type=int, default=100, help="episodes per run (seed)")
    ns = _parse(p, args)
    from jrl.app import api as experiment  # the training stack: not imported by `jrl --help`

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
    from jrl.app import api as experiment  # the training stack: not imported by `jrl --help`
    from jrl.app import render  # as api (and imageio)
    from jrl.envs.host import host_env_of  # as api
    from jrl.run.evaluation import evaluation_env  # as api

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
    from jrl.app import export  # the training stack: not imported by `jrl --help`

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


def cmd_collect(args: Sequence[str]) -> int:
    """``jrl collect RUN_DIR --steps N``: a dataset of the run's policy for offline agents."""
    p = argparse.ArgumentParser(
        prog="jrl collect",
        description="Step fresh envs with a trained run's greedy policy (or, with --epsilon, "
        "that policy mixed with uniformly random actions) and write the transitions to an "
        ".npz dataset for the offline agents (jrl train bc --dataset PATH).",
    )
    p.add_argument("run_dir", help="a run folder written by `jrl train`")
    p.add_argument("--steps", type=int, required=True, help="transitions to collect (all envs)")
    p.add_argument("--out", default=None, help="the .npz file (default: RUN_DIR/dataset.npz)")
    p.add_argument(
        "--epsilon",
        type=float,
        default=0.0,
        help="probability that an action is replaced by a uniformly random one, independently "
        "per env and step (0: the expert's data; e.g. 0.5 for a mixed dataset)",
    )
    p.add_argument("--envs", type=int, default=16, help="envs stepped in parallel")
    p.add_argument("--seed", type=int, default=0, help="seed of the collection's envs and mix")
    p.add_argument("--run", type=int, default=0, help="which run (seed) of the folder acts")
    p.add_argument(
        "--step", type=int, default=None, help="checkpoint (iteration) to load; default: the latest"
    )
    p.add_argument("--quiet", action="store_true", help="no progress lines")
    p.add_argument("--debug", action="store_true", help="show tracebacks on errors")
    p.add_argument("--import", action="append", default=[], metavar="MODULE", help="a plugin")
    ns = _parse(p, args)
    from jrl.app import collect  # the training stack: not imported by `jrl --help`

    compile_cache.enable()
    report = None if ns.quiet else (lambda line: print(line, flush=True))
    try:
        path, meta = collect.collect_run(
            ns.run_dir,
            ns.steps,
            ns.out,
            epsilon=ns.epsilon,
            envs=ns.envs,
            seed=ns.seed,
            run=ns.run,
            step=ns.step,
            report=report,
        )
    except (ValueError, FileNotFoundError, KeyError, TypeError, OSError) as e:
        if ns.debug:
            raise
        raise CLIError(str(e)) from e
    mean = meta["mean_episode_return"]
    print(
        f"{meta['steps']:,} transitions of {meta['agent']} on {meta['env_id']} ({meta['policy']}; "
        f"{meta['episodes']} episodes ended, mean return "
        f"{'-' if mean is None else f'{mean:.2f}'}) -> {path}"
    )
    return 0
