"""What the runners (:mod:`jrl.run.anakin`, :mod:`jrl.run.sebulba`) give their callers: the
host callbacks between chunks (:class:`RunHooks`), a :class:`Report` of progress after each
chunk, and the :class:`RunResult` of the whole call."""

from __future__ import annotations

import dataclasses
from typing import Callable, NamedTuple

import numpy as np

from jrl.core.types import PyTree

__all__ = ["Report", "RunHooks", "RunResult"]


@dataclasses.dataclass
class Report:
    """Progress after a chunk (sent to ``on_report``)."""

    iteration: int  # iterations done (per run)
    num_iterations: int  # iterations in the whole run
    env_steps: int  # env steps done per run
    elapsed: float  # seconds since the first chunk started (compile excluded)
    steps_per_second: float  # env steps per second summed over all runs
    metrics: dict[str, np.ndarray]  # latest value of each metric, [R]
    start_iteration: int = 0  # where this call started (a resumed run)

    @property
    def eta(self) -> float:
        """Seconds left, extrapolated from the rate so far."""
        done = max(self.iteration - self.start_iteration, 1)
        return self.elapsed * (self.num_iterations - self.iteration) / done


@dataclasses.dataclass
class RunResult:
    """Histories and final state of R runs executed together."""

    metrics: dict[str, np.ndarray]  # each [R, num_iterations], one value per iteration
    final_state: PyTree  # the stacked train states, leading axis [R] (device 0's view when sharded)
    compile_seconds: float  # time to compile the chunk program(s)
    run_seconds: float  # time executing chunks (excludes compile)
    env_steps_per_run: int  # env steps per run done by this call
    num_runs: int
    sharded_state: PyTree = (
        None  # with a mesh: the full state, leading axes [D, R] (what a resume needs)
    )
    # iterations done per run at the end (start_iteration included; < num_iterations if stopped)
    iterations: int = 0

    @property
    def steps_per_second(self) -> float:
        """Env steps per second summed over the R runs."""
        return self.env_steps_per_run * self.num_runs / max(self.run_seconds, 1e-9)


class RunHooks(NamedTuple):
    """Host callbacks of a runner's ``run`` (:func:`jrl.run.anakin.run`); each may be None.

    - ``on_chunk(states, iterations_done, chunk_metrics)`` after each chunk, before the
      next one (which donates ``states``): for checkpoints and checks; an exception it
      raises stops the run. ``chunk_metrics`` are host arrays ``[chunk_length, R]``.
    - ``on_report(report)`` after ``on_chunk``, with a :class:`Report` for progress.
    - ``should_stop()`` polled before each chunk; True ends the run early (the result
      then covers the chunks done: ``RunResult.iterations``).
    """

    on_chunk: Callable[[PyTree, int, dict[str, np.ndarray]], None] | None = None
    on_report: Callable[[Report], None] | None = None
    should_stop: Callable[[], bool] | None = None
