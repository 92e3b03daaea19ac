"""The modern GPU validation set: every row is either a simulated case or left out with a
reason; the mapping of precision, sharding and schedule follows the documented rules."""

from __future__ import annotations

import dataclasses
import io
import json

from palm.hardware.presets import hardware_preset
from palm.software import FIRST_BLACKWELL_ATTENTION
from palm.validation_modern import default_modern_file, load_modern_cases
from palm.validation_report import generation, modern_report
from search.cli import build_parser


def test_every_row_is_a_case_or_left_out_with_a_reason() -> None:
    data = load_modern_cases()
    rows = json.loads(default_modern_file().read_text())["cases"]
    ids = {c.case_id for c in data.cases} | {x.case_id for x in data.left_out}
    assert ids == {r["id"] for r in rows} and len(data.cases) + len(data.left_out) == len(rows)
    assert all(x.reason for x in data.left_out)
    assert len(data.cases) >= 150  # every dense H100 / A100 row at least


def test_mapping_rules() -> None:
    data = load_modern_cases()
    by_id = {c.case_id: c.config for c in data.cases}
    fsdp = by_id["foundry-h100-80gb-mpt-760m-16g-s2048"]
    # PyTorch's FSDP (llm-foundry): fsdp = true, whose full recompute stops early
    assert fsdp.training.fsdp and fsdp.training.zero_stage == 3
    assert fsdp.training.recompute_early_stop
    assert fsdp.training.precision == "bf16"
    assert fsdp.hardware.name == "dgx-h100" and fsdp.parallelism.dp == 16
    grad_op = by_id["foundry-h100-80gb-mpt-3b-128g-s2048"]
    # PyTorch FSDP SHARD_GRAD_OP: fsdp = true with zero = 2 (per-layer forward gathers)
    assert grad_op.training.fsdp and grad_op.training.zero_stage == 2
    assert not grad_op.parallelism.overlap_param_gather
    nemo = by_id["nemo2407-h100-gpt3-175b-128g"]
    assert nemo.training.precision == "fp8" and nemo.training.zero == 1
    assert nemo.parallelism.schedule == "interleaved-1f1b" and nemo.parallelism.interleave == 6
    assert nemo.parallelism.sequence_parallel and not nemo.training.fsdp
    a100_40 = by_id["foundry-a100-40gb-mpt-1b-8g-s2048"]
    assert a100_40.hardware.device_memory_bytes == 40e9
    # the A100 tables state no release: the current llm-foundry's (PyTorch >= 2.1)
    assert a100_40.training.fsdp and a100_40.training.recompute_early_stop
    # Megatron with the distributed optimizer overlaps its weight all-gather (recipes)
    assert nemo.parallelism.overlap_param_gather
    assert by_id["mlm-weak-h100-32b-384g"].parallelism.overlap_param_gather
    assert not fsdp.parallelism.overlap_param_gather
    assert "micro_batch 1 (not stated)" in data.assumptions["mlm-weak-h100-1.7b-48g"]
    # gpt-oss: its clamped gated activation (stated in the row's architecture notes)
    oss = by_id["mb260401-b200-gpt-oss-120b-64g-bf16"].model
    assert oss.mlp == "clamped-swiglu"
    assert by_id["nemo2407-h100-llama2-70b-64g"].model.mlp == "swiglu"
    # the flex dispatcher from the recorded recipe values only; else the all-to-all one
    dispatcher = {k: c.parallelism.moe_dispatcher for k, c in by_id.items()}
    assert dispatcher["mb260401-b300-qwen3-235b-a22b-256g-mxfp8"] == "deepep"
    assert dispatcher["mb260401-b200-qwen3-235b-a22b-256g-mxfp8"] == "alltoall"
    assert dispatcher["mb2511-gb300-qwen3-235b-a22b-256g-bf16"] == "alltoall"
    assert dispatcher["mb2511-gb300-gpt-oss-120b-64g-bf16"] == "alltoall"
    reasons = {x.case_id: x.reason for x in data.left_out}
    assert "fp4" in reasons["mb260401-gb200-llama31-405b-256g-nvfp4"].lower()


def test_report_groups_by_generation_and_cli_prints_both_sets() -> None:
    report = modern_report(None, engine="analytical")
    assert set(report["by_generation"]) >= {"A100", "H100"}
    assert sum(g["count"] for g in report["by_generation"].values()) == len(report["cases"])
    assert generation("dgx-b200") == "Blackwell" and generation("dgx-h200") == "H100"
    args = build_parser().parse_args(["validate", "--engine", "analytical"])
    out = io.StringIO()
    assert args.handler(args, out) == 0
    text = out.getvalue()
    assert "megatron-sc21-t1-18.4b" in text and "modern cases" in text and "left out" in text
    args = build_parser().parse_args(["validate", "--suite", "modern", "--json"])
    out = io.StringIO()
    assert args.handler(args, out) == 0
    assert json.loads(out.getvalue())["engine"] == "event"


def test_first_blackwell_release_rows_take_its_attention_and_the_presets_stay() -> None:
    """The six NeMo 25.02 DGX B200 rows run with that release's attention efficiency (a
    behaviour of the software they state); the same plan in a later release, and the presets
    themselves, keep the preset's."""
    data = load_modern_cases()
    by_id = {c.case_id: c.config for c in data.cases}
    assert sorted(data.epochs) == sorted(i for i in by_id if i.startswith("nemo2502-b200-"))
    assert len(data.epochs) == 6
    old, new = by_id["nemo2502-b200-llama3-8b-8g"], by_id["mb2509-b200-llama3-8b-8g-fp8"]
    assert old.hardware.attention_efficiency == FIRST_BLACKWELL_ATTENTION
    preset = hardware_preset("dgx-b200")
    assert new.hardware.attention_efficiency == preset.attention_efficiency
    # the epoch changes its constants only: same preset, same everything else
    assert dataclasses.replace(old.hardware, attention_efficiency=preset.attention_efficiency) == (
        new.hardware
    )
    assert any(a.startswith("software nemo 25.02") for a in data.assumptions[
        "nemo2502-b200-llama3-8b-8g"])  # fmt: skip
    # the user-facing presets keep the current stack's constants
    assert hardware_preset("gb200-nvl72").attention_efficiency == preset.attention_efficiency
    assert preset.attention_efficiency > FIRST_BLACKWELL_ATTENTION
