"""Torsos: the flax modules that map observations to features, by name.

``TORSOS`` maps a name to ``factory(hidden_sizes=, activation=, obs_ndim=, orthogonal=) ->
Module`` (observations ``[..., *obs_shape]`` to features ``[..., F]``): ``mlp``,
``layernorm_mlp``, ``minatar_cnn``, ``nature_cnn`` and ``impala_resnet``; every agent's
``torso`` config value is one of them, and :func:`register_torso` adds one (e.g. from a
plugin). The networks of :mod:`jrl.parts.networks` build their torsos with
:func:`make_torso`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Callable

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

__all__ = [
    "ACTIVATIONS",
    "MINATAR_CONVS",
    "MLP",
    "NATURE_CONVS",
    "TORSOS",
    "ConvTorso",
    "ImpalaResNet",
    "activation",
    "make_torso",
    "orthogonal_dense",
    "register_torso",
]

Activation = Callable[[jax.Array], jax.Array]
ACTIVATIONS: dict[str, Activation] = {
    "tanh": nn.tanh,
    "relu": nn.relu,
    "gelu": nn.gelu,
    "silu": nn.silu,
    "elu": nn.elu,
}


def activation(name: str) -> Activation:
    """Looks up an activation by name (``tanh``, ``relu``, ``gelu``, ``silu``, ``elu``)."""
    if name not in ACTIVATIONS:
        raise ValueError(f"unknown activation {name!r}; choose from {sorted(ACTIVATIONS)}")
    return ACTIVATIONS[name]


def orthogonal_dense(features: int, gain: float) -> nn.Dense:
    """A Dense layer with orthogonal(``gain``) kernels and zero biases."""
    return nn.Dense(
        features, kernel_init=nn.initializers.orthogonal(gain), bias_init=nn.initializers.zeros
    )


class MLP(nn.Module):
    """A multilayer perceptron torso: ``[..., *obs_shape] -> [..., hidden[-1]]``.

    The observation's trailing ``obs_ndim`` dimensions are flattened first.
    """

    hidden_sizes: Sequence[int] = (64, 64)
    activation: str = "tanh"
    obs_ndim: int = 1  # number of trailing observation dims to flatten
    layer_norm: bool = False
    orthogonal: bool = (
        True  # orthogonal(sqrt 2) kernels; False: flax's default (lecun normal, no QR)
    )

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        x = jnp.asarray(x, jnp.float32)
        batch = x.shape[: x.ndim - self.obs_ndim]
        x = x.reshape(batch + (-1,))
        act = activation(self.activation)
        for size in self.hidden_sizes:
            x = orthogonal_dense(size, np.sqrt(2.0))(x) if self.orthogonal else nn.Dense(size)(x)
            if self.layer_norm:
                x = nn.LayerNorm()(x)
            x = act(x)
        return x


def _conv_setup(obs_ndim: int, orthogonal: bool, act: str):
    """A CNN torso's conv kwargs (orthogonal(sqrt 2) kernels, or flax's default) and activation;
    ``ValueError`` unless the observations are images ``[H, W, C]``."""
    if obs_ndim != 3:
        raise ValueError(f"a CNN torso needs image observations [H, W, C], got {obs_ndim} dims")
    init = {"kernel_init": nn.initializers.orthogonal(np.sqrt(2.0))} if orthogonal else {}
    return init, activation(act)


class ConvTorso(nn.Module):
    """Convolutions over images ``[..., H, W, C]`` (``convs``: ``(features, kernel, stride)``
    per layer, "VALID" padding), then the MLP of ``hidden_sizes``; ``layer_norm`` puts a
    LayerNorm after each conv and hidden Dense, before the activation."""

    convs: Sequence[tuple[int, int, int]]
    hidden_sizes: Sequence[int] = (512,)
    activation: str = "relu"
    obs_ndim: int = 3
    orthogonal: bool = True
    layer_norm: bool = False

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        init, act = _conv_setup(self.obs_ndim, self.orthogonal, self.activation)
        x = jnp.asarray(x, jnp.float32)  # the MLP below flattens the convs' trailing 3 dims
        for features, kernel, stride in self.convs:
            x = nn.Conv(features, (kernel, kernel), (stride, stride), "VALID", **init)(x)
            x = act(nn.LayerNorm()(x) if self.layer_norm else x)
        return MLP(self.hidden_sizes, self.activation, 3, self.layer_norm, self.orthogonal)(x)


class ImpalaResNet(nn.Module):
    """The IMPALA ResNet torso (Espeholt et al., 2018) over images ``[..., H, W, C]``: per
    stage of ``channels``, a 3x3 conv, a 3x3 max-pool of stride 2 and two residual blocks
    (``x + conv(act(conv(act(x))))``), all "SAME" padded; then ``act``, and the MLP of
    ``hidden_sizes`` (256 in the paper) on the flattened features."""

    channels: Sequence[int] = (16, 32, 32)
    hidden_sizes: Sequence[int] = (256,)
    activation: str = "relu"
    obs_ndim: int = 3
    orthogonal: bool = True

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        init, act = _conv_setup(self.obs_ndim, self.orthogonal, self.activation)
        x = jnp.asarray(x, jnp.float32)
        conv = lambda features: nn.Conv(features, (3, 3), padding="SAME", **init)
        batch = x.shape[:-3]
        x = x.reshape((-1, *x.shape[-3:]))  # flax's max_pool wants one batch dim
        for features in self.channels:
            x = conv(features)(x)
            x = nn.max_pool(x, (3, 3), strides=(2, 2), padding="SAME")
            for _ in range(2):
                x = x + conv(features)(act(conv(features)(act(x))))
        x = act(x).reshape(batch + x.shape[-3:])
        return MLP(self.hidden_sizes, self.activation, 3, orthogonal=self.orthogonal)(x)


MINATAR_CONVS = ((16, 3, 1),)
"""One 3x3 conv with 16 channels, stride 1: the MinAtar network (Young & Tian, 2019)."""
NATURE_CONVS = ((32, 8, 4), (64, 4, 2), (64, 3, 1))
"""The DQN Nature CNN's convolutions (Mnih et al., 2015; 512 hidden units after them)."""


