"""The clock of a simulation with a ``fair`` network: a SimPy environment whose event loop
also takes the network's flow ends (:class:`FlowEnvironment`), and a leaner process resume.

It reads and writes SimPy 4.1's private fields (the environment's queue, event counter and
clock; an event's ``_ok`` and ``_value``) to take one call less per event; pyproject.toml
pins SimPy to 4.1.x for that reason, and tests/palm/test_simpy_pin.py checks the fields.

Part of the ``fair`` network (:mod:`palm.engines.event.fair`), compiled with it as one unit.
"""

from __future__ import annotations

import heapq
from typing import TYPE_CHECKING, Any

import simpy

from palm.engines.event.filling import _INF
from palm.engines.event.shared import Timer
from palm.errors import NoProgressError

if TYPE_CHECKING:
    from palm.engines.event.fair import FairNetwork

__all__ = ["FlowEnvironment", "STALL_LIMIT"]

#: most SimPy events a run takes at one instant without a flow ending, unless its caller
#: sets its own (``FlowEnvironment.stall_limit``)
STALL_LIMIT = 1_000_000

#: SimPy's priority of an ordinary event (``simpy.events.NORMAL``)
_NORMAL = simpy.events.NORMAL
_new_event = object.__new__


def _failure(event: simpy.Event) -> BaseException:
    """The exception SimPy's ``Environment.step`` raises for a failed event nobody defused: a
    copy of the event's, caused by it (SimPy 4.1, simpy/core.py)."""
    cause: BaseException = event._value  # noqa: SLF001
    exc = type(cause)(*cause.args)
    exc.__cause__ = cause
    return exc


class _Process(simpy.Process):
    """``simpy.Process`` with a leaner resume (SimPy 4.1, simpy/events.py ``Process._resume``):
    the generator's ``send`` and the process's resume are bound once, not on every wait, and
    the event it waits on is read once. The same events, in the same order: a failed event is
    thrown into the generator by SimPy's own resume, and the process ends (its event
    scheduled, with the generator's return value or exception) as SimPy ends it."""

    def __init__(self, env: simpy.Environment, generator: simpy.events.ProcessGenerator) -> None:
        super().__init__(env, generator)
        self._send = generator.send
        self._wake = self._resume  # the callback it leaves on every event it waits on

    def _resume(self, event: simpy.Event) -> None:
        env = self.env
        env._active_proc = self  # noqa: SLF001 - as SimPy's resume
        while True:
            if not event._ok:  # noqa: SLF001 - a failed event: SimPy's resume throws it in
                super()._resume(event)
                return
            try:
                event = self._send(event._value)  # noqa: SLF001
            except StopIteration as stop:  # the process ends
                self._ok, self._value = True, stop.value
                env.schedule(self)
                break
            except BaseException as exc:  # the process fails
                self._ok, self._value = False, exc
                exc.__traceback__ = exc.__traceback__.tb_next  # type: ignore[union-attr]
                env.schedule(self)
                break
            try:
                callbacks = event.callbacks
            except AttributeError:
                raise RuntimeError(f'Invalid yield value "{event}"') from None
            if callbacks is not None:  # not processed yet: wait for it
                callbacks.append(self._wake)
                self._target = event
                env._active_proc = None  # noqa: SLF001
                return
            # processed already: go on at once with its value, as SimPy does
        self._target = None  # type: ignore[assignment]
        env._active_proc = None  # noqa: SLF001


class FlowEnvironment(simpy.Environment):
    """A SimPy environment whose clock also runs a :class:`FairNetwork`: the network's next
    flow end is an event of the simulation like SimPy's own, taken before SimPy's events of
    the same instant (bytes through at ``t`` leave the links before flows started at ``t``
    take their share). A change of rates therefore costs no SimPy event, and every flow costs
    exactly one end event however flows overlap (``flow_events`` counts them). Only ``run()``
    without ``until`` is supported."""

    def __init__(self, initial_time: float = 0.0) -> None:
        super().__init__(initial_time)
        self.network: FairNetwork | None = None
        self.flow_events = 0
        #: most SimPy events ``run`` takes at one instant without a flow ending: beyond it
        #: the run is stuck (a zero-delay loop) and raises :class:`NoProgressError`. The
        #: engine sets it to what the run's whole program can schedule
        self.stall_limit = STALL_LIMIT

    def process(self, generator: simpy.events.ProcessGenerator) -> simpy.Process:
        """``simpy.Process(self, generator)``, with the leaner resume of :class:`_Process`."""
        return _Process(self, generator)

    def timeout(self, delay: float, value: Any = None) -> simpy.Timeout:  # type: ignore[override]
        """``simpy.Timeout(self, delay, value)`` built without its constructor's calls (SimPy
        4.1, simpy/events.py: the fields ``Timeout.__init__`` sets, then ``schedule``'s push
        with the environment's event counter): the same event, scheduled the same way, as a
        :class:`~palm.engines.event.shared.Timer` (its fields in slots)."""
        if delay < 0:
            raise ValueError(f"Negative delay {delay}")
        event = _new_event(Timer)
        event.env, event.callbacks, event._value = self, [], value  # noqa: SLF001
        event._delay, event._ok = delay, True  # noqa: SLF001
        heapq.heappush(self._queue, (self._now + delay, _NORMAL, next(self._eid), event))
        return event

    def run(self, until: Any = None) -> None:
        if until is not None:
            raise ValueError("FlowEnvironment.run() runs until no event is left (no until)")
        net = self.network
        queue, pop = self._queue, heapq.heappop
        if net is None:  # SimPy's events only (the exclusive model): Environment.step inlined
            # events since the clock last moved, and when it did (the clock is written only
            # when it moves)
            idle, limit, last = 0, self.stall_limit, self._now
            while queue:
                now, _, _, event = pop(queue)
                if now != last:
                    self._now = last = now
                    idle = 0
                else:
                    idle += 1
                    if idle > limit:
                        raise _stalled(self, event, idle)
                callbacks, event.callbacks = event.callbacks, None  # type: ignore[assignment]
                for callback in callbacks:
                    callback(event)
                if not event._ok and not hasattr(event, "_defused"):  # noqa: SLF001
                    raise _failure(event)
            return
        _run_with_network(self, net)


