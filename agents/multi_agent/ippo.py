"""Independent PPO (IPPO): every agent of a team learns with PPO on its own observation.

The team's agents act at once (:class:`jrl.core.multi_agent_env.MultiAgentEnvironment`); each has
an actor
and a critic on its own observation, with one set of parameters shared by all agents
(``share_parameters``, the default: one network, with the agent's id in its observation
where the env gives one) or one set per agent. The loss is PPO's
(:func:`jrl.agents.actor_critic.ppo.ppo_loss`)
averaged over steps and agents, with GAE per agent; the network, the advantages and the
assembly are :mod:`jrl.agents.multi_agent.common`'s, shared with MAPPO.
"""

from __future__ import annotations

import dataclasses
from typing import ClassVar

from jrl.agents.actor_critic.ppo import PPOConfig, ppo_loss
from jrl.agents.multi_agent.common import build_multi_agent, multi_agent_checks

from jrl.parts.agent_config import Check
from jrl.run.builders import Built

__all__ = ["IPPOConfig", "build"]

COORDINATION = {
    "total_steps": 60_000,
    "num_envs": 16,
    "num_steps": 32,
    "num_minibatches": 2,
    "learning_rate": 3e-3,
}
"""Coordination-v0 (episodes of 8 rounds): a larger batch of short rollouts and a larger
step size than the PPO defaults."""

SIMPLE_SPREAD = {"total_steps": 10_000_000, "num_envs": 16}
"""JaxMARL's IPPO configuration for MPE simple_spread (``baselines/IPPO/config/ippo_ff_mpe.yaml``):
1e7 steps, 16 envs x 128 steps, 4 epochs x 4 minibatches, lr 2.5e-4 annealed, 64x64 tanh: the
PPO defaults otherwise."""


@dataclasses.dataclass(frozen=True)
class IPPOConfig(PPOConfig):
    """IPPO settings: PPO's fields and defaults (4 envs x 128 steps, 4 epochs x 4
    minibatches, 64x64 tanh, lr 2.5e-4 annealed), for a team of agents."""

    MULTI_AGENT: ClassVar[bool] = True
    PRESETS: ClassVar[dict[str, dict]] = {
        "Coordination-v0": COORDINATION,
        "TeamTruncationProbe-v0": {},
        "jaxmarl:MPE_simple_spread_v3": SIMPLE_SPREAD,
    }

    share_parameters: bool = True
    """One actor-critic network for all agents (else one per agent)."""

    def checks(self) -> list[Check]:
        return super().checks() + multi_agent_checks(self, "ippo")


def build(config: IPPOConfig, env, env_params, num_devices: int = 1) -> Built:
    """Assembles IPPO on the multi-agent ``env`` (as :func:`jrl.envs.make` returns it)."""
    return build_team(config, env, env_params, num_devices, centralised_critic=False, name="ippo")


def build_team(
    config: IPPOConfig, env, env_params, num_devices: int, centralised_critic: bool, name: str
) -> Built:
    """IPPO (local critics) or MAPPO (``centralised_critic``) with PPO's loss on ``env``."""
    clip = config.clip_value

    def loss(dist, values, entropy, mb, hp):
        return ppo_loss(dist, values, entropy, mb, hp, clip_value=clip)

    return build_multi_agent(
        config,
        env,
        env_params,
        loss,
        share_parameters=config.share_parameters,
        centralised_critic=centralised_critic,
        agent_name=name,
        num_devices=num_devices,
    )
