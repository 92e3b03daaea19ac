"""Pipeline schedules: the order of operations Megatron-LM documents."""

from __future__ import annotations

import pytest

from palm.engines.event.schedules import stage_program


def _prog(schedule: str, p: int, v: int, m: int, s: int, training: bool = True) -> list[str]:
    ops = stage_program(
        schedule=schedule, pp=p, chunks=v, micro_batches=m, stage=s, training=training
    )
    return [f"{k}{c}.{mb}" if v > 1 else f"{k}{mb}" for k, c, mb in ops]


def test_gpipe_runs_all_forwards_then_all_backwards() -> None:
    assert _prog("gpipe", 2, 1, 3, 0) == ["F0", "F1", "F2", "B0", "B1", "B2"]


def test_1f1b_warmup_steady_cooldown() -> None:
    # rank s warms up with p - s - 1 forwards (Narayanan et al. SC21, Fig. 4 top)
    assert _prog("1f1b", 4, 1, 6, 0) == [
        "F0",
        "F1",
        "F2",
        "F3",
        "B0",
        "F4",
        "B1",
        "F5",
        "B2",
        "B3",
        "B4",
        "B5",
    ]
    assert _prog("1f1b", 4, 1, 6, 3) == [
        "F0",
        "B0",
        "F1",
        "B1",
        "F2",
        "B2",
        "F3",
        "B3",
        "F4",
        "B4",
        "F5",
        "B5",
    ]


def test_interleaved_order_matches_megatron() -> None:
    # p = 2, v = 2, m = 4: rank 0 warms up 2(p-1) + (v-1)p = 4 forwards, rank 1 two
    assert _prog("interleaved-1f1b", 2, 2, 4, 0) == [
        "F0.0",
        "F0.1",
        "F1.0",
        "F1.1",
        "F0.2",
        "B1.0",
        "F0.3",
        "B1.1",
        "F1.2",
        "B0.0",
        "F1.3",
        "B0.1",
        "B1.2",
        "B1.3",
        "B0.2",
        "B0.3",
    ]
    assert _prog("interleaved-1f1b", 2, 2, 4, 1) == [
        "F0.0",
        "F0.1",
        "F1.0",
        "B1.0",
        "F1.1",
        "B1.1",
        "F0.2",
        "B0.0",
        "F0.3",
        "B0.1",
        "F1.2",
        "B1.2",
        "F1.3",
        "B1.3",
        "B0.2",
        "B0.3",
    ]


@pytest.mark.parametrize("schedule", ["gpipe", "1f1b"])
def test_every_pass_runs_once_and_backward_follows_forward(schedule: str) -> None:
    for s in range(4):
        ops = stage_program(
            schedule=schedule, pp=4, chunks=1, micro_batches=8, stage=s, training=True
        )
        assert sorted(ops) == sorted(
            [("F", 0, i) for i in range(8)] + [("B", 0, i) for i in range(8)]
        )
        for i in range(8):
            assert ops.index(("F", 0, i)) < ops.index(("B", 0, i))


def test_inference_and_no_pipeline() -> None:
    assert _prog("1f1b", 2, 1, 3, 1, training=False) == ["F0", "F1", "F2"]
    assert _prog("gpipe", 1, 1, 3, 0) == ["F0", "B0", "F1", "B1", "F2", "B2"]  # pp = 1
