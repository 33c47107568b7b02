"""How the Sebulba runner executes (:class:`SebulbaOptions`) and the checks that refuse, before
anything is written, every option that cannot work with the env, the agent, the config and the
machine (:func:`check_options`, :func:`check_agent`)."""

from __future__ import annotations

import dataclasses
import importlib.util
import sys
from typing import Any

import jax

from jrl.core.normalization import NormalizeObservation, NormalizeReward
from jrl.parts.agent import Agent
from jrl.run import ray_actors
from jrl.run.sebulba.waits import wait_limit

__all__ = [
    "INFERENCE",
    "TRANSFERS",
    "SebulbaOptions",
    "check_agent",
    "check_options",
    "check_processes",
    "parse_actors",
]

TRANSFERS = ("float32", "bfloat16")
INFERENCE_WAIT_MS = 2.0
"""The default of ``inference_wait_ms``."""
MAX_INFERENCE_WAIT_MS = 10_000.0
"""The longest a central-inference batch may wait for more workers (a batching wait, not a
timeout: beyond seconds it only stalls the workers that did send)."""
INFERENCE = ("actor", "learner")
"""Where the policy acts: on each actor's device (``actor``) or batched for every env worker on
the learner's first device (``learner``: SEED RL's central inference,
:mod:`jrl.run.sebulba.inference`)."""


@dataclasses.dataclass(frozen=True)
class SebulbaOptions:
    """How the Sebulba runner executes (see the module docstring)."""

    actor_threads: int = 1  # threads, each with num_envs / actor_threads envs of every run
    queue_size: int = 2  # trajectories an actor may hold ready
    max_staleness: int = 0  # 0: synchronous; k: trajectories acted up to k versions behind
    transfer: str = "float32"  # or "bfloat16"
    pull_batch: int = 0  # EnvPool pull mode: envs per recv, up to a thread's (0: push mode)
    learner_devices: int = 1  # the first devices, data-parallel
    actor_devices: int = 0  # the next devices, one per thread in turn (0: the learner's first)
    actors: str = "threads"  # or "ray:N": N Ray actor processes (jrl.run.ray_actors)
    ray_address: str = ""  # with ray:N, the cluster to join ("": a local Ray for the run)
    plugins: tuple[str, ...] = ()  # modules Ray actor processes import first (jrl.run.plugins)
    inference: str = "actor"  # or "learner": env workers only step envs (SEED RL)
    inference_wait_ms: float = INFERENCE_WAIT_MS  # learner inference: a batch's longest wait

    @property
    def ray_actors(self) -> int:
        """The number of Ray actor processes (0: actor threads)."""
        return parse_actors(self.actors)

    @property
    def num_actors(self) -> int:
        """Actors (threads or processes), each stepping ``num_envs / num_actors`` envs."""
        return self.ray_actors or self.actor_threads

    def _option_checks(self) -> list[tuple[bool, str]]:
        """``(ok, message)`` of every option on its own."""
        return [
            (self.actor_threads >= 1, f"actor_threads must be >= 1, got {self.actor_threads}"),
            (self.queue_size >= 1, f"queue_size must be >= 1, got {self.queue_size}"),
            (self.max_staleness >= 0, f"max_staleness must be >= 0, got {self.max_staleness}"),
            (
                self.transfer in TRANSFERS,
                f"transfer must be one of {TRANSFERS}, got {self.transfer!r}",
            ),
            (
                self.pull_batch >= 0,
                f"pull_batch must be >= 0 (0: push mode), got {self.pull_batch}",
            ),
            (self.learner_devices >= 1, f"devices must be >= 1, got {self.learner_devices}"),
            (self.actor_devices >= 0, f"actor_devices must be >= 0, got {self.actor_devices}"),
            (
                self.inference in INFERENCE,
                f"inference must be one of {INFERENCE}, got {self.inference!r}",
            ),
            (
                0 <= self.inference_wait_ms <= MAX_INFERENCE_WAIT_MS,
                f"inference_wait_ms must be in [0, {MAX_INFERENCE_WAIT_MS:g}], "
                f"got {self.inference_wait_ms}",
            ),
            (
                self.inference == "learner" or self.inference_wait_ms == INFERENCE_WAIT_MS,
                "--inference-wait-ms is for central inference: add --inference learner",
            ),
        ]

    def validate(self, num_envs: int | None = None) -> "SebulbaOptions":
        """Raises ``ValueError`` for the first bad option (with ``num_envs``: also how the envs
        divide among threads); returns ``self``."""
        for ok, message in self._option_checks():
            if not ok:
                raise ValueError(message)
        if self.inference == "learner":
            _check_central_options(self)
        if self.ray_actors:
            _check_ray_options(self)
        elif self.ray_address:
            raise ValueError("--ray-address is for Ray actors: add --actors ray:N")
        if num_envs is None:
            return self
        what = f"actors ({self.actors})" if self.ray_actors else "actor_threads"
        checks = [
            (
                num_envs % (self.num_actors * self.learner_devices) == 0,
                f"num_envs ({num_envs}) must divide among {what} ({self.num_actors}) "
                f"and among the learner's devices ({self.learner_devices})",
            ),
        ]
        per_thread = num_envs // self.num_actors
        if self.pull_batch:  # equal: every recv waits for all of the thread's envs
            checks.append(
                (
                    per_thread % self.pull_batch == 0,
                    f"pull_batch ({self.pull_batch}) must divide the envs of one actor thread "
                    f"({per_thread}: num_envs {num_envs} / actor_threads {self.num_actors})",
                )
            )
        for ok, message in checks:
            if not ok:
                raise ValueError(message)
        return self


