"""The kernel validation file (``palm/data/kernels.json``): published single-kernel
measurements (GEMM, grouped GEMM, fused attention), each row's predicted time from the kernel
models of :mod:`palm.cost.gpu_gemm` and :mod:`palm.cost.gpu_attention`, and the report of
``palm-tune validate --suite kernels`` / ``palm-tune validate FILE``.

A row is ``{id, kernel, implementation, device, preset, dtype, shape, measured{tflops},
source{title, url, figure, reading}}`` (the file's ``meta.schema``); ``preset`` names the
hardware preset whose SM count, peaks, HBM bandwidth and exponential rate the row ran on.
Errors are ``predicted time / measured time - 1`` (the measured time is the published FLOPs
over the published TFLOP/s), as in the other validation reports.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any, TextIO

from palm.cost.gpu_attention import (
    AttentionKernelConstants,
    AttentionShape,
    attention_flops,
    attention_kernel_time,
)
from palm.cost.gpu_gemm import (
    GemmDevice,
    GemmKernelConstants,
    grouped_gemm_kernel_time,
)
from palm.cost.kernels import KernelFit, kernel_fit
from palm.errors import ConfigError
from palm.hardware.spec import GpuClusterHardware
from palm.inputs import read_input

__all__ = [
    "KERNELS_FILE",
    "KernelRow",
    "is_kernel_file",
    "kernel_report",
    "load_kernel_rows",
    "predict_time",
    "row_group",
    "write_kernel_report",
]

KERNELS_FILE = Path(__file__).resolve().parent / "data" / "kernels.json"
_KINDS = ("gemm", "grouped_gemm", "attention")
_BYTES = {"fp8": 1.0, "bf16": 2.0, "fp16": 2.0}


@dataclass(frozen=True)
class KernelRow:
    """One published kernel measurement."""

    row_id: str
    kernel: str
    implementation: str
    preset: str
    dtype: str
    shape: Mapping[str, Any]
    measured_tflops: float

    @property
    def flops(self) -> float:
        """FLOPs as the source counts them (``meta.conventions`` of the file)."""
        s = self.shape
        if self.kernel == "attention":
            return attention_flops(_attention_shape(s))
        groups = int(s.get("groups", 1))
        m = int(s.get("m_per_group", s.get("m", 0)))
        return 2.0 * groups * m * int(s["n"]) * int(s["k"])

    @property
    def measured_s(self) -> float:
        return self.flops / (self.measured_tflops * 1e12)


def is_kernel_file(data: Any) -> bool:
    """Whether parsed JSON has the kernel file's shape: a non-empty ``kernels`` list of rows
    with ``kernel``, ``shape`` and ``measured``."""
    rows = data.get("kernels") if isinstance(data, dict) else None
    return (
        isinstance(rows, list)
        and bool(rows)
        and all(isinstance(r, dict) and {"kernel", "shape", "measured"} <= set(r) for r in rows)
    )


def _attention_shape(s: Mapping[str, Any]) -> AttentionShape:
    return AttentionShape(
        batch=int(s["batch"]),
        seq_len=int(s["seq_len"]),
        heads=int(s["heads"]),
        head_dim=int(s["head_dim"]),
        causal=bool(s["causal"]),
        direction=str(s["pass"]),
    )


def _row(raw: Any, i: int) -> KernelRow:
    where = f"kernels[{i}]"
    if not isinstance(raw, dict):
        raise ConfigError(where, raw, "an object")
    for key in ("id", "kernel", "implementation", "preset", "dtype", "shape", "measured", "source"):
        if key not in raw:
            raise ConfigError(f"{where}.{key}", None, "a value (the file's meta.schema)")
    if raw["kernel"] not in _KINDS:
        raise ConfigError(f"{where}.kernel", raw["kernel"], "one of " + ", ".join(_KINDS))
    if raw["dtype"] not in _BYTES:
        raise ConfigError(f"{where}.dtype", raw["dtype"], "one of " + ", ".join(_BYTES))
    tflops = raw["measured"].get("tflops") if isinstance(raw["measured"], dict) else None
    if not isinstance(tflops, (int, float)) or isinstance(tflops, bool) or tflops <= 0:
        raise ConfigError(f"{where}.measured.tflops", tflops, "a number > 0")
    src = raw["source"]
    if not isinstance(src, dict) or not src.get("url") or not src.get("title"):
        raise ConfigError(f"{where}.source", src, "an object with title and url")
    return KernelRow(
        row_id=str(raw["id"]),
        kernel=raw["kernel"],
        implementation=str(raw["implementation"]),
        preset=str(raw["preset"]),
        dtype=raw["dtype"],
        shape=dict(raw["shape"]),
        measured_tflops=float(tflops),
    )


def load_kernel_rows(path: str | Path | None = None) -> list[KernelRow]:
    """The rows of a kernel file (default: the packaged ``palm/data/kernels.json``)."""
    source = path if path is not None else KERNELS_FILE
    text = read_input(source, field="validation file", kind="JSON file")
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise ConfigError("validation file", str(source), f"valid JSON ({exc})") from None
    if not is_kernel_file(data):
        raise ConfigError("validation file", str(source), "an object with a kernels list")
    return [_row(r, i) for i, r in enumerate(data["kernels"])]


@cache
def _hardware(preset: str) -> GpuClusterHardware:
    from palm.hardware.presets import hardware_preset

    hw = hardware_preset(preset)
    if not isinstance(hw, GpuClusterHardware) or hw.sm_count <= 0 or not hw.kernel_arch:
        raise ConfigError("preset", preset, "a GPU preset with sm_count and kernel_arch")
    return hw


def row_group(row: KernelRow) -> str:
    """The constants a row informs: ``gemm`` or ``attention/<kernel>/<pass>``."""
    if row.kernel == "attention":
        return f"attention/{row.implementation}/{row.shape['pass']}"
    return "gemm"


def predict_time(
    row: KernelRow,
    *,
    gemm: GemmKernelConstants | None,
    attention: Mapping[tuple[str, str], AttentionKernelConstants],
) -> float | None:
    """Predicted seconds of ``row`` with these constants (``None``: none for its kernel)."""
    hw = _hardware(row.preset)
    peak = hw.peak_tflops.get(row.dtype) * 1e12
    hbm = hw.hbm_bandwidth_gbps * 1e9
    s = row.shape
    if row.kernel == "attention":
        c = attention.get((row.implementation, str(s["pass"])))
        if c is None:
            return None
        return attention_kernel_time(
            _attention_shape(s),
            sm_count=hw.sm_count,
            peak_flops=peak,
            exp_per_s=hw.sfu_exp_tera_per_s * 1e12,
            hbm_Bps=hbm,
            constants=c,
            elem_bytes=_BYTES[row.dtype],
        )
    if gemm is None:
        return None
    m = int(s.get("m_per_group", s.get("m", 0)))
    rows = (m,) * int(s.get("groups", 1))
    device = GemmDevice(hw.kernel_arch, hw.sm_count, peak, hbm)
    return grouped_gemm_kernel_time(
        rows=rows,
        n=int(s["n"]),
        k=int(s["k"]),
        device=device,
        constants=gemm,
        in_bytes=_BYTES[row.dtype],
    )


def _fit_for(row: KernelRow) -> KernelFit | None:
    return kernel_fit(_hardware(row.preset).kernel_arch)


def kernel_report(path: str | Path | None = None) -> dict[str, Any]:
    """Every row's predicted and measured TFLOP/s with the stored constants, and the mean /
    max absolute error per group of constants (with the leave-one-out errors the calibration
    recorded)."""
    cases: list[dict[str, Any]] = []
    for row in load_kernel_rows(path):
        fit = _fit_for(row)
        t = predict_time(row, gemm=fit.gemm, attention=fit.attention) if fit else None
        cases.append(
            {
                "id": row.row_id,
                "group": row_group(row),
                "measured_tflops": row.measured_tflops,
                "predicted_tflops": row.flops / t / 1e12 if t else None,
                "error": t / row.measured_s - 1.0 if t else None,
            }
        )
    groups: dict[str, dict[str, Any]] = {}
    for c in cases:
        if c["error"] is None:
            continue
        g = groups.setdefault(c["group"], {"errors": []})
        g["errors"].append(abs(c["error"]))
    summary = {
        name: {
            "rows": len(g["errors"]),
            "mean": sum(g["errors"]) / len(g["errors"]),
            "max": max(g["errors"]),
        }  # fmt: skip
        for name, g in sorted(groups.items())
    }
    return {"cases": cases, "groups": summary, "leave_one_out": _stored_loo()}


def _stored_loo() -> dict[str, Any]:
    from palm.hardware.preset_data import fit_sets

    out: dict[str, Any] = {}
    for name, fit in fit_sets().items():
        if name.startswith("kernels-"):
            out[name] = dict(fit.record.get("groups", {}))
    return out


def write_kernel_report(report: Mapping[str, Any], *, out: TextIO) -> None:
    """The report as text: one line per row, then the per-group summary."""
    out.write(f"{'kernel row':58} {'group':26} {'meas TF/s':>10} {'pred TF/s':>10} {'error':>8}\n")
    for c in report["cases"]:
        pred = "-" if c["predicted_tflops"] is None else f"{c['predicted_tflops']:.0f}"
        err = "-" if c["error"] is None else f"{c['error']:+.1%}"
        out.write(
            f"{c['id']:58} {c['group']:26} {c['measured_tflops']:10.0f} {pred:>10} {err:>8}\n"
        )
    out.write("\n")
    for name, g in report["groups"].items():
        out.write(
            f"{name}: {g['rows']} rows, mean absolute error {g['mean']:.1%}, max {g['max']:.1%}\n"
        )
    for fit_name, groups in report["leave_one_out"].items():
        for name, g in groups.items():
            loo = g.get("leave_one_out")
            if loo:
                out.write(
                    f"{fit_name} {name}: leave-one-out mean {loo['mean']:.1%}, "
                    f"max {loo['max']:.1%}\n"
                )
