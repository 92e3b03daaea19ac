"""Messages that must say what is wrong: a key megabytes long is abbreviated as values are,
an override is one key and one value, each refusal names the bound that holds, the field the
user changed and the value given, a stop of a simulation does not speak of trials, a full
disk is exit 1 as docs/tuning.md says, empty choice lists are refused alike, and a validation
file of an unknown shape names the shapes expected."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import pytest

from tests.cli_run import (
    DGX,
    WAFER,
    assert_clean,
    assert_usage_error,
    run,
    spawn_long_simulation,
    wait_for_cpu,
    wait_for_import,
)


def test_a_megabyte_key_is_abbreviated(tmp_path: Path) -> None:
    key = "k" * 2_000_000
    path = tmp_path / "big.toml"
    path.write_text(
        f'[model]\npreset = "t-18b"\n[hardware]\npreset = "dgx-a100"\n[training]\n{key} = 1\n'
    )
    r = run("simulate", str(path), cwd=tmp_path)
    assert_usage_error(r, "training.kkk", "...", "a known field")
    assert len(r.stderr) < 1000, len(r.stderr)


@pytest.mark.parametrize(
    "override",
    [
        "model.layers=40\nbogus = 1",  # a second key on the next line
        "model.layers=40\rbogus = 1",
        "model.layers=40\n",
        "model.layers=[40,\n41]",
    ],
)
def test_an_override_is_one_key_and_one_value(override: str) -> None:
    r = run("simulate", str(DGX), "--set", override, "--engine", "analytical")
    assert_usage_error(r, "--set", "one section.field=value on one line")


def test_an_override_with_a_comment_is_still_one_value() -> None:
    from palm.config import apply_overrides

    assert apply_overrides({}, ["model.layers=40 # a comment"]) == {"model": {"layers": 40}}


@pytest.mark.parametrize(
    ("overrides", "words"),
    [
        (["model.layers=-5"], ["model.layers = -5", "an integer >= 1"]),
        (["model.hidden=-1"], ["model.hidden = -1", "an integer >= 1"]),
        (["model.kv_heads=-1"], ["model.kv_heads = -1", "an integer >= 0"]),  # 0 means heads
        (
            ["placement.layout='explicit'", "placement.stage_tiles=[]"],
            ["placement.stage_tiles = []", "one tile list per stage (20"],
        ),
        (["parallelism.dp=3"], ["parallelism.dp = 3", "does not divide", "[1, 2, 4, 8,"]),
        (["training.micro_batch=3"], ["training.micro_batch = 3 does not divide"]),
    ],
    ids=["layers", "hidden", "kv-heads", "stage-tiles", "dp", "micro-batch"],
)
def test_a_refusal_names_what_holds(overrides: list[str], words: list[str]) -> None:
    base = WAFER if any("placement" in o for o in overrides) else DGX
    r = run("simulate", str(base), *[a for o in overrides for a in ("--set", o)])
    assert_usage_error(r, *words)


def test_a_gemm_model_says_its_dimension_bound() -> None:
    from palm.workload.gemm import MAX_GEMM_DIM
    from tests.cli_run import REPO

    gemm = REPO / "examples" / "wormhole-gemm.toml"
    r = run("simulate", str(gemm), "--set", "model.m=-3")
    assert_usage_error(r, "model.m = -3", "an integer >= 1")
    r = run("simulate", str(gemm), "--set", f"model.k={MAX_GEMM_DIM + 1}")
    assert_usage_error(r, "model.k", f"{MAX_GEMM_DIM:,}")


def test_sigterm_to_a_simulation_does_not_speak_of_trials(tmp_path: Path) -> None:
    """A simulation has no trials to mark failed. The signal is sent once the simulation runs:
    after the readiness line of palm-tune's last module (``-X importtime``) and two seconds of
    the process's CPU time (its start-up past the imports takes a fraction of one)."""
    proc = spawn_long_simulation(tmp_path)
    try:
        seen = wait_for_import(proc, "search.lifecycle")  # the last module palm-tune loads
        wait_for_cpu(proc, 2.0)  # then its handlers, the configuration, the simulation
        proc.send_signal(signal.SIGTERM)
        _, rest = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
    lines = [line for line in (seen + rest).splitlines() if not line.startswith("import time:")]
    assert proc.returncode == 143, lines
    assert lines == ["palm-tune: terminated (SIGTERM)"], lines


def test_a_trace_to_a_full_disk_is_exit_1_as_documented(tmp_path: Path) -> None:
    """docs/tuning.md ("Guarantees"): a full disk ends any command with exit 1 and says that
    nothing was lost; a path that cannot be written is bad input (exit 2)."""
    small = ["--set", "training.global_batch=32"]
    r = run("simulate", str(WAFER), *small, "--trace", "/dev/full", cwd=tmp_path)
    assert r.code == 1, r.stderr
    (line,) = r.stderr.strip().splitlines()
    assert line.startswith("palm-tune: error: the disk is full (/dev/full)"), line
    assert_clean(r)
    r = run("simulate", str(WAFER), *small, "--trace", "/proc/none/t.json", cwd=tmp_path)
    assert_usage_error(r, "--trace", "writable")


@pytest.mark.parametrize(
    ("part", "field"),
    [
        ("parallelism = { tp = [] }", "space.parallelism.tp"),
        ("parallelism = { pp = [] }", "space.parallelism.pp"),
        ("micro_batch = []", "space.micro_batch"),
    ],
)
def test_an_empty_choice_list_is_refused_alike(tmp_path: Path, part: str, field: str) -> None:
    study = tmp_path / "s.toml"
    study.write_text(f'[study]\nbase = "{WAFER}"\n[space]\n{part}\n')
    r = run("tune", str(study), "--storage", f"sqlite:///{tmp_path}/s.db", cwd=tmp_path)
    assert_usage_error(r, field, "non-empty array")
    assert not (tmp_path / "s.db").exists()


@pytest.mark.parametrize(
    "content",
    [
        [{"model": "llama3-8b", "phase": "decode", "tokens_per_s": 3100.0}],  # a list of rows
        {"cases": [{"model": "llama3-8b", "phase": "decode", "tokens_per_s": 3100.0}]},
        {"cases": [{"id": "x", "hardware": {"gpu": "H100"}}]},  # a modern row, half there
        {"measurements": []},
        {"gpu_training": []},
    ],
    ids=["list", "cases-of-unknown-rows", "modern-row-missing-tables", "other-key", "empty"],
)
def test_a_validation_file_of_unknown_shape_names_the_shapes(
    tmp_path: Path, content: object
) -> None:
    path = tmp_path / "v.json"
    path.write_text(json.dumps(content))
    r = run("validate", str(path), cwd=tmp_path)
    assert_usage_error(r, "validation file", "gpu_training", "cases", "kind gemm or dram")


def test_validation_file_kinds_are_recognised_in_one_place() -> None:
    from palm.serving.validation import default_inference_file
    from palm.validation import default_validation_file
    from palm.validation_files import KINDS, validation_file_kind
    from palm.validation_kernels import KERNELS_FILE
    from palm.validation_modern import default_modern_file
    from palm.validation_tiled import default_tiled_file

    assert [k.name for k in KINDS] == ["tiled", "modern", "megatron", "inference", "kernels"]
    assert validation_file_kind(KERNELS_FILE) == "kernels"
    assert validation_file_kind(default_inference_file()) == "inference"
    assert validation_file_kind(default_tiled_file()) == "tiled"
    assert validation_file_kind(default_modern_file()) == "modern"
    assert validation_file_kind(default_validation_file()) == "megatron"
    assert os.path.exists(default_modern_file())
