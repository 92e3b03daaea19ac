"""palm/data/kernels.json: every row has the schema, a source with a URL, a preset with the
SMs and architecture the kernel models need, and a plausible throughput; `palm-tune validate`
reads it by its shape and refuses a broken row in one line."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from palm.errors import ConfigError
from palm.hardware.presets import hardware_preset
from palm.validation_files import validation_file_kind
from palm.validation_kernels import (
    KERNELS_FILE,
    kernel_report,
    load_kernel_rows,
    write_kernel_report,
)

DATA = json.loads(KERNELS_FILE.read_text(encoding="utf-8"))


def test_every_row_has_the_schema_and_a_source() -> None:
    ids = [r["id"] for r in DATA["kernels"]]
    assert len(ids) == len(set(ids))
    for raw in DATA["kernels"]:
        src = raw["source"]
        assert src["url"].startswith("https://") and src["title"] and src["figure"]
        assert src["reading"]  # how the number was read (table entry or bar label)
        assert raw["kernel"] in ("gemm", "grouped_gemm", "attention")
    rows = load_kernel_rows()
    assert len(rows) == len(ids)
    kinds = {r.kernel for r in rows}
    assert kinds == {"gemm", "grouped_gemm", "attention"}


def test_rows_run_on_presets_with_kernel_inputs() -> None:
    for row in load_kernel_rows():
        hw = hardware_preset(row.preset)
        assert hw.sm_count > 0 and hw.kernel_arch  # type: ignore[union-attr]
        peak = hw.peak_tflops.get(row.dtype)
        assert 0 < row.measured_tflops < peak  # published throughput below the datasheet peak


def test_validate_recognises_and_reports_the_file(tmp_path: Path) -> None:
    assert validation_file_kind(KERNELS_FILE) == "kernels"
    report = kernel_report()
    assert report["groups"] and all(c["error"] is not None for c in report["cases"])
    buf = io.StringIO()
    write_kernel_report(report, out=buf)
    assert "leave-one-out" in buf.getvalue()


@pytest.mark.parametrize(
    ("field", "value", "expected"),
    [("kernel", "conv", r"kernels\[0\]\.kernel"), ("measured", {"tflops": -1}, "tflops")],
)
def test_a_broken_row_is_refused_naming_its_field(
    tmp_path: Path, field: str, value: object, expected: str
) -> None:
    bad = json.loads(json.dumps(DATA))
    bad["kernels"][0][field] = value
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(bad), encoding="utf-8")
    with pytest.raises(ConfigError, match=expected):
        load_kernel_rows(path)
