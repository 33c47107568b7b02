"""Networks as flax modules: heads and whole networks built from an env's spaces.

Every network feeds a torso (:mod:`jrl.parts.torsos`, chosen by name) into its heads.
Conventions: inputs are observations ``[..., *obs_shape]`` (flattened by the
torso), outputs keep the leading batch dimensions ``[...]``. Policy heads
return a distribution from :mod:`jrl.ops.action_distributions`.

Initialisation: orthogonal weights (gain ``sqrt(2)`` in hidden layers, small
gains for policy heads) as is standard for on-policy methods. Orthogonal init
runs a QR decomposition, which on jax 0.10 CPU can hang when *vmapped* over
seeds (see ARCHITECTURE.md); jrl therefore never vmaps ``init``: runners
initialise each seed separately and stack the results.
"""

from __future__ import annotations

from collections.abc import Sequence

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from jrl.core import spaces
from jrl.core.types import split_action_mask
from jrl.ops import action_distributions as distributions
from jrl.parts.torsos import MLP, make_torso, orthogonal_dense

__all__ = [
    "MuZeroNetwork",
    "ActorCritic",
    "CORES",
    "CategoricalActor",
    "ContinuousQ",
    "DeterministicActor",
    "DiscreteQEnsemble",
    "NoisyDense",
    "PolicyHead",
    "QEnsemble",
    "QNetwork",
    "RecurrentActorCritic",
    "RecurrentQNetwork",
    "SquashedGaussianActor",
    "example_observation",
    "initial_core_state",
    "reset_core_state",
]


def example_observation(space: spaces.Space):
    """A batch of one all-zero observation, ``[1, *obs_shape]`` per leaf, for ``Module.init``."""
    return jax.tree.map(lambda x: x[None], spaces.zeros_like_space(space))


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
            return distributions.Categorical(
                orthogonal_dense(space.n, self.gain)(features), mask=mask
            )
        if isinstance(space, spaces.MultiDiscrete):
            logits = orthogonal_dense(int(np.sum(space.nvec)), self.gain)(features)
            return distributions.MultiCategorical.from_flat(
                logits, tuple(int(n) for n in space.nvec)
            )
        if isinstance(space, spaces.Box):
            dim = int(np.prod(space.shape))
            mean = orthogonal_dense(dim, self.gain)(features)
            log_std = self.param("log_std", nn.initializers.constant(self.init_log_std), (dim,))
            log_std = jnp.broadcast_to(log_std, mean.shape)
            if self.continuous == "tanh_normal":
                low = jnp.broadcast_to(jnp.asarray(space.low.reshape(-1), jnp.float32), mean.shape)
                high = jnp.broadcast_to(
                    jnp.asarray(space.high.reshape(-1), jnp.float32), mean.shape
                )
                return distributions.TanhNormal(
                    mean, log_std, low=low, high=high
                )  # every leaf batched like mean
            return distributions.Normal(mean, log_std)
        raise TypeError(f"no policy head for action space {space!r}")


def _split_mask(obs, mask):
    """``(observation, mask)``: a masked env's ``{"observation", "action_mask"}`` split (the
    mask given, if any, wins), else ``(obs, mask)``."""
    obs, in_obs = split_action_mask(obs)
    return obs, in_obs if mask is None else mask


class ActorCritic(nn.Module):
    """Separate actor and critic torsos: ``obs -> (distribution, value [...])``.

    A masked env's observation ``{"observation": x, "action_mask": bool [..., A]}`` is split:
    the torsos see ``x`` and the policy gives invalid actions probability 0 (a ``mask`` argument
    overrides the observation's).
    """

    action_space: spaces.Space
    hidden_sizes: Sequence[int] = (64, 64)
    activation: str = "tanh"
    obs_ndim: int = 1
    continuous: str = "normal"
    init_log_std: float = 0.0
    torso: str = "mlp"  # a name of torsos.TORSOS
    shared_torso: bool = False  # one torso feeds both heads

    def setup(self):
        make = lambda: make_torso(self.torso, self.hidden_sizes, self.activation, self.obs_ndim)
        self.actor_torso = make()
        self.critic_torso = self.actor_torso if self.shared_torso else make()
        self.policy_head = PolicyHead(self.action_space, self.continuous, self.init_log_std)
        self.value_head = orthogonal_dense(1, 1.0)

    def __call__(self, obs: jax.Array, mask: jax.Array | None = None):
        return self.policy(obs, mask), self.value(obs)

    def policy(self, obs: jax.Array, mask: jax.Array | None = None):
        obs, mask = _split_mask(obs, mask)
        return self.policy_head(self.actor_torso(obs), mask)

    def value(self, obs: jax.Array) -> jax.Array:
        obs, _ = split_action_mask(obs)
        return self.value_head(self.critic_torso(obs))[..., 0]


