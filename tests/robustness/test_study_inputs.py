"""Class 3: a study file is validated completely before the first trial. Every hostile space
gives the simulation config's one-line error (exit 2) and creates no study."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.robustness.cli_run import REPO, assert_usage_error, run

WAFER = REPO / "examples" / "wafer-t18b.toml"  # 320 cores, t-18b (40 layers, 48 heads)


def _study(tmp_path: Path, space: str, sampler: str = "tpe", batch: int = 32) -> Path:
    path = tmp_path / "s.toml"
    path.write_text(
        f'[study]\nbase = "{WAFER}"\nset = ["training.global_batch={batch}"]\n'
        f'trials = 2\nsampler = "{sampler}"\n\n[space]\n{space}\n',
        encoding="utf-8",
    )
    return path


KNOB = "space.hardware."
CASES = {  # name: (space, sampler, field the error names)
    "knob-high-inf": (
        "hardware = { sram_per_core_mib = { low = 1, high = inf } }",
        "tpe",
        KNOB + "sram",
    ),
    "knob-high-1e300": (
        "hardware = { sram_per_core_mib = { low = 1, high = 1e300 } }",
        "tpe",
        KNOB + "sram",
    ),
    "knob-low-nan": (
        "hardware = { sram_per_core_mib = { low = nan, high = 4 } }",
        "tpe",
        KNOB + "sram",
    ),
    "knob-int-half": (
        "hardware = { dram_channels = { low = 0.5, high = 4 } }",
        "tpe",
        KNOB + "dram_channels",
    ),
    "knob-int-beyond-bound": (
        "hardware = { dram_channels = { low = 1, high = 100000000 } }",
        "tpe",
        KNOB + "dram_channels",
    ),
    "knob-efficiency-above-one": (
        "hardware = { matmul_efficiency = { low = 0.5, high = 2 } }",
        "random",
        KNOB + "matmul_efficiency",
    ),
    "tp-no-divisor": ("parallelism = { tp = [7] }", "tpe", "space.parallelism.tp"),
    "tp-not-a-head-divisor": ("parallelism = { tp = [32] }", "tpe", "space.parallelism.tp"),
    "pp-too-deep": ("parallelism = { pp = [999] }", "tpe", "space.parallelism.pp"),
    "pp-not-with-these-tps": (
        "parallelism = { tp = [16], pp = [40] }",
        "tpe",
        "space.parallelism.pp",
    ),
    "float-knob-bruteforce": (
        "hardware = { sram_per_core_mib = { low = 1, high = 4 } }",
        "bruteforce",
        "study.sampler",
    ),
    "micro-batch-divides-nothing": ("micro_batch = [3]", "tpe", "space.micro_batch"),
    "micro-batch-leaves-a-dp-without-choice": (
        "parallelism = true\nmicro_batch = [2, 4]",
        "tpe",
        "space.micro_batch",
    ),
    "empty-space": ("", "tpe", "space"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_bad_space_is_refused_before_any_trial(tmp_path: Path, case: str) -> None:
    space, sampler, field = CASES[case]
    study = _study(tmp_path, space, sampler)
    db = tmp_path / "x.db"
    r = run("tune", str(study), "--storage", f"sqlite:///{db}", "--no-progress", cwd=tmp_path)
    assert_usage_error(r, field)
    assert not db.exists(), "no study may be created for a bad study file"


def test_cli_sampler_override_is_checked_too(tmp_path: Path) -> None:
    study = _study(tmp_path, "hardware = { sram_per_core_mib = { low = 1, high = 4 } }")
    r = run(
        "tune",
        str(study),
        "--sampler",
        "bruteforce",
        "--storage",
        f"sqlite:///{tmp_path}/x.db",
        "--no-progress",
        cwd=tmp_path,
    )
    assert_usage_error(r, "study.sampler", "sram_per_core_mib")


def test_an_integer_knob_runs_with_bruteforce(tmp_path: Path) -> None:
    study = _study(tmp_path, "hardware = { dram_channels = { low = 16, high = 18 } }", "bruteforce")
    r = run(
        "tune",
        str(study),
        "--storage",
        f"sqlite:///{tmp_path}/x.db",
        "--no-progress",
        "--trials",
        "2",
        cwd=tmp_path,
        timeout_s=120,
    )
    assert r.code == 0, r.stderr
    assert "2 completed" in r.stdout or "completed" in r.stdout
