"""The modern GPU validation set: every row is either a simulated case or left out with a
reason; the mapping of precision, sharding and schedule follows the documented rules."""

from __future__ import annotations

import dataclasses
import io
import json

from palm.hardware.presets import hardware_preset
from palm.validation_modern import (
    ARGUED_OUT,
    STACK_EPOCHS,
    TABLE_CORRECTIONS,
    container_release,
    default_modern_file,
    load_modern_cases,
    stack_epoch,
)
from palm.validation_report import generation, modern_report, write_modern
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
    # PyTorch's FSDP (Composer): fsdp = true, whose full recompute stops early
    assert fsdp.training.fsdp and fsdp.training.zero_stage == 3
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
    # llm-foundry's A100 tables ran PyTorch 1.13.1: no early-stopping checkpoint, zero = 3
    assert a100_40.training.zero == 3 and not a100_40.training.fsdp
    # Megatron with the distributed optimizer overlaps its weight all-gather (recipes)
    assert nemo.parallelism.overlap_param_gather
    assert by_id["mlm-weak-h100-32b-384g"].parallelism.overlap_param_gather
    assert not fsdp.parallelism.overlap_param_gather
    assert "micro_batch 1 (not stated)" in data.assumptions["mlm-weak-h100-1.7b-48g"]
    # gpt-oss: its clamped gated activation and the biases of GPTOSSProvider
    oss = by_id["mb260401-b200-gpt-oss-120b-64g-bf16"].model
    assert (oss.mlp, oss.bias) == ("clamped-swiglu", True)
    assert by_id["nemo2407-h100-llama2-70b-64g"].model.mlp == "swiglu"
    # the flex dispatcher: from the recorded recipe hints, or for the 25.11 GB200 / GB300
    # DeepSeek-V3 and Qwen3-235B runs (no hints recorded) from their workload configs
    dispatcher = {k: c.parallelism.moe_dispatcher for k, c in by_id.items()}
    assert dispatcher["mb260401-b300-qwen3-235b-a22b-256g-mxfp8"] == "deepep"
    assert dispatcher["mb260401-b200-qwen3-235b-a22b-256g-mxfp8"] == "alltoall"
    assert dispatcher["mb2511-gb300-qwen3-235b-a22b-256g-bf16"] == "deepep"
    assert dispatcher["mb2511-gb200-deepseek-v3-256g-bf16"] == "deepep"
    assert dispatcher["mb2511-b200-qwen3-235b-a22b-64g-fp8mx"] == "alltoall"
    assert dispatcher["mb2511-gb300-gpt-oss-120b-64g-bf16"] == "alltoall"
    assert dispatcher["mb2509-gb200-qwen3-235b-a22b-64g-fp8"] == "alltoall"
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


def test_argued_rows_stay_in_the_headline_and_the_rest_is_reported_beside_it() -> None:
    """Rows argued inconsistent with measurements of the same work (docs/validation.md) are
    simulated rows of the set, counted in the first headline, and the figures without them are
    the statistics of the other rows, printed on a line of their own with each row's reason."""
    data = load_modern_cases()
    assert set(ARGUED_OUT) <= {c.case_id for c in data.cases} and all(ARGUED_OUT.values())
    report = modern_report(None, engine="analytical")
    assert report["count"] == len(report["cases"]) == len(data.cases)
    rest = [abs(r["error"]) for r in report["cases"] if r["id"] not in ARGUED_OUT]
    without = report["without_argued_out"]
    assert without["count"] == len(rest) == len(report["cases"]) - len(ARGUED_OUT)
    assert without["max_abs_error"] == max(rest)
    assert abs(without["mean_abs_error"] - sum(rest) / len(rest)) < 1e-15
    assert {x["id"] for x in report["argued_out"]} == set(ARGUED_OUT)
    out = io.StringIO()
    write_modern(report, engine="analytical", out=out)
    lines = out.getvalue().splitlines()
    line = next(x for x in lines if x.startswith(f"without the {len(ARGUED_OUT)} rows argued"))
    assert f"{len(rest)} cases" in line and f"max {max(rest):.1%}" in line
    assert sum(x.startswith("  argued: ") for x in lines) == len(ARGUED_OUT)


