"""Policy export: one trained run as an inference-only artifact.

``export_policy(RUN, OUT, run=r)`` writes into the folder ``OUT``:

- ``policy.jaxexport``: the run's evaluation policy as a serialized ``jax.export``
  program, with the network parameters and the observation normaliser's statistics
  (frozen) inside it, for any batch size ``B``::

      (observations [B, ...], key_data uint32[2]) -> actions [B, ...]
      # a policy with memory (e.g. ppo --recurrent lstm/gru) carries its core state:
      (state [B, ...], observations [B, ...], key_data uint32[2]) -> (actions [B, ...],
                                                                      state [B, ...])

  ``observations`` are the env's own (every leaf of a dict observation, e.g. a team env's
  ``{"observation": [B, A, ...], "global_state": [B, S]}``), ``key_data`` is
  ``jax.random.key_data(key)``, ``state`` a pytree (``(c, h)`` for an LSTM, ``h`` for a
  GRU); an episode starts from ``policy.json``'s ``initial_state``. Loading it needs jax
  alone, not jrl's training code: ``jax.export.deserialize(data).call(...)``;
- ``params.msgpack``: the run's network parameters (flax serialization, no
  leading run axis), for those who rebuild the network themselves;
- ``policy.json``: where it comes from (agent, env, run, seed, checkpoint iteration, jrl
  version), whether it is greedy, its signature (``inputs``, ``output``, ``state``), for a
  policy with memory the state one episode starts from (``initial_state``, one nested list
  per state leaf, in ``jax.tree`` order, no batch axis), and the env's observation and
  action spaces.

``OUT`` must be a folder of its own: an export never writes into a run folder or its
outputs (``checkpoints/``...), nor over files it did not write itself (:func:`check_out`).

:func:`load_policy` reads the folder back as a policy that takes one observation or a batch
(:func:`jrl.run.evaluation.batch_optional`)::

    policy = jrl.load_policy(OUT)
    policy(obs [...], key=None) -> action [...]
    policy(obs [B, ...], key=None) -> actions [B, ...]
    # with memory (a jrl.run.evaluation.StatefulPolicy):
    state = policy.initial_state()                       # policy.initial_state(B): [B, ...]
    action, state = policy.step(state, obs, key=None)    # state batched as obs is

the same signature as ``jrl.app.api.load_run(RUN).policy(r)``.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import serialization

import jrl
from jrl.app import run_folder
from jrl.app.api import load_run
from jrl.run import evaluation
from jrl.run.evaluation import StatefulPolicy
from jrl.util import files

__all__ = ["EXPORT_FILES", "INFO_FILE", "POLICY_FILE", "check_out", "export_policy", "load_policy"]

POLICY_FILE = "policy.jaxexport"
PARAMS_FILE = "params.msgpack"
INFO_FILE = "policy.json"
EXPORT_FILES = (POLICY_FILE, PARAMS_FILE, INFO_FILE)
"""The files an export writes (and the only ones it ever overwrites)."""


def _is_export(folder: Path) -> bool:
    """Whether ``folder`` holds an export (its ``policy.json`` is one that
    :func:`export_policy` wrote)."""
    try:
        info = json.loads((folder / INFO_FILE).read_text())
    except (OSError, ValueError):
        return False
    return isinstance(info, dict) and {"agent", "env_id", "inputs", "jrl_version"} <= set(info)


def check_out(out: str | os.PathLike) -> None:
    """Refuses (``FileExistsError``, before anything is written) an export folder ``out``
    that is a run folder (a jrl ``config.json``, or a run's outputs), lies among a run
    folder's outputs (``RUN/checkpoints/...``, ``RUN/tb/...``; a new ``RUN/policy`` is
    fine), or holds files named like the export's that an export did not write."""
    out = Path(out)
    resolved = out.resolve()
    for folder in resolved.parents:
        if run_folder.is_run_record(folder / "config.json"):
            part = resolved.relative_to(folder).parts[0]
            if part in run_folder.OUTPUTS or part == run_folder.LOCK_FILE:
                raise FileExistsError(
                    f"--out {out} lies in the run folder {folder}'s {part}; an export never "
                    f"writes among a run's files: choose a folder of its own, e.g. "
                    f"{folder / 'policy'}"
                )
    if out.exists() and not out.is_dir():
        raise FileExistsError(f"--out {out} exists and is not a folder")
    if not out.is_dir():
        return
    if run_folder.is_run_record(out / "config.json"):
        raise FileExistsError(
            f"--out {out} is a run folder; an export never writes into one (it would replace "
            f"the run's files): choose a folder of its own, e.g. {out / 'policy'}"
        )
    if _is_export(out):  # a previous export: its files are the export's to replace
        return
    taken = [f for f in (*run_folder.OUTPUTS, *EXPORT_FILES) if (out / f).exists()]
    if taken:
        raise FileExistsError(
            f"--out {out} holds {', '.join(dict.fromkeys(taken))}, not written by jrl export; "
            "refusing to overwrite them: choose another --out"
        )


