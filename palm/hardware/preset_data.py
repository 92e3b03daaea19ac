"""The reader of the hardware presets' data files (:mod:`palm.hardware.presets` is the
lookup): ``palm/data/hardware/*.toml`` (the figures, each with its source) and
``palm/data/fitted/*.toml`` (the constants fitted by the calibration scripts of ``benchmarks/``,
each with the fit's command, rows and errors). Nothing here holds a number; ``docs/hardware.md``
and the constant tables of ``docs/model.md`` and ``docs/validation.md`` are generated from the
same files (``python benchmarks/preset_docs.py``).

A preset file holds one table per preset, in the order ``palm-tune presets`` lists them (files in
name order)::

    [dgx-h100]
    title = "NVIDIA DGX H100: 8 x H100 SXM5 80GB"   # one line for the docs
    topology = "gpu-cluster"                          # or "mesh2d": which Hardware class
    base = "dgx-a100"                                 # optional: start from that preset's
                                                      # figures, sources and fits
    fitted = ["megatron-a100", "gpu-h100"]            # fit sets, prior first, later win
    gpus_per_node = 8                                 # any Hardware field, in its units...
    hbm_gb = 80                                       # ...or one of the figures below
    [dgx-h100.sources]
    gpus_per_node = "DGX H100 datasheet (2023): 8 GPUs"
    "hbm_gb, hbm_bandwidth_gbps" = "H100 datasheet (2023): 80 GB HBM3 at 3.35 TB/s"

Figures in the units a datasheet gives, converted here (exactly as the literals were before):

* ``hbm_gb``, ``dram_capacity_gb``: decimal gigabytes, stored as GiB (``x * 1e9 / 2**30``);
* ``sram_per_core_mb`` (decimal MB) and ``sram_per_core_kib``: stored as MiB;
* ``chip_peak_tflops`` with ``peak_cores``: a chip's peak over its enabled cores gives
  ``core_peak_tflops`` (``chip / cores``);
* ``clock_ghz`` with a ``[name.at_1ghz]`` table: per-cycle figures written as their value at
  1 GHz; a rate (``*_gbps``, ``*_tflops``) is multiplied by the clock, a latency (``*_ns``,
  ``*_us``) divided by it. A fit set's ``at_1ghz`` constants scale the same way.

Every figure (after ``base`` and the conversions) is covered by exactly one source key (a key
may name several fields, comma-separated); a preset's own source for a field replaces the
base's. Constants of the fit sets come with the fit's own record. A fitted constant may not also
be given as a figure. This module is imported, and the files parsed, on the first lookup of a
preset (``import palm`` does neither); the result is cached.

To add a preset: a table in the family's file (or a new ``palm/data/hardware/<family>.toml``),
every figure sourced, ``fitted`` naming the fit of the same silicon (say so in a source); two
marker lines ``<!-- BEGIN preset-<name> -->`` / ``<!-- END preset-<name> -->`` where it belongs
in docs/hardware.md; ``python benchmarks/preset_docs.py --write``; a test of its datasheet
figures (tests/palm/test_gpu_presets.py). To add a fitted constant: fit it in a calibration
script that writes its fit set with ``benchmarks/_fitted.py`` (``write_fit``: ``--write``),
name the set in the presets' ``fitted``; never edit ``palm/data/fitted/`` by hand.
"""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from palm.hardware.spec import GpuClusterHardware, Hardware, Mesh2DHardware, PeakTflops

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib  # type: ignore[import-not-found,unused-ignore]

__all__ = [
    "FITTED_DIR",
    "HARDWARE_DIR",
    "FitSet",
    "PresetDataError",
    "PresetRecord",
    "fit_sets",
    "preset_hardware",
    "preset_records",
]

_DATA = Path(__file__).resolve().parents[1] / "data"
HARDWARE_DIR = _DATA / "hardware"
FITTED_DIR = _DATA / "fitted"

_MB_IN_MIB = 1e6 / 2**20
_CLASSES: dict[str, type[GpuClusterHardware] | type[Mesh2DHardware]] = {
    "gpu-cluster": GpuClusterHardware,
    "mesh2d": Mesh2DHardware,
}
#: keys of a preset table that are not figures
_META = ("title", "topology", "base", "fitted", "sources", "at_1ghz")


class PresetDataError(ValueError):
    """A preset or fit file breaks the layout above (names the file, the key and the rule)."""


