"""The event engine reads SimPy's private fields (the pin ``simpy>=4.1,<4.2`` in
pyproject.toml says why): the installed SimPy has them, with the meaning the engine
assumes, so that a SimPy that renamed one fails here, by name, not deep in a run."""

from __future__ import annotations

import heapq
from importlib.metadata import version

import simpy


def test_the_installed_simpy_is_in_the_pinned_range() -> None:
    major, minor = (int(x) for x in version("simpy").split(".")[:2])
    assert (major, minor) == (4, 1)


def test_the_private_fields_the_engine_reads() -> None:
    env = simpy.Environment()
    event = env.timeout(2.0, value="x")
    # the queue of (time, priority, event id, event), a heap; the event counter; the clock
    assert isinstance(env._queue, list) and env._queue[0][3] is event  # noqa: SLF001
    when, priority, eid, _ = heapq.heappop(env._queue)  # noqa: SLF001
    assert (when, priority) == (2.0, simpy.events.NORMAL)
    assert next(env._eid) == eid + 1  # noqa: SLF001
    assert env._now == 0.0 and env._active_proc is None  # noqa: SLF001
    assert event._ok is True and event._value == "x"  # noqa: SLF001
    assert event.callbacks == []
    failed = env.event()
    failed.fail(ValueError("y"))
    failed.defused = True
    assert failed._ok is False and failed._defused  # noqa: SLF001
