"""The ``precision`` and ``fsdp`` parts of a space: every drawn configuration parses and
simulates with the drawn field, ``fsdp`` is drawn only at ZeRO 2 or 3 (at 0 or 1 it would be
the ZeRO-3 configuration again), and a study file that cannot draw them is refused in one
line."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import palm
from palm.config import load_config
from palm.errors import ConfigError
from search.study_file import study_from_tables
from spaces import SpaceContext, enumerate_space, space_from_table

REPO = Path(__file__).resolve().parents[2]
DGX = REPO / "examples" / "t18b-dgx-a100.toml"  # t-18b on 256 A100s
H100 = REPO / "examples" / "mixtral-8x7b-h100.toml"  # an H100 cluster: fp8 runs there


def _drafts(path: Path, table: dict[str, Any]) -> list[dict[str, Any]]:
    ctx = SpaceContext.of(load_config(path))
    space = space_from_table(table, ctx)
    return [d.draft for d in enumerate_space(space, ctx) if d.draft is not None]


def test_precision_is_searched_and_reaches_the_simulator() -> None:
    drafts = _drafts(H100, {"precision": ["bf16", "fp8"], "recompute": ["selective", "full"]})
    assert len(drafts) == 4
    assert {d["training"]["precision"] for d in drafts} == {"bf16", "fp8"}
    flops = {}
    for d in drafts:
        config = palm.parse_config(d)
        assert config.training.precision == d["training"]["precision"]
        flops[config.training.precision] = palm.api.plan_for(config, engine="analytical")
    # the same plan at fp8 computes at a higher peak rate: its stages are faster
    bf16, fp8 = flops["bf16"], flops["fp8"]
    assert sum(s.forward_s for s in fp8.stages) < sum(s.forward_s for s in bf16.stages)


def test_fsdp_is_drawn_only_at_zero_two_or_three() -> None:
    drafts = _drafts(DGX, {"zero": [0, 1, 2, 3], "fsdp": [True, False]})
    pairs = sorted((d["training"]["zero"], d["training"]["fsdp"]) for d in drafts)
    # zero 0 and 1 keep fsdp = false (fsdp = true there is ZeRO 3 again), 2 and 3 draw it
    assert pairs == [(0, False), (1, False), (2, False), (2, True), (3, False), (3, True)]
    stages = {
        (z, f): palm.parse_config(d).training.zero_stage
        for d in drafts
        for z, f in [(d["training"]["zero"], d["training"]["fsdp"])]
    }
    assert stages[(2, True)] == 2 and stages[(3, True)] == 3


def test_fsdp_changes_what_is_simulated() -> None:
    """FSDP SHARD_GRAD_OP gathers and reduce-scatters layer by layer, a distributed
    optimizer's ZeRO-2 reduces once at the step's end: not the same iteration."""
    drafts = _drafts(DGX, {"zero": [2], "fsdp": [True, False]})
    assert len(drafts) == 2
    times = {
        d["training"]["fsdp"]: palm.simulate(palm.parse_config(d), engine="analytical")
        for d in drafts
    }
    assert times[True].iteration_time_s != times[False].iteration_time_s


def _study(space: dict[str, Any], base: Path = DGX) -> Any:
    return study_from_tables({"study": {"base": str(base)}, "space": space})


def test_a_precision_the_hardware_lacks_is_refused_in_one_line() -> None:
    with pytest.raises(ConfigError, match=r"space\.precision = 'int8'.*fp32, bf16, fp16 or fp8"):
        _study({"precision": ["bf16", "int8"]})
    with pytest.raises(ConfigError, match=r"space\.precision = 'fp4'.*on dgx-a100"):
        _study({"precision": ["fp4"]})  # a precision palm knows, not one an A100 computes in
    with pytest.raises(ConfigError, match=r"space\.precision = 'fp2'.*choices among"):
        _study({"precision": ["fp2"]})


def test_fsdp_without_zero_two_or_three_is_refused() -> None:
    with pytest.raises(ConfigError, match=r"space\.fsdp .*ZeRO 2 or 3 among the zero choices"):
        _study({"zero": [0, 1], "fsdp": [True, False]})
    _study({"zero": [1, 3], "fsdp": [True, False]})  # accepted
