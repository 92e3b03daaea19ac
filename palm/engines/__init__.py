"""How it is simulated: engines that turn a :class:`~palm.plan.Plan` into a result."""

from palm.engines.analytical import run_analytical

__all__ = ["run_analytical", "ENGINES"]

ENGINES: tuple[str, ...] = ("analytical",)
