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
        # a field (a table key the user wrote), a value and the allowed text are each shown
        # abbreviated, so that the line stays a line whatever the input holds
        message = (
            f"{_abbreviated(' '.join(str(field).split()), 80)} = "
            f"{_abbreviated(repr(value), 80)} is not allowed: "
            f"expected {_abbreviated(allowed, _MAX_ALLOWED_CHARS)}"
        )
        super().__init__(_printable(" ".join(message.split())))


def _printable(text: str) -> str:
    """``text`` with characters a terminal would act on (escape sequences, other controls)
    written as escapes: a key the user wrote is shown, never executed by the terminal."""
    if text.isprintable():
        return text
    return "".join(
        c if c.isprintable() else c.encode("unicode_escape").decode("ascii") for c in text
    )


#: the longest "expected ..." text shown (a list of divisors of a large number can be long)
_MAX_ALLOWED_CHARS = 600


def _abbreviated(text: str, limit: int) -> str:
    """``text`` cut in its middle to ``limit`` characters, keeping both ends (a path's file
    name is at its end, a dotted field's section at its start)."""
    if len(text) <= limit:
        return text
    head = limit * 3 // 8
    return text[:head] + "..." + text[-(limit - 3 - head) :]


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