CORES = ("lstm", "gru")
"""The recurrent cores of :class:`RecurrentActorCritic`: flax's ``OptimizedLSTMCell`` (state
``(c, h)``) and ``GRUCell`` (state ``h``)."""


def initial_core_state(core: str, size: int, num: int):
    """The state of ``num`` fresh ``core`` cells of ``size`` units: zeros, ``[num, size]`` per
    leaf (``(c, h)`` for an LSTM, ``h`` for a GRU)."""
    if core not in CORES:
        raise ValueError(f"unknown recurrent core {core!r}; choose from {list(CORES)}")
    zeros = jnp.zeros((num, size), jnp.float32)
    return (zeros, zeros) if core == "lstm" else zeros


def reset_core_state(state, initial, episode_start: jax.Array):
    """``state`` with row ``i`` of every leaf replaced by ``initial``'s where
    ``episode_start[i]`` is true (``[N]`` bool; leaves ``[N, ...]``)."""

    def pick(init, x):
        start = episode_start.reshape(episode_start.shape + (1,) * (x.ndim - episode_start.ndim))
        return jnp.where(start, init, x)

    return jax.tree.map(pick, initial, state)


class RecurrentActorCritic(nn.Module):
    """``obs -> torso -> recurrent core -> (distribution, value)``: one torso and one core
    (``core``: an LSTM or GRU of ``core_size`` units) feed a policy head and a value head.

    A step is three methods so a learner can unroll the core alone over a sequence:
    :meth:`embed` (the torso, over any leading dims), :meth:`core_step` (one step of the cell
    on ``[N, F]`` features from state ``[N, core_size]``) and :meth:`heads`; ``__call__`` is one
    whole step ``(state, obs) -> (state, distribution, value)``. A masked env's observation is
    split as for :class:`ActorCritic`: :meth:`embed` sees ``x``, :meth:`heads` takes the mask.
    """

    action_space: spaces.Space
    core: str = "lstm"  # one of CORES
    core_size: int = 128
    hidden_sizes: Sequence[int] = (64,)
    activation: str = "tanh"
    obs_ndim: int = 1
    continuous: str = "normal"
    init_log_std: float = 0.0
    torso: str = "mlp"  # a name of torsos.TORSOS

    def setup(self):
        self.torso_module = make_torso(
            self.torso, self.hidden_sizes, self.activation, self.obs_ndim
        )
        cell = {"lstm": nn.OptimizedLSTMCell, "gru": nn.GRUCell}
        if self.core not in cell:
            raise ValueError(f"unknown recurrent core {self.core!r}; choose from {list(CORES)}")
        self.cell = cell[self.core](self.core_size)
        self.policy_head = PolicyHead(self.action_space, self.continuous, self.init_log_std)
        self.value_head = orthogonal_dense(1, 1.0)

    def __call__(self, state, obs: jax.Array):
        state, out = self.core_step(state, self.embed(obs))
        dist, value = self.heads(out, split_action_mask(obs)[1])
        return state, dist, value

    def embed(self, obs: jax.Array) -> jax.Array:
        return self.torso_module(split_action_mask(obs)[0])

    def core_step(self, state, features: jax.Array):
        return self.cell(state, features)

    def heads(self, out: jax.Array, mask: jax.Array | None = None):
        return self.policy_head(out, mask), self.value_head(out)[..., 0]


