"""Class 3: a study file is validated completely before the first trial. Every hostile space
gives the simulation config's one-line error (exit 2) and creates no study."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.cli_run import DGX, REPO, WAFER, assert_clean, assert_usage_error, run, tune

MIXTRAL = REPO / "examples" / "mixtral-8x7b-h100.toml"  # 64 H100s, TP=1 PP=4 DP=16 EP=8


def _study(
    tmp_path: Path,
    space: str,
    sampler: str = "tpe",
    batch: int | None = 32,
    base: Path = WAFER,
    extra: str = "",
) -> Path:
    path = tmp_path / "s.toml"
    sets = f'["training.global_batch={batch}"]' if batch else "[]"
    path.write_text(
        f'[study]\nbase = "{base}"\nset = {sets}\n'
        f'trials = 2\nsampler = "{sampler}"\n{extra}\n[space]\n{space}\n',
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
    "interleave-only-where-none-fits": (  # 32 micro-batches, pp = 20: no interleaving fits
        'schedule = ["interleaved-1f1b"]\ninterleave = [2]',
        "tpe",
        "space.schedule",
    ),
    "interleave-huge": (
        'schedule = ["interleaved-1f1b"]\ninterleave = [1000000]',
        "random",
        "space.schedule",
    ),
    "interleave-without-the-schedule": (
        'schedule = ["1f1b", "gpipe"]\ninterleave = [2]',
        "tpe",
        "space.interleave",
    ),
    "cp-on-a-mesh": ('cp = [2]\nrecompute = ["full"]', "tpe", "space.cp"),
    "repeated-choices": ('recompute = ["full", "full"]', "bruteforce", "space.recompute"),
    "repeated-tp": ("parallelism = { tp = [8, 8] }", "tpe", "space.parallelism.tp"),
}

#: spaces of a GPU cluster: (space, base, field the error names)
GPU_CASES = {
    "cp-divides-nothing": ("cp = [7]", DGX, "space.cp"),
    "cp-beyond-the-ranks": ("cp = [1024]", DGX, "space.cp"),
    "ep-not-an-expert-divisor": ("ep = [3]", MIXTRAL, "space.ep"),
    "ep-beyond-the-experts": ("ep = [1024]", MIXTRAL, "space.ep"),
    "etp-not-a-width-divisor": ("etp = [3]", MIXTRAL, "space.etp"),
    "ep-on-a-dense-model": ("ep = [2]", DGX, "space.ep"),
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


@pytest.mark.parametrize("case", sorted(GPU_CASES))
def test_bad_parallel_choices_are_refused_not_replaced(tmp_path: Path, case: str) -> None:
    """A cp / ep / etp choice that no draw admits would be replaced by 1 in every trial."""
    space, base, field = GPU_CASES[case]
    study = _study(tmp_path, space, "random", batch=None, base=base)
    db = tmp_path / "x.db"
    r = run("tune", str(study), "--storage", f"sqlite:///{db}", "--no-progress", cwd=tmp_path)
    assert_usage_error(r, field)
    assert not db.exists()


@pytest.mark.parametrize(
    ("extra", "option"),
    [
        ("seed = -1", "study.seed"),
        ("seed = 4294967296", "study.seed"),
        ("seed = 1.5", "study.seed"),
        ('seed = "0"', "study.seed"),
    ],
)
def test_seeds_outside_what_the_samplers_take(tmp_path: Path, extra: str, option: str) -> None:
    study = _study(tmp_path, 'recompute = ["full", "selective"]', extra=extra)
    db = tmp_path / "x.db"
    r = run("tune", str(study), "--storage", f"sqlite:///{db}", "--no-progress", cwd=tmp_path)
    assert_usage_error(r, option)
    assert not db.exists()


def test_a_never_drawn_interleave_is_named_in_a_warning(tmp_path: Path) -> None:
    """parallelism searched with interleave = [3] on 40 layers: 3 chunks never fit; the study
    runs (other plans exist) and says so in one line."""
    study = _study(
        tmp_path,
        'parallelism = true\nschedule = ["1f1b", "interleaved-1f1b"]\ninterleave = [3]',
    )
    r = tune(study, f"sqlite:///{tmp_path}/x.db", trials=1, cwd=tmp_path, timeout_s=120)
    assert r.code == 0, r.stderr
    assert_clean(r)
    (warning,) = r.stderr.strip().splitlines()
    assert warning.startswith("palm-tune: warning: space.interleave = [3] is never drawn")


def test_shipped_studies_load_without_a_warning() -> None:
    import warnings

    from search.study_file import load_study

    for path in sorted((REPO / "studies").glob("*.toml")):
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            load_study(path)
