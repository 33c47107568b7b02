"""Worker for tests/test_distributed.py (run as a script in a subprocess).

    python tests/dist_worker.py OUT.npz AGENT DEVICES [--fake-devices N]
        [--process-id I --num-processes P --coordinator A]

Trains AGENT for a few iterations with the same global batch whatever the
device count and saves the final parameters of every run.
"""

import argparse
import os
import sys

p = argparse.ArgumentParser()
p.add_argument("out")
p.add_argument("agent")
p.add_argument("devices", type=int)  # 0: the plain unsharded program
p.add_argument("--fake-devices", type=int, default=1)
p.add_argument("--process-id", type=int)
p.add_argument("--num-processes", type=int)
p.add_argument("--coordinator")
p.add_argument("--total-steps", type=int, default=0)
p.add_argument("--seeds", type=int, default=2)
p.add_argument("--actor-threads", type=int, default=0)  # sebulba: threads per process
a = p.parse_args()
# XLA's CPU collectives give up when a device thread is 40 s late to a rendezvous: on a loaded
# 2-core machine (the whole suite on two workers) a thread can be descheduled that long
os.environ["XLA_FLAGS"] = (
    f"--xla_force_host_platform_device_count={a.fake_devices} "
    "--xla_cpu_collective_call_terminate_timeout_seconds=600 "
    "--xla_cpu_collective_call_warn_stuck_timeout_seconds=120"
)
os.environ["JAX_PLATFORMS"] = "cpu"

import jax  # noqa: E402
import numpy as np  # noqa: E402

if os.environ.get("JRL_TEST_COMPILE_CACHE"):  # share the test run's compilation cache
    jax.config.update("jax_compilation_cache_dir", os.environ["JRL_TEST_COMPILE_CACHE"])
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.5)

import jrl  # noqa: E402
import jrl.app.distributed  # noqa: E402

if a.num_processes:
    jrl.app.distributed.initialize(
        a.coordinator, a.num_processes, a.process_id, timeout=300
    )  # a loaded machine starts slowly

SMALL = {
    "ppo": dict(num_envs=4, num_steps=32, total_steps=4 * 32 * 4),
    "a2c": dict(num_envs=4, num_steps=8, total_steps=4 * 8 * 4),
    "reinforce": dict(num_envs=4, num_steps=32, total_steps=4 * 32 * 4),
    "impala": dict(num_envs=4, num_steps=16, total_steps=4 * 16 * 4),
    # 12 iterations of 16 steps, updates from the 4th (2 per iteration), target copied every 3
    "dqn": dict(
        num_envs=4,
        steps_per_iteration=4,
        updates_per_iteration=2,
        batch_size=32,
        buffer_size=400,
        learning_starts=64,
        n_step=2,
        target_update_interval=3,
        total_steps=4 * 4 * 12,
    ),
}
# 12 iterations of 4 envs x 2 steps, updates from the 3rd, 2 per iteration (TD3: the actor and
# targets on every 2nd), one item per env in each batch of 16
CONTINUOUS = dict(
    num_envs=4,
    steps_per_iteration=2,
    updates_per_iteration=2,
    batch_size=16,
    buffer_size=96,
    learning_starts=24,
    hidden_sizes=(16, 16),
    total_steps=4 * 2 * 12,
)
for name in ("sac", "td3", "ddpg", "sac_discrete"):  # sac_discrete: on CartPole-v1
    SMALL[name] = CONTINUOUS
# DDPG explores with OU noise here: the per-env noise state (the off-policy loop's acting
# state) must be split over devices like the envs; Gaussian exploration is TD3's case
SMALL["ddpg"] = {**CONTINUOUS, "noise": "ou", "ou_dt": 0.1}
# 3 iterations of 4 games x 4 moves, 4 simulations per move, the last 2 rollouts replayed
SMALL["alphazero"] = dict(
    num_envs=4,
    num_steps=4,
    num_simulations=4,
    hidden_sizes=(16, 16),
    replay_rollouts=2,
    num_minibatches=2,
    total_steps=4 * 4 * 3,
)
# 6 iterations of 4 envs x 2 steps, 4 simulations per step, updates from the 3rd on 8
# sequences of 2 + 2 + 1 steps; on CartPole (muzero-game: the same on tic-tac-toe)
SMALL["muzero"] = dict(
    num_envs=4,
    steps_per_iteration=2,
    updates_per_iteration=2,
    batch_size=8,
    buffer_size=64,
    learning_starts=20,
    unroll_steps=2,
    td_steps=2,
    num_simulations=4,
    hidden_sizes=(16,),
    latent_size=8,
    support_size=3,
    total_steps=4 * 2 * 6,
)
SMALL["muzero-game"] = SMALL["muzero"]
ENV = {"sac": "Pendulum-v1", "td3": "Pendulum-v1", "ddpg": "Pendulum-v1"}
ENV["alphazero"] = "TicTacToe-v0"
# 4 iterations of 4 envs x 16 steps, one network per agent
SMALL["ippo"] = dict(num_envs=4, num_steps=16, total_steps=4 * 16 * 4, share_parameters=False)
ENV["ippo"] = "Coordination-v0"
ENV["muzero-game"] = "TicTacToe-v0"
# Sebulba: host CartPole envs stepped by actor threads, 3 synchronous iterations of 4 x 16 steps
SMALL["ppo-sebulba"] = dict(num_envs=4, num_steps=16, total_steps=4 * 16 * 3, runner="sebulba")
ENV["ppo-sebulba"] = "gymnasium:CartPole-v1"
overrides = dict(SMALL[a.agent])
agent = a.agent.split("-")[0]
if a.total_steps:
    overrides = {"total_steps": a.total_steps}
if a.actor_threads:
    overrides["actor_threads"] = a.actor_threads
res = jrl.train(
    agent,
    ENV.get(a.agent, "CartPole-v1"),
    seeds=a.seeds,
    seed=3,
    progress=False,
    devices=a.devices or None,
    **overrides,
)
leaves = [np.asarray(x) for x in jax.tree.leaves(res.final_params)]
np.savez(a.out, *leaves, final_returns=res.final_returns(), process=jax.process_index())
print("done", jax.process_index(), jax.device_count(), res.summary(), flush=True)
sys.exit(0)
