"""tests/palm/test_resource_table.py again, every test of it, on the compiled build of the
resource table (palm/engines/event/accel.py)."""

from __future__ import annotations

from on_the_build import loaded_on_the_build

globals().update(loaded_on_the_build("test_resource_table.py", "resource_table", imports="Fabric"))