def _signature(specs: Any, batch: str = "batch") -> list[list[Any]]:
    """``[[shape, dtype], ...]`` of the leaves of ``specs``, with a leading batch axis."""
    return [[[batch, *map(str, x.shape)], str(x.dtype)] for x in jax.tree.leaves(specs)]


def export_policy(
    run_dir: str | os.PathLike,
    out: str | os.PathLike,
    run: int = 0,
    step: int | None = None,
    greedy: bool = True,
) -> Path:
    """Exports run ``run`` of the run folder ``run_dir`` (its checkpoint at ``step``,
    default the latest) into the folder ``out`` (see the module docstring); returns ``out``.
    ``greedy=False`` exports the behaviour policy (sampled actions) instead.

    Raises ``FileExistsError`` for an ``out`` that :func:`check_out` refuses and
    ``ValueError`` for a bad ``run``, before anything is written; the files are computed
    in full before the first is written, each atomically."""
    out = Path(out)
    check_out(out)
    loaded = load_run(run_dir, step)
    policy = loaded.policy(run, greedy)  # one observation or a batch; key optional
    observation = loaded.observation_spec()
    exported, signature, initial = _export_program(policy, observation)
    memory = isinstance(policy, StatefulPolicy)
    action = exported.out_avals[0]
    env = evaluation.evaluation_env(loaded.built.env)  # the env the policy acts in
    spec = loaded.spec
    info = {
        "agent": spec.agent,
        "env_id": spec.env_id,
        "run": int(run),
        "seed": spec.run_seeds[run],
        "swept": {k: v[run] for k, v in spec.run_sweep.items()},
        "checkpoint_iteration": loaded.step,
        "greedy": bool(greedy),
        "jrl_version": jrl.__version__,
        "signature": signature,
        "memory": memory,
        "inputs": _signature(initial) + _signature(observation) + [[["2"], "uint32"]],
        "output": [list(map(str, action.shape)), str(action.dtype)],
        "observation_space": repr(env.observation_space(loaded.built.env_params)),
        "action_space": repr(env.action_space(loaded.built.env_params)),
    }
    if memory:
        info["state"] = _signature(initial)
        info["initial_state"] = [np.asarray(x).tolist() for x in jax.tree.leaves(initial)]
    one = jax.tree.map(lambda x: x[run], loaded.state)
    blobs = {
        POLICY_FILE: bytes(exported.serialize()),
        PARAMS_FILE: serialization.to_bytes(jax.device_get(one.agent_state.params)),
        INFO_FILE: json.dumps(info, indent=2),  # last: a folder with it holds a whole export
    }
    out.mkdir(parents=True, exist_ok=True)
    for name, data in blobs.items():
        files.write_atomic(out / name, data)
    return out