class NoisyDense(nn.Module):
    """A factorised-Gaussian noisy linear layer (Fortunato et al., 2018): ``[..., p] -> [..., q]``.

    Parameters ``mu_w [p, q]``, ``mu_b [q]`` (init ``U(-1/sqrt(p), 1/sqrt(p))``)
    and ``sigma_w [p, q]``, ``sigma_b [q]`` (init ``sigma0 / sqrt(p)``). With
    ``noise=True`` the layer draws standard normals ``eps_in [p]`` and
    ``eps_out [q]`` from the ``"noise"`` rng stream (``apply(...,
    rngs={"noise": key})``; one draw per call, shared by every batch row),
    and with ``f(x) = sign(x) sqrt(|x|)`` uses

        w = mu_w + sigma_w * outer(f(eps_in), f(eps_out)),
        b = mu_b + sigma_b * f(eps_out).

    ``noise=False`` (the default; also what ``init`` uses, so init needs no
    noise key) uses the means ``mu_w``, ``mu_b``: the greedy evaluation
    network. When noise is drawn the raw normals are sown as
    ``intermediates/eps_in`` and ``intermediates/eps_out`` (recorded only if
    ``apply`` is called with ``mutable=["intermediates"]``).
    """

    features: int
    sigma0: float = 0.5

    @nn.compact
    def __call__(self, x: jax.Array, noise: bool = False) -> jax.Array:
        x = jnp.asarray(x, jnp.float32)
        p, q = x.shape[-1], self.features
        bound = 1.0 / np.sqrt(p)
        mu_init = _symmetric_uniform(bound)
        mu_w = self.param("mu_w", mu_init, (p, q), jnp.float32)
        mu_b = self.param("mu_b", mu_init, (q,), jnp.float32)
        sigma_w = self.param(
            "sigma_w", nn.initializers.constant(self.sigma0 * bound), (p, q), jnp.float32
        )
        sigma_b = self.param(
            "sigma_b", nn.initializers.constant(self.sigma0 * bound), (q,), jnp.float32
        )
        if not noise:
            return x @ mu_w + mu_b
        key_in, key_out = jax.random.split(self.make_rng("noise"))
        eps_in = jax.random.normal(key_in, (p,), jnp.float32)
        eps_out = jax.random.normal(key_out, (q,), jnp.float32)
        self.sow("intermediates", "eps_in", eps_in)
        self.sow("intermediates", "eps_out", eps_out)
        f_in, f_out = _scale_noise(eps_in), _scale_noise(eps_out)
        w = mu_w + sigma_w * jnp.outer(f_in, f_out)
        b = mu_b + sigma_b * f_out
        return x @ w + b


def _scale_noise(eps: jax.Array) -> jax.Array:
    """``f(x) = sign(x) sqrt(|x|)``, the factorised-noise transform."""
    return jnp.sign(eps) * jnp.sqrt(jnp.abs(eps))


def _symmetric_uniform(bound: float):
    """An initialiser drawing ``U(-bound, bound)``."""

    def init(key, shape, dtype=jnp.float32):
        return jax.random.uniform(key, shape, dtype, -bound, bound)

    return init


