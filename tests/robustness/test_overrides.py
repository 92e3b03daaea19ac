"""Class 2: a partial override (``--set a.b.c=v`` or a table next to a preset) merges into the
preset's table field by field instead of replacing it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.cli_run import REPO, assert_clean, assert_usage_error, run

DGX = REPO / "examples" / "t18b-dgx-a100.toml"  # precision fp16
WAFER = REPO / "examples" / "wafer-t18b.toml"  # precision fp16


def _config(*args: str, cwd: Path = REPO) -> dict:
    r = run("simulate", *args, "--engine", "analytical", "--json", cwd=cwd)
    assert r.code == 0, r.stderr
    assert_clean(r)
    return json.loads(r.stdout)["config"]


@pytest.mark.parametrize(
    ("path", "field", "value"),
    [
        (DGX, "hardware.peak_tflops.bf16", 400.0),  # the docs' own example
        (DGX, "hardware.peak_tflops.fp8", 1000.0),  # a precision the preset lacks
        (WAFER, "hardware.core_peak_tflops.fp32", 1.5),
        (WAFER, "hardware.core_peak_tflops.fp16", 2.0),  # the precision in use
    ],
)
def test_set_one_precision_keeps_the_others(path: Path, field: str, value: float) -> None:
    plain = _config(str(path))
    merged = _config(str(path), "--set", f"{field}={value}")
    section, table, key = field.split(".")
    expected = dict(plain[section][table], **{key: value})
    assert merged[section][table] == expected
    rest = {k: v for k, v in merged[section].items() if k != table}
    assert rest == {k: v for k, v in plain[section].items() if k != table}


def test_toml_table_next_to_a_preset_merges(tmp_path: Path) -> None:
    cfg = tmp_path / "c.toml"
    cfg.write_text(
        DGX.read_text(encoding="utf-8") + "\n[hardware.peak_tflops]\nbf16 = 400\n",
        encoding="utf-8",
    )
    # the file's [hardware] table is above; TOML allows the sub-table after [parallelism]
    merged = _config(str(cfg))
    assert merged["hardware"]["peak_tflops"]["bf16"] == 400.0
    assert merged["hardware"]["peak_tflops"]["fp16"] == 312.0
    assert merged["training"]["precision"] == "fp16"


def test_set_a_nested_field_on_a_preset_model_keeps_its_other_fields() -> None:
    merged = _config(str(DGX), "--set", "model.seq_len=1024")
    plain = _config(str(DGX))
    assert merged["model"] == dict(plain["model"], seq_len=1024)


@pytest.mark.parametrize(
    ("override", "field"),
    [
        ("hardware.peak_tflops.bf17=1", "hardware.peak_tflops.bf17"),
        ("hardware.peak_tflops.bf16=-1", "hardware.peak_tflops.bf16"),
        ("hardware.peak_tflops=3", "hardware.peak_tflops"),
        ("hardware.peak_tflops.fp16=0", "training.precision"),  # removing the one in use
    ],
)
def test_bad_nested_overrides_are_one_line_errors(override: str, field: str) -> None:
    assert_usage_error(run("simulate", str(DGX), "--set", override), field)
