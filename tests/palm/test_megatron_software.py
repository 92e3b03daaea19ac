"""What Megatron-LM's releases do differently, each hand-worked on a small case: the
unfused gradient accumulation of 2021, its data-parallel reduction after the last backward
pass, and the asynchronous TP communication of the backward pass (from 2021-09). And the
packaged Megatron suite: plain TOML files, simulated exactly as they are."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest

import palm
from palm.config import load_config, parse_config
from palm.plan import build_plan
from palm.plan.chunks import accumulation_s
from palm.plan.context import plan_context
from palm.validation import default_suite_file, load_cases

REPO = Path(__file__).resolve().parents[2]


def _gpt(**changes: Any) -> palm.SimConfig:
    tables: dict[str, dict[str, Any]] = {
        "model": {
            "family": "gpt",
            "layers": 4,
            "hidden": 1024,
            "heads": 8,
            "ffn_hidden": 4096,
            "seq_len": 1024,
            "vocab": 32000,
        },
        "hardware": {"preset": "dgx-a100"},
        "training": {"global_batch": 64, "micro_batch": 2, "precision": "fp16"},
        "parallelism": {"tp": 8, "dp": 8},
    }
    for key, value in changes.items():
        section, field = key.split("__")
        tables.setdefault(section, {})[field] = value
    return parse_config(tables)


def test_unfused_gradient_accumulation_is_one_pass_over_the_gradients() -> None:
    """fp16: read the 2-byte gradient, read and write the 2-byte buffer: 6 B per parameter
    of the chunk per micro-batch at the HBM rate; bf16 accumulates in fp32: 2 + 2 x 4 B."""
    fused = _gpt()
    unfused = _gpt(training__grad_accumulation_fusion=False)
    ctx = plan_context(unfused, with_links=False)
    ops = ctx.ops(0)
    params = sum(op.params_per_device(tp=8) for op in ops)
    hbm = 2039e9 * fused.hardware.memory_efficiency
    assert accumulation_s(ctx, ops) == pytest.approx(params * 6.0 / hbm)
    assert accumulation_s(plan_context(fused, with_links=False), ops) == 0.0
    bf16 = plan_context(
        _gpt(training__grad_accumulation_fusion=False, training__precision="bf16"),
        with_links=False,
    )
    assert accumulation_s(bf16, ops) == pytest.approx(params * 10.0 / hbm)
    a, b = (build_plan(c).chunks[0] for c in (fused, unfused))
    assert b.backward_compute_s - a.backward_compute_s == pytest.approx(params * 6.0 / hbm)
    assert b.forward_compute_s == a.forward_compute_s


def test_gradients_reduced_after_the_last_backward_pass_are_exposed_in_full() -> None:
    """``overlap_grad_reduce = false``: one bucket, started when the backward pass ends, so
    the iteration grows by the whole all-reduce (analytical engine) less what the bucketed
    reduction had already hidden."""
    on = _gpt(parallelism__dp_bucket_mib=2.0)
    off = _gpt(parallelism__dp_bucket_mib=2.0, parallelism__overlap_grad_reduce=False)
    st_on, st_off = build_plan(on).stages[0], build_plan(off).stages[0]
    assert st_off.dp_buckets == 1 and st_on.dp_buckets > 1
    assert st_off.dp_allreduce_s == st_on.dp_allreduce_s > 0
    t_on, t_off = (palm.simulate(c, engine="analytical").iteration_time_s for c in (on, off))
    assert t_off > t_on
    # with nothing hidden the difference is at most the whole reduction
    assert t_off - t_on <= st_on.dp_allreduce_s + 1e-12


def test_async_tp_hides_the_column_parallel_half_of_the_backward_collectives() -> None:
    """Each layer's backward pass mirrors its forward collectives (two all-reduces); the one
    of each column-parallel linear (QKV, FC1) runs under its weight-gradient product. A
    large layer (weight gradients far longer than the all-reduce) hides exactly half."""
    big = {
        "model__hidden": 8192,
        "model__heads": 64,
        "model__ffn_hidden": 32768,
        "model__seq_len": 2048,
        "training__micro_batch": 4,
        "training__global_batch": 32,
    }

    def tp_backward(layers: int, **more: Any) -> float:
        plan = build_plan(_gpt(model__layers=layers, **big, **more))
        return plan.chunks[0].tp_backward_s

    two_layers = tp_backward(4) - tp_backward(2)  # what two layers' collectives take
    assert two_layers > 0
    hidden = tp_backward(4) - tp_backward(4, parallelism__tp_async_backward=True)
    assert hidden == pytest.approx(4 * (two_layers / 2) / 2, rel=1e-6)
    plan = build_plan(_gpt(model__layers=4, **big, parallelism__tp_async_backward=True))
    assert (
        plan.chunks[0].tp_forward_s
        == build_plan(_gpt(model__layers=4, **big)).chunks[0].tp_forward_s
    )

    # hidden behind the weight gradients only as far as they last: a small layer's weight
    # gradients are shorter than half its collectives, and bound what is hidden
    def small(layers: int, **more: Any) -> float:
        return build_plan(_gpt(model__layers=layers, **more)).chunks[0].tp_backward_s

    two_small = small(4) - small(2)
    hidden_small = small(4) - small(4, parallelism__tp_async_backward=True)
    assert 0 < hidden_small < 4 * (two_small / 2) / 2


@pytest.mark.parametrize("case", load_cases(), ids=lambda c: c.case_id)
def test_the_suite_simulates_its_toml_files_as_they_are(case: Any) -> None:
    import json

    manifest = json.loads(default_suite_file().read_text())
    entry = next(c for c in manifest["cases"] if c["id"] == case.case_id)
    path = default_suite_file().parent / entry["config"]
    assert case.config == load_config(path)
    assert case.config.software.framework == "megatron-lm"


def test_the_example_is_the_first_sc21_row_as_the_suite_runs_it() -> None:
    example = load_config(REPO / "examples" / "t18b-dgx-a100.toml")
    suite = {c.case_id: c.config for c in load_cases()}
    assert example == suite["megatron-sc21-t1-18.4b"]
    assert example.model.attention == "unfused"
    # the same file without [software] runs today's defaults: FlashAttention, faster
    plain = dataclasses.replace(
        load_config(
            REPO / "examples" / "t18b-dgx-a100.toml",
            overrides=['software.framework=""', 'software.version=""'],
        )
    )
    assert plain.model.attention == "auto"
    assert (
        palm.simulate(plain, engine="analytical").iteration_time_s
        < palm.simulate(example, engine="analytical").iteration_time_s
    )