class QNetwork(nn.Module):
    """Action values for a Discrete action space: ``obs [..., *obs_shape] -> q [..., num_actions]``.

    A torso (``torso``, :func:`~jrl.parts.torsos.make_torso`; flax's default init, no orthogonal
    QR; ``layer_norm`` puts a LayerNorm after each hidden layer, before the
    activation) and a Dense head; with ``dueling`` (Wang et al., 2016) separate value and advantage
    streams are combined as ``q = v + a - mean_a(a)``.

    ``num_atoms = K > 1`` gives ``[..., num_actions, K]`` numbers per action
    (C51 logits or QR-DQN quantiles: the caller decides; see
    :mod:`jrl.ops.return_distributions`); with ``dueling`` the value stream is
    ``[..., 1, K]``, the advantage ``[..., A, K]``, and the mean is over the
    action axis. ``num_atoms = 1`` keeps the plain ``[..., num_actions]``.

    ``noisy`` makes the output layers (the head, or both dueling streams)
    :class:`NoisyDense` layers. Call with ``noise=True`` and
    ``apply(params, obs, noise=True, rngs={"noise": key})`` for a noisy
    (exploring) pass; ``noise=False`` (the default, and what ``init`` uses)
    takes the mean weights. ``noise`` is ignored when ``noisy`` is False.
    """

    num_actions: int
    hidden_sizes: Sequence[int] = (64, 64)
    activation: str = "relu"
    obs_ndim: int = 1
    dueling: bool = False
    num_atoms: int = 1  # > 1: outputs [..., num_actions, num_atoms]
    noisy: bool = False  # NoisyDense output layers (Fortunato et al., 2018)
    layer_norm: bool = False  # LayerNorm after each hidden layer of the torso (make_torso)
    sigma0: float = 0.5  # NoisyDense's initial noise scale (used when noisy)
    torso: str = "mlp"  # a name of torsos.TORSOS

    def _out(self, features: jax.Array, size: int, noise: bool) -> jax.Array:
        if self.noisy:
            return NoisyDense(size, self.sigma0)(features, noise)
        return nn.Dense(size)(features)

    @nn.compact
    def __call__(self, obs: jax.Array, noise: bool = False) -> jax.Array:
        if self.num_atoms < 1:
            raise ValueError(f"num_atoms must be >= 1, got {self.num_atoms}")
        torso = make_torso(  # (the layer_norm switch is PQN's)
            self.torso,
            self.hidden_sizes,
            self.activation,
            self.obs_ndim,
            orthogonal=False,
            layer_norm=self.layer_norm,
        )
        features = torso(obs)
        num_actions, num_atoms = self.num_actions, self.num_atoms
        batch = features.shape[:-1]
        if not self.dueling:
            q = self._out(features, num_actions * num_atoms, noise)
            return q if num_atoms == 1 else q.reshape(batch + (num_actions, num_atoms))
        value = self._out(features, num_atoms, noise).reshape(batch + (1, num_atoms))
        advantage = self._out(features, num_actions * num_atoms, noise).reshape(
            batch + (num_actions, num_atoms)
        )
        q = value + advantage - advantage.mean(axis=-2, keepdims=True)  # [..., A, K]
        return q[..., 0] if num_atoms == 1 else q


class RecurrentQNetwork(nn.Module):
    """Action values with memory: ``obs -> torso -> recurrent core -> Dense -> q [N, A]``
    (R2D2's network shape; ``core``: an LSTM or GRU of ``core_size`` units, flax's default
    init like :class:`QNetwork`; ``dueling`` splits the head into value and advantage
    streams).

    Like :class:`RecurrentActorCritic` a step is three methods, so a learner can embed a whole
    sequence at once and unroll the core alone: :meth:`embed` (the torso, any leading dims),
    :meth:`core_step` (``(state [N, core_size], features [N, F]) -> (state, out [N,
    core_size])``) and :meth:`q_values` (``out [..., core_size] -> q [..., A]``); ``__call__``
    is one whole step ``(state, obs) -> (state, q)``.
    """

    num_actions: int
    core: str = "lstm"  # one of CORES
    core_size: int = 128
    hidden_sizes: Sequence[int] = (64,)
    activation: str = "relu"
    obs_ndim: int = 1
    dueling: bool = False
    torso: str = "mlp"  # a name of torsos.TORSOS

    def setup(self):
        self.torso_module = make_torso(
            self.torso, self.hidden_sizes, self.activation, self.obs_ndim, orthogonal=False
        )
        cell = {"lstm": nn.OptimizedLSTMCell, "gru": nn.GRUCell}
        if self.core not in cell:
            raise ValueError(f"unknown recurrent core {self.core!r}; choose from {list(CORES)}")
        self.cell = cell[self.core](self.core_size)
        self.advantage_head = nn.Dense(self.num_actions)
        if self.dueling:
            self.value_head = nn.Dense(1)

    def __call__(self, state, obs: jax.Array):
        state, out = self.core_step(state, self.embed(obs))
        return state, self.q_values(out)

    def embed(self, obs: jax.Array) -> jax.Array:
        return self.torso_module(obs)

    def core_step(self, state, features: jax.Array):
        return self.cell(state, features)

    def q_values(self, out: jax.Array) -> jax.Array:
        advantage = self.advantage_head(out)
        if not self.dueling:
            return advantage
        return self.value_head(out) + advantage - advantage.mean(axis=-1, keepdims=True)


# ---------------------------------------------------------------------------
# Continuous control: Q(obs, action) ensembles and actors acting in [-1, 1]
# ---------------------------------------------------------------------------


