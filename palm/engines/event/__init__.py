"""The event-driven engine (SimPy)."""

from palm.engines.event.engine import FlowRecord, PhaseRecord, Timeline, run_event
from palm.engines.event.fabric import GRANULARITIES
from palm.engines.event.schedules import stage_program

__all__ = ["GRANULARITIES", "FlowRecord", "PhaseRecord", "Timeline", "run_event", "stage_program"]
