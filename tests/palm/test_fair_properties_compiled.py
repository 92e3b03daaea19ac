"""tests/palm/test_fair_properties.py again, every property and counter-example of it, on the
compiled build of the fair network (palm/engines/event/accel.py): the network the engine runs
always ends, is max-min fair, moves every byte and is monotone where the docs say it is."""

from __future__ import annotations

from on_the_build import loaded_on_the_build

globals().update(loaded_on_the_build("test_fair_properties.py", "fair", imports="FairNetwork"))
