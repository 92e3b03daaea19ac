"""tests/palm/test_fair_network.py again, every test of it, on the compiled build of the fair
network (palm/engines/event/accel.py): its hand-worked cases, invariants and randomised checks
hold for the network the engine runs, not only for fair.py."""

from __future__ import annotations

from on_the_build import loaded_on_the_build

from palm.engines.event import accel

_TESTS = loaded_on_the_build("test_fair_network.py", "fair")
# the tests' own names are the build's
assert (
    _TESTS["test_a_flow_alone_ends_at_exactly_start_plus_bytes_over_rate"].__globals__[
        "FairNetwork"
    ]
    is accel.compiled_module("fair")[0].FairNetwork
)  # type: ignore[union-attr]
globals().update(_TESTS)
