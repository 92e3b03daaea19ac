"""``palm.feasibility``: each rule on hand-worked cases, and the one place both the
configuration's validation and the search spaces take their rules from (a value a rule
refuses is refused by validation with the rule's words, and never offered by a space)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from palm import feasibility
from palm.config import config_to_dict, load_config, parse_config
from palm.errors import ConfigError
from spaces import SpaceContext

ROOT = Path(__file__).resolve().parents[2]


def test_divisors() -> None:
    assert feasibility.divisors(1) == [1]
    assert feasibility.divisors(36) == [1, 2, 3, 4, 6, 9, 12, 18, 36]
    assert feasibility.divisors(97) == [1, 97]
    assert feasibility.divisors_or_note(10**13) == "its divisors"


def test_the_rules_on_hand_worked_cases() -> None:
    model = load_config(ROOT / "examples" / "llama3-70b-h100.toml").model  # 64 heads, 8 kv
    assert (model.heads, model.kv_heads) == (64, 8)
    assert feasibility.tensor_parallel(model, 8) is None
    assert feasibility.tensor_parallel(model, 16) is None  # a multiple of the kv heads
    assert "model.heads = 64" in str(feasibility.tensor_parallel(model, 3))
    assert feasibility.pipeline_depth(pp=80, blocks=80) is None
    assert feasibility.pipeline_depth(pp=81, blocks=80) is not None
    assert feasibility.pipeline_depth(pp=41, blocks=80, chunks=2) is not None
    assert feasibility.pipeline_depth(pp=41, blocks=80, chunks=2, uneven=True) is None
    assert feasibility.context_parallel(cp=2, seq_len=8192, transformer=True, mesh=False) is None
    assert feasibility.context_parallel(cp=3, seq_len=8192, transformer=True, mesh=False)
    assert feasibility.context_parallel(cp=2, seq_len=8192, transformer=True, mesh=True)
    assert feasibility.context_parallel(cp=2, seq_len=8192, transformer=False, mesh=False)
    assert feasibility.expert_parallel(ep=4, experts=8) is None
    assert feasibility.expert_parallel(ep=3, experts=8) is not None
    assert feasibility.expert_tensor_parallel(etp=2, moe_ffn_hidden=14336) is None
    assert feasibility.expert_layout(ep=4, etp=2, stage_devices=16) is None
    assert feasibility.expert_layout(ep=4, etp=2, stage_devices=12) is not None
    assert feasibility.batch_split(global_batch=32, dp=4, micro_batch=8) is None
    assert "micro_batch = 3 does not" in str(
        feasibility.batch_split(global_batch=32, dp=4, micro_batch=3)
    )
    assert "dp = 3 does not" in str(feasibility.batch_split(global_batch=32, dp=3, micro_batch=2))
    assert feasibility.interleave_batches(micro_batches=6, pp=4, chunks=1) is None
    assert feasibility.interleave_batches(micro_batches=6, pp=4, chunks=2) is not None


@pytest.mark.parametrize("tp", [1, 2, 3, 4, 5, 6, 8, 12, 16, 24, 32, 64])
def test_validation_and_the_space_agree_on_tp(tp: int) -> None:
    base = load_config(ROOT / "examples" / "llama3-70b-h100.toml")
    ctx = SpaceContext.of(base)
    tables = config_to_dict(replace(base, hardware=replace(base.hardware, gpus=0)))
    tables["parallelism"].update(tp=tp, pp=1, dp=1, cp=1)
    tables["training"].update(global_batch=8, micro_batch=1)
    rule = feasibility.tensor_parallel(base.model, tp)
    assert ctx.tp_allowed(tp) == (rule is None)
    if rule is None:
        parse_config(tables)
    else:
        with pytest.raises(ConfigError) as err:
            parse_config(tables)
        assert (err.value.field, err.value.allowed) == ("parallelism.tp", rule)