def _export_program(policy, observation: Any) -> tuple[Any, str, Any]:
    """``(exported, signature, initial state)``: ``policy`` as a ``jax.export`` program over
    a symbolic batch of ``observation`` (and of its state, for a policy with memory, whose
    initial state, one episode's, no batch axis, comes back; ``()`` without memory)."""
    (batch,) = jax.export.symbolic_shape("batch")
    batched = lambda x: jax.ShapeDtypeStruct((batch, *x.shape), x.dtype)  # noqa: E731
    obs_spec = jax.tree.map(batched, observation)
    key_spec = jax.ShapeDtypeStruct((2,), jnp.uint32)
    key = jax.random.wrap_key_data
    if not isinstance(policy, StatefulPolicy):
        exported = jax.export.export(jax.jit(lambda obs, key_data: policy(obs, key(key_data))))(
            obs_spec, key_spec
        )
        return exported, "(observations [B, ...], key_data uint32[2]) -> actions [B, ...]", ()
    initial = policy.initial_state()  # one episode's state, no batch axis
    state_spec = jax.tree.map(batched, jax.eval_shape(policy.initial_state))
    exported = jax.export.export(
        jax.jit(lambda state, obs, key_data: policy.step(state, obs, key(key_data)))
    )(state_spec, obs_spec, key_spec)
    signature = (
        "(state [B, ...], observations [B, ...], key_data uint32[2]) -> "
        "(actions [B, ...], state [B, ...])"
    )
    return exported, signature, initial


def _key_data(key: jax.Array) -> jax.Array:
    """``uint32[2]`` of a typed PRNG key (a raw ``uint32[2]`` key passes as it is)."""
    if jnp.issubdtype(key.dtype, jax.dtypes.prng_key):
        key = jax.random.key_data(key)
    return jnp.asarray(key, jnp.uint32)


def _initial_state(info_file: Path, state_avals: Any) -> Any:
    """The state one episode starts from (no batch axis), read from ``policy.json``."""
    try:
        leaves = json.loads(info_file.read_text())["initial_state"]
    except (OSError, ValueError, KeyError, TypeError):
        raise FileNotFoundError(
            f"a policy with memory needs the initial state in {info_file} (jrl export writes it)"
        ) from None
    avals, tree = jax.tree.flatten(state_avals)
    state = [jnp.asarray(x, a.dtype) for x, a in zip(leaves, avals)]
    if len(state) != len(avals) or any(x.shape != a.shape[1:] for x, a in zip(state, avals)):
        raise ValueError(f"{info_file}'s initial_state does not fit the policy's state")
    return jax.tree.unflatten(tree, state)


def load_policy(path: str | os.PathLike):
    """The policy of an exported folder (or its ``policy.jaxexport`` file), jitted, with
    the signature of ``jrl.app.api.load_run(RUN).policy(r)``
    (:func:`jrl.run.evaluation.batch_optional`)::

        policy(obs [...], key=None) -> action [...]           # one observation
        policy(obs [B, ...], key=None) -> actions [B, ...]    # a batch

    ``obs`` is the env's own observation; its arrays are cast to the dtypes the policy was
    exported with. ``key`` (a typed PRNG key, or its ``uint32[2]`` data) only matters for a
    stochastic export; the default is ``key(0)``. A policy with memory is a
    :class:`~jrl.run.evaluation.StatefulPolicy`: ``initial_state(num=None)`` (one episode's
    state, or ``[num, ...]``; read from ``policy.json``) and ``step(state, obs, key=None)
    -> (action, state)``, ``state`` batched as ``obs`` is."""
    path = Path(path)
    file = path / POLICY_FILE if path.is_dir() else path
    if not file.is_file():
        raise FileNotFoundError(f"no exported policy at {path} (expected {POLICY_FILE})")
    exported = jax.export.deserialize(bytearray(file.read_bytes()))
    args, _ = jax.tree.unflatten(exported.in_tree, exported.in_avals)
    # one observation: the exported inputs without their (symbolic) batch axis
    observation = jax.tree.map(lambda a: jax.ShapeDtypeStruct(a.shape[1:], a.dtype), args[-2])
    call = jax.jit(exported.call)
    if len(args) == 2:
        return evaluation.batch_optional(lambda obs, key: call(obs, _key_data(key)), observation)
    initial = _initial_state(file.parent / INFO_FILE, args[0])
    stateful = StatefulPolicy(
        lambda num: jax.tree.map(lambda x: jnp.broadcast_to(x, (num, *x.shape)), initial),
        lambda state, obs, key: call(state, obs, _key_data(key)),
    )
    return evaluation.batch_optional(stateful, observation)