TORSOS: dict[str, Callable[..., nn.Module]] = {
    "mlp": lambda **kw: MLP(**kw),
    "layernorm_mlp": lambda **kw: MLP(**{**kw, "layer_norm": True}),
    "minatar_cnn": lambda **kw: ConvTorso(MINATAR_CONVS, **kw),
    "nature_cnn": lambda **kw: ConvTorso(NATURE_CONVS, **kw),
    "impala_resnet": lambda **kw: ImpalaResNet(**kw),
}
"""Torso name -> ``factory(hidden_sizes=, activation=, obs_ndim=, orthogonal=) -> Module``
mapping observations ``[..., *obs_shape]`` to features ``[..., F]``; the ``torso`` config
value of every agent. :func:`register_torso` adds one (e.g. from a plugin)."""


def register_torso(name: str, factory: Callable[..., nn.Module], overwrite: bool = False) -> None:
    """Adds a torso: ``factory(hidden_sizes=, activation=, obs_ndim=, orthogonal=)`` returns a
    flax module ``obs [..., *obs_shape] -> features [..., F]``."""
    if name in TORSOS and not overwrite:
        raise ValueError(f"torso {name!r} is registered already (pass overwrite=True)")
    TORSOS[name] = factory


def make_torso(
    name: str,
    hidden_sizes,
    act: str,
    obs_ndim: int,
    orthogonal: bool = True,
    layer_norm: bool = False,
):
    """The torso called ``name`` (:data:`TORSOS`). ``layer_norm=True`` is passed on to the
    factory (``mlp``, ``layernorm_mlp``, ``minatar_cnn`` and ``nature_cnn`` take it); a torso
    whose factory does not take it is refused, not built without it."""
    if name not in TORSOS:
        raise ValueError(f"unknown torso {name!r}; choose from {sorted(TORSOS)}")
    kwargs = dict(
        hidden_sizes=tuple(hidden_sizes), activation=act, obs_ndim=obs_ndim, orthogonal=orthogonal
    )
    if not layer_norm:
        return TORSOS[name](**kwargs)
    try:
        return TORSOS[name](**kwargs, layer_norm=True)
    except TypeError as e:
        if "layer_norm" not in str(e):
            raise
        raise ValueError(f"the {name!r} torso has no layer_norm option") from None
