"""jrl: JAX-native reinforcement learning."""

from jrl import spaces
from jrl.env import Environment, Wrapper
from jrl.types import TimeStep, Transition

__version__ = "0.1.0"

__all__ = ["Environment", "TimeStep", "Transition", "Wrapper", "spaces", "__version__"]