def check_processes(options: SebulbaOptions, num_envs: int, processes: int) -> None:
    """The learner of a multi-process run (``jax.distributed``) spans every device of every
    process; each process runs ``options.num_actors`` actors over its ``num_envs / processes``
    envs. Raises ``ValueError`` for what such a run cannot do."""
    if options.pull_batch:
        raise ValueError("EnvPool's pull mode runs in one process: drop --pull-batch")
    if options.actor_devices:
        raise ValueError(
            "--actor-devices is for a one-process run: with several processes the learner spans "
            "every device and each process's actors act on its first device"
        )
    if options.learner_devices != jax.device_count():
        raise ValueError(
            f"a multi-process sebulba learner spans every device ({jax.device_count()} in "
            f"{processes} processes), got --devices {options.learner_devices}"
        )
    if num_envs % (processes * options.num_actors * jax.local_device_count()):
        raise ValueError(
            f"num_envs ({num_envs}) must divide among the {processes} processes, each one's "
            f"{options.num_actors} actors and its {jax.local_device_count()} devices"
        )


def check_options(
    options: SebulbaOptions, host_env: Any, num_envs: int, runs: int, replay: bool = False
) -> None:
    """Raises ``ValueError`` (``ConnectionError`` for a Ray address where nothing answers)
    for the first option the run cannot execute with ``runs`` runs of ``num_envs`` envs of
    ``host_env`` on this machine: the options themselves and how the envs divide
    (:meth:`SebulbaOptions.validate`), pull mode (EnvPool envs, one run, push-mode actors for
    an agent with an actor ``replay``), the devices, a multi-process learner
    (:func:`check_processes`), ``$JRL_SEBULBA_WAIT_S`` and the Ray address
    (:func:`jrl.run.ray_actors.check_address`). ``jrl.app.api.check_runner`` calls it
    before the run folder is made, :func:`run` before it starts."""
    options.validate(num_envs)
    wait_limit()
    if replay and options.inference == "learner":
        raise ValueError(
            "an agent learning from its actors' replay (apex) computes priorities where it "
            "acts: drop --inference learner"
        )
    if replay and (options.learner_devices > 1 or options.pull_batch):
        raise ValueError(
            "an agent learning from its actors' replay (apex) has one learner device and "
            "push-mode actors: drop --devices and --pull-batch"
        )
    if options.pull_batch and not host_env.pull_capable:
        raise ValueError(f"{host_env.id} has no pull mode (EnvPool envs have: envpool:<id>)")
    if options.pull_batch and runs != 1:
        raise ValueError(f"pull mode runs one seed at a time, got {runs} runs")
    processes = jax.process_count()
    if processes > 1:
        check_processes(options, num_envs, processes)
    else:
        devices = jax.devices()
        L = options.learner_devices
        if L + options.actor_devices > len(devices):
            raise ValueError(
                f"{L} learner and {options.actor_devices} actor devices requested, "
                f"{len(devices)} available ({devices[0].platform}); on CPU, XLA_FLAGS="
                "--xla_force_host_platform_device_count=N gives fake devices"
            )
    if options.ray_actors and options.ray_address:
        ray_actors.check_address(options.ray_address)


def parse_actors(text: str) -> int:
    """``"threads"`` -> 0, ``"ray:N"`` -> N (``ValueError`` for anything else)."""
    kind, _, count = str(text).partition(":")
    if kind == "threads" and not count:
        return 0
    if kind == "ray" and count.isdigit() and int(count) >= 1:
        return int(count)
    raise ValueError(
        f"actors must be 'threads' or 'ray:N' with N >= 1 Ray actor processes, got {text!r}"
    )


def _check_central_options(options: SebulbaOptions) -> None:
    """``ValueError`` for what central inference does not combine with."""
    refused = [
        (options.pull_batch != 0, "--pull-batch (EnvPool's pull mode acts on its own thread)"),
        (options.actor_devices != 0, "--actor-devices (it acts on the learner's first device)"),
        (options.transfer != "float32", "--transfer bfloat16 (no parameters leave the learner)"),
    ]
    for bad, what in refused:
        if bad:
            raise ValueError(f"--inference learner does not take {what}")


def _check_ray_options(options: SebulbaOptions) -> None:
    """``ValueError`` for what Ray actors do not combine with, and when Ray is absent."""
    refused = [
        (options.actor_threads != 1, "--actor-threads (each Ray actor is one process)"),
        (options.pull_batch != 0, "--pull-batch (EnvPool's pull mode runs in threads)"),
        (options.actor_devices != 0, "--actor-devices (Ray actors act on their own CPU)"),
    ]
    for bad, what in refused:
        if bad:
            raise ValueError(f"--actors {options.actors} does not take {what}")
    absent = (
        sys.modules["ray"] is None if "ray" in sys.modules else not importlib.util.find_spec("ray")
    )
    if absent:
        raise ValueError(
            f"--actors {options.actors} needs Ray, which is not installed: pip install jrl-jax[ray]"
        )


def check_agent(agent: Agent, built_env: Any) -> None:
    """Refuses what Sebulba cannot run: agents with memory (their acting state would cross
    threads) and training envs with normalisers (their statistics live in a pure env's
    state)."""
    if agent.recurrent is not None:
        raise ValueError(
            "the sebulba runner does not run agents with an acting state (recurrent policies, "
            "OU noise) yet; use the anakin runner"
        )
    env = built_env
    while env is not None:
        if isinstance(env, (NormalizeObservation, NormalizeReward)):
            raise ValueError(
                f"the sebulba runner does not normalise host envs ({type(env).__name__}): set "
                "normalize_observations=False and normalize_rewards=False"
            )
        env = getattr(env, "env", None)
