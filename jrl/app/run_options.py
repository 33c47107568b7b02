"""Run options, the agent's config, and the run record.

:class:`RunOptions` is everything about *how* a run executes, apart from the
agent's config: seeds, a sweep, devices, reports, evaluation, checkpoints,
logs. It is validated once (:meth:`RunOptions.validate`), written to the run
folder's ``config.json`` (the fields in :data:`RECORDED`; the others only
concern one invocation) and read back from it; the CLI parses its fields
straight from the dataclass, docstrings included.

:func:`make_config` is the agent's config of a run: its defaults, the env's preset, then
the fields given (``jrl.train``'s keywords that are not run options, :data:`OPTION_NAMES`).

:class:`RunSpec` is one run's whole record: agent, env, config and options.
``resume``, ``jrl eval`` and ``jrl render`` rebuild the run from it.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import itertools
import json
import typing
from pathlib import Path
from typing import Annotated, Any

import jax
import tyro

import jrl.agents
from jrl import __version__
from jrl.app import sinks
from jrl.app.checkpoint import CheckpointError
from jrl.envs.registry import ENVPOOL_PREFIX, GYMNASIUM_PREFIX
from jrl.parts.agent_config import coerce_field
from jrl.run.pbt import PBT
from jrl.run.sebulba import SebulbaOptions
from jrl.util.names import closest

__all__ = [
    "LAYOUT",
    "OPTION_NAMES",
    "RECORDED",
    "RESERVED_NAMES",
    "RUN_FORMAT_VERSION",
    "RunOptions",
    "RunSpec",
    "make_config",
    "preset_of_host_env",
]

RUN_FORMAT_VERSION = 2
"""Version of the ``run`` record in ``config.json`` (a newer one is refused). 2: per-seed run
keys (``keys``); records of version 1 derive them by splitting one key."""

_Hidden = tyro.conf.Suppress  # set from Python (or by the CLI's own flags), not a CLI option


@dataclasses.dataclass(frozen=True)
class RunOptions:
    """How a run executes (everything but the agent's config)."""

    seeds: int = 1
    """Independent seeds trained together in one compiled program."""
    seed: int = 0
    """Base random seed; run i uses key(seed + i). Every run's seed, seed .. seed + seeds - 1,
    must lie in [-2**31, 2**31 - 1]: the run keys are made from 32-bit integers, beyond which
    seeds would wrap around or share keys."""
    sweep: Annotated[dict[str, tuple[float, ...]], _Hidden] = dataclasses.field(
        default_factory=dict
    )
    """Sweepable config field -> values; every value is trained for every seed, in the same
    compiled program."""
    sweep_zip: Annotated[bool, _Hidden] = False
    """Pair the swept values by position (lists of one length), for jrl.app.search's batches."""
    env_overrides: Annotated[dict[str, Any], _Hidden] = dataclasses.field(default_factory=dict)
    """Env parameters to override (``jrl.envs.make`` keyword arguments)."""
    devices: int | None = None
    """Data-parallel over this many devices (num_envs divisible by it); default: one device, or
    every device of every process in a multi-host run."""
    num_reports: int = 20
    """Progress reports (chunks) over the run."""
    eval_every: int = 0
    """Evaluate the greedy policy on fresh episodes every this many env steps per run (0: never)."""
    eval_episodes: int = 10
    """Episodes per run for each --eval-every evaluation."""
    video_every: int = 0
    """Draw greedy episodes with the env's own render every this many env steps per run, and at
    the end, into OUT/videos/<run>_iter<N>.gif (and TensorBoard, wandb): run 0, or the first run
    of each swept value (0: never; pure-JAX envs that render, anakin runner)."""
    video_episodes: int = 1
    """Episodes in each --video-every video, played one after another."""
    video_format: typing.Literal["gif", "mp4"] = "gif"
    """File format of the --video-every videos (mp4: pip install jrl-jax[video])."""
    checkpoint_every: int = 0
    """Write a checkpoint (the whole train state, every seed) every this many env steps per run,
    at the end of a chunk; 0: only at the end and on Ctrl-C/SIGTERM."""
    plugins: Annotated[tuple[str, ...], tyro.conf.arg(name="import")] = ()
    """Modules to import first, which register envs or agents (jrl.run.plugins; also $JRL_PLUGINS);
    recorded, so resume, eval, render and export import them again."""
    log: tuple[str, ...] = ()
    """Extra metric sinks besides metrics.csv: jsonl, tensorboard (one run per seed in OUT/tb),
    wandb (pip install jrl-jax[wandb]); a resumed run keeps its own."""
    log_every: int = 0
    """Write every run's metrics to the sinks every this many env steps per run (0: every
    iteration); each report's last iteration is always written."""
    keep_checkpoints: int = 3
    """How many checkpoints to keep."""
    stop_at_steps: int | None = None
    """Stop after the chunk reaching this many env steps per run, with a checkpoint (resume
    later)."""
    overwrite: bool = False
    """Replace a run already in the output folder."""
    progress: Annotated[bool, _Hidden] = True
    """Show a live progress line."""
    compile_cache: Annotated[bool | str, _Hidden] = True
    """JAX's persistent compilation cache: True for the default directory, a path for another,
    False to leave JAX's setting alone."""
    pbt: Annotated[PBT | None, _Hidden] = None
    """Population-based training of the runs (jrl.run.pbt.PBT; the CLI's --pbt flags); None: off."""
    runner: typing.Literal["anakin", "sebulba"] = "anakin"
    """anakin: the env inside the compiled program (pure-JAX envs); sebulba: actor threads
    stepping host envs (gymnasium:<id>, envpool:<id>) and a learner on its device(s)."""
    actor_threads: int = 1
    """sebulba: actor threads, each stepping num_envs / actor_threads envs of every run."""
    queue_size: int = 2
    """sebulba: trajectories each actor thread may hold ready for the learner."""
    max_staleness: int = 0
    """sebulba: 0 runs actors and learner in turn (synchronous, reproducible); k lets actors act
    with parameters up to k updates old (asynchronous)."""
    transfer: typing.Literal["float32", "bfloat16"] = "float32"
    """sebulba: send trajectories and parameters as bfloat16 (uint8 observations stay uint8)."""
    pull_batch: int = 0
    """sebulba with envpool:<id>: act on the first pull_batch envs that are ready (EnvPool's
    async send/recv; one seed; it must divide the envs of one actor thread); 0: step all envs
    together."""
    actor_devices: int = 0
    """sebulba: devices for the actor threads after the learner's --devices (0: actors use the
    learner's first device)."""
    actors: str = "threads"
    """sebulba: where the actors run: threads (--actor-threads of them) or ray:N (N Ray actor
    processes with their own envs and CPU inference; pip install jrl-jax[ray])."""
    ray_address: str = ""
    """sebulba with --actors ray:N: the Ray cluster to join: HOST:PORT of its head's GCS (e.g.
    10.0.0.1:6379), ray://HOST:PORT or auto; empty: a local Ray started and shut down with the
    run (and ended with it if the run is killed). Checked before anything is written: a host
    name that does not resolve, or nothing accepting a connection within 10 s, stops the run
    (exit 2), as does an address where no Ray answers within 2 minutes."""
    inference: typing.Literal["actor", "learner"] = "actor"
    """sebulba: where the policy acts: actor (on each actor's device) or learner (SEED RL: the
    actor threads or Ray processes only step envs; the learner's first device acts for all of
    them in batches, and no trajectory or parameter crosses between processes)."""
    inference_wait_ms: float = 2.0
    """sebulba with --inference learner: the longest a batch of observations waits for the
    other env workers' before the policy acts on it (it acts at once when all have sent)."""
    keys: Annotated[str, _Hidden] = "per_seed"
    """How run keys derive from the seeds: "per_seed" (run i uses key(seed + i)) or "split"
    (split(key(seed), seeds)[i]: run folders written before per-seed keys)."""

    def validate(self, has_out: bool = True) -> "RunOptions":
        """Raises ``ValueError`` for the first out-of-range option; returns ``self``."""
        if self.keys not in ("per_seed", "split"):
            raise ValueError(f"keys must be 'per_seed' or 'split', got {self.keys!r}")
        for name in _whole_number_fields():
            value = getattr(self, name)
            if value is not None and (isinstance(value, bool) or not float(value).is_integer()):
                raise ValueError(f"{name} must be a whole number, got {value!r}")
        for ok, message in self._range_checks(has_out):
            if not ok:
                raise ValueError(message)
        for name, values in self.sweep.items():
            if not values:
                raise ValueError(f"sweep over {name!r} has no values")
        if self.pbt is not None:
            self.pbt.validate()
        self._check_runner()
        if self.log:
            sinks.check_names(["csv", *self.log])
        return self

    def _range_checks(self, has_out: bool) -> list[tuple[bool, str]]:
        """``(holds, message)`` of each range check of :meth:`validate`, in order."""
        last_seed = int(self.seed) + (int(self.seeds) - 1 if self.keys == "per_seed" else 0)
        return [
            (int(self.seeds) >= 1, f"seeds must be >= 1, got {self.seeds}"),
            (
                SEED_MIN <= int(self.seed) <= SEED_MAX,
                f"seed must lie in [{SEED_MIN}, {SEED_MAX}] (run keys are made from 32-bit "
                f"integers), got {self.seed}",
            ),
            (
                last_seed <= SEED_MAX,
                f"the last run's seed, seed + seeds - 1 = {last_seed}, must be <= {SEED_MAX} "
                "(run keys are made from 32-bit integers)",
            ),
            (int(self.num_reports) >= 1, f"num_reports must be >= 1, got {self.num_reports}"),
            (
                int(self.checkpoint_every) >= 0,
                f"checkpoint_every must be >= 0 (0: off), got {self.checkpoint_every}",
            ),
            (int(self.eval_every) >= 0, f"eval_every must be >= 0 (0: off), got {self.eval_every}"),
            (
                int(self.log_every) >= 0,
                f"log_every must be >= 0 (0: every iteration), got {self.log_every}",
            ),
            (int(self.eval_episodes) >= 1, f"eval_episodes must be >= 1, got {self.eval_episodes}"),
            (
                int(self.video_every) >= 0,
                f"video_every must be >= 0 (0: off), got {self.video_every}",
            ),
            (
                int(self.video_episodes) >= 1,
                f"video_episodes must be >= 1, got {self.video_episodes}",
            ),
            (
                int(self.keep_checkpoints) >= 1,
                f"keep_checkpoints must be >= 1, got {self.keep_checkpoints}",
            ),
            (
                self.stop_at_steps is None or int(self.stop_at_steps) >= 0,
                f"stop_at_steps must be >= 0, got {self.stop_at_steps}",
            ),
            (
                has_out
                or (int(self.checkpoint_every) == 0 and not self.log and not self.video_every),
                "checkpoint_every, log and video_every write into the run folder: pass out=DIR",
            ),
        ]

    def _check_runner(self) -> None:
        """Refuses a sebulba option without ``--runner sebulba``, and bad sebulba options."""
        if self.runner not in ("anakin", "sebulba"):
            raise ValueError(f"runner must be 'anakin' or 'sebulba', got {self.runner!r}")
        if self.runner == "anakin":
            default = RunOptions()
            given = [n for n in SEBULBA_OPTIONS if getattr(self, n) != getattr(default, n)]
            if given:
                flag = "--" + given[0].replace("_", "-")
                raise ValueError(f"{flag} is an option of the sebulba runner: add --runner sebulba")
        else:
            self.sebulba().validate()
            if self.pbt is not None:
                raise ValueError("PBT runs in the anakin runner's compiled program, not sebulba")

    def normalized(self) -> "RunOptions":
        """The same options with plain Python types (ints, float tuples, a tuple of sink names)."""
        values = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        for name in _whole_number_fields():
            values[name] = None if values[name] is None else int(values[name])
        values["sweep"] = {k: tuple(float(v) for v in vs) for k, vs in self.sweep.items()}
        values["env_overrides"], values["log"] = dict(self.env_overrides), tuple(self.log)
        values["plugins"] = tuple(str(m) for m in self.plugins)
        values["actors"] = str(values["actors"])  # RayActors(n) -> "ray:n"
        values["inference_wait_ms"] = float(values["inference_wait_ms"])
        return RunOptions(**values)

    def record(self) -> dict[str, Any]:
        """The ``run`` record of ``config.json`` (the :data:`RECORDED` options)."""
        out: dict[str, Any] = {"format_version": RUN_FORMAT_VERSION}
        for name in RECORDED:
            value = getattr(self, name)
            if name in SEBULBA_OPTIONS:  # recorded with "runner"
                continue
            if name in VIDEO_OPTIONS and not self.video_every:  # older records are unchanged
                continue
            if name in ("pbt", "sweep_zip"):  # absent when off: older records are unchanged
                out.update({name: value.record() if name == "pbt" else value} if value else {})
                continue
            if name == "runner":  # absent for anakin: older records are unchanged
                if value != "anakin":
                    out["runner"] = value
                    out["sebulba"] = self._sebulba_record()
                continue
            if name == "sweep":
                value = {k: list(v) for k, v in value.items()}
            out[_RECORD_KEYS.get(name, name)] = list(value) if name in ("log", "plugins") else value
        return out

    def _sebulba_record(self) -> dict[str, Any]:
        default = RunOptions()
        return {
            n: getattr(self, n)
            for n in SEBULBA_OPTIONS
            if n not in NEWER_SEBULBA or getattr(self, n) != getattr(default, n)
        }

    @classmethod
    def from_record(cls, run: dict[str, Any]) -> "RunOptions":
        """The recorded options of a ``run`` record (the others at their defaults; a record
        without ``keys`` was written with the ``"split"`` key derivation)."""
        names = {name: _RECORD_KEYS.get(name, name) for name in RECORDED}
        values = {name: run[key] for name, key in names.items() if key in run}
        if "pbt" in values:
            values["pbt"] = PBT.from_record(values["pbt"])
        values.update(run.get("sebulba", {}))
        return cls(**{"keys": "split", **values}).normalized()

    def sebulba(self):
        """The :class:`jrl.run.sebulba.SebulbaOptions` of these options."""
        fields = {n: getattr(self, n) for n in SEBULBA_OPTIONS}
        fields["actors"] = str(fields["actors"])  # a jrl.run.ray_actors.RayActors, or text
        plugins = tuple(str(m) for m in self.plugins)  # imported by Ray actor processes too
        return SebulbaOptions(learner_devices=int(self.devices or 1), plugins=plugins, **fields)

    def recorded(self) -> dict[str, Any]:
        """The :data:`RECORDED` options by name."""
        return {name: getattr(self, name) for name in RECORDED}

    def changed_from(self, saved: "RunOptions", names) -> list[str]:
        """The options of ``names`` whose values here differ from ``saved`` (both normalized);
        ``devices`` 1 and None (the default: one device) count as equal."""
        out = []
        for name in names:
            mine, theirs = getattr(self, name), getattr(saved, name)
            if name == "devices":
                mine, theirs = mine or 1, theirs or 1
            if mine != theirs:
                out.append(name)
        return out


@functools.cache
def _whole_number_fields() -> tuple[str, ...]:
    """The options declared ``int`` (or ``int | None``)."""
    hints = typing.get_type_hints(RunOptions)
    return tuple(name for name, tp in hints.items() if tp in (int, int | None))


SEED_MIN, SEED_MAX = -(2**31), 2**31 - 1
"""The seeds a run may have (:attr:`RunOptions.seed`): the 32-bit integers its keys are
made from."""
_RECORD_KEYS = {"seeds": "num_seeds", "sweep": "sweep_values"}
"""Names the ``run`` record of ``config.json`` gives some options."""
SEBULBA_OPTIONS = (
    "actor_threads",
    "queue_size",
    "max_staleness",
    "transfer",
    "pull_batch",
    "actor_devices",
    "actors",
    "ray_address",
    "inference",
    "inference_wait_ms",
)
"""The sebulba runner's options (recorded under ``"sebulba"`` for its runs only; those of
:data:`NEWER_SEBULBA` only where they differ from the default)."""
NEWER_SEBULBA = ("inference", "inference_wait_ms")
"""Sebulba options added after runs were recorded without them: recorded only when not at
their defaults, so the records (and fingerprints) of older runs stay what they were."""

VIDEO_OPTIONS = ("video_every", "video_episodes", "video_format")
"""Options added after runs were recorded without them: recorded only when ``video_every`` is
on, so the records (and fingerprints) of other runs stay as they were."""

LAYOUT = ("devices", "actor_threads", "actors")
"""Recorded options that say where a run ran, not what it computes: a checkpoint written on
one device count resumes on another (:mod:`jrl.app.reshard`), and a Sebulba run's actors
spread anew over another number of processes, so they may differ between a run folder's
record and its checkpoints."""

RECORDED = (
    "seeds",
    "seed",
    "sweep",
    "sweep_zip",
    "env_overrides",
    "devices",
    "num_reports",
    "eval_every",
    "eval_episodes",
    *VIDEO_OPTIONS,
    "checkpoint_every",
    "log",
    "log_every",
    "keys",
    "plugins",
    "pbt",
    "runner",
    *SEBULBA_OPTIONS,
)
"""Options that define a run (saved in ``config.json``; a resumed run keeps them)."""

OPTION_NAMES = frozenset(f.name for f in dataclasses.fields(RunOptions))
"""Keywords of ``jrl.train`` and ``resume`` that are run options, not config fields."""
RESERVED_NAMES = OPTION_NAMES | {"env", "out", "options", "agent", "resume", "debug", "quiet"}
"""Names no agent config field may have (run options and ``jrl train``'s own flags)."""


def make_config(agent: str, env_id: str, **overrides: Any):
    """The agent's config: defaults, then the env's preset, then ``overrides``.

    Unknown fields raise ``TypeError`` with close matches; ill-typed values
    raise ``TypeError``; out-of-range values raise ``ValueError``.
    """
    config_cls = jrl.agents.get(agent).config_cls
    fields = {f.name: f for f in dataclasses.fields(config_cls)}
    clash = sorted(set(fields) & RESERVED_NAMES)
    if clash:
        raise TypeError(
            f"{agent}'s config field(s) {clash} have the name of a run option or command-line "
            "option of jrl.train / jrl train; rename them in the config class"
        )
    hints = typing.get_type_hints(config_cls)
    unknown = sorted(set(overrides) - set(fields))
    if unknown:  # suggestions also from the run options, which jrl.train takes by keyword too
        known = [*fields, *OPTION_NAMES]
        hints_txt = "; ".join(
            f"{u!r}" + "".join(f" (did you mean {c}?)" for c in closest(u, known, n=1))
            for u in unknown
        )
        raise TypeError(
            f"unknown {agent} config field(s): {hints_txt}. Fields: {', '.join(sorted(fields))}"
        )
    values = dict(config_cls.PRESETS.get(env_id, preset_of_host_env(config_cls, env_id)))
    values.update({k: coerce_field(fields[k], v, hints) for k, v in overrides.items()})
    config = config_cls(**values)
    config.validate()
    return config


def preset_of_host_env(config_cls, env_id: str) -> dict[str, Any]:
    """A host env (``gymnasium:<id>``, ``envpool:<id>``) without a preset of its own takes the
    preset of the jrl env of the same id (the same task), if there is one, less what the
    Sebulba runner (the one host envs train under) does not do: observation and reward
    normalisation (their statistics live in a pure env's state), which the preset's
    ``normalize_observations`` / ``normalize_rewards`` turn off."""
    for prefix in (GYMNASIUM_PREFIX, ENVPOOL_PREFIX):
        if env_id.startswith(prefix):
            preset = dict(config_cls.PRESETS.get(env_id[len(prefix) :], {}))
            for name in ("normalize_observations", "normalize_rewards"):  # check_agent's refusals
                if preset.get(name):
                    preset[name] = False
            return preset
    return {}


@dataclasses.dataclass
class RunSpec:
    """Everything that defines a run; saved as the run folder's ``config.json`` and read
    back by ``resume``, ``load_run``, ``jrl eval`` and ``jrl render``."""

    agent: str
    env_id: str
    config: Any  # the agent's config dataclass
    options: RunOptions

    @property
    def combos(self) -> list[tuple]:
        """Every combination of swept values (one empty combination without a sweep)."""
        sweep, pick = self.options.sweep, zip if self.options.sweep_zip else itertools.product
        return list(pick(*sweep.values())) if sweep else [()]

    @property
    def run_seeds(self) -> list[int]:
        """``[R]`` the seed of each run (sweep-major): ``seed, seed + 1, ...`` (in run folders
        of the ``"split"`` key derivation, the index ``0, 1, ...`` of the split key)."""
        first = 0 if self.options.keys == "split" else self.options.seed
        return [first + s for _ in self.combos for s in range(self.options.seeds)]

    @property
    def run_sweep(self) -> dict[str, list[float]]:
        """Swept field -> ``[R]`` its value in each run."""
        n = self.options.seeds
        return {
            k: [c[i] for c in self.combos for _ in range(n)]
            for i, k in enumerate(self.options.sweep)
        }

    def keys(self) -> jax.Array:
        """``[R]`` run keys, the same for every swept combination: run i uses ``key(seed + i)``,
        so run i of ``seeds=N`` is the run ``seed + i`` alone (the ``"split"`` derivation of
        older run folders: ``split(key(seed), seeds)[i]``)."""
        if self.options.keys == "split":
            base = jax.random.split(jax.random.key(self.options.seed), self.options.seeds)
        else:
            first = self.options.seed
            base = jax.vmap(jax.random.key)(jax.numpy.arange(first, first + self.options.seeds))
        # without a sweep there is one combination: no concatenate (each jnp call compiles)
        return base if len(self.combos) == 1 else jax.numpy.concatenate([base] * len(self.combos))

    def record(self) -> dict[str, Any]:
        """The whole record, as ``config.json`` holds it."""
        return {
            "agent": self.agent,
            "env_id": self.env_id,
            "seeds": self.run_seeds,
            "sweep": self.run_sweep,
            "config": dataclasses.asdict(self.config),
            "jrl_version": __version__,
            "run": self.options.record(),
        }

    def identity(self) -> dict[str, Any]:
        """What makes two runs the same run: agent, env, every config value and the recorded
        options (seeds, sweep, devices, schedule...), with the run record's format version."""
        return {
            "agent": self.agent,
            "env_id": self.env_id,
            "config": dataclasses.asdict(self.config),
            "run": self.options.record(),
        }

    def fingerprint(self) -> str:
        """sha256 of :meth:`identity` as canonical JSON (checkpoints record it)."""
        text = json.dumps(self.identity(), sort_keys=True, default=str)
        return hashlib.sha256(text.encode()).hexdigest()

    def differences(self, other: "RunSpec", ignore: tuple[str, ...] = ()) -> list[str]:
        """``"field: here X, there Y"`` for every part of :meth:`identity` that differs (but
        the recorded options in ``ignore``, e.g. :data:`LAYOUT`)."""
        out = []
        for part in ("agent", "env_id"):
            if getattr(self, part) != getattr(other, part):
                out.append(f"{part}: {getattr(self, part)!r} vs {getattr(other, part)!r}")
        mine, theirs = dataclasses.asdict(self.config), dataclasses.asdict(other.config)
        for name in sorted(set(mine) | set(theirs)):
            if mine.get(name) != theirs.get(name):
                out.append(f"{name}: {mine.get(name)!r} vs {theirs.get(name)!r}")
        mine, theirs = self.options.recorded(), other.options.recorded()
        out += [
            f"{k}: {mine[k]!r} vs {theirs[k]!r}"
            for k in RECORDED
            if mine[k] != theirs[k] and k not in ignore
        ]
        return out

    def check_sweep(self, overrides: dict[str, Any]) -> None:
        """Refuses a sweep of a field that cannot vary in one program, a field both set and
        swept, or a value that is invalid on its own."""
        sweep, config = self.options.sweep, self.config
        both = sorted(set(sweep) & set(overrides))
        if both:
            raise ValueError(
                f"{both[0]} is both set ({both[0]}={overrides[both[0]]!r}) and swept "
                f"({list(sweep[both[0]])}); give one of them"
            )
        sweepable = jrl.agents.get(self.agent).sweepable
        bad = sorted(set(sweep) - set(sweepable))
        if bad:
            raise ValueError(
                f"cannot sweep {bad} in one program: sweepable fields are {list(sweepable)}"
            )
        if "gamma" in sweep and getattr(config, "normalize_rewards", False):
            raise ValueError(
                "cannot sweep gamma with normalize_rewards: the reward normaliser's discount is "
                "fixed when the env is built; sweep it in separate runs or turn normalize_rewards "
                "off"
            )
        for k, vs in sweep.items():
            for v in vs:  # each value must be valid on its own
                dataclasses.replace(config, **{k: v}).validate()

    def resume_differences(self, agent, env, recorded: dict, overrides: dict) -> list[str]:
        """What a resume call asks that differs from the saved run, one phrase each."""
        diffs = []
        if agent is not None and agent != self.agent:
            diffs.append(f"agent: saved {self.agent!r}, given {agent!r}")
        if env is not None and env != self.env_id:
            diffs.append(f"env: saved {self.env_id!r}, given {env!r}")
        saved_opts = self.options
        given_opts = dataclasses.replace(saved_opts, **recorded).normalized()
        diffs += [
            f"{k}: saved {getattr(saved_opts, k)!r}, given {getattr(given_opts, k)!r}"
            for k in given_opts.changed_from(saved_opts, sorted(recorded))
        ]
        if not diffs and overrides:
            saved = dataclasses.asdict(self.config)
            given = make_config(self.agent, self.env_id, **{**saved, **overrides})
            diffs += [
                f"{k}: saved {getattr(self.config, k)!r}, given {getattr(given, k)!r}"
                for k in sorted(overrides)
                if getattr(given, k) != getattr(self.config, k)
            ]
        return diffs

    @classmethod
    def from_record(cls, record: dict[str, Any], where: Path) -> "RunSpec":
        """Parses a ``config.json`` record (``where`` names it in errors); fields an agent's
        config no longer has (its ``RETIRED_FIELDS``) are ignored, and fields added since the
        record was written (its ``ADDED_FIELDS``) get the values older runs ran with."""
        if not isinstance(record, dict) or not {"agent", "env_id", "config"} <= set(record):
            raise CheckpointError(f"{where} is not a jrl run record (no agent, env_id and config)")
        run = record.get("run")
        if not isinstance(run, dict) or "num_seeds" not in run:
            raise CheckpointError(
                f"{where} was written by an older jrl without a run record; it cannot be "
                "resumed, evaluated or rendered"
            )
        if run.get("format_version", 0) > RUN_FORMAT_VERSION:
            raise CheckpointError(
                f"{where} has run format {run.get('format_version')}, newer than this jrl "
                f"({__version__}) reads; upgrade jrl"
            )
        config_cls = jrl.agents.get(record["agent"]).config_cls
        fields = {k: v for k, v in record["config"].items() if k not in config_cls.RETIRED_FIELDS}
        fields = {**config_cls.ADDED_FIELDS, **fields}
        config = make_config(record["agent"], record["env_id"], **fields)
        return cls(record["agent"], record["env_id"], config, RunOptions.from_record(run))
