"""The inference validation rows: every row translated or left out with a reason, the
translation from stated facts only (scrambling ids, commits, names and sources changes no
configuration), the measured key's unit, and the report's JSON keys."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from palm.config import config_to_dict
from palm.serving.validation import (
    default_inference_file,
    is_inference_file,
    load_inference_cases,
    step_token_cap,
    translate_row,
)
from tests.cli_run import run


@pytest.fixture(scope="module")
def rows() -> list[dict[str, Any]]:
    cases: list[dict[str, Any]] = json.loads(default_inference_file().read_text())["cases"]
    return cases


def _configs(row: dict[str, Any]) -> list[dict[str, Any]] | str:
    out = translate_row(row)
    if isinstance(out, str):
        return out
    return [config_to_dict(c) for c in out.configs]


def test_every_row_is_translated_or_left_out_with_a_reason(rows: list[dict[str, Any]]) -> None:
    data = load_inference_cases(None)
    ids = {c.case_id for c in data.cases} | {x.case_id for x in data.left_out}
    assert len(data.cases) + len(data.left_out) == len(rows) == len(ids)
    assert all(x.reason for x in data.left_out)
    assert len(data.cases) >= 200


def _scramble(row: dict[str, Any], i: int) -> dict[str, Any]:
    out = copy.deepcopy(row)
    out["id"] = f"scrambled-{i}"
    out["model"]["name"] = f"model-{i}"
    out["source"] = {"repo": "nobody/nothing", "path": "x", "commit": "0" * 40, "section": "y"}
    out["source_kind"] = "scrambled"
    out["group"] = "scrambled"
    out["notes"] = ""
    return out


def test_translation_ignores_ids_commits_names_and_sources(rows: list[dict[str, Any]]) -> None:
    # every fifth row: a sample of every source and scenario
    for i, row in enumerate(rows[::5]):
        assert _configs(_scramble(row, i)) == _configs(row), row["id"]


def test_a_stated_batch_runs_static_and_an_unstated_one_at_the_runtime_batch(
    rows: list[dict[str, Any]],
) -> None:
    stated = next(r for r in rows if r["setup"].get("batch") and r["hardware"]["count"] == 1)
    case = translate_row(stated)
    assert not isinstance(case, str)
    sv = case.configs[0].serving
    assert (sv.batching, sv.batch) == ("static", stated["setup"]["batch"])
    unstated = next(
        r for r in rows if r["setup"].get("batch") is None and r["setup"].get("input_len")
    )
    case = translate_row(unstated)
    assert not isinstance(case, str)
    sv = case.configs[0].serving
    assert sv.batching == "continuous" and sv.batch > 1
    assert sv.chunk_tokens == step_token_cap(
        requests=sv.batch, input_tokens=sv.input_tokens, output_tokens=sv.output_tokens
    )


def test_step_token_cap_rounds_as_trtllm_bench() -> None:
    """``finetune_setting``: at least 2048, rounded up to 256 / 512 / 1024, at most 32768
    before rounding (hand-worked)."""
    assert step_token_cap(requests=46, input_tokens=20000, output_tokens=2000) == 2048
    assert step_token_cap(requests=1000, input_tokens=1000, output_tokens=1000) == 2048
    assert step_token_cap(requests=1500, input_tokens=128, output_tokens=128) == 3072
    assert step_token_cap(requests=2100, input_tokens=1000, output_tokens=1000) == 4608
    assert step_token_cap(requests=3988, input_tokens=128, output_tokens=128) == 8192
    assert step_token_cap(requests=4096, input_tokens=2048, output_tokens=128) == 32768


def test_per_gpu_figures_compare_per_device(rows: list[dict[str, Any]]) -> None:
    row = next(r for r in rows if "output_tokens_per_s_per_gpu" in r["measured"])
    case = translate_row(row)
    assert not isinstance(case, str)
    assert case.predicted_key == "output_tokens_per_s" and case.scale == "per_device"


def test_precision_text_sets_the_formats(rows: list[dict[str, Any]]) -> None:
    def first(word: str, accelerator: str) -> Any:
        row = next(
            r
            for r in rows
            if word in r["setup"]["precision"] and r["hardware"]["accelerator_type"] == accelerator
        )
        case = translate_row(row)
        assert not isinstance(case, str)
        return case.configs[0]

    fp4 = first("FP4", "B200-SXM-180GB")
    assert fp4.training.precision == "fp4" and fp4.serving.kv_cache == "fp8"
    fp8 = first("FP8", "H100-SXM-80GB")
    assert fp8.training.precision == "fp8" and fp8.serving.kv_cache == "fp8"
    tt = first("bfp4 MLP, bfp8 attention", "Wormhole-n150")
    sv = tt.serving
    assert (sv.weights, sv.attention_weights, sv.kv_cache) == ("bfp4", "bfp8", "bfp8")


def test_validate_suite_inference_reports_the_suite_keys(tmp_path: Path) -> None:
    assert is_inference_file(default_inference_file())
    out = run("validate", "--suite", "inference", "--json", timeout_s=300)
    assert out.code == 0, out.stderr
    report = json.loads(out.stdout)
    assert report["cases"] and all({"id", "error"} <= set(c) for c in report["cases"])
    assert report["left_out"] and all({"id", "reason"} <= set(x) for x in report["left_out"])
    # a file of the same shape: the first ten rows
    data = json.loads(default_inference_file().read_text())
    data["cases"] = data["cases"][200:210]
    path = tmp_path / "some_inference.json"
    path.write_text(json.dumps(data))
    out = run("validate", str(path), "--json", timeout_s=120)
    assert out.code == 0, out.stderr
    small = json.loads(out.stdout)
    assert len(small["cases"]) + len(small["left_out"]) == 10