@dataclass(frozen=True)
class FitSet:
    """The constants one calibration script wrote (``palm/data/fitted/<name>.toml``)."""

    name: str
    constants: Mapping[str, float]  # preset field -> value, as the presets take it
    at_1ghz: tuple[str, ...]  # constants that are per-cycle rates, given at 1 GHz
    record: Mapping[str, Any]  # the whole file: [fit], [fitted], [errors]


@dataclass(frozen=True)
class PresetRecord:
    """One preset as its data file gives it, and the ``Hardware`` built from it."""

    name: str
    file: str  # the data file, relative to palm/data
    title: str
    figures: Mapping[str, Any]  # field or figure name -> value as written (base merged)
    at_1ghz: Mapping[str, Any]  # per-cycle figures at 1 GHz (with clock_ghz)
    sources: tuple[tuple[tuple[str, ...], str], ...]  # (fields, source), base's first
    fitted: tuple[str, ...]  # fit sets, prior first
    hardware: Hardware


@dataclass(frozen=True)
class _Draft:
    """A preset's data before its Hardware is built."""

    name: str
    figures: Mapping[str, Any]
    at_1ghz: Mapping[str, Any]
    sources: tuple[tuple[tuple[str, ...], str], ...]
    fitted: tuple[str, ...]


def _read(path: Path) -> dict[str, Any]:
    try:
        data: dict[str, Any] = tomllib.loads(path.read_text(encoding="utf-8"))
        return data
    except tomllib.TOMLDecodeError as exc:
        raise PresetDataError(f"{path.name}: not valid TOML: {exc}") from None


@cache
def fit_sets() -> Mapping[str, FitSet]:
    """Every fit set of ``palm/data/fitted/``, by name (the file's stem)."""
    out: dict[str, FitSet] = {}
    for path in sorted(FITTED_DIR.glob("*.toml")):
        data = _read(path)
        constants = data.get("constants")
        if not isinstance(constants, dict) or not constants:
            raise PresetDataError(f"{path.name}: needs a [constants] table")
        fit = data.get("fit", {})
        scaled = tuple(fit.get("at_1ghz", ()))
        values = {k: float(v) for k, v in constants.items()}
        out[path.stem] = FitSet(path.stem, values, scaled, data)
    return out


def _source_groups(name: str, table: Mapping[str, Any]) -> list[tuple[tuple[str, ...], str]]:
    groups = []
    for key, text in table.items():
        if not isinstance(text, str) or not text:
            raise PresetDataError(f"{name}.sources.{key}: expected a non-empty string")
        groups.append((tuple(k.strip() for k in key.split(",")), text))
    return groups


def _merge_sources(
    inherited: tuple[tuple[tuple[str, ...], str], ...], own: list[tuple[tuple[str, ...], str]]
) -> tuple[tuple[tuple[str, ...], str], ...]:
    """The base's groups less the fields this preset sources itself, then its own."""
    mine = {f for fields, _ in own for f in fields}
    kept = [(tuple(f for f in fields if f not in mine), text) for fields, text in inherited]
    return tuple([(fields, text) for fields, text in kept if fields] + own)


def _at_clock(name: str, key: str, value: Any, clock: float) -> Any:
    """A per-cycle figure given at 1 GHz, at ``clock`` GHz."""
    if isinstance(value, dict):
        return {k: _at_clock(name, f"{key}.{k}", v, clock) for k, v in value.items()}
    if key.endswith(("_ns", "_us")):
        return value / clock
    if "_gbps" in key or "_tflops" in key:
        return value * clock
    raise PresetDataError(f"{name}.at_1ghz.{key}: expected a rate (_gbps, _tflops) or a time")


def _fields(rec: _Draft, fits: Mapping[str, FitSet]) -> dict[str, Any]:
    """The Hardware fields of ``rec``: its figures converted, then its fit sets."""
    fig = dict(rec.figures)
    clock = fig.pop("clock_ghz", None)
    if rec.at_1ghz and clock is None:
        raise PresetDataError(f"{rec.name}: at_1ghz needs clock_ghz")
    for key, value in rec.at_1ghz.items():
        fig[key] = _at_clock(rec.name, key, value, clock)
    if "hbm_gb" in fig:
        fig["hbm_gib"] = fig.pop("hbm_gb") * 1e9 / 2**30
    if "dram_capacity_gb" in fig:
        fig["dram_capacity_gib"] = fig.pop("dram_capacity_gb") * 1e9 / 2**30
    if "sram_per_core_mb" in fig:
        fig["sram_per_core_mib"] = fig.pop("sram_per_core_mb") * _MB_IN_MIB
    if "sram_per_core_kib" in fig:
        fig["sram_per_core_mib"] = fig.pop("sram_per_core_kib") / 1024
    if "chip_peak_tflops" in fig:
        cores = fig.pop("peak_cores")
        fig["core_peak_tflops"] = {k: v / cores for k, v in fig.pop("chip_peak_tflops").items()}
    for set_name in rec.fitted:
        fit = fits.get(set_name)
        if fit is None:
            raise PresetDataError(f"{rec.name}.fitted: no fit set {set_name!r} in palm/data/fitted")
        for key, value in fit.constants.items():
            if key in rec.figures or key in rec.at_1ghz:
                raise PresetDataError(f"{rec.name}.{key}: given as a figure and fitted")
            if key in fit.at_1ghz:
                if clock is None:
                    raise PresetDataError(f"{rec.name}: fit {set_name} needs clock_ghz")
                value = value * clock
            fig[key] = value
    return fig


