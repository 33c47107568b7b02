"""MinAtar smoke: PPO's MinAtar preset on gymnax:Breakout-MinAtar, cut to a CI budget, clearly
beats the uniform random policy.

Measured (``python benchmarks/memory.py --only breakout-random breakout-ppo-smoke``; BENCHMARKS.md
"Memory tasks and MinAtar"): the random policy returns 0.41 (std 0.66 over 1000 episodes);
after the smoke budget PPO's final training return is 1.31 and 1.33 for seeds 0 and 1. On 8
seeds from 1000 (2026-12-04, ``benchmarks/learning_reach.py``, BENCHMARKS.md "Learning reach"):
1.48 +- 0.24 (0.98 .. 1.78), the worst pair's mean 1.14. So the two seeds' mean must reach 0.9
(2.2 times random's mean; margin 0.24 over the worst pair) and each seed 0.7 (1.7 times random's;
margin 0.28 over the lowest seed). (PPO's full MinAtar batch, 64 envs x 128 steps with 4
epochs, reaches 0.95 in 65k steps and 4.4-4.6 in 262k, at 5 times the cost per step of this
one.)
"""

import numpy as np
import pytest

import jrl

pytest.importorskip("gymnax")

SMOKE = dict(
    total_steps=49_152,
    num_envs=32,
    num_steps=64,
    num_epochs=2,
    num_minibatches=4,
    learning_rate=1e-3,
)
"""PPO's MinAtar preset (the MinAtar network, one torso) with a smaller batch, 2 epochs and lr
1e-3 for 24 iterations: 0.5% of the preset's 10M steps."""

RANDOM_RETURN = 0.41
"""The uniform random policy's mean return on Breakout-MinAtar (benchmarks/memory.py)."""


@pytest.mark.learning
def test_ppo_breakout_minatar_beats_random(learning_seed):
    result = jrl.train(
        "ppo", "gymnax:Breakout-MinAtar", 2, seed=learning_seed, progress=False, **SMOKE
    )
    final = result.metrics["train/episode_return"][:, -1]
    assert (final >= 0.7).all() and final.mean() >= 0.9, final
    assert np.isfinite(result.metrics["train/loss"]).all()
