"""tests/palm/test_dram_system.py again, every test of it, on the compiled build of the DRAM
system (palm/engines/event/accel.py)."""

from __future__ import annotations

from on_the_build import loaded_on_the_build

from palm.engines.event import accel

_TESTS = loaded_on_the_build("test_dram_system.py", "dram_system")
# the tests' own names are the build's
assert (
    _TESTS["test_dram_channels_are_fair_shared_by_class"].__globals__["DramSystem"]
    is accel.compiled_module("dram_system")[0].DramSystem
)  # type: ignore[union-attr]
globals().update(_TESTS)