class ContinuousQ(nn.Module):
    """``Q(obs, action)`` for Box actions: ``obs [..., *obs_shape]`` (its trailing ``obs_ndim``
    dims flattened) and ``action [..., A]`` concatenated, an MLP (flax's default init;
    ``layer_norm``: a LayerNorm after each hidden Dense), a Dense to one value ``[...]``."""

    hidden_sizes: Sequence[int] = (256, 256)
    activation: str = "relu"
    obs_ndim: int = 1
    layer_norm: bool = False

    @nn.compact
    def __call__(self, obs: jax.Array, action: jax.Array) -> jax.Array:
        obs = jnp.asarray(obs, jnp.float32)
        batch = obs.shape[: obs.ndim - self.obs_ndim]
        x = jnp.concatenate([obs.reshape(batch + (-1,)), jnp.asarray(action, jnp.float32)], -1)
        x = MLP(self.hidden_sizes, self.activation, 1, self.layer_norm, orthogonal=False)(x)
        return nn.Dense(1)(x)[..., 0]


class QEnsemble(nn.Module):
    """``num_critics`` independent :class:`ContinuousQ` networks as one vmapped module:
    ``(obs, action) -> q [num_critics, ...]``; every parameter has a leading
    ``[num_critics]`` axis. (flax's default init draws no QR, so a vmapped init is safe.)"""

    num_critics: int = 2
    hidden_sizes: Sequence[int] = (256, 256)
    activation: str = "relu"
    obs_ndim: int = 1
    layer_norm: bool = False

    @nn.compact
    def __call__(self, obs: jax.Array, action: jax.Array) -> jax.Array:
        ensemble = nn.vmap(
            ContinuousQ,
            variable_axes={"params": 0},
            split_rngs={"params": True},
            in_axes=None,
            out_axes=0,
            axis_size=self.num_critics,
        )
        return ensemble(self.hidden_sizes, self.activation, self.obs_ndim, self.layer_norm)(
            obs, action
        )


class DiscreteQEnsemble(nn.Module):
    """``num_critics`` independent :class:`QNetwork` s as one vmapped module: ``obs [...,
    *obs_shape] -> q [num_critics, ..., num_actions]``, every parameter with a leading
    ``[num_critics]`` axis (discrete SAC's critics; flax's default init, no QR)."""

    num_actions: int
    num_critics: int = 2
    hidden_sizes: Sequence[int] = (256, 256)
    activation: str = "relu"
    obs_ndim: int = 1
    torso: str = "mlp"  # a name of torsos.TORSOS

    @nn.compact
    def __call__(self, obs: jax.Array) -> jax.Array:
        ensemble = nn.vmap(
            QNetwork,
            variable_axes={"params": 0},
            split_rngs={"params": True},
            in_axes=None,
            out_axes=0,
            axis_size=self.num_critics,
        )
        q = ensemble(
            self.num_actions, self.hidden_sizes, self.activation, self.obs_ndim, torso=self.torso
        )
        return q(obs)


class CategoricalActor(nn.Module):
    """``obs -> Categorical`` over ``num_actions`` (discrete SAC): a torso (flax's default init)
    and a Dense of orthogonal gain 0.01 (a nearly uniform first policy). A masked env's
    ``{"observation", "action_mask"}`` is split and invalid actions get probability 0."""

    num_actions: int
    hidden_sizes: Sequence[int] = (256, 256)
    activation: str = "relu"
    obs_ndim: int = 1
    torso: str = "mlp"  # a name of torsos.TORSOS

    @nn.compact
    def __call__(self, obs, mask: jax.Array | None = None) -> distributions.Categorical:
        obs, mask = _split_mask(obs, mask)
        x = make_torso(
            self.torso, self.hidden_sizes, self.activation, self.obs_ndim, orthogonal=False
        )(obs)
        return PolicyHead(spaces.Discrete(self.num_actions))(x, mask)


class DeterministicActor(nn.Module):
    """``obs -> tanh(Dense(MLP(obs)))``: actions ``[..., action_dim]`` in ``[-1, 1]``
    (TD3, DDPG)."""

    action_dim: int
    hidden_sizes: Sequence[int] = (256, 256)
    activation: str = "relu"
    obs_ndim: int = 1
    torso: str = "mlp"  # a name of torsos.TORSOS

    @nn.compact
    def __call__(self, obs: jax.Array) -> jax.Array:
        x = make_torso(
            self.torso, self.hidden_sizes, self.activation, self.obs_ndim, orthogonal=False
        )(obs)
        return jnp.tanh(nn.Dense(self.action_dim)(x))


