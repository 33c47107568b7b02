"""Judges the checkpoints of pgx's AlphaZero example (``examples/alphazero/train.py`` of
github.com/sotetsuk/pgx, run unchanged from a checkout outside this repository) by the
protocol of ``games_vs_random.py``: the network's most likely legal move against the
uniformly random player, half the games as first player.

Runs in the example's own environment (pgx, dm-haiku; jrl need not be installed there)::

    python benchmarks/pgx_az_checkpoints.py CHECKOUT/examples/alphazero \\
        CHECKOUT/examples/alphazero/checkpoints/othello_<time> [--games 1000]

Prints one JSON object per checkpoint: its iteration, the example's own count of training
hours (self-play and learning, evaluation excluded) and frames (moves), the network's size,
and the win, draw and loss rates.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import pickle
from pathlib import Path

import jax
from games_vs_random import win_rate


class _Config:
    """Stands in for the example's pydantic ``Config`` (pickled from its ``__main__``)."""

    def __setstate__(self, state):
        self.fields = dict(state.get("__dict__", state))


class _Unpickler(pickle.Unpickler):
    def find_class(self, module, name):
        if module == "__main__" and name == "Config":
            return _Config
        return super().find_class(module, name)


def _example_network(example_dir: Path):
    """The example's own ``network.py`` (its ``AZNet``), loaded from its file as it is."""
    path = example_dir / "network.py"
    if not path.is_file():
        raise SystemExit(f"{path} not found: pass the checkout's examples/alphazero folder")
    spec = importlib.util.spec_from_file_location("pgx_example_network", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("example_dir", type=Path, help="the checkout's examples/alphazero")
    p.add_argument("checkpoints", type=Path, help="a folder of the example's *.ckpt files")
    p.add_argument("--games", type=int, default=1000)
    a = p.parse_args()
    import haiku as hk
    import pgx

    AZNet = _example_network(a.example_dir).AZNet

    for path in sorted(a.checkpoints.glob("*.ckpt")):
        with open(path, "rb") as f:
            d = _Unpickler(f).load()
        conf = d["config"].fields
        env = pgx.make(conf["env_id"])

        def forward_fn(x, conf=conf, env=env):
            net = AZNet(
                num_actions=env.num_actions,
                num_channels=conf["num_channels"],
                num_blocks=conf["num_layers"],
                resnet_v2=conf["resnet_v2"],
            )
            return net(x, is_training=False, test_local_stats=False)

        forward = hk.without_apply_rng(hk.transform_with_state(forward_fn))
        params, state = d["model"]

        def logits(obs, params=params, state=state, forward=forward):
            return forward.apply(params, state, obs)[0][0]

        rates = jax.jit(lambda k, logits=logits, env=env: win_rate(env, logits, a.games, k))(
            jax.random.PRNGKey(1)
        )
        row = {
            "iteration": d["iteration"],
            "hours": d["hours"],
            "frames": d["frames"],
            "network_parameters": int(sum(x.size for x in jax.tree_util.tree_leaves(params))),
            **{k: round(float(v), 4) for k, v in rates.items()},
        }
        print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
