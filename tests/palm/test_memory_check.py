"""``palm.api.memory_check``: the stage memories of the plan, without building the plan."""

from __future__ import annotations

from pathlib import Path

import pytest

from palm.api import memory_check, plan_for
from palm.config import load_config

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


@pytest.mark.parametrize(
    ("example", "overrides"),
    [
        ("wafer-t18b.toml", []),
        ("wafer-t18b.toml", ['training.recompute="auto"', "training.global_batch=32"]),
        ("t18b-dgx-a100.toml", []),
        ("t18b-dgx-a100.toml", ['training.recompute="none"', "training.zero=1"]),
        ("mixtral-8x7b-h100.toml", []),
    ],
)
def test_memory_check_is_the_plans_peak_stage_memory(example: str, overrides: list[str]) -> None:
    config = load_config(EXAMPLES / example, overrides=overrides)
    check = memory_check(config)
    for engine in ("analytical", "event"):
        plan = plan_for(config, engine=engine)
        assert check.peak_bytes == max(s.memory.total_bytes for s in plan.stages)
        assert check.capacity_bytes == plan.memory_capacity_bytes
    assert check.overflow_bytes == check.peak_bytes - check.capacity_bytes


def test_an_overflowing_plan_is_seen_without_a_plan() -> None:
    # t-18b on 256 A100s without recompute at micro-batch 16: activations overflow 80 GB
    config = load_config(
        EXAMPLES / "t18b-dgx-a100.toml",
        overrides=['training.recompute="none"', "training.micro_batch=16"],
    )
    check = memory_check(config)
    assert check.overflow_bytes > 0
    assert check.overflow_bytes == pytest.approx(
        max(s.memory.total_bytes for s in plan_for(config).stages) - check.capacity_bytes
    )
