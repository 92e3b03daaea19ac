"""The resource table (palm/engines/event/resource_table.py): the exclusive model's holds (a
flow starts when every resource it holds is free, first come first served), busy time and
bytes conserved, resources numbered as they first appear; hand-worked."""

from __future__ import annotations

from palm.engines.event.fabric import Flow
from palm.engines.event.resource_table import Fabric


def test_two_flows_on_one_resource_take_twice_as_long_disjoint_ones_overlap() -> None:
    fabric = Fabric()
    a, b = fabric.resource("a", "link"), fabric.resource("b", "link")
    shared = Flow((a,), (1.0,), "p2p")
    assert fabric.reserve(shared, 0.0, 5.0, 100.0) == 5.0
    assert fabric.reserve(shared, 0.0, 5.0, 100.0) == 10.0  # waits for the first
    assert fabric.reserve(Flow((b,), (1.0,), "p2p"), 0.0, 5.0, 100.0) == 5.0  # overlaps
    both = Flow((a, b), (1.0, 1.0), "p2p")
    assert fabric.reserve(both, 1.0, 1.0, 10.0) == 11.0  # starts when every link is free
    assert fabric.busy_s[a] == 11.0 and fabric.nbytes[a] == 210.0


def test_accounted_and_booked_flows_add_busy_time_and_bytes_without_holding() -> None:
    fabric = Fabric()
    a, b = fabric.resource("a", "link"), fabric.resource(("noc", 3), "link", 2.0)
    flow = Flow((a, b), (1.0, 0.5), "tp", (4.0, 4.0))  # books 4 bytes per byte on each
    fabric.account(flow, 2.0, 10.0)
    fabric.book(flow, 1.0)
    assert fabric.busy_s == [2.0, 2.0] and fabric.nbytes == [44.0, 44.0]
    assert fabric.free_at == [0.0, 0.0]  # neither holds: a later flow starts at once
    assert fabric.reserve(Flow((a,), (1.0,), "p2p"), 1.0, 1.0, 0.0) == 2.0


def test_resources_are_numbered_as_they_first_appear_and_a_fresh_table_starts_at_zero() -> None:
    fabric = Fabric()
    assert fabric.resources(["x", ("noc", 1), "x"], "dp") == (0, 1, 0)
    assert fabric.kinds == ["dp", "noc"] and fabric.capacity_Bps == [1.0, 1.0]
    assert fabric.labels == ["x", "noc[1]"]
    fabric.reserve(Flow((0, 1), (1.0, 1.0), "dp"), 0.0, 3.0, 1.0)
    fresh = fabric.fresh()
    assert fresh.keys is fabric.keys and fresh.labels == ["x", "noc[1]"]
    assert fresh.free_at == fresh.busy_s == fresh.nbytes == [0.0, 0.0]
    assert fabric.busy_s == [3.0, 3.0]  # the table it was made from keeps its counters
