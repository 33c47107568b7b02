"""Policy export (layer 8): one trained run as an inference-only artifact.

``export_policy(RUN, OUT, run=r)`` writes into the folder ``OUT``:

- ``policy.jaxexport``: the run's evaluation policy as a serialized
  ``jax.export`` program, ``(observations [B, ...], key_data uint32[2]) ->
  actions [B, ...]`` for any batch size ``B``, with the network parameters and
  the observation normaliser's statistics (frozen) inside it. Loading it
  needs jax alone, not jrl's training code: ``jax.export.deserialize(data)``;
- ``params.msgpack``: the run's network parameters (flax serialization, no
  leading run axis), for those who rebuild the network themselves;
- ``policy.json``: where it comes from (agent, env, run, seed, checkpoint
  iteration, jrl version), whether it is greedy, and its input and output
  signature and the env's observation and action spaces.

:func:`load_policy` reads the folder back as a jitted ``policy(obs, key=None)``.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Callable

import jax
import jax.numpy as jnp
import numpy as np

import jrl
from jrl import files
from jrl.experiment import load_run

__all__ = ["POLICY_FILE", "export_policy", "load_policy"]

POLICY_FILE = "policy.jaxexport"
INFO_FILE = "policy.json"


def _batched_spec(x: jax.ShapeDtypeStruct, batch) -> jax.ShapeDtypeStruct:
    return jax.ShapeDtypeStruct((batch, *x.shape[1:]), x.dtype)


def export_policy(
    run_dir: str | os.PathLike,
    out: str | os.PathLike,
    run: int = 0,
    step: int | None = None,
    greedy: bool = True,
) -> Path:
    """Exports run ``run`` of the run folder ``run_dir`` (its checkpoint at ``step``,
    default the latest) into the folder ``out`` (see the module docstring); returns ``out``.
    ``greedy=False`` exports the behaviour policy (sampled actions) instead."""
    from flax import serialization

    loaded = load_run(run_dir, step)
    policy = loaded.policy(run, greedy)
    recurrent = loaded.built.agent.recurrent
    if recurrent is not None and recurrent.stateful(greedy):
        raise ValueError(
            "export takes policies without memory; this run's policy carries a hidden state"
        )
    one = jax.tree.map(lambda x: x[run], loaded.state)
    env, params = loaded.built.env, loaded.built.env_params
    # one observation of the (batched) training env, as the policy sees it: [N, ...] -> [B, ...]
    _, ts = jax.eval_shape(env.reset, jax.random.key(0), params)
    (batch,) = jax.export.symbolic_shape("batch")
    obs_spec = jax.tree.map(lambda x: _batched_spec(x, batch), ts.observation)

    def fn(obs, key_data):
        return policy(obs, jax.random.wrap_key_data(key_data))

    key_spec = jax.ShapeDtypeStruct((2,), jnp.uint32)
    exported = jax.export.export(jax.jit(fn))(obs_spec, key_spec)
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
        "inputs": [[list(map(str, x.shape)), str(x.dtype)] for x in jax.tree.leaves(obs_spec)]
        + [[["2"], "uint32"]],
        "output": [list(map(str, exported.out_avals[0].shape)), str(exported.out_avals[0].dtype)],
        "observation_space": repr(loaded.built.spec.observation_space),
        "action_space": repr(loaded.built.spec.action_space),
    }
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    files.write_atomic(out / POLICY_FILE, bytes(exported.serialize()))
    files.write_atomic(
        out / "params.msgpack", serialization.to_bytes(jax.device_get(one.agent_state.params))
    )
    files.write_atomic(out / INFO_FILE, json.dumps(info, indent=2))
    return out


def load_policy(path: str | os.PathLike) -> Callable[..., Any]:
    """A jitted ``policy(obs [B, ...], key=None) -> actions [B, ...]`` from an exported folder
    (or its ``policy.jaxexport`` file); observations are cast to the dtypes the policy was
    exported with. ``key`` (a typed PRNG key) only matters for a stochastic export; the
    default is ``key(0)``."""
    path = Path(path)
    file = path / POLICY_FILE if path.is_dir() else path
    if not file.is_file():
        raise FileNotFoundError(f"no exported policy at {path} (expected {POLICY_FILE})")
    exported = jax.export.deserialize(bytearray(file.read_bytes()))
    dtypes = [a.dtype for a in exported.in_avals[:-1]]  # the observation leaves', in order

    @jax.jit
    def call(obs, key_data):
        leaves, tree = jax.tree.flatten(obs)
        if len(leaves) != len(dtypes):
            raise ValueError(
                f"the policy takes {len(dtypes)} observation arrays, got {len(leaves)}"
            )
        leaves = [jnp.asarray(x, d) for x, d in zip(leaves, dtypes)]  # e.g. bool images
        return exported.call(jax.tree.unflatten(tree, leaves), key_data)

    def policy(obs, key: jax.Array | None = None):
        key = jax.random.key(0) if key is None else key
        return call(obs, jax.random.key_data(key).astype(np.uint32))

    return policy
