"""The Anakin runner: the whole training loop compiled on the device.

``run`` executes an :class:`~jrl.run.loops.Algorithm` for R runs at once (seeds,
or seeds x hyperparameter values) in one compiled program:
``jit(scan(vmap(step)))`` over a chunk of iterations, called once per chunk
so the host can report progress between chunks. Runs are initialised with
``lax.map`` (sequentially, *not* vmapped): vmapping a network init that uses
the orthogonal initialiser (batched QR) can hang on jax 0.10 CPU.

With ``mesh`` (a 1-D mesh over the device axis :data:`jrl.core.parallel.AXIS`)
the same program runs data-parallel with pmap semantics: ``shard_map`` over
the devices, each device stepping its share of the envs, gradients and
statistics all-reduced by :mod:`jrl.core.parallel` (the algorithm must be built
for that many devices). Every leaf of the sharded train state has a leading
device axis ``[D, R, ...]``; the scan over iterations sits inside the
sharded function, so there is one dispatch (and one host sync) per chunk.
Multi-host: call :func:`jrl.app.distributed.initialize` first; the mesh then
spans the devices of every process.

Without ``mesh``, on a CPU with several devices (one per core:
:func:`jrl.core.parallel.use_cpu_cores`,
which ``jrl train`` calls), the R runs are *spread* over the cores: the states ``[R, ...]``
are split along R over a mesh of local CPU devices (:func:`spread_mesh`, axis
:data:`jrl.core.parallel.SPREAD`), and each device steps its block of runs with the same
program, no collective between them. The arrays keep their global ``[R, ...]`` shapes.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import contextvars
import functools
import math
import os
import time
from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from jrl.core import parallel
from jrl.core.types import PyTree
from jrl.parts import buffers
from jrl.run.algorithm import Algorithm
from jrl.run.placement import (
    first_device,
    make_mesh,
    num_runs,
    place,
    spread_mesh,
    spread_sharding,
)
from jrl.run.reports import Report, RunHooks, RunResult

__all__ = [
    "Report",
    "RunResult",
    "abstract_states",
    "check_memory",
    "chunk_lengths",
    "first_device",
    "init_runs",
    "make_chunk",
    "make_init",
    "make_mesh",
    "num_runs",
    "place",
    "RunHooks",
    "run",
    "set_hparams",
    "spread_mesh",
    "spread_sharding",
]


def set_hparams(
    algorithm: Algorithm, states: PyTree, values: dict[str, Any], sharded: bool = False
) -> PyTree:
    """Sets swept hyperparameters through the algorithm's own hook
    (:attr:`~jrl.run.loops.Algorithm.with_hparams`), vmapped over the run axis: ``values`` maps
    names to ``[R]`` values; ``states`` are stacked ``[R, ...]`` (``[D, R, ...]`` when
    ``sharded``, every device getting the same values)."""
    if not values:
        return states
    values = {k: jnp.asarray(v) for k, v in values.items()}
    hook = jax.vmap(algorithm.with_hparams)
    if sharded:
        hook = jax.vmap(hook, in_axes=(0, None))
    return hook(states, values)


CPU_OPT_LEVEL_ENV = "JRL_CPU_OPT_LEVEL"
"""Environment variable overriding :data:`DEFAULT_CPU_OPT_LEVEL` (0-3; 3 is XLA's own default)."""
DEFAULT_CPU_OPT_LEVEL = 2
"""LLVM optimisation level of the runner's programs on CPU (see :func:`compiler_options`)."""


def compiler_options(platform: str | None = None) -> dict[str, Any] | None:
    """XLA options the runner compiles its programs (init and chunks) with.

    On CPU: ``xla_backend_optimization_level`` 2 instead of XLA's 3
    (``$JRL_CPU_OPT_LEVEL`` overrides it). An RL step's heavy work runs in
    library kernels (matmuls) that the LLVM level does not touch, while level 3
    spends about 20-40% more compile time on the many small fused loops around
    them, for no measured runtime gain (BENCHMARKS.md, "Measurements behind design
    choices"). PPO's and A2C's programs come out bitwise the same as at level 3; DQN's
    differ in the last bits. Level 1 compiles a little faster still but changes PPO's and A2C's
    floats too. Results are deterministic at any level, but not bitwise equal
    across levels. Other platforms: None (XLA's defaults), though a bad
    ``$JRL_CPU_OPT_LEVEL`` is refused there too. ``platform`` defaults to jax's
    default backend.
    """
    raw = os.environ.get(CPU_OPT_LEVEL_ENV, "").strip() or str(DEFAULT_CPU_OPT_LEVEL)
    if raw not in ("0", "1", "2", "3"):  # checked on every platform: a typo never passes silently
        raise ValueError(f"{CPU_OPT_LEVEL_ENV} must be 0, 1, 2 or 3, got {raw!r}")
    if (platform or jax.default_backend()) != "cpu":
        return None
    return {"xla_backend_optimization_level": int(raw)}


def _platform(mesh: Mesh | None) -> str:
    return next(iter(mesh.devices.flat)).platform if mesh is not None else jax.default_backend()


@functools.lru_cache(maxsize=8)
def _stacked_init(init: Callable[[jax.Array], PyTree]):
    """``jit(lax.map(init))`` for one algorithm's ``init``, the same function object for
    every caller, so that the memory check, :func:`abstract_states` and
    :func:`init_runs` trace ``init`` once between them (jax caches a jitted
    function's trace by its identity and argument shapes; a trace of a large
    algorithm takes a few tenths of a second)."""
    return jax.jit(lambda ks: jax.lax.map(init, ks))


def init_runs(algorithm: Algorithm, keys: jax.Array, spread: Mesh | None = None) -> PyTree:
    """One train state per key, stacked ``[R, ...]``; sequential ``lax.map``, not vmap
    (see the module docstring). Compiled with :func:`compiler_options`. With ``spread``
    (:func:`spread_mesh`) each device makes its own block of runs, in parallel, and the
    states come out split over them (:func:`spread_sharding`)."""
    if spread is not None:
        keys = jax.device_put(keys, spread_sharding(spread))
    return make_init(algorithm, spread).lower(keys).compile(compiler_options())(keys)


def make_init(algorithm: Algorithm, spread: Mesh | None = None):
    """``jit(lax.map(init))``: keys ``[R]`` to stacked train states ``[R, ...]`` (what
    :func:`init_runs` compiles and calls); with ``spread`` (:func:`spread_mesh`)
    ``shard_map``ped over its devices, each making its block of runs."""
    stacked = _stacked_init(algorithm.init)
    if spread is None:
        return stacked
    runs = P(parallel.SPREAD)
    return jax.jit(
        jax.shard_map(stacked, mesh=spread, in_specs=runs, out_specs=runs, check_vma=False)
    )


def abstract_states(
    algorithm: Algorithm, keys: jax.Array, num_devices: int | None = None
) -> PyTree:
    """Shapes and dtypes (``ShapeDtypeStruct``s) of the stacked train states ``run``
    starts from: ``[R, ...]``, or ``[D, R, ...]`` for a run sharded over ``num_devices``
    (the algorithm built for that many devices). Nothing is allocated."""
    states = _stacked_init(algorithm.init).eval_shape(keys)
    if num_devices is None:
        return states
    return jax.tree.map(
        lambda x: jax.ShapeDtypeStruct((int(num_devices),) + x.shape, x.dtype), states
    )


def check_memory(algorithm: Algorithm, keys: jax.Array, mesh: Mesh | None = None) -> None:
    """Refuses, before anything is allocated, a run whose train states (R runs, replay
    buffers included) do not fit in the free memory of a device: ``MemoryError``
    with the numbers. On CPU every local device shares the host's memory."""
    stacked = jax.tree.leaves(_stacked_init(algorithm.init).eval_shape(keys))  # [R, ...]
    per_run = sum(x.size * x.dtype.itemsize for x in stacked) // max(int(keys.shape[0]), 1)
    devices = list(mesh.devices.flat) if mesh is not None else jax.devices()[:1]
    local = [d for d in devices if d.process_index == jax.process_index()]
    copies = int(keys.shape[0]) * (len(local) if local[0].platform == "cpu" else 1)
    need, avail = per_run * copies, buffers.available_memory_bytes(local[0])
    if avail is not None and need > avail:
        gib = float(2**30)
        raise MemoryError(
            f"the train states need {need / gib:.2f} GiB ({keys.shape[0]} runs x "
            f"{per_run / gib:.3f} GiB"
            f"{'' if copies == keys.shape[0] else f' x {len(local)} devices'}), "
            f"only {avail / gib:.2f} GiB free on {local[0].platform}; use fewer seeds, smaller "
            "replay buffers or more devices"
        )


def _sharded(mesh: Mesh, fn, in_spec, out_spec, donate: bool = False):
    return jax.jit(
        jax.shard_map(fn, mesh=mesh, in_specs=in_spec, out_specs=out_spec, check_vma=False),
        donate_argnums=0 if donate else (),
    )


def _init_sharded(algorithm: Algorithm, keys: jax.Array, mesh: Mesh) -> PyTree:
    def init(key_data):
        states = jax.lax.map(algorithm.init, jax.random.wrap_key_data(key_data))
        return jax.tree.map(lambda x: x[None], states)

    key_data = jax.make_array_from_process_local_data(
        NamedSharding(mesh, P()), np.asarray(jax.random.key_data(keys))
    )
    with parallel.device_axis(parallel.AXIS, mesh.devices.size):
        program = (
            _sharded(mesh, init, P(), P(parallel.AXIS))
            .lower(key_data)
            .compile(compiler_options(_platform(mesh)))
        )
    return program(key_data)


def make_chunk(
    algorithm: Algorithm, length: int, mesh: Mesh | None = None, spread: Mesh | None = None
):
    """``jit(scan(vmap(step)))`` over ``length`` iterations of stacked states ``[R, ...]``
    (``shard_map``ped over ``mesh``'s devices, states ``[D, R, ...]``, when given); the
    input states are donated. With one run (``R == 1``, per device under ``mesh``) the
    step runs without the ``vmap``: ``jit(scan(step))`` on the run's state, which XLA
    compiles to unbatched kernels (faster on the CPU; the same computation, other
    rounding), taking and giving the same ``[R, ...]`` shapes. With ``spread``
    (:func:`spread_mesh`; not with ``mesh``) the program is ``shard_map``ped over its
    devices, each stepping its block of R / k runs (one run: unbatched) with no collective
    between them; states ``[R, ...]`` and metrics ``[length, R, ...]`` split along R.
    :func:`run` compiles one per distinct chunk length; call
    ``.lower(states).compile(compiler_options())`` on it to time a chunk yourself."""
    vstep = jax.vmap(algorithm.step, axis_name=parallel.RUNS)

    def chunk(states):
        if num_runs(states) == 1:
            # One run: step it unbatched (ARCHITECTURE.md, "One run steps without the runs
            # vmap"); same shapes in and out as the vmapped path.
            one = jax.tree.map(lambda x: x[0], states)
            one, metrics = jax.lax.scan(lambda s, _: algorithm.step(s), one, None, length=length)
            return jax.tree.map(lambda x: x[None], one), jax.tree.map(lambda x: x[:, None], metrics)
        with parallel.runs_axis():  # lets the loops branch on lockstep counters (parallel.all_runs)
            return jax.lax.scan(lambda s, _: vstep(s), states, None, length=length)

    if spread is not None:
        if mesh is not None:
            raise ValueError("a run over a device mesh is not spread over the cores too")
        runs, history = P(parallel.SPREAD), P(None, parallel.SPREAD)
        spread_chunk = jax.shard_map(
            chunk, mesh=spread, in_specs=runs, out_specs=(runs, history), check_vma=False
        )
        return jax.jit(spread_chunk, donate_argnums=0)
    if mesh is None:
        return jax.jit(chunk, donate_argnums=0)

    def sharded_chunk(states):
        states, metrics = chunk(jax.tree.map(lambda x: x[0], states))
        return jax.tree.map(lambda x: x[None], (states, metrics))

    return _sharded(
        mesh, sharded_chunk, P(parallel.AXIS), (P(parallel.AXIS), P(parallel.AXIS)), donate=True
    )


def chunk_lengths(num_iterations: int, num_reports: int) -> list[int]:
    """Splits the iterations into about ``num_reports`` chunks.

    Each distinct chunk length is a separate compilation, so equal lengths
    are preferred: a divisor of ``num_iterations`` giving between half and
    twice the requested number of reports is used when one exists, otherwise
    equal chunks plus one shorter remainder.
    """
    target = max(1, math.ceil(num_iterations / max(num_reports, 1)))
    lo, hi = max(1, target // 2), max(1, 2 * target)
    divisors = [d for d in range(lo, hi + 1) if num_iterations % d == 0]
    if divisors:
        d = min(divisors, key=lambda d: abs(d - target))
        return [d] * (num_iterations // d)
    lengths = [target] * (num_iterations // target)
    if num_iterations % target:
        lengths.append(num_iterations % target)
    return lengths


def run(
    algorithm: Algorithm,
    keys: jax.Array,
    num_iterations: int,
    *,
    num_reports: int = 20,
    hparams: dict[str, Any] | None = None,
    initial_state: PyTree | None = None,
    mesh: Mesh | None = None,
    start_iteration: int = 0,
    hooks: RunHooks = RunHooks(),
    memory_check: bool = True,
    spread: bool | Mesh = True,
) -> RunResult:
    """Trains ``len(keys)`` runs for ``num_iterations`` iterations each.

    Args:
      algorithm: the loop (``init``/``step``).
      keys: ``[R]`` typed PRNG keys, one per run.
      num_iterations: iterations per run.
      num_reports: the run is cut into this many chunks (at most), each one
        compiled call; the hooks are called after each.
      hparams: sweepable hyperparameters per run, name -> ``[R]`` values, set
        after init through the algorithm's ``with_hparams``.
      initial_state: a stacked train state to start from instead of ``init``; it
        carries its own hyperparameters, so ``hparams`` must then be empty.
      mesh: run sharded over this 1-D device mesh (see the module docstring).
      start_iteration: iterations ``initial_state`` has already done (a
        resumed run); the remaining chunks of the same schedule
        (:func:`chunk_lengths` of ``num_iterations``) are run, so a resumed
        run executes the same compiled chunks as an uninterrupted one.
      hooks: host callbacks (:class:`RunHooks`).
      memory_check: refuse runs whose states do not fit (:func:`check_memory`);
        False when the caller has checked already.
      spread: without ``mesh``, spread the runs over the local CPU devices where
        :func:`spread_mesh` gives a mesh (the states then come back split over them); a
        mesh from :func:`spread_mesh` is used as given (a caller that placed other
        programs on it), False never spreads.
    """
    if num_iterations <= 0:
        raise ValueError(f"num_iterations must be positive, got {num_iterations}")
    if initial_state is not None and hparams:
        raise ValueError("hparams are set after init: an initial_state carries its own")
    if memory_check:
        check_memory(algorithm, keys, mesh)
    lengths = _remaining_chunks(num_iterations, num_reports, start_iteration)
    cores = _cores(algorithm, keys, mesh, spread)
    programs, states = _programs_and_states(
        algorithm, keys, lengths, mesh, cores, initial_state, hparams
    )
    plan = _Plan(lengths, start_iteration, num_iterations, int(keys.shape[0]))
    with programs:
        return _run_chunks(algorithm, programs, plan, states, mesh, hooks)


def _cores(algorithm: Algorithm, keys: jax.Array, mesh: Mesh | None, spread: bool | Mesh):
    """The mesh of CPU cores :func:`run`'s runs are spread over (see its ``spread``), or None."""
    cores = spread if isinstance(spread, Mesh) else None
    if spread is True and mesh is None:
        cores = spread_mesh(int(keys.shape[0]), algorithm)
    return cores


def _programs_and_states(
    algorithm: Algorithm,
    keys: jax.Array,
    lengths: list[int],
    mesh: Mesh | None,
    cores: Mesh | None,
    initial_state: PyTree | None,
    hparams: dict[str, Any] | None,
) -> tuple[_Programs, PyTree]:
    """:func:`run`'s chunk programs (:class:`_Programs`, compiling) and the states they start
    from: ``initial_state`` or fresh ones, with ``hparams`` set."""
    axis = parallel.device_axis(parallel.AXIS, mesh.devices.size) if mesh is not None else None
    split = None if cores is None else spread_sharding(cores)
    options = compiler_options(_platform(mesh))

    def compile_chunks(spec: PyTree) -> _Programs:
        def compile_chunk(n: int):
            return make_chunk(algorithm, n, mesh, cores).lower(spec).compile(options)

        with axis or contextlib.nullcontext():  # the trace reads it; the thread copies it
            return _Programs(compile_chunk, lengths, spec)

    programs = None
    if initial_state is None and mesh is None:
        # a fresh run on one device: its chunks compile while init compiles and runs (XLA
        # compiles outside the GIL, so the two overlap on a multi-core host); the states'
        # shapes come from init's (cached) trace
        programs = compile_chunks(_spec(abstract_states(algorithm, keys), sharding=split))
    try:
        if initial_state is not None:
            states = _own_copy(initial_state, split)  # the chunks donate their input
        elif mesh is None:
            states = init_runs(algorithm, keys, cores)
        else:
            states = _init_sharded(algorithm, keys, mesh)
        states = set_hparams(algorithm, states, hparams or {}, sharded=mesh is not None)
        # shapes, dtypes and placements only: the first chunk donates ``states`` while later
        # lengths may still be compiling
        if split is not None and hparams:  # the hook may have made a swept leaf on one device
            states = jax.device_put(states, split)
        spec = _spec(states, placed=mesh is not None or split is not None)
        if programs is None or programs.spec_differs(spec):  # a sweep may change a dtype
            if programs is not None:
                programs.close()
            programs = compile_chunks(spec)
    except BaseException:
        if programs is not None:
            programs.close()
        raise
    return programs, states


def _own_copy(states: PyTree, split: NamedSharding | None) -> PyTree:
    """A copy of ``states`` (host or device arrays) that the chunks may donate, placed with
    ``split`` (:func:`spread_sharding`) when given."""
    if split is None:
        return jax.tree.map(jnp.copy, states)
    return jax.device_put(states, split, may_alias=False)


def _spec(states: PyTree, placed: bool = False, sharding=None) -> PyTree:
    """``ShapeDtypeStruct``s of ``states`` (arrays or structs): shape, dtype and weak type,
    and the sharding of committed arrays when ``placed`` (a run over a device mesh), or
    ``sharding`` for every leaf when given."""

    def leaf(x):
        # an uncommitted array (made on the default device, not placed) may be moved by jit
        # onto the mesh; as a struct with its sharding it would be pinned there
        where = x.sharding if placed and getattr(x, "committed", True) else sharding
        weak = bool(getattr(x, "weak_type", False))  # typed key arrays have none
        return jax.ShapeDtypeStruct(x.shape, x.dtype, weak_type=weak, sharding=where)

    return jax.tree.map(leaf, states)


class _Programs:
    """The compiled chunk of each distinct length in ``lengths``, compiled in order of first
    use on one background thread, started at construction: the first while the run's
    states are made, the others while the first chunks run (a run of 97 iterations in
    chunks of 5 ends with one of 2: its trace, lowering and compile or cache load no longer
    delay the first progress line). ``[n]`` waits for length ``n``; ``waited`` is the
    seconds the caller spent waiting, the run's compile time (what compilation added to
    its wall clock). The thread runs in a copy of the caller's context (the device-axis and
    runs-axis context variables the trace reads). ``close`` (or leaving the ``with``
    block) cancels compiles not started yet; one under way finishes on its own."""

    def __init__(self, compile_chunk: Callable[[int], Any], lengths: list[int], spec: PyTree):
        self.spec = spec  # the states' ShapeDtypeStructs the programs are compiled for
        self.waited = 0.0
        self._done: dict[int, Any] = {}
        self._pool = concurrent.futures.ThreadPoolExecutor(1, "jrl-compile")
        context = contextvars.copy_context()
        self._pending = {
            n: self._pool.submit(context.copy().run, compile_chunk, n)
            for n in dict.fromkeys(lengths)  # distinct, in order of first use
        }

    def spec_differs(self, spec: PyTree) -> bool:
        """Whether states shaped ``spec`` differ from those the programs were compiled for."""
        return jax.tree.structure(spec) != jax.tree.structure(self.spec) or any(
            a != b for a, b in zip(jax.tree.leaves(spec), jax.tree.leaves(self.spec))
        )

    def __getitem__(self, n: int):
        if n not in self._done:
            t0 = time.perf_counter()
            self._done[n] = self._pending.pop(n).result()
            self.waited += time.perf_counter() - t0
        return self._done[n]

    def close(self, wait: bool = False) -> None:
        self._pool.shutdown(wait=wait, cancel_futures=True)

    def __enter__(self) -> _Programs:
        return self

    def __exit__(self, *exc) -> None:
        self.close(wait=exc[0] is None)


class _Plan(NamedTuple):
    lengths: list[int]  # the chunks this call runs
    start_iteration: int
    num_iterations: int
    num_runs: int


def _remaining_chunks(num_iterations: int, num_reports: int, start_iteration: int) -> list[int]:
    """The chunk lengths of the schedule that end after ``start_iteration``."""
    schedule = chunk_lengths(num_iterations, num_reports)
    ends = np.cumsum(schedule)
    if start_iteration != 0 and start_iteration not in ends:
        raise ValueError(
            f"start_iteration {start_iteration} is not a chunk boundary of {num_iterations} "
            f"iterations in {num_reports} reports (boundaries: {ends.tolist()})"
        )
    return [n for n, end in zip(schedule, ends) if end > start_iteration]


def _run_chunks(
    algorithm: Algorithm, programs: _Programs, plan: _Plan, states, mesh, hooks: RunHooks
) -> RunResult:
    """Executes the compiled chunks in order, calling the hooks between them. Time spent
    waiting for a chunk length still compiling counts as compile time, not run time."""
    history: list[dict[str, np.ndarray]] = []
    done, per_iteration = plan.start_iteration, algorithm.env_steps_per_iteration
    t_start = time.perf_counter()
    for n in plan.lengths:
        if hooks.should_stop is not None and hooks.should_stop():
            break
        states, metrics = programs[n](states)
        if mesh is not None:  # identical on every device after the all-reduces
            metrics = first_device(metrics)
        metrics = jax.device_get(metrics)  # blocks: one sync per chunk
        history.append(metrics)
        done += n
        if hooks.on_chunk is not None:
            hooks.on_chunk(states, done, metrics)
        if hooks.on_report is not None:
            elapsed = time.perf_counter() - t_start - programs.waited
            steps_now = (done - plan.start_iteration) * per_iteration
            latest = {k: np.asarray(v[-1]) for k, v in metrics.items()}
            rate = steps_now * plan.num_runs / max(elapsed, 1e-9)
            hooks.on_report(
                Report(
                    done,
                    plan.num_iterations,
                    done * per_iteration,
                    elapsed,
                    rate,
                    latest,
                    plan.start_iteration,
                )
            )
    jax.block_until_ready(states)
    run_seconds = time.perf_counter() - t_start - programs.waited
    merged = {}
    if history:  # [R, iterations]
        merged = {k: np.concatenate([h[k] for h in history], axis=0).T for k in history[0]}
    return RunResult(
        merged,
        states if mesh is None else first_device(states),
        programs.waited,
        run_seconds,
        (done - plan.start_iteration) * per_iteration,
        plan.num_runs,
        None if mesh is None else states,
        iterations=done,
    )
