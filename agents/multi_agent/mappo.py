"""Multi-agent PPO (MAPPO, Yu et al., 2022): PPO actors on each agent's own observation and a
centralised critic on the global state.

The actors are IPPO's (shared parameters by default, or one set per agent); the critic is
one network on the env's global state
(:meth:`jrl.core.multi_agent_env.MultiAgentEnvironment.global_state`)
with one value per agent, used only while learning, so the agents still act on their own
observations. The loss is PPO's averaged over steps and agents
(:mod:`jrl.agents.multi_agent.common`).
"""

from __future__ import annotations

import dataclasses
from typing import ClassVar

from jrl.agents.multi_agent.common import multi_agent_checks
from jrl.agents.multi_agent.ippo import COORDINATION, SIMPLE_SPREAD, IPPOConfig, build_team

from jrl.parts.agent_config import Check
from jrl.run.builders import Built

__all__ = ["MAPPOConfig", "build"]


@dataclasses.dataclass(frozen=True)
class MAPPOConfig(IPPOConfig):
    """MAPPO settings: IPPO's (PPO's defaults), with a centralised critic on the global
    state."""

    PRESETS: ClassVar[dict[str, dict]] = {
        "Coordination-v0": COORDINATION,
        "TeamTruncationProbe-v0": {},
        "jaxmarl:MPE_simple_spread_v3": SIMPLE_SPREAD,
    }

    def checks(self) -> list[Check]:
        return super(IPPOConfig, self).checks() + multi_agent_checks(self, "mappo")


def build(config: MAPPOConfig, env, env_params, num_devices: int = 1) -> Built:
    """Assembles MAPPO on the multi-agent ``env`` (as :func:`jrl.envs.make` returns it)."""
    return build_team(config, env, env_params, num_devices, centralised_critic=True, name="mappo")