def _run_with_network(env: FlowEnvironment, net: FairNetwork) -> None:
    """:meth:`FlowEnvironment.run` with a network: SimPy's events and the network's flow ends in
    time order. A function of its own so that the compiled build can type its locals
    (``fair.pxd``: the network's fields are then read as C fields, its ends called as C
    methods)."""
    queue, pop, heappush = env._queue, heapq.heappop, heapq.heappush  # noqa: SLF001
    ends = 0  # flow ends, added to ``flow_events`` when the run stops
    # SimPy events since the clock moved or a flow ended, and the clock (written only when it
    # moves)
    idle, limit, last = 0, env.stall_limit, env._now  # noqa: SLF001
    try:
        while True:
            end = net.next_end
            if queue and queue[0][0] < end:
                # SimPy's Environment.step (SimPy 4.1, simpy/core.py), inlined: one call less
                # per event
                now, _, _, event = pop(queue)
                if now != last:
                    env._now = last = now  # noqa: SLF001
                    idle = 0
                else:
                    idle += 1
                    if idle > limit:
                        raise _stalled(env, event, idle)
                callbacks, event.callbacks = event.callbacks, None  # type: ignore[assignment]
                for callback in callbacks:
                    callback(event)
                if not event._ok and not hasattr(event, "_defused"):  # noqa: SLF001
                    raise _failure(event)
            elif end < _INF:
                env._now = last = end
                ends += 1
                idle = 0
                if net._cls is None:  # noqa: SLF001
                    net._fire()  # noqa: SLF001
                else:  # FairNetwork._fire's first test, taken here: one call less
                    net._fire_in_class()  # noqa: SLF001
                ready = net.ready
                if ready is not None:
                    # the ended flow's done event, scheduled at ``end`` (no latency): it is
                    # SimPy's next event when nothing else is due by then (every event queued
                    # at ``end`` was scheduled earlier, so comes first) and no flow ends then
                    # (flow ends go first): then run it at once, as step would, else queue it
                    net.ready = None
                    if (queue and queue[0][0] <= end) or net.next_end <= end:
                        heappush(queue, (end, _NORMAL, net.ready_eid, ready))
                    else:
                        callbacks, ready.callbacks = ready.callbacks, None  # type: ignore[assignment]
                        for callback in callbacks:
                            callback(ready)
            elif net.rates():  # flows in flight whose end is not a time (NaN rates)
                raise _never_ending(net)
            else:
                return
    finally:
        env.flow_events += ends


def _stalled(env: simpy.Environment, event: simpy.Event, idle: int) -> NoProgressError:
    """The error of a run whose clock stays at one instant: ``idle`` events there without a
    flow ending, the last ``event``."""
    waiting = [getattr(getattr(c, "__self__", None), "name", None) for c in event.callbacks or ()]
    who = ", ".join(w for w in waiting if w) or "no process"
    return NoProgressError(
        f"simulation made no progress: {idle} events at t = {env.now!r} s without the clock "
        f"moving or a flow ending (more than the run can schedule); the last, "
        f"{type(event).__name__}, resumes {who}"
    )


def _never_ending(net: FairNetwork) -> NoProgressError:
    """The error of a run that has no event left but flows in flight (their ends are not
    times: NaN rates)."""
    flows = net.rates()
    first = next(iter(flows))
    return NoProgressError(
        f"fair network: {len(flows)} flows in flight can never end; the first, on resources "
        f"{list(first.route.resources)}, moves at {flows[first]!r} B/s with "
        f"{first.remaining!r} B left (ends at {first.end!r} s)"
    )
