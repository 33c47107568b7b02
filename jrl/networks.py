"""Networks as flax modules: torsos and heads built from an env's spaces.

Conventions: inputs are observations ``[..., *obs_shape]`` (flattened by the
torso), outputs keep the leading batch dimensions ``[...]``. Policy heads
return a distribution from :mod:`jrl.distributions`.

Initialisation: orthogonal weights (gain ``sqrt(2)`` in hidden layers, small
gains for policy heads) as is standard for on-policy methods. Orthogonal init
runs a QR decomposition, which on jax 0.10 CPU can hang when *vmapped* over
seeds (see ARCHITECTURE.md); jrl therefore never vmaps ``init``: runners
initialise each seed separately and stack the results.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Callable

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from jrl import distributions, spaces

Activation = Callable[[jax.Array], jax.Array]
ACTIVATIONS: dict[str, Activation] = {"tanh": nn.tanh, "relu": nn.relu, "gelu": nn.gelu, "silu": nn.silu, "elu": nn.elu}


def activation(name: str) -> Activation:
    """Looks up an activation by name (``tanh``, ``relu``, ``gelu``, ``silu``, ``elu``)."""
    if name not in ACTIVATIONS:
        raise ValueError(f"unknown activation {name!r}; choose from {sorted(ACTIVATIONS)}")
    return ACTIVATIONS[name]


def example_observation(space: spaces.Space):
    """A batch of one all-zero observation, ``[1, *obs_shape]`` per leaf, for ``Module.init``."""
    return jax.tree.map(lambda x: x[None], spaces.zeros_like_space(space))


def _dense(features: int, gain: float) -> nn.Dense:
    return nn.Dense(features, kernel_init=nn.initializers.orthogonal(gain), bias_init=nn.initializers.zeros)


class MLP(nn.Module):
    """A multilayer perceptron torso: ``[..., *obs_shape] -> [..., hidden[-1]]``.

    The observation's trailing ``obs_ndim`` dimensions are flattened first.
    """

    hidden_sizes: Sequence[int] = (64, 64)
    activation: str = "tanh"
    obs_ndim: int = 1  # number of trailing observation dims to flatten
    layer_norm: bool = False
    orthogonal: bool = True  # orthogonal(sqrt 2) kernels; False: flax's default (lecun normal, no QR)

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        x = jnp.asarray(x, jnp.float32)
        batch = x.shape[: x.ndim - self.obs_ndim]
        x = x.reshape(batch + (-1,))
        act = activation(self.activation)
        for size in self.hidden_sizes:
            x = _dense(size, np.sqrt(2.0))(x) if self.orthogonal else nn.Dense(size)(x)
            if self.layer_norm:
                x = nn.LayerNorm()(x)
            x = act(x)
        return x


class PolicyHead(nn.Module):
    """Maps features ``[..., F]`` to an action distribution for ``action_space``.

    Discrete -> Categorical, MultiDiscrete -> MultiCategorical, Box -> diagonal
    Normal with a state-independent learned log-std (``Normal``) or a squashed
    ``TanhNormal`` rescaled to the Box bounds.
    """

    action_space: spaces.Space
    continuous: str = "normal"  # "normal" or "tanh_normal" for Box action spaces
    init_log_std: float = 0.0
    gain: float = 0.01

    @nn.compact
    def __call__(self, features: jax.Array, mask: jax.Array | None = None):
        space = self.action_space
        if isinstance(space, spaces.Discrete):
            return distributions.Categorical(_dense(space.n, self.gain)(features), mask=mask)
        if isinstance(space, spaces.MultiDiscrete):
            logits = _dense(int(np.sum(space.nvec)), self.gain)(features)
            return distributions.MultiCategorical.from_flat(logits, tuple(int(n) for n in space.nvec))
        if isinstance(space, spaces.Box):
            dim = int(np.prod(space.shape))
            mean = _dense(dim, self.gain)(features)
            log_std = self.param("log_std", nn.initializers.constant(self.init_log_std), (dim,))
            log_std = jnp.broadcast_to(log_std, mean.shape)
            if self.continuous == "tanh_normal":
                low = jnp.broadcast_to(jnp.asarray(space.low.reshape(-1), jnp.float32), mean.shape)
                high = jnp.broadcast_to(jnp.asarray(space.high.reshape(-1), jnp.float32), mean.shape)
                return distributions.TanhNormal(mean, log_std, low=low, high=high)  # every leaf batched like mean
            return distributions.Normal(mean, log_std)
        raise TypeError(f"no policy head for action space {space!r}")


class ActorCritic(nn.Module):
    """Separate actor and critic torsos: ``obs -> (distribution, value [...])``."""

    action_space: spaces.Space
    hidden_sizes: Sequence[int] = (64, 64)
    activation: str = "tanh"
    obs_ndim: int = 1
    continuous: str = "normal"
    init_log_std: float = 0.0

    def setup(self):
        self.actor_torso = MLP(self.hidden_sizes, self.activation, self.obs_ndim)
        self.critic_torso = MLP(self.hidden_sizes, self.activation, self.obs_ndim)
        self.policy_head = PolicyHead(self.action_space, self.continuous, self.init_log_std)
        self.value_head = _dense(1, 1.0)

    def __call__(self, obs: jax.Array, mask: jax.Array | None = None):
        return self.policy(obs, mask), self.value(obs)

    def policy(self, obs: jax.Array, mask: jax.Array | None = None):
        return self.policy_head(self.actor_torso(obs), mask)

    def value(self, obs: jax.Array) -> jax.Array:
        return self.value_head(self.critic_torso(obs))[..., 0]


class QNetwork(nn.Module):
    """Action values for a Discrete action space: ``obs [..., *obs_shape] -> q [..., num_actions]``.

    An MLP torso (flax's default init, no orthogonal QR) and a Dense head; with
    ``dueling`` (Wang et al., 2016) separate value and advantage streams are
    combined as ``q = v + a - mean_a(a)``.
    """

    num_actions: int
    hidden_sizes: Sequence[int] = (64, 64)
    activation: str = "relu"
    obs_ndim: int = 1
    dueling: bool = False

    @nn.compact
    def __call__(self, obs: jax.Array) -> jax.Array:
        features = MLP(self.hidden_sizes, self.activation, self.obs_ndim, orthogonal=False)(obs)
        if not self.dueling:
            return nn.Dense(self.num_actions)(features)
        value = nn.Dense(1)(features)
        advantage = nn.Dense(self.num_actions)(features)
        return value + advantage - advantage.mean(axis=-1, keepdims=True)
