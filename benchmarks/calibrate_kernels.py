"""Fit the kernel constants of each GPU architecture on published kernel measurements only.

Data: ``palm/data/kernels.json`` (FlashAttention-2 / -3 and cuDNN attention throughput from
Shah et al. 2024, DeepGEMM's published FP8 GEMM and grouped-GEMM tables; each row cites its
source). Model: :mod:`palm.cost.gpu_gemm` (tiles, waves, pipeline fill, operand feed, HBM
roofline) and :mod:`palm.cost.gpu_attention` (work units over the SMs, tensor FLOPs plus
the exponentials a kernel does not hide). Per architecture (a preset's ``kernel_arch``):

* the five GEMM constants on the GEMM and grouped-GEMM rows;
* per attention kernel and pass, its three constants on its rows;

each by a Nelder-Mead simplex on the mean squared log error of the kernel time, with every
constant kept in its physical range by a transform (fractions through a logistic, positive
constants through an exponential). Beside the in-sample error, every row is predicted by a
fit of its group without it (leave-one-out). ``--write`` stores the constants in
``palm/data/fitted/kernels-<arch>.toml`` (``palm/cost/kernels.py`` reads them); the
end-to-end validation suites never fit them.

    python benchmarks/calibrate_kernels.py [--write] [--adopt] [--write-docs]

``--write-docs`` alone regenerates the constants table of docs/model.md from the stored fit.
"""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _docblock import write_section  # noqa: E402
from _fit import leave_one_out, mean_max, nelder_mead, summary  # noqa: E402
from _fitted import write_fit  # noqa: E402

from palm.cost.gpu_attention import AttentionKernelConstants  # noqa: E402
from palm.cost.gpu_gemm import GemmKernelConstants  # noqa: E402
from palm.cost.kernels import kernel_fit  # noqa: E402
from palm.hardware.preset_data import fit_sets  # noqa: E402
from palm.hardware.presets import hardware_preset  # noqa: E402
from palm.validation_kernels import (  # noqa: E402
    KernelRow,
    load_kernel_rows,
    predict_time,
    row_group,
)

Params = dict[str, float]


def _sig(x: float) -> float:
    return 1.0 / (1.0 + math.exp(-x))


def _logit(p: float) -> float:
    return math.log(p / (1.0 - p))


#: name -> (to model value, from model value, start)
_GEMM = {
    "gemm_efficiency": (_sig, _logit, 0.8),
    "gemm_k_fill": (math.exp, math.log, 500.0),
    "gemm_launch_us": (math.exp, math.log, 3.0),
    "gemm_hbm_fraction": (_sig, _logit, 0.85),
    "gemm_feed_tbps": (math.exp, math.log, 15.0),
}
_ATTENTION = {
    "efficiency": (_sig, _logit, 0.7),
    "exposed_exp": (_sig, _logit, 0.5),
    "fill_keys": (math.exp, math.log, 256.0),
}


def _gemm_constants(p: Params) -> GemmKernelConstants:
    return GemmKernelConstants(
        efficiency=p["gemm_efficiency"],
        k_fill=p["gemm_k_fill"],
        launch_s=p["gemm_launch_us"] * 1e-6,
        hbm_fraction=p["gemm_hbm_fraction"],
        feed_Bps=p["gemm_feed_tbps"] * 1e12,
    )


def _predict(row: KernelRow, p: Params) -> float:
    """Seconds of ``row`` with the constants of its group in ``p`` (keys without prefix for
    attention)."""
    if row.kernel == "attention":
        key = (row.implementation, str(row.shape["pass"]))
        c = AttentionKernelConstants(p["efficiency"], p["exposed_exp"], p["fill_keys"])
        t = predict_time(row, gemm=None, attention={key: c})
    else:
        t = predict_time(row, gemm=_gemm_constants(p), attention={})
    assert t is not None
    return t


def _error(row: KernelRow, p: Params) -> float:
    return _predict(row, p) / row.measured_s - 1.0


def _fitter(
    spec: dict[str, tuple[Callable[[float], float], Callable[[float], float], float]],
    *,
    start: Params | None = None,
    iters: int = 1500,
) -> Callable[[list[KernelRow]], Params]:
    """A fit of ``spec``'s constants from ``start`` (default: the spec's starting values);
    leave-one-out refits start from the full fit with fewer iterations."""
    names = list(spec)
    first = start or {n: spec[n][2] for n in names}

    def unpack(x: np.ndarray) -> Params:
        return {n: spec[n][0](float(v)) for n, v in zip(names, x, strict=True)}

    def fit(rows: list[KernelRow]) -> Params:
        def loss(x: np.ndarray) -> float:
            p = unpack(np.clip(x, -30, 30))
            return sum(math.log(_predict(r, p) / r.measured_s) ** 2 for r in rows) / len(rows)

        x0 = [spec[n][1](first[n]) for n in names]
        x = nelder_mead(loss, x0, iters=iters)
        return unpack(np.clip(x, -30, 30))

    return fit


def _fit_group(name: str, rows: list[KernelRow]) -> tuple[Params, list[float], list[float]]:
    spec = _GEMM if name == "gemm" else _ATTENTION
    params = _fitter(spec)(rows)
    in_sample = [_error(r, params) for r in rows]
    loo = leave_one_out(rows, _fitter(spec, start=params, iters=300), _error)
    return params, in_sample, loo