LOG_STD_MIN, LOG_STD_MAX = -5.0, 2.0
"""The range :class:`SquashedGaussianActor` clips its log-std to."""


class SquashedGaussianActor(nn.Module):
    """``obs -> TanhNormal(mean, log_std)`` on ``[-1, 1]^action_dim`` (SAC): a state-dependent
    mean and log-std (clipped to [LOG_STD_MIN, LOG_STD_MAX]) from one MLP."""

    action_dim: int
    hidden_sizes: Sequence[int] = (256, 256)
    activation: str = "relu"
    obs_ndim: int = 1
    torso: str = "mlp"  # a name of torsos.TORSOS

    @nn.compact
    def __call__(self, obs: jax.Array) -> distributions.TanhNormal:
        x = make_torso(
            self.torso, self.hidden_sizes, self.activation, self.obs_ndim, orthogonal=False
        )(obs)
        mean = nn.Dense(self.action_dim)(x)
        log_std = jnp.clip(nn.Dense(self.action_dim)(x), LOG_STD_MIN, LOG_STD_MAX)
        return distributions.TanhNormal(mean, log_std)


def _min_max_scale(x: jax.Array) -> jax.Array:
    """Each row of ``x [..., D]`` rescaled to [0, 1] (MuZero's hidden-state normalisation)."""
    low = x.min(axis=-1, keepdims=True)
    high = x.max(axis=-1, keepdims=True)
    return (x - low) / jnp.maximum(high - low, 1e-5)


class MuZeroNetwork(nn.Module):
    """MuZero's learned model (Schrittwieser et al., 2020), three MLPs over a latent state:

    - :meth:`represent`: ``obs [B, *obs_shape] -> latent [B, D]``;
    - :meth:`dynamics`: ``(latent [B, D], action int[B]) -> (latent [B, D], reward logits
      [B, 2S + 1])``;
    - :meth:`predict`: ``latent [B, D] -> (policy logits [B, A], value logits [B, 2S + 1])``.

    Latents are min-max scaled to [0, 1] per row. Reward and value are categorical over the
    atoms ``-S..S`` of the transformed scale
    (:func:`jrl.ops.return_distributions.two_hot_to_scalar`);
    their output layers, and the policy's, start at zero (value and reward 0, a uniform
    prior). ``__call__`` runs all three (for ``init``).
    """

    num_actions: int
    hidden_sizes: Sequence[int] = (64, 64)
    latent_size: int = 64
    support_size: int = 10
    activation: str = "relu"
    obs_ndim: int = 1

    def setup(self):
        atoms = 2 * self.support_size + 1
        zero = dict(kernel_init=nn.initializers.zeros, bias_init=nn.initializers.zeros)
        self.represent_torso = MLP(self.hidden_sizes, self.activation, self.obs_ndim)
        self.represent_out = orthogonal_dense(self.latent_size, 1.0)
        self.dynamics_torso = MLP(self.hidden_sizes, self.activation, 1)
        self.dynamics_out = orthogonal_dense(self.latent_size, 1.0)
        self.reward_head = nn.Dense(atoms, **zero)
        self.predict_torso = MLP(self.hidden_sizes, self.activation, 1)
        self.policy_head = nn.Dense(self.num_actions, **zero)
        self.value_head = nn.Dense(atoms, **zero)

    def represent(self, obs: jax.Array) -> jax.Array:
        return _min_max_scale(self.represent_out(self.represent_torso(obs)))

    def dynamics(self, latent: jax.Array, action: jax.Array) -> tuple[jax.Array, jax.Array]:
        x = jnp.concatenate([latent, jax.nn.one_hot(action, self.num_actions)], axis=-1)
        h = self.dynamics_torso(x)
        return _min_max_scale(self.dynamics_out(h)), self.reward_head(h)

    def predict(self, latent: jax.Array) -> tuple[jax.Array, jax.Array]:
        h = self.predict_torso(latent)
        return self.policy_head(h), self.value_head(h)

    def __call__(self, obs: jax.Array, action: jax.Array):
        latent = self.represent(obs)
        next_latent, reward = self.dynamics(latent, action)
        return self.predict(next_latent), reward