def test_table_corrections_take_the_recipe_layout_and_say_so() -> None:
    """Each correction names a row of the set and real fields, changes what it says, and is
    listed among the row's assumptions (docs/validation.md, "Layout columns corrected")."""
    data = load_modern_cases()
    by_id = {c.case_id: c.config for c in data.cases}
    for case_id, (values, why) in TABLE_CORRECTIONS.items():
        assert case_id in by_id and why
        config = by_id[case_id]
        for key, value in values.items():
            table, name = key.split(".")
            assert getattr(getattr(config, table), name) == value
        assert any(a.startswith("layout corrected:") for a in data.assumptions[case_id])
    b200 = by_id["mb2511-b200-gpt-oss-120b-64g-bf16"]
    assert b200.parallelism.ep == 64 and b200.training.micro_batch == 4
    h100 = by_id["mb2511-h100-gpt-oss-120b-64g-bf16"]
    assert h100.training.micro_batch == 1 and h100.parallelism.ep == 8 and h100.parallelism.pp == 4


def test_dgx_b300_rows_run_their_nics_at_400_gbps_and_the_preset_keeps_the_datasheet() -> None:
    """docs/validation.md, "Network of the DGX B300": a mapping override, not a preset edit."""
    from palm.hardware.presets import hardware_preset
    from palm.hardware.spec import GpuClusterHardware

    data = load_modern_cases()
    b300 = [c.config.hardware for c in data.cases if c.config.hardware.name == "dgx-b300"]
    assert b300 and all(
        isinstance(h, GpuClusterHardware) and h.inter_node_bandwidth_gbps == 50.0 for h in b300
    )
    preset = hardware_preset("dgx-b300")
    assert isinstance(preset, GpuClusterHardware) and preset.inter_node_bandwidth_gbps == 100.0


def _row(gpu: str, table: str) -> dict:
    return {"hardware": {"gpu": gpu}, "source": {"table": table}}


def test_stack_epoch_rule_on_hand_made_rows() -> None:
    """Blackwell rows of a container older than NeMo 25.04 are the early Blackwell stack;
    later containers, other GPUs and sources without a container are the current stack."""
    assert container_release(_row("B200", "Container NeMo 25.02, System DGX-B200")) == (25, 2)
    assert container_release(_row("B200", "(Container NeMo24.07, System DGX-H100)")) == (24, 7)
    assert container_release(_row("GB200", "26.04.01 NeMo Container > Model: X")) == (26, 4)
    assert container_release(_row("H100-80GB", "H100 80GB BF16")) is None
    early = "blackwell-early-2025"
    assert stack_epoch(_row("B200", "Container NeMo 25.02, System DGX-B200")) == early
    assert stack_epoch(_row("GB200", "Container NeMo 25.02, System DGX-GB200")) == early
    assert stack_epoch(_row("GB200", "Container NeMo 25.04, System DGX-GB200")) is None
    assert stack_epoch(_row("B200", "25.09 NeMo Container > System: DGX-B200")) is None
    assert stack_epoch(_row("H100-SXM5-80GB", "Container NeMo 25.02, System DGX-H100")) is None
    assert stack_epoch(_row("B300", "Container NeMo 25.02")) is None  # not an epoch preset
    assert stack_epoch(_row("B200", "a table naming no container")) is None
    assert stack_epoch(_row("TPU v5p", "Container NeMo 25.02")) is None  # no preset


def test_epoch_rows_take_the_epoch_constants_and_the_presets_stay() -> None:
    """The six NeMo 25.02 DGX B200 rows run with the epoch's attention efficiency and say so;
    the same plan in a later release, and the presets themselves, keep the preset's."""
    data = load_modern_cases()
    by_id = {c.case_id: c.config for c in data.cases}
    epoch = STACK_EPOCHS["blackwell-early-2025"]
    assert sorted(data.epochs) == sorted(i for i in by_id if i.startswith("nemo2502-b200-"))
    assert len(data.epochs) == 6
    old, new = by_id["nemo2502-b200-llama3-8b-8g"], by_id["mb2509-b200-llama3-8b-8g-fp8"]
    assert old.hardware.attention_efficiency == epoch.constants["attention_efficiency"]
    preset = hardware_preset("dgx-b200")
    assert new.hardware.attention_efficiency == preset.attention_efficiency
    # the epoch changes its constants only: same preset, same everything else
    assert dataclasses.replace(old.hardware, attention_efficiency=preset.attention_efficiency) == (
        new.hardware
    )
    assert any(a.startswith("software stack blackwell-early-2025") for a in data.assumptions[
        "nemo2502-b200-llama3-8b-8g"])  # fmt: skip
    # the user-facing presets keep the current stack's constants (the epoch is applied in the
    # validation mapping only, never to a preset)
    assert hardware_preset("gb200-nvl72").attention_efficiency == preset.attention_efficiency
    assert epoch.constants["attention_efficiency"] < preset.attention_efficiency