def _prefixed(name: str, params: Params) -> Params:
    if name == "gemm":
        return params
    _, kernel, direction = name.split("/")
    return {f"attention_{kernel}_{direction}_{k}": v for k, v in params.items()}


def _round(k: str, v: float) -> float:
    return round(v, 1) if k.endswith(("fill", "fill_keys", "_us", "_tbps")) else round(v, 4)


def calibrate(*, write: bool, adopt: bool, out: Callable[[str], None] = print) -> None:
    rows = load_kernel_rows()
    by_arch: dict[str, list[KernelRow]] = {}
    for r in rows:
        by_arch.setdefault(hardware_preset(r.preset).kernel_arch, []).append(r)  # type: ignore[union-attr]
    for arch, arch_rows in sorted(by_arch.items()):
        groups: dict[str, list[KernelRow]] = {}
        for r in arch_rows:
            groups.setdefault(row_group(r), []).append(r)
        constants: Params = {}
        records: dict[str, dict[str, object]] = {}
        all_in: list[float] = []
        all_loo: list[float] = []
        for name, grows in sorted(groups.items()):
            params, in_sample, loo = _fit_group(name, grows)
            constants.update(_prefixed(name, params))
            all_in += in_sample
            all_loo += loo
            mi, xi = mean_max(in_sample)
            ml, xl = mean_max(loo)
            records[name] = {
                "rows": len(grows),
                "in_sample": {"mean": round(mi, 4), "max": round(xi, 4)},
                "leave_one_out": {"mean": round(ml, 4), "max": round(xl, 4)},
            }
            shown = ", ".join(f"{k} {v:.4g}" for k, v in params.items())
            out(f"{arch} {name} ({len(grows)} rows): {shown}")
            out(f"  in-sample {summary(in_sample)}; leave-one-out {summary(loo)}")
        out(f"{arch}: all rows in-sample {summary(all_in)}; leave-one-out {summary(all_loo)}")
        if write:
            _write(arch, arch_rows, constants, all_in, all_loo, records, adopt=adopt)


def _stored_errors(arch: str, rows: Sequence[KernelRow]) -> list[float]:
    """The rows' errors with the stored constants (empty: none stored for ``arch``)."""
    fit = kernel_fit(arch)
    if fit is None:
        return []
    out = []
    for r in rows:
        t = predict_time(r, gemm=fit.gemm, attention=fit.attention)
        if t is None:
            return []
        out.append(t / r.measured_s - 1.0)
    return out


def _write(
    arch: str,
    rows: Sequence[KernelRow],
    constants: Params,
    in_sample: list[float],
    loo: list[float],
    records: dict[str, dict[str, object]],
    *,
    adopt: bool,
) -> None:
    rounded = {k: _round(k, v) for k, v in constants.items()}
    write_fit(
        f"kernels-{arch}",
        script="calibrate_kernels.py",
        data="palm/data/kernels.json",
        rows=[r.row_id for r in rows],
        left_out=[],
        method="per group of constants (the GEMM and grouped-GEMM rows; each attention kernel "
        "and pass), a Nelder-Mead simplex on the mean squared log error of the kernel time "
        "(palm/cost/gpu_gemm.py, palm/cost/gpu_attention.py); fractions through a logistic, "
        "positive constants through an exponential",
        fitted=constants,
        rounded=rounded,
        in_sample_stored=_stored_errors(arch, rows) or in_sample,
        in_sample_fitted=in_sample,
        leave_one_out=loo,
        adopt=adopt,
        extra={"groups": records},
    )


ROOT = Path(__file__).resolve().parents[1]


def constants_table() -> str:
    """The stored kernel constants of every architecture, with each group's in-sample and
    leave-one-out errors (docs/model.md, block ``kernel-constants``)."""
    lines = [
        "| fit set | group | constants | rows | in-sample mean / max | leave-one-out mean / max |",
        "|---|---|---|---|---|---|",
    ]
    for name, fit in sorted(fit_sets().items()):
        if not name.startswith("kernels-"):
            continue
        for group, rec in fit.record.get("groups", {}).items():
            prefix = (
                "gemm_" if group == "gemm" else "attention_{}_{}_".format(*group.split("/")[1:])
            )
            shown = ", ".join(
                f"`{k[len(prefix) :]}` {v:g}"
                for k, v in fit.constants.items()
                if k.startswith(prefix)
            )
            ins, loo = rec["in_sample"], rec["leave_one_out"]
            lines.append(
                f"| `{name}` | {group} | {shown} | {rec['rows']} | "
                f"{ins['mean']:.1%} / {ins['max']:.1%} | {loo['mean']:.1%} / {loo['max']:.1%} |"
            )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", action="store_true", help="write palm/data/fitted/")
    parser.add_argument(
        "--adopt", action="store_true", help="replace the stored constants even without a gain"
    )
    parser.add_argument(
        "--write-docs", action="store_true", help="regenerate docs/model.md's constants table"
    )
    args = parser.parse_args(argv)
    if not args.write_docs or args.write:
        calibrate(write=args.write, adopt=args.adopt)
    if args.write_docs:
        write_section(ROOT / "docs" / "model.md", "kernel-constants", constants_table())
    return 0


if __name__ == "__main__":
    sys.exit(main())
