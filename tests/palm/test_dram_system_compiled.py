"""tests/palm/test_dram_system.py again, every test of it, on the compiled build of the DRAM
system (palm/engines/event/accel.py)."""

from __future__ import annotations

from on_the_build import loaded_on_the_build

globals().update(loaded_on_the_build("test_dram_system.py", "dram_system", imports="DramSystem"))
