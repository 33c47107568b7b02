"""The parts agents are built from: the agent contract, config bases, the learner step,
networks and torsos, the optimiser and replay buffers.

Each module is reachable as an attribute without importing it first."""

from jrl.util.submodules import lazy_submodules

__getattr__ = lazy_submodules(__name__)
