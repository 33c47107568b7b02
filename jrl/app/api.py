"""Experiments: ``jrl.train``, ``resume``, and trained runs loaded back.

``train("ppo", "CartPole-v1", seeds=8, learning_rate=3e-4)`` builds the env
and agent, runs every seed (and every swept hyperparameter value) in one
compiled program with the Anakin runner, shows progress, and returns a
:class:`~jrl.app.result.TrainResult`; with ``out=DIR`` it also writes a run
folder (:mod:`jrl.app.run_folder`). Keyword arguments that name a
:class:`~jrl.app.run_options.RunOptions` field (``seed``, ``sweep``, ``eval_every``,
``checkpoint_every``, ``log``...) are run options; every other keyword is a
config field of the agent.

``resume(DIR)`` continues an interrupted run exactly; ``load_run(DIR)`` and
``evaluate_run(DIR)`` give back its policies (``jrl eval``, ``jrl render``).
SIGINT/SIGTERM during training finish the current chunk, write a checkpoint
and raise :class:`TrainingInterrupted`; a NaN/inf loss or parameter stops
training at the chunk where it appears (:class:`NonFiniteError`). The
execution itself is :mod:`jrl.app.execution`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
from pathlib import Path
from typing import Any

import jax
import numpy as np

import jrl.agents
import jrl.envs
from jrl.app import checkpoint, compile_cache, peers, run_folder, videos
from jrl.app import execution as training
from jrl.app.checkpoint import CheckpointError
from jrl.app.chunk_work import make_evaluator
from jrl.app.execution import NonFiniteError, TrainingInterrupted
from jrl.app.result import RETURN_KEY, TrainResult, sweep_groups
from jrl.app.run_folder import RUN_FILES, read_spec
from jrl.app.run_options import (
    LAYOUT,
    OPTION_NAMES,
    RECORDED,
    RunOptions,
    RunSpec,
    make_config,
)
from jrl.core.multi_agent_env import is_multi_agent
from jrl.core.two_player_env import is_two_player
from jrl.envs.host import host_env_of
from jrl.parts import torsos
from jrl.parts.agent_config import check
from jrl.run import anakin, evaluation, pbt, plugins, sebulba
from jrl.run.sebulba import ActorError

__all__ = [
    "ActorError",
    "OPTION_NAMES",
    "RETURN_KEY",
    "RUN_FILES",
    "CheckpointError",
    "LoadedRun",
    "NonFiniteError",
    "RunOptions",
    "RunSpec",
    "TrainResult",
    "TrainingInterrupted",
    "check_env",
    "check_runner",
    "evaluate_run",
    "load_run",
    "make_config",
    "read_spec",
    "resume",
    "train",
]


def check_env(spec: RunSpec) -> None:
    """``ValueError`` (before any folder is touched) when the run's agent cannot act in its
    env's action space (:func:`jrl.agents.check_action_space`, naming the agents that can) or
    its config refuses the space (``env_checks``, e.g. a Box with infinite bounds), or when
    the agent trains on another kind of env (single-agent, two-player game, team of agents:
    :func:`jrl.agents.check_kind`)."""
    env, env_params = jrl.envs.make(spec.env_id, **spec.options.env_overrides)
    check_runner(spec, env)
    space = env.action_space(env_params)
    kind = "game" if is_two_player(env) else "team" if is_multi_agent(env) else "single"
    jrl.agents.check_kind(spec.agent, kind, spec.env_id)
    jrl.agents.check_action_space(spec.agent, space, spec.env_id)
    check(spec.config.env_checks(space, spec.agent))
    spec.config.check_env(env, env_params)  # e.g. an offline agent's dataset against the env
    videos.check_videos(spec, env, env_params)  # --video-every: an env that renders


def check_runner(spec: RunSpec, env) -> None:
    """``ValueError`` when the runner cannot run the env or the agent: a host env
    (``gymnasium:``/``envpool:``) needs the Sebulba runner and a pure-JAX env the Anakin one;
    an agent runs on the runners its config's ``RUNNERS`` names (Sebulba: agents that learn
    from on-policy rollouts, and Ape-X), naming those that fit. For the Sebulba runner, every
    check of its options against the env, the config and the machine
    (:func:`jrl.run.sebulba.check_options`: how the envs divide, pull mode, devices, the Ray
    address; ``ConnectionError`` where nothing answers at that address) runs here, before any
    run folder is made."""
    host = host_env_of(env)
    on_host = host is not None
    most, devices = type(spec.config).MAX_DEVICES, spec.options.devices or 1
    if most is not None and devices > most:
        raise ValueError(
            f"{spec.agent}'s learner runs on at most {most} device(s): drop --devices ({devices})"
        )
    if on_host and spec.options.runner != "sebulba":
        raise ValueError(
            f"{spec.env_id} is a host environment (it steps outside the compiled program): "
            "train it with --runner sebulba"
        )
    if spec.options.runner != "sebulba":
        if spec.options.runner not in type(spec.config).RUNNERS:
            raise ValueError(
                f"{spec.agent} runs on the sebulba runner only: train it on a host env "
                f"(gymnasium:<id>) with --runner sebulba"
            )
        return
    if not on_host:
        raise ValueError(
            f"the sebulba runner steps host environments (gymnasium:<id>, envpool:<id>); "
            f"{spec.env_id} is a pure-JAX env: train it with the anakin runner (the default)"
        )
    fits = lambda cls: (
        "sebulba" in cls.RUNNERS
        and not (getattr(cls, "TURN_BASED", False) or getattr(cls, "MULTI_AGENT", False))
    )
    if not fits(type(spec.config)):
        able = [n for n in jrl.agents.names() if fits(jrl.agents.get(n).config_cls)]
        raise ValueError(
            f"the sebulba runner runs agents that learn from on-policy rollouts or from their "
            f"actors' replay ({', '.join(able)}); {spec.agent} does not: train it with the "
            "anakin runner"
        )
    options = spec.options.sebulba()
    replay = False
    if options.pull_batch or options.inference == "learner":  # refused for apex's replay
        built = jrl.agents.get(spec.agent).build(spec.config, env, env.default_params)
        replay = built.replay is not None
    sebulba.check_options(options, host, spec.config.num_envs, len(spec.run_seeds), replay)


def _split_options(kwargs: dict[str, Any], options: RunOptions | None) -> tuple[RunOptions, dict]:
    """``(run options, config overrides)`` from :func:`train`'s keywords (``sweep=None`` and
    ``env_overrides=None`` mean none)."""
    given = {k: kwargs.pop(k) for k in list(kwargs) if k in OPTION_NAMES}
    for name in ("sweep", "env_overrides"):
        if name in given and given[name] is None:
            given[name] = {}
    opts = dataclasses.replace(options or RunOptions(), **given)
    return opts, kwargs


def _start(options: RunOptions) -> None:
    """What every entry point does first (before any folder is touched)."""
    if options.compile_cache:
        compile_cache.enable(None if options.compile_cache is True else options.compile_cache)
    anakin.compiler_options()  # a bad JRL_CPU_OPT_LEVEL fails here


def train(
    agent: str,
    env: str = "CartPole-v1",
    seeds: int | None = None,
    *,
    out: str | os.PathLike | None = None,
    options: RunOptions | None = None,
    **kwargs: Any,
) -> TrainResult:
    """Trains ``agent`` on ``env`` for ``seeds`` seeds in one compiled program.

    Args:
      agent: a registered agent name (``jrl.agents.names()``), e.g. "ppo".
      env: a registered env id (``jrl.envs.names()``), "gymnax:<name>", or an
        :class:`~jrl.core.env.Environment` object (or ``(env, params)``), registered for this
        process under its ``id``; a run folder of an env object is resumed, evaluated or
        rendered in a process that registers the env again (a plugin: :mod:`jrl.run.plugins`).
      seeds: independent runs per swept value (vmapped); default ``options.seeds`` (1).
      out: run folder to write (refuses a folder holding another run unless
        ``overwrite``, which first removes that run's files).
      options: run options (:class:`~jrl.app.run_options.RunOptions`); keywords naming
        one of its fields override it: ``seed`` (run i uses ``split(key(seed),
        seeds)[i]``), ``sweep`` (sweepable config field -> values, every value
        trained for every seed in the same program), ``devices`` (data-parallel
        over this many devices, pmap semantics; default one, or every device of
        every process after :func:`jrl.app.distributed.initialize`, where only
        process 0 writes ``out``), ``num_reports``, ``eval_every`` and
        ``eval_episodes`` (greedy evaluation on fresh episodes, logged as
        ``eval/episode_return``), ``video_every``, ``video_episodes`` and ``video_format``
        (videos of greedy episodes in ``out/videos`` and the sinks: :mod:`jrl.app.videos`),
        ``checkpoint_every`` and ``keep_checkpoints``,
        ``log`` ("jsonl", "tensorboard", "wandb"), ``stop_at_steps`` (stop as on
        SIGINT after the chunk reaching this many env steps per run),
        ``env_overrides``, ``progress``, ``compile_cache``, ``overwrite``, ``plugins``
        (modules that register envs or agents, imported first and recorded: :mod:`jrl.run.plugins`).
      **kwargs: the run options above, and config fields, e.g.
        ``total_steps=100_000, learning_rate=3e-4``; ``torso`` may also be a flax module
        factory (see :data:`jrl.parts.torsos.TORSOS`), registered under its ``__name__``.

    Raises:
      TrainingInterrupted: on SIGINT/SIGTERM (after the current chunk, with a
        checkpoint in ``out``) or at ``stop_at_steps``.
      NonFiniteError: a loss or parameter became NaN/inf (the last good
        checkpoint is kept).
    """
    opts, overrides = _train_options(dict(kwargs), options, seeds)
    _start(opts)
    env, object_overrides = jrl.envs.register_object(env)
    if object_overrides:
        opts = dataclasses.replace(opts, env_overrides={**object_overrides, **opts.env_overrides})
    opts = opts.validate(has_out=out is not None).normalized()
    if opts.devices is None and jax.process_count() > 1:
        opts = dataclasses.replace(opts, devices=jax.device_count())
    if opts.devices is not None:  # too many devices: refused before any folder is looked at
        anakin.make_mesh(opts.devices)
    return _train_into(_checked_spec(agent, env, opts, overrides), _common_folder(out))


def _train_into(spec: RunSpec, out_path: Path | None) -> TrainResult:
    """:func:`train`'s run of ``spec`` into ``out_path`` (None: no run folder)."""
    if out_path is None:
        return training.execute(spec, None)
    with contextlib.ExitStack() as held:  # process 0 holds the run folder's lock
        with peers.agreement("start the run"):  # the others stop too when process 0 refuses
            if jax.process_index() == 0:
                held.enter_context(run_folder.RunLock(out_path, quiet=not spec.options.progress))
                run_folder.check_out_dir(out_path, spec.options.overwrite)
        return training.execute(spec, out_path)


def _common_folder(out: str | os.PathLike | None) -> Path | None:
    """The run folder, the same one in every process of a multi-process run (process 0 writes
    its files and every process its own blocks of the checkpoints): a ``ValueError`` when the
    processes were given different ones."""
    group = peers.group()
    if out is None and group is None:
        return None
    # as given, not made absolute: hosts may start in different working directories
    given = "" if out is None else os.path.normpath(out)
    folders = [given] if group is None else group.gather("the run folder", given)
    for p, folder in enumerate(folders):
        if folder != folders[0]:
            names = [f or "no folder" for f in (folders[0], folder)]
            raise ValueError(
                f"every process of a run writes one run folder, on a filesystem they share: "
                f"process 0 was given {names[0]}, process {p} {names[1]}"
            )
    return Path(out) if out is not None else None


def _train_options(
    kwargs: dict[str, Any], options: RunOptions | None, seeds: int | None
) -> tuple[RunOptions, dict]:
    """:func:`train`'s ``(run options, config overrides)``, its plugins imported; a flax module
    factory given as ``torso`` is registered under its name."""
    opts, overrides = _split_options(kwargs, options)
    if callable(overrides.get("torso")):  # a flax module factory: registered under its name
        factory = overrides["torso"]
        overrides["torso"] = getattr(factory, "__name__", type(factory).__name__)
        torsos.register_torso(overrides["torso"], factory, overwrite=True)
    if seeds is not None:
        opts = dataclasses.replace(opts, seeds=seeds)
    opts = dataclasses.replace(
        opts, plugins=plugins.load([*opts.plugins, *plugins.from_environment()])
    )
    return opts, overrides


def _checked_spec(agent: str, env: str, opts: RunOptions, overrides: dict) -> RunSpec:
    """The run's spec, its sweep, PBT settings and env checked (before any folder is
    touched)."""
    spec = RunSpec(agent, env, make_config(agent, env, **overrides), opts)
    spec.check_sweep(overrides)
    if opts.pbt is not None:
        sweepable = jrl.agents.get(agent).sweepable
        checked = pbt.check_pbt(opts.pbt, sweepable, opts.sweep, len(spec.run_seeds))
        spec.options = dataclasses.replace(opts, pbt=checked)
    check_env(spec)
    return spec


def resume(
    run_dir: str | os.PathLike,
    *,
    step: int | None = None,
    agent: str | None = None,
    env: str | None = None,
    **kwargs: Any,
) -> TrainResult:
    """Continues the run in ``run_dir`` from its latest checkpoint (or ``step``).

    The run goes on with the saved configuration, seeds, sweep and chunk
    schedule, so it ends with the same parameters and metrics, bit for bit,
    as the run would have uninterrupted. Run options that concern this
    invocation only (``progress``, ``compile_cache``, ``keep_checkpoints``,
    ``stop_at_steps``) may be given; ``agent``, ``env``, recorded run options
    and config fields, when given, must equal the saved ones (a
    :class:`~jrl.app.checkpoint.CheckpointError` names what differs). Nothing in
    the folder changes before the checkpoint has loaded and checked.

    ``devices`` may differ: an Anakin run resumes on the device count of its
    checkpoint by default (in a multi-process run: every device of every
    process), and on another one when given, its state moved onto it
    (:mod:`jrl.app.reshard`; then equal to the uninterrupted run up to float
    rounding, not bit for bit).
    """
    run_dir = Path(run_dir)
    _common_folder(run_dir)  # every process of a multi-process run resumes the same folder
    # every process reads the folder; one that cannot stops them all (a folder a host does
    # not see), and all take the checkpoint process 0 chose (a shared filesystem may lag)
    with peers.agreement("read the run folder"):
        spec = read_spec(run_dir)
        given, overrides = _split_options(dict(kwargs), None)
        if given.overwrite:
            raise TypeError("resume continues the run in its own folder: overwrite does not apply")
        step = _common_step(run_dir, step)
        invocation = {
            k: getattr(given, k)
            for k in ("progress", "compile_cache", "keep_checkpoints", "stop_at_steps")
        }
        opts = dataclasses.replace(spec.options, **invocation)
        _start(opts)
        record = checkpoint.record(run_dir, step)  # its layout, which the resume starts from
        devices = _resumed_devices(run_dir, spec, kwargs.get("devices"), record)
        opts = dataclasses.replace(opts, devices=devices, **_resumed_actors(run_dir, spec, record))
        opts.validate()
        recorded = {k: kwargs[k] for k in kwargs if k in RECORDED and k not in LAYOUT}
        diffs = spec.resume_differences(agent, env, recorded, overrides)
        if diffs:
            raise CheckpointError(
                f"{run_dir} holds a different run; --resume continues the saved one: "
                + "; ".join(diffs)
            )
    spec = dataclasses.replace(spec, options=opts)
    with contextlib.ExitStack() as held:  # process 0 holds the run folder's lock
        with peers.agreement("resume the run"):
            if jax.process_index() == 0:
                held.enter_context(run_folder.RunLock(run_dir, quiet=not opts.progress))
        return training.execute(spec, run_dir, step, resuming=True)


def _common_step(run_dir: Path, step: int | None) -> int | None:
    """The checkpoint to resume: ``step``, or the latest one; in a multi-process run the one
    process 0 sees (every process reads the same one, though a shared filesystem may show a
    new step to one host before another)."""
    group = peers.group()
    if group is None:
        return step
    if step is None:
        step = (checkpoint.steps(run_dir) or [None])[-1]
    return group.gather("the checkpoint to resume", step)[0]


def _resumed_devices(
    run_dir: Path, spec: RunSpec, given: int | None, record: dict | None
) -> int | None:
    """The device count a resume runs on: ``given``; else every device of a multi-process
    run; else the count its checkpoint (``record``) was written on (a resharded run's may
    differ from the folder's record), which this process must have."""
    saved = (record or {}).get("run", {}).get("devices", spec.options.devices)
    if given is not None:  # 1 and None (no device axis) are one device: no change
        return saved if int(given) == (saved or 1) else int(given)
    if jax.process_count() > 1:
        return jax.device_count()
    if saved is not None and saved > jax.device_count():
        raise CheckpointError(
            f"{run_dir}'s checkpoint was written on {saved} devices and this process has "
            f"{jax.device_count()}: resume with --devices N (N <= {jax.device_count()}, "
            "dividing num_envs) to move its state onto N devices"
        )
    return saved


def _resumed_actors(run_dir: Path, spec: RunSpec, record: dict | None) -> dict[str, Any]:
    """A Sebulba run resumed on another number of processes keeps its actors (each with its
    envs and their saved host envs, by global index) and spreads them anew: P x A actors
    on P' processes are A' = P x A / P' per process. The options that say so (on the same
    count, the checkpoint's own)."""
    before, now = (record or {}).get("processes", 1), jax.process_count()
    if spec.options.runner != "sebulba":
        return {}
    saved = spec.options
    if record and isinstance(record.get("run"), dict):  # the layout it was checkpointed on
        saved = RunSpec.from_record({k: record.get(k) for k in RUN_PARTS}, run_dir).options
    if before == now:  # as the checkpoint ran (an earlier resume may have spread them anew)
        return {"actors": saved.actors, "actor_threads": saved.actor_threads}
    per = saved.sebulba().num_actors
    total = per * before
    if total % now:
        raise CheckpointError(
            f"{run_dir} was checkpointed with {total} actors ({before} processes x {per}), "
            f"which cannot divide among {now} processes: resume on a number of processes that "
            f"divides {total}"
        )
    if saved.sebulba().ray_actors:
        return {"actors": f"ray:{total // now}", "actor_threads": saved.actor_threads}
    return {"actor_threads": total // now}


RUN_PARTS = ("agent", "env_id", "config", "run")
"""The parts of a checkpoint's record that describe its run (:meth:`RunSpec.from_record`)."""


@dataclasses.dataclass
class LoadedRun:
    """A trained run folder loaded back: its spec, the built experiment and the
    train states of every run at a checkpoint (``[R, ...]``, device 0's view)."""

    spec: RunSpec
    built: Any
    state: Any
    step: int
    checkpoint: Any

    def observation_spec(self):
        """One observation of the run's env as the env produces it (``jax.ShapeDtypeStruct``
        leaves, no batch axis): what :meth:`policy` takes (see
        :func:`jrl.run.evaluation.observation_spec`)."""
        on_host = host_env_of(self.built.env) is not None
        return evaluation.observation_spec(self.built.env, self.built.env_params, on_host)

    def policy(self, run: int = 0, greedy: bool = True):
        """Run ``run``'s evaluation policy (frozen normalisers; ``greedy=False``: the behaviour
        policy), on one observation or a batch (:func:`jrl.run.evaluation.batch_optional`)::

            policy(obs [...], key=None) -> action [...]
            policy(obs [B, ...], key=None) -> actions [B, ...]

        ``obs`` is the env's own observation (:meth:`observation_spec`); ``key`` (default
        ``key(0)``) only matters for a stochastic policy. A policy with memory is a
        :class:`~jrl.run.evaluation.StatefulPolicy`: ``initial_state(num=None)`` (one episode's
        state, or ``[num, ...]``) and ``step(state, obs, key=None) -> (action, state)``."""
        if not 0 <= run < len(self.spec.run_seeds):
            raise ValueError(f"run must lie in [0, {len(self.spec.run_seeds)}), got {run}")
        one = jax.tree.map(lambda x: x[run], self.state)
        policy = evaluation.run_policy(
            self.built.agent, self.built.env, one.agent_state, one.env_state, greedy
        )
        return evaluation.batch_optional(policy, self.observation_spec())


def load_run(run_dir: str | os.PathLike, step: int | None = None) -> LoadedRun:
    """Loads a run folder's checkpoint (default: the latest) for evaluation or rendering."""
    run_dir = Path(run_dir)
    spec = run_folder.read_spec(run_dir)
    # the device count of the checkpoint (a run resumed on another count differs from its record)
    devices = (checkpoint.record(run_dir, step) or {}).get("run", {}).get("devices")
    if devices != spec.options.devices and spec.options.runner == "anakin":
        spec = dataclasses.replace(spec, options=dataclasses.replace(spec.options, devices=devices))
    build = jrl.agents.get(spec.agent).build
    env_obj, env_params = jrl.envs.make(spec.env_id, **spec.options.env_overrides)
    built = build(spec.config, env_obj, env_params, num_devices=spec.options.devices or 1)
    like = training.abstract_states(spec, built)
    ck = checkpoint.load(run_dir, like, step, step_flag="--step")
    run_folder.check_checkpoint_run(ck.meta, spec, ck.path)  # a checkpoint of another run
    state = training.one_view(spec, ck.state)
    return LoadedRun(spec, built, state, ck.step, ck)


def _iqm(sorted_values: np.ndarray) -> float:
    """Interquartile mean of sorted values (the middle half; all of them when fewer than 4)."""
    q = len(sorted_values) // 4
    middle = sorted_values[q : len(sorted_values) - q]
    return float(middle.mean() if len(middle) else sorted_values.mean())


def _evaluate_games(loaded: LoadedRun, games: int, seed: int) -> dict[str, Any]:
    """:func:`evaluate_run` of a two-player game: ``games`` games (half as first player)
    of every run against each baseline opponent
    (:func:`jrl.agents.search.arena.baseline_players`)."""
    # the tree-search family (and mctx, about 0.3 s to import) only for a two-player game
    from jrl.agents.search import arena as game_eval

    if games < 2 or games % 2:
        raise ValueError(f"a game evaluation plays an even number of games >= 2, got {games}")
    built, spec = loaded.built, loaded.spec
    env = evaluation.evaluation_env(built.env)  # the unbatched env the training env steps
    opponents = game_eval.baseline_players(env, built.env_params)
    key = jax.random.key(seed)
    runs = len(spec.run_seeds)
    report: dict[str, Any] = {}
    for name, opponent in opponents.items():

        def one(agent_state, k, opponent=opponent):
            return game_eval.play_games(
                env, built.env_params, built.player(agent_state), opponent, games, k
            )

        k = jax.random.fold_in(key, len(report))
        outcome, a_first = jax.device_get(
            jax.jit(jax.vmap(one))(loaded.state.agent_state, jax.random.split(k, runs))
        )
        report[name] = {
            **game_eval.game_report(outcome, a_first),
            "runs": [game_eval.game_report(outcome[r], a_first[r]) for r in range(runs)],
        }
    return {
        "agent": spec.agent,
        "env_id": spec.env_id,
        "checkpoint_iteration": loaded.step,
        "policy": "search",
        "games_per_run": games,
        "seed": seed,
        "run_seeds": list(spec.run_seeds),
        "opponents": report,
    }


def evaluate_run(
    run_dir: str | os.PathLike,
    episodes: int = 100,
    greedy: bool = True,
    seed: int = 0,
    step: int | None = None,
) -> dict[str, Any]:
    """Evaluates every run of a run folder on ``episodes`` fresh episodes each
    (vmapped) and returns the statistics that ``jrl eval`` prints and writes."""
    if int(episodes) < 1:
        raise ValueError(f"episodes must be >= 1, got {episodes}")
    loaded = load_run(run_dir, step)
    if loaded.built.player is not None:
        return _evaluate_games(loaded, int(episodes), int(seed))
    returns, lengths = jax.device_get(
        make_evaluator(loaded.built, int(episodes), greedy)(loaded.state, jax.random.key(int(seed)))
    )
    returns = np.asarray(returns, np.float64)
    return _returns_report(loaded, returns, lengths, int(episodes), greedy, int(seed))


def _returns_report(
    loaded: LoadedRun, returns: np.ndarray, lengths, episodes: int, greedy: bool, seed: int
) -> dict[str, Any]:
    """:func:`evaluate_run`'s statistics of ``returns`` ``[R, episodes]``."""
    flat = np.sort(returns.reshape(-1))
    iqm = _iqm(flat)
    spec = loaded.spec
    groups = [
        {
            "sweep": label,
            "runs": idx.tolist(),
            "mean": float(returns[idx].mean()),
            "std": float(returns[idx].std()),
            "iqm": _iqm(np.sort(returns[idx].reshape(-1))),
        }
        for label, idx in sweep_groups(spec.run_sweep, returns.shape[0])
        if label
    ]
    return {
        "agent": spec.agent,
        "env_id": spec.env_id,
        "checkpoint_iteration": loaded.step,
        "policy": "greedy" if greedy else "stochastic",
        "episodes_per_run": episodes,
        "seed": seed,
        "mean": float(flat.mean()),
        "std": float(flat.std()),
        "median": float(np.median(flat)),
        "iqm": iqm,
        "min": float(flat.min()),
        "max": float(flat.max()),
        "mean_length": float(np.mean(lengths)),
        "runs": [
            {
                "run": r,
                "seed": spec.run_seeds[r],
                **{k: v[r] for k, v in spec.run_sweep.items()},
                "mean": float(returns[r].mean()),
                "std": float(returns[r].std()),
            }
            for r in range(returns.shape[0])
        ],
        "sweep_groups": groups,  # per combination of swept values (empty without a sweep)
        "returns": returns.tolist(),
    }
