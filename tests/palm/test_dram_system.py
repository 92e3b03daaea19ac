"""The exclusive model's DRAM channels (palm/engines/event/dram_system.py): each channel's
bandwidth shared equally by the accesses using it, hand-worked on two and three channels; the
one-class loop against the general one."""

from __future__ import annotations

import pytest
import simpy

from palm.engines.event.dram_system import DramSystem


def test_dram_channels_are_fair_shared_by_class() -> None:
    # channels of 10 B/s. A reads over channels 0 and 1 (1 and 2 cores), B over 1 and 2 (1
    # core each), 10 B per core, both from t = 0. Channel 1 is shared: A gets
    # min(10 / 1, 10 / (2 * 2)) = 2.5 B/s per core, B min(10 / 2, 10 / 1) = 5, so B is done at
    # 2 s; then A alone runs at min(10, 10 / 2) = 5 with 5 B left: done at 3 s.
    env = simpy.Environment()
    dram = DramSystem(env, [10.0, 10.0, 10.0], [((0, 1), (1, 2)), ((1, 2), (1, 1))])
    done = {}

    def watch(name: str, event: simpy.Event):  # type: ignore[no-untyped-def]
        yield event
        done[name] = env.now

    a = dram.read(10.0, pattern=0, noc_bandwidth_Bps=float("inf"), latency_s=0.0)
    b = dram.read(10.0, pattern=1, noc_bandwidth_Bps=float("inf"), latency_s=0.0)
    env.process(watch("a", a))
    env.process(watch("b", b))
    env.run()
    assert done["b"] == pytest.approx(2.0) and done["a"] == pytest.approx(3.0)
    assert list(dram.busy_s) == pytest.approx([3.0, 3.0, 2.0])
    assert list(dram.nbytes) == pytest.approx([10.0, 30.0, 10.0])


def test_dram_accesses_on_one_channel_class_share_it() -> None:
    # two channels of 10 B/s both read by every pattern (interleaved placement: one class).
    # A has 1 core per channel (limit 10 B/s), B 2 (limit 5 B/s); 10 B per core from t = 0,
    # NoC 8 B/s per core. Together: A min(8, 10 / 2) = 5, B min(8, 5 / 2) = 2.5; A is done
    # at 2 s, B has 5 B left and then runs at min(8, 5) = 5: done at 3 s.
    env = simpy.Environment()
    dram = DramSystem(env, [10.0, 10.0], [((0, 1), (1, 1)), ((0, 1), (2, 2))])
    assert dram.classes.count == 1  # the case under test
    done: dict[str, float] = {}

    def watch(name: str, event: simpy.Event):  # type: ignore[no-untyped-def]
        yield event
        done[name] = env.now

    for name, pattern in (("a", 0), ("b", 1)):
        event = dram.read(10.0, pattern=pattern, noc_bandwidth_Bps=8.0, latency_s=0.0)
        env.process(watch(name, event))
    env.run()
    assert done == {"a": 2.0, "b": 3.0}
    assert list(dram.busy_s) == pytest.approx([3.0, 3.0])
