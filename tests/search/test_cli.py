"""Tests of the ``palm-tune`` command line (``search.cli``): ``simulate`` and ``presets``.

Contract: success exits 0; bad input exits 2 with exactly one stderr line starting with
``palm-tune: error:`` that names the field, and no traceback anywhere.

Most cases call ``search.cli.main`` in-process. Error output goes to ``sys.stderr`` and is read
with ``capsys``. Normal output is written to a stream that the handler received at import time,
so capsys cannot see it (a bug, see ``test_main_output_is_capturable``). These tests read normal
output by calling the parsed handler with ``out=`` set, or by running ``python -m search.cli`` in
a subprocess.
"""

from __future__ import annotations

import io
import json
import math
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import palm
from search.cli import build_parser, main

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "examples"
DGX = EXAMPLES / "t18b-dgx-a100.toml"  # t-18b (48 heads, 40 layers), TP=8 PP=1 DP=32, gb 1024, mb 8
WAFER = EXAMPLES / "wafer-t18b.toml"  # t-18b on 320 cores, TP=8 PP=20 DP=2, gb 64, mb 1
GRAYSKULL = EXAMPLES / "grayskull-resnet50.toml"
EXAMPLE_FILES = sorted(EXAMPLES.glob("*.toml"))

REQUIRED_KEYS = {
    "throughput_samples_per_s",
    "iteration_time_s",
    "model_tflops_per_device",
    "hardware_tflops_per_device",
    "mfu",
    "bubble_fraction",
    "peak_memory_bytes",
    "memory_capacity_bytes",
    "fits_memory",
    "memory_overflow_bytes",
    "engine",
    "events_simulated",
    "sim_wall_s",
    "stages",
}

LLAMA2_7B_HF: dict[str, Any] = {
    "model_type": "llama",
    "hidden_size": 4096,
    "num_attention_heads": 32,
    "num_key_value_heads": 32,
    "num_hidden_layers": 32,
    "intermediate_size": 11008,
    "vocab_size": 32000,
    "max_position_embeddings": 4096,
    "hidden_act": "silu",
    "rms_norm_eps": 1e-5,
    "tie_word_embeddings": False,
}

SIM_TOML_FOR_HF = """\
[model]
hf_config = "config.json"

[hardware]
preset = "dgx-a100"

[training]
global_batch = 8

[parallelism]
tp = 8
"""


# --------------------------------------------------------------------------------------------
# helpers
# --------------------------------------------------------------------------------------------


def run_handler(argv: list[str]) -> tuple[int, str]:
    """Parse ``argv`` like ``main`` does and run the handler, returning (code, stdout)."""
    args = build_parser().parse_args(argv)
    out = io.StringIO()
    code = args.handler(args, out=out)
    return code, out.getvalue()


def run_subprocess(*argv: str, cwd: Path = REPO) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "search.cli", *argv],
        capture_output=True,
        text=True,
        cwd=cwd,
        timeout=60,
    )


def assert_clean_error(code: int, out: str, err: str, *fragments: str) -> None:
    """Exit 2, one stderr line ``palm-tune: error: ...`` naming the field, no traceback."""
    assert code == 2, f"exit code {code}, stderr: {err!r}"
    lines = err.splitlines()
    assert len(lines) == 1, f"expected one stderr line, got {lines!r}"
    assert err.endswith("\n")
    assert lines[0].startswith("palm-tune: error:"), lines[0]
    for fragment in fragments:
        assert fragment in lines[0], f"{fragment!r} not in {lines[0]!r}"
    assert "Traceback" not in out and "Traceback" not in err
    assert out == ""


