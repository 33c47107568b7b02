"""Optimisers and schedules shared by the agents (the parts layer).

The learning rate is never inside the optax chain: agents multiply the
chain's update by ``-lr`` themselves, so the rate can be a traced,
sweepable value (``agent_state.hparams``) and can be annealed with
:func:`linear_schedule`.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import optax

__all__ = ["OPTIMIZERS", "grad_norm_metric", "linear_schedule", "make_optimizer"]

OPTIMIZERS = {
    "adam": lambda eps: optax.scale_by_adam(eps=eps),
    "radam": lambda eps: optax.scale_by_radam(eps=eps),
    "rmsprop": lambda eps: optax.scale_by_rms(decay=0.99, eps=eps),
}
"""Scalers :func:`make_optimizer` knows, by name."""


def make_optimizer(
    name: str, max_grad_norm: float, eps: float = 1e-5
) -> optax.GradientTransformation:
    """Global-norm clipping at ``max_grad_norm`` then Adam, RAdam or RMSprop, *without*
    the learning rate. ``max_grad_norm = 0`` means no clipping: the scaler alone, so
    no global norm is computed (that reduction waits for every gradient leaf before
    any parameter can be updated)."""
    if name not in OPTIMIZERS:
        raise ValueError(f"unknown optimizer {name!r}; choose from {sorted(OPTIMIZERS)}")
    if max_grad_norm < 0:
        raise ValueError(f"max_grad_norm must be >= 0 (0: no clipping), got {max_grad_norm}")
    if max_grad_norm == 0:
        return OPTIMIZERS[name](eps)
    return optax.chain(optax.clip_by_global_norm(max_grad_norm), OPTIMIZERS[name](eps))


def grad_norm_metric(grads, max_grad_norm: float) -> dict[str, jax.Array]:
    """``{"train/grad_norm": global norm of grads}`` when clipping is on (``max_grad_norm >
    0``), where :func:`make_optimizer`'s clip computes that same norm, so XLA shares it;
    ``{}`` without clipping, which would otherwise pay for the reduction just for the
    metric (clip and metric together: 9-12% of a 1-seed DQN CartPole iteration on 2 CPU
    cores, ``benchmarks/dqn_clip_ab.py``)."""
    return {"train/grad_norm": optax.tree.norm(grads)} if max_grad_norm > 0 else {}


def linear_schedule(step, start, end, duration) -> jax.Array:
    """``start`` at step 0, moving linearly to ``end`` at ``duration`` steps, then ``end``;
    ``[]`` float32 (all arguments may be traced; ``duration <= 0`` gives ``end``)."""
    frac = jnp.where(duration > 0, jnp.clip(step / jnp.maximum(duration, 1e-8), 0.0, 1.0), 1.0)
    return start + frac * (end - start)
