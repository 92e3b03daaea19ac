"""Comparing the simulator with published runs (docs/validation.md).

The default is the packaged Megatron suite (``palm/data/validation/megatron.json``): published
runs written as plain simulation TOML files, the format a user writes, with the software each
ran stated in its ``[software]`` table (Megatron SC21 Table 1, Korthikanti et al. 2022 Table
5); the suite simulates exactly those files. A validation file of the shape of
``palm/data/visible.json`` (``gpu_training`` cases with the model, the cluster and
the plan of a published run and its measured throughput, ``derived.iteration_time_s`` being
what the simulator is compared with) is translated row by row from its stated facts,
the software it states included (:func:`palm.validation_software.stated_software`).
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from palm.api import simulate
from palm.config import load_config, parse_config
from palm.errors import ConfigError
from palm.inputs import read_input
from palm.strategy import SimConfig
from palm.validation_software import stated_software

__all__ = [
    "ValidationCase",
    "CaseResult",
    "load_cases",
    "run_cases",
    "default_suite_file",
    "default_validation_file",
]


@dataclass(frozen=True)
class ValidationCase:
    case_id: str
    config: SimConfig
    published_iteration_time_s: float
    source: str


@dataclass(frozen=True)
class CaseResult:
    case_id: str
    predicted_iteration_time_s: float
    published_iteration_time_s: float

    @property
    def error(self) -> float:
        """Signed relative error of the prediction (+: the simulator is slower)."""
        return self.predicted_iteration_time_s / self.published_iteration_time_s - 1.0


def default_validation_file() -> Path:
    """The packaged copy of ``visible.json`` (the SC21 rows as data, and the wafer cases)."""
    return Path(str(resources.files("palm") / "data" / "visible.json"))


def default_suite_file() -> Path:
    """The packaged Megatron suite: its manifest, beside the TOML files it names."""
    return Path(str(resources.files("palm") / "data" / "validation" / "megatron.json"))


_PRECISION = {"fp16 mixed": "fp16", "bf16 mixed": "bf16", "fp32": "fp32"}


def _case_tables(case: dict[str, Any]) -> dict[str, Any]:
    hw = case["hardware"]
    tr = case["training"]
    par = case["parallelism"]
    schedule = par.get("schedule", "1f1b")
    if schedule not in ("gpipe", "1f1b", "interleaved-1f1b"):
        schedule = "1f1b"  # "none" when pp = 1: any value, no effect
    precision = _PRECISION.get(tr["precision"], tr["precision"])
    software = stated_software(case)
    sharding = {k: tr[k] for k in ("zero", "fsdp") if k in tr}
    return {
        **({"software": software} if software else {}),
        "model": {
            "name": case["id"],
            "family": "gpt",
            **case["model"],
            "kv_heads": case["model"]["heads"],
        },
        "hardware": {
            "preset": "dgx-a100",
            "gpus": hw["gpus"],
            "gpus_per_node": hw["gpus_per_node"],
            "hbm_gib": hw["hbm_gib"],
            "hbm_bandwidth_gbps": hw["hbm_gbps"],
        },
        "training": {
            "global_batch": tr["global_batch"],
            "micro_batch": tr["micro_batch"],
            "precision": precision,
            "optimizer": tr["optimizer"],
            "recompute": tr["recompute"],
            **sharding,
        },
        "parallelism": {
            "tp": par["tp"],
            "pp": par["pp"],
            "dp": par["dp"],
            "schedule": schedule,
            "interleave": par.get("interleave", 1),
        },
    }


def _published_time(value: Any, index: int) -> float:
    """The published iteration time: a finite number of seconds > 0 (it divides the error)."""
    ok = isinstance(value, (int, float)) and not isinstance(value, bool)
    if not ok or not math.isfinite(value) or value <= 0:
        raise ConfigError(
            f"gpu_training[{index}].derived.iteration_time_s", value, "a number of seconds > 0"
        )
    return float(value)


def is_suite_file(data: Any) -> bool:
    """Whether parsed JSON is a suite manifest: ``cases`` naming TOML ``config`` files."""
    cases = data.get("cases") if isinstance(data, dict) else None
    return (
        isinstance(cases, list)
        and bool(cases)
        and all(isinstance(c, dict) and "config" in c for c in cases)
    )


def _load_suite(path: Path, data: dict[str, Any]) -> list[ValidationCase]:
    """The cases of a suite manifest: each a TOML file (relative to the manifest) simulated as
    it is, and the published iteration time it is compared with."""
    out = []
    for i, case in enumerate(data["cases"]):
        where = f"cases[{i}]"
        if not isinstance(case.get("config"), str) or "id" not in case:
            raise ConfigError(where, case.get("id", i), "a case with an id and a config file")
        out.append(
            ValidationCase(
                case_id=str(case["id"]),
                config=load_config(path.parent / case["config"]),
                published_iteration_time_s=_published_time(
                    case.get("published_iteration_time_s"), i
                ),
                source=str(case.get("source", "")),
            )
        )
    return out


def load_cases(path: str | Path | None = None) -> list[ValidationCase]:
    """The cases of a validation file: a suite manifest of TOML files (default: the packaged
    Megatron suite) or a file of ``gpu_training`` rows."""
    path = Path(path) if path is not None else default_suite_file()
    text = read_input(path, field="validation file", kind="JSON file")
    try:
        data = json.loads(text)
    except (ValueError, RecursionError) as exc:
        raise ConfigError("validation file", str(path), f"valid JSON ({exc})") from None
    if is_suite_file(data):
        return _load_suite(path, data)
    cases = data.get("gpu_training") if isinstance(data, dict) else None
    if not isinstance(cases, list) or not cases:
        raise ConfigError("validation file", str(path), "a JSON object with a gpu_training list")
    out = []
    for i, case in enumerate(cases):
        try:
            tables = _case_tables(case)
            published = _published_time(case["derived"]["iteration_time_s"], i)
        except (KeyError, TypeError) as exc:
            raise ConfigError(
                f"gpu_training[{i}]",
                case.get("id", i) if isinstance(case, dict) else case,
                f"a case with model, hardware, training, parallelism "
                f"and derived.iteration_time_s (missing {exc})",
            ) from None
        out.append(
            ValidationCase(
                case_id=str(case["id"]),
                config=parse_config(tables),
                published_iteration_time_s=published,
                source=str(case.get("source", "")),
            )
        )
    return out


def run_cases(cases: Iterable[ValidationCase], *, engine: str = "analytical") -> list[CaseResult]:
    return [
        CaseResult(
            case.case_id,
            simulate(case.config, engine=engine).iteration_time_s,
            case.published_iteration_time_s,
        )
        for case in cases
    ]
