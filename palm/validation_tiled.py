"""Comparing the simulator with measured tiled chips (docs/validation.md).

A file of the shape of ``palm/data/visible_tiled.json`` (a packaged copy of the visible
cases is the default) holds ``cases`` of two kinds:

* ``gemm``: one matrix product on one Tensix chip (tt-metal ``tech_reports/GEMM_FLOPS``), the
  chip (``hardware.chip``: a Wormhole B0 runs on the ``wormhole-n150`` preset, a Blackhole on
  ``blackhole-p150``), shape, data type, math fidelity, compute grid (``grid_size_used`` is
  ttnn's ``CoreCoord``, ``(x, y)`` = columns by rows), where each operand lives
  (``in0``/``in1``/``out`` in L1 or DRAM), whether the program was traced and whether its
  program config was hand-tuned (``hardware.matmul_config = "block2d"``) or chosen by ttnn
  (``"auto"``, the "out of box" rows);
  ``measured.inference_time_avg_ns`` is compared with the ``iteration_time_s`` of a
  ``family = "gemm"`` simulation of the same product;
* ``dram``: N cores each moving 1 MiB between its L1 and DRAM (tt-isa-documentation,
  ``WormholeB0/DRAMTile``); ``measured.bandwidth_GBps`` is compared with
  :func:`palm.network.tensix_noc.dram_bandwidth_Bps` for the same cores, channels and NoC.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from palm.api import simulate
from palm.config import parse_config
from palm.errors import ConfigError
from palm.hardware.presets import hardware_preset
from palm.hardware.spec import Mesh2DHardware
from palm.inputs import read_input
from palm.network.tensix_noc import DramTransfer, dram_bandwidth_Bps
from palm.strategy import SimConfig

__all__ = [
    "GemmCase",
    "DramCase",
    "TiledCases",
    "CHIP_PRESETS",
    "chip_of",
    "default_tiled_file",
    "default_tiled_files",
    "is_tiled_file",
    "load_tiled_cases",
    "gemm_tables",
    "predict_dram",
    "fidelity_conflicts",
]

_DTYPES = {"BFLOAT16": "bf16", "BFLOAT8_B": "bfp8", "BFLOAT4_B": "bfp4"}

CHIP_PRESETS = {"wormhole": "wormhole-n150", "blackhole": "blackhole-p150"}
"""The preset a ``gemm`` row runs on, by the first word of its ``hardware.chip`` (lower case)."""


@dataclass(frozen=True)
class GemmCase:
    case_id: str
    config: SimConfig
    measured_time_s: float
    traced: bool
    tuned: bool
    source: str
    #: the chip family (a key of :data:`CHIP_PRESETS`), from the row's stated chip
    chip: str = "wormhole"


@dataclass(frozen=True)
class DramCase:
    case_id: str
    transfer: DramTransfer
    measured_Bps: float
    source: str


@dataclass(frozen=True)
class TiledCases:
    gemm: tuple[GemmCase, ...]
    dram: tuple[DramCase, ...]


def default_tiled_file() -> Path:
    return Path(str(resources.files("palm") / "data" / "visible_tiled.json"))


def default_tiled_files() -> tuple[Path, ...]:
    """The packaged visible tiled files: Wormhole (products and DRAM) and Blackhole."""
    data = resources.files("palm") / "data"
    return (default_tiled_file(), Path(str(data / "visible_tiled_blackhole.json")))


def chip_of(case: dict[str, Any]) -> str:
    """The chip family of a ``gemm`` row (a key of :data:`CHIP_PRESETS`), from its stated
    ``hardware.chip``; a row that states none is a Wormhole row (the first file's schema)."""
    hw = case.get("hardware") or {}
    stated = str(hw.get("chip") or "Wormhole B0") if isinstance(hw, dict) else str(hw)
    chip = stated.split()[0].lower() if stated.split() else ""
    if chip not in CHIP_PRESETS:
        raise ConfigError("hardware.chip", stated, f"a chip of {', '.join(CHIP_PRESETS)}")
    return chip


def _read(path: Path) -> Any:
    text = read_input(path, field="validation file", kind="JSON file")
    try:
        return json.loads(text)
    except (ValueError, RecursionError) as exc:
        raise ConfigError("validation file", str(path), f"valid JSON ({exc})") from None


def is_tiled_file(path: str | Path) -> bool:
    """Whether ``path`` has the tiled shape (``cases`` of kind ``gemm`` or ``dram``;
    recognised in :mod:`palm.validation_files`); unreadable files are not."""
    from palm.validation_files import validation_file_kind

    try:
        return validation_file_kind(path) == "tiled"
    except ConfigError:
        return False


def _source(case: dict[str, Any]) -> str:
    src = case.get("source", {})
    if not isinstance(src, dict):
        return str(src)
    return f"{src.get('repo', '')} {src.get('path', '')} @{str(src.get('commit', ''))[:8]}"


def _tuned(mapping: dict[str, Any]) -> bool:
    """A hand-tuned program config (else ttnn chose one: the "out of box" rows)."""
    return "tuned" in str(mapping.get("config_selection", ""))


def gemm_tables(case: dict[str, Any]) -> dict[str, Any]:
    """The configuration tables of one ``gemm`` case."""
    w, mp = case["workload"], case["mapping"]
    x, y = (int(v) for v in mp["grid_size_used"])  # ttnn CoreCoord: columns, rows
    dtype = str(w["dtype"]).split(".")[-1]
    if dtype not in _DTYPES:
        raise ConfigError("workload.dtype", w["dtype"], f"one of {', '.join(_DTYPES)}")
    resident = [name for name, key in (("a", "in0"), ("b", "in1"), ("c", "out"))
                if mp[f"{key}_storage"] == "L1"]  # fmt: skip
    return {
        "model": {
            "name": case["id"],
            "family": "gemm",
            "m": w["M"],
            "k": w["K"],
            "n": w["N"],
            "sram_resident": resident,
        },  # fmt: skip
        "hardware": {
            "preset": CHIP_PRESETS[chip_of(case)],
            "math_fidelity": str(w["math_fidelity"]).split(".")[-1].lower(),
            "compute_grid": [y, x],
            "dispatch": "trace" if mp["use_trace"] else "host",
            "matmul_config": "block2d" if _tuned(mp) else "auto",
        },
        "training": {"mode": "inference", "global_batch": 1, "precision": _DTYPES[dtype]},
    }


def _dram_case(case: dict[str, Any]) -> DramCase:
    w, mp = case["workload"], case["mapping"]
    transfer = DramTransfer(
        cores=int(mp["tiles"]),
        channels=int(mp["channels"]),
        paired=mp["pairing"] == "carefully",
        noc=int(mp["noc"]),
        write="L1 -> DRAM" in str(w["direction"]),
        bytes_per_core=float(w["transfer_per_tile_bytes"]),
    )
    return DramCase(case["id"], transfer, float(case["measured"]["bandwidth_GBps"]) * 1e9,
                    _source(case))  # fmt: skip


def load_tiled_cases(path: str | Path | None = None) -> TiledCases:
    """The ``gemm`` and ``dram`` cases of a tiled validation file (default: every packaged
    visible file, :func:`default_tiled_files`, Wormhole first)."""
    if path is None:
        parts = [_load_one(p) for p in default_tiled_files()]
        return TiledCases(
            tuple(c for part in parts for c in part.gemm),
            tuple(c for part in parts for c in part.dram),
        )
    return _load_one(Path(path))


def _load_one(path: Path) -> TiledCases:
    data = _read(path)
    cases = data.get("cases") if isinstance(data, dict) else None
    if not isinstance(cases, list) or not cases:
        raise ConfigError("validation file", str(path), "a JSON object with a cases list")
    gemm, dram = [], []
    for i, case in enumerate(cases):
        try:
            if case["kind"] == "gemm":
                gemm.append(GemmCase(
                    case_id=str(case["id"]),
                    config=parse_config(gemm_tables(case)),
                    measured_time_s=float(case["measured"]["inference_time_avg_ns"]) * 1e-9,
                    traced=bool(case["mapping"]["use_trace"]),
                    tuned=_tuned(case["mapping"]),
                    source=_source(case),
                    chip=chip_of(case),
                ))  # fmt: skip
            elif case["kind"] == "dram":
                dram.append(_dram_case(case))
        except (KeyError, TypeError) as exc:
            raise ConfigError(
                f"cases[{i}]",
                case.get("id", i) if isinstance(case, dict) else case,
                f"a gemm or dram case with workload, mapping and measured (missing {exc})",
            ) from None
    return TiledCases(tuple(gemm), tuple(dram))


def fidelity_conflicts(
    cases: Sequence[GemmCase], *, tolerance: float = 0.25
) -> dict[str, GemmCase]:
    """The HiFi2 rows measured more than ``(1 + tol) / (1 - tol)`` times their HiFi4 twin (same
    shape, operands in the same places, same program config and dispatch), each with that twin.

    HiFi4 runs every multiplier phase of HiFi2 and two more on the same data (tt-metal
    ``MathFidelity``; 32 against 64 cycles per 32^3 tile product), so no model whose time never
    falls as the fidelity rises can predict both rows of such a pair within ``tol``: the pair
    contradicts the hardware, and the slower row's excess is host noise, not device work. Such
    rows are kept in every table and reported; the constant fits leave them out and the
    headline is given with and without them (docs/validation.md, "Wormhole")."""

    def key(c: GemmCase) -> tuple[object, ...]:
        m, hw = c.config.model, c.config.hardware
        assert isinstance(hw, Mesh2DHardware)
        grid = (hw.name, hw.compute_grid)
        return (m.m, m.k, m.n, m.sram_resident, hw.dispatch, hw.matmul_config, c.traced, grid)

    def fidelity(c: GemmCase) -> str:
        hw = c.config.hardware
        assert isinstance(hw, Mesh2DHardware)
        return hw.math_fidelity

    hifi4 = {key(c): c for c in cases if fidelity(c) == "hifi4"}
    limit = (1 + tolerance) / (1 - tolerance)
    out = {}
    for c in cases:
        twin = hifi4.get(key(c)) if fidelity(c) == "hifi2" else None
        if twin is not None and c.measured_time_s > limit * twin.measured_time_s:
            out[c.case_id] = twin
    return out


def predict_gemm(case: GemmCase, *, engine: str = "analytical") -> float:
    return simulate(case.config, engine=engine).iteration_time_s


def predict_dram(case: DramCase, *, hardware: Mesh2DHardware | None = None) -> float:
    """Predicted aggregate bandwidth (bytes/s) of one DRAM case on ``hardware`` (default:
    the wormhole-n150 preset)."""
    hw = hardware or hardware_preset("wormhole-n150")
    assert isinstance(hw, Mesh2DHardware)
    return dram_bandwidth_Bps(case.transfer, hardware=hw)