def _build(rec: _Draft, topology: str, fits: Mapping[str, FitSet]) -> Hardware:
    cls = _CLASSES.get(topology)
    if cls is None:
        raise PresetDataError(f"{rec.name}.topology = {topology!r}: one of {', '.join(_CLASSES)}")
    values = _fields(rec, fits)
    types = {f.name: f.type for f in dataclasses.fields(cls)}
    kwargs: dict[str, Any] = {"name": rec.name}
    for key, value in values.items():
        kind = types.get(key)
        if kind is None or key in ("name", "topology"):
            raise PresetDataError(f"{rec.name}.{key}: not a field of {cls.__name__}")
        if kind == "PeakTflops":
            value = PeakTflops(**{k: float(v) for k, v in value.items()})
        elif kind == "float":
            value = float(value)
        elif isinstance(value, list):
            value = tuple(value)
        kwargs[key] = value
    return cls(**kwargs)


def _check_sources(rec: _Draft) -> None:
    given = [*rec.figures, *rec.at_1ghz]
    covered = [f for fields, _ in rec.sources for f in fields]
    for key in given:
        count = covered.count(key)
        if count != 1:
            raise PresetDataError(f"{rec.name}.{key}: needs exactly one source (has {count})")
    extra = sorted(set(covered) - set(given))
    if extra:
        raise PresetDataError(f"{rec.name}.sources: {', '.join(extra)} is not a figure")


def _record(
    name: str, file: str, table: dict[str, Any], done: Mapping[str, PresetRecord],
    fits: Mapping[str, FitSet],
) -> PresetRecord:  # fmt: skip
    base_name = table.get("base")
    if base_name is not None and base_name not in done:
        raise PresetDataError(f"{name}.base = {base_name!r}: not a preset defined before it")
    base = done[base_name] if base_name is not None else None
    title = str(table.get("title", ""))
    if not title:
        raise PresetDataError(f"{name}.title: expected a one-line description")
    own = {k: v for k, v in table.items() if k not in _META}
    draft = _Draft(
        name=name,
        figures={**(base.figures if base else {}), **own},
        # a figure the preset gives itself replaces the base's per-cycle one (a chip link's
        # bandwidth is no NoC clock's multiple)
        at_1ghz={
            **{k: v for k, v in (base.at_1ghz if base else {}).items() if k not in own},
            **table.get("at_1ghz", {}),
        },
        sources=_merge_sources(
            base.sources if base else (), _source_groups(name, table.get("sources", {}))
        ),
        fitted=tuple(table.get("fitted", base.fitted if base else ())),
    )
    _check_sources(draft)
    topology = table.get("topology", base.hardware.topology if base else None)
    hardware = _build(draft, str(topology), fits)
    return PresetRecord(
        name, file, title, draft.figures, draft.at_1ghz, draft.sources, draft.fitted, hardware
    )


@cache
def preset_records() -> Mapping[str, PresetRecord]:
    """Every preset of ``palm/data/hardware/`` with its sources, in listing order."""
    fits = fit_sets()
    out: dict[str, PresetRecord] = {}
    for path in sorted(HARDWARE_DIR.glob("*.toml")):
        file = path.relative_to(_DATA).as_posix()
        for name, table in _read(path).items():
            if name in out:
                raise PresetDataError(f"{file}: preset {name!r} defined twice")
            if not isinstance(table, dict):
                raise PresetDataError(f"{file}: {name} is not a table")
            out[name] = _record(name, file, table, out, fits)
    return out


@cache
def preset_hardware() -> Mapping[str, Hardware]:
    """Every preset's ``Hardware`` by name, in listing order."""
    return {name: rec.hardware for name, rec in preset_records().items()}
