"""Writes ``baselines/<game>_v0.ckpt`` for pgx's AlphaZero example: pgx's own baseline
architecture (``pgx._src.baseline._create_az_model_v0``) with every parameter zero, so all its
logits are equal.

pgx's ``examples/alphazero/train.py`` loads ``pgx.make_baseline_model(game + "_v0")`` when it
is imported, which downloads the real baseline from Google Drive unless the file is already
in ``baselines/``; this machine cannot reach Google Drive. With this file in place the example
runs unchanged; its own "vs_baseline" numbers are then against a player sampling uniformly
from all moves (the example does not mask the baseline's illegal moves), which is why the
side-by-side judges both libraries with ``games_vs_random.py`` instead. Run in the example's
environment, from its folder::

    python /path/to/jrl/benchmarks/pgx_uniform_baseline.py othello

pgx has no public function that builds the baseline's architecture without downloading its
weights (``make_baseline_model`` loads them), so this script calls pgx's private
``_create_az_model_v0``, the function ``make_baseline_model`` builds the network with: the
checkpoint then holds exactly the parameters that function expects. It is a peer's private
name, called in that peer's own environment (as ``threefry_ab.py`` reaches into jax's); the
benchmarks never call jrl's private names (``tests/test_benchmarks.py``).
"""

from __future__ import annotations

import os
import pickle

from common import script_parser


def main(argv=None) -> None:
    parser = script_parser(__doc__)
    parser.add_argument("game", help="a pgx game with an AlphaZero baseline, e.g. othello")
    game = parser.parse_args(argv).game
    # imported here, not at the top: pgx and dm-haiku are installed only in pgx's example's
    # environment, and `--help` works without them
    import haiku as hk
    import jax
    import jax.numpy as jnp
    import pgx
    from pgx._src.baseline import _create_az_model_v0

    out = os.path.join("baselines", f"{game}_v0.ckpt")
    env = pgx.make(game)
    args = dict(num_actions=env.num_actions, num_channels=4, num_layers=1, resnet_v2=True)

    def forward_fn(x, is_eval=False):
        net = _create_az_model_v0(**args)
        return net(x, is_training=not is_eval, test_local_stats=False)

    forward = hk.without_apply_rng(hk.transform_with_state(forward_fn))
    obs = jax.vmap(env.init)(jax.random.split(jax.random.PRNGKey(0), 2)).observation
    params, state = forward.init(jax.random.PRNGKey(0), obs)
    params = jax.tree_util.tree_map(jnp.zeros_like, params)
    (logits, _), _ = forward.apply(params, state, obs, is_eval=True)
    assert float(jnp.abs(logits).max()) == 0.0
    os.makedirs("baselines", exist_ok=True)
    with open(out, "wb") as f:
        data = {"args": args, "params": jax.device_get(params), "state": jax.device_get(state)}
        pickle.dump(data, f)
    print("wrote", out)


if __name__ == "__main__":
    main()
