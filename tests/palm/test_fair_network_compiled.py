"""tests/palm/test_fair_network.py again, every test of it, on the compiled build of the fair
network (palm/engines/event/accel.py): its hand-worked cases, invariants and randomised checks
hold for the network the engine runs, not only for fair.py."""

from __future__ import annotations

from on_the_build import loaded_on_the_build

globals().update(loaded_on_the_build("test_fair_network.py", "fair", imports="FairNetwork"))
