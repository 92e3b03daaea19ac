"""Exception hierarchy of the simulator.

One root, :class:`PalmError`; :class:`ConfigError` is raised for every user mistake in a
configuration (unknown preset, impossible strategy, hostile value, malformed file). Its message
is one line that names the field, the value and what is allowed, so a command-line front end can
print it as is and exit with code 2.

Memory overflow is *not* an error: it is a field of the result (``fits_memory``,
``memory_overflow_bytes``) so that a tuner can prune on it.
"""

from __future__ import annotations

__all__ = ["PalmError", "ConfigError", "ConfigWarning", "SimulationError", "NoProgressError"]


class PalmError(Exception):
    """Root of all errors raised by :mod:`palm`."""


class ConfigError(PalmError, ValueError):
    """A configuration value is not allowed.

    Args:
        field: dotted path of the offending field, e.g. ``"parallelism.tp"``.
        value: the value that was given.
        allowed: what would have been accepted, in words, e.g. ``"a divisor of 96 (heads)"``.
    """

    def __init__(self, field: str, value: object, allowed: str) -> None:
        self.field = field
        self.value = value
        self.allowed = allowed
        shown = repr(value)
        if len(shown) > 80:  # keep both ends: a path's file name is at its end
            shown = shown[:30] + "..." + shown[-47:]
        message = f"{field} = {shown} is not allowed: expected {allowed}"
        super().__init__(" ".join(message.split()))


class ConfigWarning(UserWarning):
    """A configuration was completed with a guess the user may not want (one line, naming the
    field, the value taken and how to choose another)."""


class SimulationError(PalmError):
    """The simulator reached a state it cannot handle (a bug, not a user mistake)."""


class NoProgressError(SimulationError):
    """A simulation stopped making progress (a bug, not a user mistake): its clock stayed at
    one instant for more events than the run can schedule, flows in flight can never end, a
    stage waits for an event nothing will fire, or the fair network's progressive filling
    went round without freezing a flow. The message names what is stuck."""
