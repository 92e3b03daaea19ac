"""How it is simulated: engines that turn a :class:`~palm.plan.Plan` into a result."""

from palm.engines.analytical import run_analytical
from palm.engines.event import run_event

__all__ = ["run_analytical", "run_event"]