def without_wall_time(text: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(text)
    assert isinstance(data["sim_wall_s"], float) and data["sim_wall_s"] >= 0
    del data["sim_wall_s"]
    return data


def strict_json(text: str) -> Any:
    """json.loads that refuses NaN / Infinity (not JSON per RFC 8259)."""

    def refuse(name: str) -> Any:
        raise ValueError(f"non-standard JSON constant {name}")

    return json.loads(text, parse_constant=refuse)


# --------------------------------------------------------------------------------------------
# simulate: success
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("path", EXAMPLE_FILES, ids=lambda p: p.stem)
def test_simulate_json_has_the_required_keys(path: Path) -> None:
    code, out = run_handler(["simulate", str(path), "--engine", "analytical", "--json"])
    assert code == 0
    # exactly one JSON object and nothing else
    _, end = json.JSONDecoder().raw_decode(out)
    assert out[end:].strip() == ""
    data = strict_json(out)
    assert isinstance(data, dict)
    assert set(data) >= REQUIRED_KEYS, REQUIRED_KEYS - set(data)
    assert isinstance(data["fits_memory"], bool)
    assert data["engine"] == "analytical"
    assert isinstance(data["stages"], list) and data["stages"]
    for key in REQUIRED_KEYS - {"fits_memory", "engine", "stages", "events_simulated"}:
        assert isinstance(data[key], (int, float)) and not isinstance(data[key], bool), key
        assert math.isfinite(data[key]), key
    assert data["throughput_samples_per_s"] > 0
    assert data["iteration_time_s"] > 0
    assert 0 <= data["bubble_fraction"] < 1
    assert 0 < data["mfu"] <= 1
    assert data["memory_overflow_bytes"] >= 0
    assert data["fits_memory"] == (data["peak_memory_bytes"] <= data["memory_capacity_bytes"])
    assert data["fits_memory"] == (data["memory_overflow_bytes"] == 0)


def test_simulate_json_stage_count_follows_pp() -> None:
    _, out = run_handler(["simulate", str(WAFER), "--json"])
    assert len(json.loads(out)["stages"]) == 20
    _, out = run_handler(
        ["simulate", str(DGX), "--json", "--set", "parallelism.pp=4", "--set", "parallelism.dp=8"]
    )
    assert len(json.loads(out)["stages"]) == 4


def test_simulate_json_is_deterministic_in_process() -> None:
    runs = [run_handler(["simulate", str(WAFER), "--json"])[1] for _ in range(2)]
    assert without_wall_time(runs[0]) == without_wall_time(runs[1])


def test_simulate_json_is_deterministic_across_processes() -> None:
    runs = [
        run_subprocess("simulate", str(WAFER), "--engine", "analytical", "--json") for _ in range(2)
    ]
    for r in runs:
        assert r.returncode == 0, r.stderr
        assert r.stderr == ""
    first, second = (without_wall_time(r.stdout) for r in runs)
    assert first == second
    assert first["stages"] == second["stages"]
    assert REQUIRED_KEYS - {"sim_wall_s"} <= set(first)


def test_simulate_override_is_reflected_in_the_result() -> None:
    _, base = run_handler(["simulate", str(DGX), "--json"])
    _, changed = run_handler(
        ["simulate", str(DGX), "--json", "--set", "parallelism.tp=4", "--set", "parallelism.dp=64"]
    )
    assert json.loads(base)["peak_memory_bytes"] != json.loads(changed)["peak_memory_bytes"]


def test_simulate_preset_field_override_next_to_preset() -> None:
    code, out = run_handler(
        ["simulate", str(WAFER), "--json", "--set", "hardware.inter_tile_link_gbps=512"]
    )
    assert code == 0
    assert json.loads(out)["iteration_time_s"] > 0


def test_simulate_hf_config(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text(json.dumps(LLAMA2_7B_HF))
    (tmp_path / "sim.toml").write_text(SIM_TOML_FOR_HF)
    code, out = run_handler(["simulate", str(tmp_path / "sim.toml"), "--json"])
    assert code == 0
    assert set(json.loads(out)) >= REQUIRED_KEYS


def test_simulate_summary_mentions_throughput_and_memory() -> None:
    code, out = run_handler(["simulate", str(DGX)])
    assert code == 0
    text = out.lower()
    assert "throughput" in text and "memory" in text
    assert not out.lstrip().startswith("{")


def test_simulate_summary_via_subprocess() -> None:
    r = run_subprocess("simulate", "examples/t18b-dgx-a100.toml")
    assert r.returncode == 0, r.stderr
    assert "throughput" in r.stdout.lower() and "memory" in r.stdout.lower()
    assert r.stderr == ""


def test_main_returns_zero_on_success() -> None:
    assert main(["simulate", str(DGX), "--json"]) == 0


def test_main_output_is_capturable(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["simulate", str(DGX), "--json"]) == 0
    out, err = capsys.readouterr()
    assert set(json.loads(out)) >= REQUIRED_KEYS
    assert err == ""


# --------------------------------------------------------------------------------------------
# presets
# --------------------------------------------------------------------------------------------


def test_presets_json() -> None:
    code, out = run_handler(["presets", "--json"])
    assert code == 0
    data = json.loads(out)
    models = {m["name"] for m in data["models"]}
    hardware = {h["name"] for h in data["hardware"]}
    assert {"t-18b", "llama2-7b", "resnet50"} <= models
    assert {"dgx-a100", "wafer-palm", "grayskull"} <= hardware


def test_presets_readable() -> None:
    code, out = run_handler(["presets"])
    assert code == 0
    for name in ("t-18b", "llama2-7b", "dgx-a100", "wafer-palm"):
        assert name in out
    # every row's second column starts where its header's does, the long Tenstorrent names too
    lines = out.splitlines()
    split = lines.index("hardware")
    for header, rows in ((lines[1], lines[2 : split - 1]), (lines[split + 1], lines[split + 2 :])):
        column = header.index(header.split()[1])
        assert rows and all(r[column - 1] == " " and r[column] != " " for r in rows), rows


def test_presets_subprocess() -> None:
    r = run_subprocess("presets", "--json")
    assert r.returncode == 0, r.stderr
    assert "t-18b" in {m["name"] for m in json.loads(r.stdout)["models"]}


# --------------------------------------------------------------------------------------------
# simulate: bad input -> exit 2, one line naming the field
# --------------------------------------------------------------------------------------------

# (id, example file, --set overrides, fragments the error line must contain: field first)
BAD_SETS: list[tuple[str, Path, list[str], tuple[str, ...]]] = [
    ("unknown-model-preset", DGX, ["model.preset=gpt-9"], ("model.preset", "gpt-9")),
    ("unknown-hardware-preset", DGX, ["hardware.preset=tpu-v9"], ("hardware.preset", "tpu-v9")),
    ("tp-not-dividing-heads", DGX, ["parallelism.tp=7"], ("parallelism.tp", "7")),
    (
        "tp-not-dividing-heads-mesh2d",
        WAFER,
        ["parallelism.tp=5", "parallelism.pp=32"],
        ("parallelism.tp", "5"),
    ),
    (
        "mesh2d-degrees-not-device-count",
        WAFER,
        ["parallelism.tp=8", "parallelism.pp=20", "parallelism.dp=3", "training.global_batch=60"],
        ("parallelism", "320"),
    ),
    (
        "gpu-cluster-degrees-not-gpus",
        DGX,
        ["hardware.gpus=256", "parallelism.dp=16"],
        ("parallelism", "hardware.gpus", "256"),
    ),
    ("more-stages-than-layers", DGX, ["parallelism.pp=41"], ("parallelism.pp", "41")),
    (
        "inter-node-bandwidth-zero",
        DGX,
        ["hardware.inter_node_bandwidth_gbps=0"],
        ("hardware.inter_node_bandwidth_gbps",),
    ),
    (
        "inter-node-bandwidth-negative",
        DGX,
        ["hardware.inter_node_bandwidth_gbps=-5"],
        ("hardware.inter_node_bandwidth_gbps", "-5"),
    ),
    (
        "inter-tile-link-zero",
        WAFER,
        ["hardware.inter_tile_link_gbps=0"],
        ("hardware.inter_tile_link_gbps",),
    ),
    (
        "hbm-bandwidth-nan",
        DGX,
        ["hardware.hbm_bandwidth_gbps=nan"],
        ("hardware.hbm_bandwidth_gbps", "nan"),
    ),
    ("unknown-field", DGX, ["training.foo=1"], ("training.foo",)),
    ("wrong-type", DGX, ['training.micro_batch="x"'], ("training.micro_batch",)),
    ("bad-set-syntax", DGX, ["parallelism.tp"], ("--set", "parallelism.tp")),
    ("bad-set-section", DGX, ["solver.tp=4"], ("--set", "solver.tp=4")),
    (
        "global-batch-not-multiple",
        DGX,
        ["training.global_batch=1000"],
        ("training.global_batch", "1000"),
    ),
    ("unknown-schedule", DGX, ["parallelism.schedule=zigzag"], ("parallelism.schedule", "zigzag")),
    (
        "interleave-without-interleaved-schedule",
        DGX,
        ["parallelism.pp=4", "parallelism.dp=8", "parallelism.interleave=2"],
        ("parallelism.interleave",),
    ),
    ("fp8-on-a100", DGX, ["training.precision=fp8"], ("training.precision", "fp8")),
    ("int8-training", DGX, ["training.precision=int8"], ("training.precision", "int8")),
    ("zero-4", DGX, ["training.zero=4"], ("training.zero", "4")),
    (
        "heads-not-dividing-hidden",
        DGX,
        ["model.heads=50", "parallelism.tp=1"],
        ("model.heads", "50"),
    ),
    ("tp-not-dividing-ffn", DGX, ["model.ffn_hidden=1001"], ("parallelism.tp", "ffn_hidden")),
    ("kv-heads-not-dividing-heads", DGX, ["model.kv_heads=5"], ("model.kv_heads", "5")),
    ("tp-vs-kv-heads", DGX, ["model.kv_heads=12"], ("parallelism.tp", "kv_heads")),
    (
        "resnet-more-stages-than-operators",
        GRAYSKULL,
        ["parallelism.pp=120", "parallelism.dp=1"],
        ("parallelism.pp", "120"),
    ),
    ("fp32-on-grayskull", GRAYSKULL, ["training.precision=fp32"], ("training.precision", "fp32")),
]


@pytest.mark.parametrize(
    ("example", "overrides", "fragments"), [c[1:] for c in BAD_SETS], ids=[c[0] for c in BAD_SETS]
)
def test_simulate_bad_set_is_a_clean_error(
    example: Path,
    overrides: list[str],
    fragments: tuple[str, ...],
    capsys: pytest.CaptureFixture[str],
) -> None:
    argv = ["simulate", str(example), "--json"]
    for item in overrides:
        argv += ["--set", item]
    code = main(argv)
    out, err = capsys.readouterr()
    assert_clean_error(code, out, err, *fragments)


def test_simulate_nan_literal_in_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "nan.toml"
    path.write_text(
        DGX.read_text().replace(
            'preset = "dgx-a100"', 'preset = "dgx-a100"\nhbm_bandwidth_gbps = nan'
        )
    )
    code = main(["simulate", str(path)])
    out, err = capsys.readouterr()
    assert_clean_error(code, out, err, "hardware.hbm_bandwidth_gbps", "nan")


def test_simulate_malformed_toml(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "broken.toml"
    path.write_text('[model]\npreset = "t-18b\n[hardware\n')
    code = main(["simulate", str(path)])
    out, err = capsys.readouterr()
    assert_clean_error(code, out, err, "config file", "broken.toml")


def test_simulate_missing_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["simulate", str(tmp_path / "nope.toml"), "--json"])
    out, err = capsys.readouterr()
    assert_clean_error(code, out, err, "config file", "nope.toml")


def test_simulate_missing_hf_config(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "sim.toml").write_text(SIM_TOML_FOR_HF)  # config.json not written
    code = main(["simulate", str(tmp_path / "sim.toml")])
    out, err = capsys.readouterr()
    assert_clean_error(code, out, err, "model.hf_config", "config.json")


def test_simulate_missing_file_subprocess(tmp_path: Path) -> None:
    r = run_subprocess("simulate", str(tmp_path / "nope.toml"))
    assert_clean_error(r.returncode, r.stdout, r.stderr, "config file", "nope.toml")


def test_simulate_bad_value_subprocess() -> None:
    r = run_subprocess(
        "simulate", "examples/wafer-t18b.toml", "--json", "--set", "hardware.inter_tile_link_gbps=0"
    )
    assert_clean_error(r.returncode, r.stdout, r.stderr, "hardware.inter_tile_link_gbps")


# --------------------------------------------------------------------------------------------
# hostile values: either a clean rejection (exit 2 naming the field) or a clean, finite result
# --------------------------------------------------------------------------------------------

# valid TOML integers (tomllib accepts them) beyond float range; the hidden size stays a
# multiple of the 48 heads of t-18b so that the divisibility check passes
_HUGE = "1" + "0" * 400
_HUGE_HIDDEN = "6144" + "0" * 400


@pytest.mark.parametrize(
    ("example", "override", "field"),
    [
        pytest.param(DGX, "model.hidden=" + _HUGE_HIDDEN, "model.hidden", id="huge-hidden"),
        pytest.param(
            DGX, "training.global_batch=" + _HUGE, "training.global_batch", id="huge-global-batch"
        ),
        pytest.param(
            DGX, "hardware.matmul_half_dim=1e308", "hardware.matmul_half_dim", id="huge-half-dim"
        ),
        pytest.param(
            DGX,
            "hardware.inter_node_bandwidth_gbps=1e-320",
            "hardware.inter_node_bandwidth_gbps",
            id="subnormal-bandwidth",
        ),
        pytest.param(
            DGX,
            'model.ops=[{type="linear", in_features=0, out_features=0}]',
            "model.ops",
            id="graph-linear-zero",
        ),
        pytest.param(
            DGX,
            'model.ops=[{type="linear", in_features="4", out_features=4}]',
            "model.ops",
            id="graph-linear-string",
        ),
        pytest.param(
            DGX,
            'model.ops=[{type="linear", in_features=nan, out_features=4}]',
            "model.ops",
            id="graph-linear-nan",
        ),
        pytest.param(
            DGX,
            'model.ops=[{type="conv2d", in_channels=3, out_channels=4, kernel=3, in_hw=5}]',
            "model.ops",
            id="graph-conv-in-hw-scalar",
        ),
        pytest.param(DGX, "hardware.hbm_gib=1e308", "hardware.hbm_gib", id="huge-memory"),
        pytest.param(
            DGX, "parallelism.dp_bucket_mib=1e-300", "parallelism.dp_bucket_mib", id="tiny-bucket"
        ),
    ],
)
def test_hostile_value_is_rejected_or_simulated_cleanly(
    example: Path, override: str, field: str
) -> None:
    argv = ["simulate", str(example), "--json", "--set", override]
    if override.startswith("model.ops"):
        argv += [
            "--set",
            "parallelism.tp=1",
            "--set",
            "parallelism.dp=1",
            "--set",
            "training.global_batch=8",
        ]
    # a subprocess: the real exit code and stdout together
    r = run_subprocess(*argv)
    assert "Traceback" not in r.stdout + r.stderr
    if r.returncode == 2:
        assert_clean_error(r.returncode, r.stdout, r.stderr, field)
        return
    assert r.returncode == 0, f"exit code {r.returncode}: {r.stderr.strip()}"
    data = strict_json(r.stdout)
    for key in REQUIRED_KEYS - {"fits_memory", "engine", "stages", "events_simulated"}:
        assert math.isfinite(data[key]), (key, data[key])
    assert data["throughput_samples_per_s"] > 0


# --------------------------------------------------------------------------------------------
# command-line usage errors
# --------------------------------------------------------------------------------------------


def test_no_command_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([]) == 2
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err


def test_unknown_engine_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    try:
        code = main(["simulate", str(DGX), "--engine", "des"])
    except SystemExit as exc:  # argparse exits instead of returning
        code = exc.code  # type: ignore[assignment]
    out, err = capsys.readouterr()
    assert_clean_error(code, out, err, "--engine", "des")


def test_unknown_engine_exit_code_subprocess() -> None:
    r = run_subprocess("simulate", str(DGX), "--engine", "des")
    assert r.returncode == 2
    assert "Traceback" not in r.stdout + r.stderr
    assert "des" in r.stderr


@pytest.mark.parametrize("pure", [False, True])
def test_version_names_the_networks_the_simulator_runs(
    pure: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    from palm.engines.event import accel

    monkeypatch.delenv(accel.PURE_ENV, raising=False)
    if pure:
        monkeypatch.setenv(accel.PURE_ENV, "1")
    out = subprocess.run(
        [sys.executable, "-m", "search.cli", "--version"],
        capture_output=True,
        text=True,
        cwd=REPO,
        check=True,
    ).stdout
    line = accel.choose()[1]  # what this environment selects, as the command's import does
    assert line == f"python ({accel.PURE_ENV} is set)" if pure else not line.endswith("is set)")
    assert out == f"palm-tune {palm.__version__} (event networks: {line})\n"
