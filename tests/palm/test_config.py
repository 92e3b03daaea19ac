"""Tests of the configuration layer: ``palm.load_config``, ``palm.parse_config``,
``palm.apply_overrides``, ``palm.config_to_dict`` and :class:`palm.ConfigError`.

Contract: every mistake raises ``ConfigError`` (a ``PalmError``) whose ``str`` is one line
naming the dotted field, the value and what is allowed.
"""

from __future__ import annotations

import dataclasses
import json
import math
import sys
from pathlib import Path
from typing import Any

import pytest

import palm
from palm import ConfigError, PalmError, apply_overrides, config_to_dict, load_config, parse_config
from palm.hardware.presets import HARDWARE_PRESETS
from palm.hardware.spec import Mesh2DHardware
from palm.workload import build_workload
from palm.workload.presets import MODEL_PRESETS

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib  # type: ignore[import-not-found]

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "examples"
DGX = EXAMPLES / "t18b-dgx-a100.toml"  # t-18b (48 heads, 40 layers), TP=8 PP=1 DP=32, gb 1024, mb 8
WAFER = EXAMPLES / "wafer-t18b.toml"  # t-18b on 320 cores, TP=8 PP=20 DP=2, gb 64, mb 1
EXAMPLE_FILES = sorted(EXAMPLES.glob("*.toml"))

# A Llama-2-7B config.json as released on the Hugging Face hub (the fields that matter).
LLAMA2_7B_HF: dict[str, Any] = {
    "architectures": ["LlamaForCausalLM"],
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
micro_batch = 1

[parallelism]
tp = 8
"""


def read_toml(path: Path) -> dict[str, Any]:
    with path.open("rb") as fh:
        data: dict[str, Any] = tomllib.load(fh)
    return data


def assert_one_line_naming(exc: ConfigError, field: str, *fragments: str) -> None:
    """The contract of a ConfigError message: one line, names the field (and the value)."""
    msg = str(exc)
    assert msg, "empty ConfigError message"
    assert "\n" not in msg and "\r" not in msg, f"multi-line message: {msg!r}"
    assert field in msg, f"{field!r} not named in {msg!r}"
    assert exc.field == field or exc.field.startswith(field), (exc.field, field)
    for fragment in fragments:
        assert fragment in msg, f"{fragment!r} not in {msg!r}"
    assert "Traceback" not in msg


# --------------------------------------------------------------------------------------------
# the exception type itself
# --------------------------------------------------------------------------------------------


def test_config_error_hierarchy() -> None:
    assert issubclass(ConfigError, PalmError)
    assert issubclass(palm.PalmError, Exception)
    assert palm.ConfigError is ConfigError


def test_config_error_message_is_one_line_with_field_value_allowed() -> None:
    exc = ConfigError("parallelism.tp", 7, "a divisor of\n48 (heads)")
    msg = str(exc)
    assert "\n" not in msg
    assert msg.startswith("parallelism.tp")
    assert "7" in msg and "a divisor of 48 (heads)" in msg
    assert (exc.field, exc.value, exc.allowed) == ("parallelism.tp", 7, "a divisor of\n48 (heads)")


def test_config_error_message_stays_one_line_for_hostile_values() -> None:
    exc = ConfigError("model.name", "line one\nline two\r\n" + "x" * 500, "a short string")
    msg = str(exc)
    assert "\n" not in msg and "\r" not in msg
    assert "model.name" in msg
    assert len(msg) < 300  # long values are shortened


# --------------------------------------------------------------------------------------------
# valid configurations
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("path", EXAMPLE_FILES, ids=lambda p: p.stem)
def test_examples_load(path: Path) -> None:
    config = load_config(path)
    assert isinstance(config, palm.SimConfig)
    assert config.parallelism.devices >= 1


def test_example_values_are_read() -> None:
    config = load_config(DGX)
    # its [software] (Megatron-LM v2.5, 2021) ran the unfused attention kernel
    assert config.model == dataclasses.replace(MODEL_PRESETS["t-18b"], attention="unfused")
    assert config.software.framework == "megatron-lm"
    assert config.hardware == HARDWARE_PRESETS["dgx-a100"]
    assert (config.parallelism.tp, config.parallelism.pp, config.parallelism.dp) == (8, 1, 32)
    assert config.training.global_batch == 1024
    assert config.training.micro_batch == 8
    assert config.training.precision == "fp16"
    assert config.training.recompute == "full"


@pytest.mark.parametrize("path", EXAMPLE_FILES, ids=lambda p: p.stem)
def test_load_config_equals_parse_config_of_the_same_tables(path: Path) -> None:
    assert load_config(path) == parse_config(read_toml(path), base_dir=path.parent)


@pytest.mark.parametrize("path", EXAMPLE_FILES, ids=lambda p: p.stem)
def test_config_to_dict_round_trips(path: Path) -> None:
    config = load_config(path)
    data = config_to_dict(config)
    assert set(data) >= {"model", "hardware", "training", "parallelism"}
    assert parse_config(data) == config
    # plain, TOML/JSON-compatible data
    assert json.loads(json.dumps(data)) == data


def test_config_to_dict_round_trips_through_overrides() -> None:
    config = load_config(
        WAFER, overrides=["hardware.inter_tile_link_gbps=512", "placement.layout=s-shape"]
    )
    assert parse_config(config_to_dict(config)) == config


def test_override_changes_the_field() -> None:
    config = load_config(DGX, overrides=["parallelism.tp=4"])
    assert config.parallelism.tp == 4
    # everything else is as in the file
    assert config.parallelism.dp == 32
    assert config.training == load_config(DGX).training


@pytest.mark.parametrize(
    ("override", "getter", "expected"),
    [
        ("parallelism.schedule=gpipe", lambda c: c.parallelism.schedule, "gpipe"),  # bare word
        ('parallelism.schedule="gpipe"', lambda c: c.parallelism.schedule, "gpipe"),  # TOML string
        ("parallelism.dp_bucket_mib=2.5", lambda c: c.parallelism.dp_bucket_mib, 2.5),
        ("parallelism.sequence_parallel=true", lambda c: c.parallelism.sequence_parallel, True),
        ("training.recompute=selective", lambda c: c.training.recompute, "selective"),
        ("training.zero=1", lambda c: c.training.zero, 1),
        ("hardware.peak_tflops.fp16=100", lambda c: c.hardware.peak_tflops.fp16, 100.0),
        ("hardware.hbm_gib=40", lambda c: c.hardware.hbm_gib, 40.0),
        ("model.layers=20", lambda c: c.model.layers, 20),
        (" parallelism.tp = 4 ", lambda c: c.parallelism.tp, 4),
    ],
)
def test_override_value_is_parsed_as_toml(override: str, getter: Any, expected: Any) -> None:
    config = load_config(DGX, overrides=[override])
    assert getter(config) == expected
    assert type(getter(config)) is type(expected)


def test_later_override_wins() -> None:
    config = load_config(DGX, overrides=["parallelism.tp=4", "parallelism.tp=2"])
    assert config.parallelism.tp == 2


def test_apply_overrides_does_not_mutate_its_input() -> None:
    data = read_toml(DGX)
    before = json.loads(json.dumps(data))
    out = apply_overrides(data, ["parallelism.tp=4", "placement.layout=line"])
    assert data == before
    assert out["parallelism"]["tp"] == 4
    assert out["placement"] == {"layout": "line"}


def test_preset_field_overridden_next_to_a_preset() -> None:
    hardware = load_config(WAFER, overrides=["hardware.inter_tile_link_gbps=512"]).hardware
    preset = HARDWARE_PRESETS["wafer-palm"]
    assert isinstance(hardware, Mesh2DHardware) and isinstance(preset, Mesh2DHardware)
    assert hardware.inter_tile_link_gbps == 512.0
    assert preset.inter_tile_link_gbps == 256.0  # the preset itself is untouched
    # every other field still comes from the preset
    assert hardware.intra_tile_link_gbps == preset.intra_tile_link_gbps
    assert hardware.tiles == preset.tiles
    assert hardware.name == "wafer-palm"


def test_preset_field_overridden_in_the_file(tmp_path: Path) -> None:
    path = tmp_path / "sim.toml"
    path.write_text(
        WAFER.read_text().replace(
            'preset = "wafer-palm"', 'preset = "wafer-palm"\ninter_tile_link_gbps = 512'
        )
    )
    hardware = load_config(path).hardware
    assert isinstance(hardware, Mesh2DHardware)
    assert hardware.inter_tile_link_gbps == 512.0


def test_model_preset_field_override() -> None:
    config = load_config(DGX, overrides=["model.layers=20"])
    assert config.model.layers == 20
    assert config.model.hidden == MODEL_PRESETS["t-18b"].hidden


def test_parse_config_of_a_plain_dict() -> None:
    config = parse_config(
        {
            "model": {"preset": "llama2-7b"},
            "hardware": {"preset": "dgx-h100"},
            "training": {"global_batch": 16, "micro_batch": 2, "precision": "fp8"},
            "parallelism": {"tp": 4, "pp": 2, "dp": 2},
        }
    )
    assert config.model.name == "llama2-7b"
    assert config.training.precision == "fp8"
    assert config.parallelism.devices == 16


def test_optional_tables_take_defaults() -> None:
    config = parse_config({"model": {"preset": "t-18b"}, "hardware": {"preset": "dgx-a100"}})
    assert config.training == palm.TrainingConfig()
    assert config.parallelism == palm.ParallelismConfig()
    assert config.placement == palm.PlacementConfig()
    assert config.communication == palm.CommunicationConfig()


# --------------------------------------------------------------------------------------------
# Hugging Face config.json
# --------------------------------------------------------------------------------------------


def write_hf(tmp_path: Path, hf: dict[str, Any], sim: str = SIM_TOML_FOR_HF) -> Path:
    (tmp_path / "config.json").write_text(json.dumps(hf))
    path = tmp_path / "sim.toml"
    path.write_text(sim)
    return path


def test_hf_config_matches_llama2_7b_preset(tmp_path: Path) -> None:
    config = load_config(write_hf(tmp_path, LLAMA2_7B_HF))
    preset = MODEL_PRESETS["llama2-7b"]
    assert build_workload(config.model).params == build_workload(preset).params
    m = config.model
    assert (m.layers, m.hidden, m.heads, m.kv_heads, m.ffn_hidden, m.seq_len, m.vocab) == (
        32,
        4096,
        32,
        32,
        11008,
        4096,
        32000,
    )
    assert m.mlp == "swiglu" and m.norm == "rmsnorm" and m.tied_embeddings is False


def test_hf_config_path_is_relative_to_the_toml_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    sub = tmp_path / "run"
    sub.mkdir()
    path = write_hf(sub, LLAMA2_7B_HF)
    monkeypatch.chdir(tmp_path)  # config.json is not in the working directory
    assert load_config(path).model.hidden == 4096


def test_hf_config_fields_can_be_overridden(tmp_path: Path) -> None:
    config = load_config(write_hf(tmp_path, LLAMA2_7B_HF), overrides=["model.layers=4"])
    assert config.model.layers == 4
    assert config.model.hidden == 4096


def test_hf_config_round_trips(tmp_path: Path) -> None:
    config = load_config(write_hf(tmp_path, LLAMA2_7B_HF))
    assert parse_config(config_to_dict(config)) == config


def test_hf_config_missing_file(tmp_path: Path) -> None:
    path = tmp_path / "sim.toml"
    path.write_text(SIM_TOML_FOR_HF)  # no config.json next to it
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert_one_line_naming(info.value, "model.hf_config", "config.json")


def test_hf_config_malformed_json(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text("{not json")
    path = tmp_path / "sim.toml"
    path.write_text(SIM_TOML_FOR_HF)
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert_one_line_naming(info.value, "model.hf_config")


def test_hf_config_missing_key(tmp_path: Path) -> None:
    hf = {k: v for k, v in LLAMA2_7B_HF.items() if k != "vocab_size"}
    with pytest.raises(ConfigError) as info:
        load_config(write_hf(tmp_path, hf))
    assert_one_line_naming(info.value, "model.hf_config", "vocab_size")


def test_hf_config_kv_heads_not_dividing_heads(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as info:
        load_config(write_hf(tmp_path, {**LLAMA2_7B_HF, "num_key_value_heads": 5}))
    assert_one_line_naming(info.value, "model.kv_heads", "5")


def test_hf_config_and_preset_together(tmp_path: Path) -> None:
    path = write_hf(
        tmp_path,
        LLAMA2_7B_HF,
        SIM_TOML_FOR_HF.replace(
            'hf_config = "config.json"', 'hf_config = "config.json"\npreset = "llama2-7b"'
        ),
    )
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert_one_line_naming(info.value, "model.hf_config")


@pytest.mark.parametrize(
    ("key", "value"),
    [
        pytest.param(
            "hidden_size",
            "4096",
            id="hidden_size-string",
        ),
        pytest.param(
            "num_hidden_layers",
            32.5,
            id="num_hidden_layers-fraction",
        ),
        pytest.param(
            "num_attention_heads",
            [32],
            id="num_attention_heads-list",
        ),
        pytest.param(
            "hidden_size",
            float("nan"),
            id="hidden_size-NaN",
        ),
        pytest.param(
            "attention_dropout",
            "x",
            id="attention_dropout-string",
        ),
    ],
)
def test_hf_config_wrong_value_type_is_a_config_error(tmp_path: Path, key: str, value: Any) -> None:
    path = write_hf(tmp_path, {**LLAMA2_7B_HF, key: value})
    with pytest.raises(ConfigError) as info:
        palm.simulate(load_config(path))
    msg = str(info.value)
    assert "\n" not in msg
    assert info.value.field.startswith("model.")
    assert info.value.field in msg


# --------------------------------------------------------------------------------------------
# bad configurations: ConfigError naming the field, via load_config and via parse_config
# --------------------------------------------------------------------------------------------

# (id, example file, overrides, field named, fragments the message must contain)
BAD_CASES: list[tuple[str, Path, list[str], str, tuple[str, ...]]] = [
    ("unknown-model-preset", DGX, ["model.preset=gpt-9"], "model.preset", ("gpt-9", "t-18b")),
    (
        "unknown-hardware-preset",
        DGX,
        ["hardware.preset=tpu-v9"],
        "hardware.preset",
        ("tpu-v9", "dgx-a100"),
    ),
    ("tp-not-dividing-heads", DGX, ["parallelism.tp=7"], "parallelism.tp", ("7", "48")),
    (
        "tp-not-dividing-heads-mesh2d",
        WAFER,
        ["parallelism.tp=5", "parallelism.pp=32"],
        "parallelism.tp",
        ("5", "48"),
    ),
    (
        "mesh2d-degrees-not-device-count",
        WAFER,
        ["parallelism.dp=3", "training.global_batch=60"],
        "parallelism",
        ("480", "320"),
    ),
    (
        "gpu-cluster-degrees-not-gpus",
        DGX,
        ["hardware.gpus=256", "parallelism.dp=16"],
        "parallelism",
        ("128", "256"),
    ),
    ("more-stages-than-layers", DGX, ["parallelism.pp=41"], "parallelism.pp", ("41", "40")),
    (
        "inter-node-bandwidth-zero",
        DGX,
        ["hardware.inter_node_bandwidth_gbps=0"],
        "hardware.inter_node_bandwidth_gbps",
        ("0",),
    ),
    (
        "inter-node-bandwidth-negative",
        DGX,
        ["hardware.inter_node_bandwidth_gbps=-5"],
        "hardware.inter_node_bandwidth_gbps",
        ("-5",),
    ),
    (
        "inter-tile-link-zero",
        WAFER,
        ["hardware.inter_tile_link_gbps=0"],
        "hardware.inter_tile_link_gbps",
        ("0",),
    ),
    (
        "hbm-bandwidth-nan",
        DGX,
        ["hardware.hbm_bandwidth_gbps=nan"],
        "hardware.hbm_bandwidth_gbps",
        ("nan",),
    ),
    (
        "hbm-bandwidth-inf",
        DGX,
        ["hardware.hbm_bandwidth_gbps=inf"],
        "hardware.hbm_bandwidth_gbps",
        ("inf",),
    ),
    (
        "peak-tflops-nan",
        DGX,
        ["hardware.peak_tflops.fp16=nan"],
        "hardware.peak_tflops.fp16",
        ("nan",),
    ),
    ("unknown-field", DGX, ["training.foo=1"], "training.foo", ("micro_batch",)),
    ("wrong-type", DGX, ['training.micro_batch="x"'], "training.micro_batch", ("'x'", "integer")),
    ("wrong-type-bare-word", DGX, ["training.micro_batch=x"], "training.micro_batch", ("'x'",)),
    (
        "global-batch-not-multiple",
        DGX,
        ["training.global_batch=1000"],
        "training.global_batch",
        ("1000", "256"),
    ),
    (
        "unknown-schedule",
        DGX,
        ["parallelism.schedule=zigzag"],
        "parallelism.schedule",
        ("zigzag", "1f1b"),
    ),
    (
        "interleave-without-interleaved-schedule",
        DGX,
        ["parallelism.pp=4", "parallelism.dp=8", "parallelism.interleave=2"],
        "parallelism.interleave",
        ("2",),
    ),
    ("fp8-on-a100", DGX, ["training.precision=fp8"], "training.precision", ("fp8",)),
    ("int8-training", DGX, ["training.precision=int8"], "training.precision", ("int8",)),
    ("zero-4", DGX, ["training.zero=4"], "training.zero", ("4",)),
    (
        "heads-not-dividing-hidden",
        DGX,
        ["model.heads=50", "parallelism.tp=1"],
        "model.heads",
        ("50", "6144"),
    ),
    (
        "tp-not-dividing-ffn",
        DGX,
        ["model.ffn_hidden=1001"],
        "parallelism.tp",
        ("ffn_hidden", "1001"),
    ),
    ("ffn-zero", DGX, ["model.ffn_hidden=0"], "model.ffn_hidden", ("0",)),
    ("kv-heads-not-dividing-heads", DGX, ["model.kv_heads=5"], "model.kv_heads", ("5", "48")),
    ("tp-vs-kv-heads", DGX, ["model.kv_heads=12"], "parallelism.tp", ("kv_heads",)),
    ("tp-zero", DGX, ["parallelism.tp=0"], "parallelism.tp", ("0",)),
    ("micro-batch-zero", DGX, ["training.micro_batch=0"], "training.micro_batch", ("0",)),
    (
        "efficiency-above-one",
        DGX,
        ["hardware.matmul_efficiency=2"],
        "hardware.matmul_efficiency",
        ("2",),
    ),
    ("tiles-zero", WAFER, ["hardware.tiles=[0, 4]"], "hardware.tiles", ("0",)),
    ("unknown-mode", DGX, ["training.mode=eval"], "training.mode", ("eval",)),
    (
        "bool-as-string",
        DGX,
        ["parallelism.sequence_parallel=yes"],
        "parallelism.sequence_parallel",
        ("yes",),
    ),
    (
        "explicit-layout-on-gpu-cluster",
        DGX,
        ["placement.layout=explicit"],
        "placement.layout",
        ("explicit",),
    ),
    (
        "too-many-adapters",
        WAFER,
        ["communication.adapters=100"],
        "communication.adapters",
        ("100",),
    ),
    (
        "hardware-topology-contradicts-preset",
        DGX,
        ["hardware.topology=mesh2d"],
        "hardware.topology",
        ("mesh2d",),
    ),
]


@pytest.mark.parametrize(
    ("example", "overrides", "field", "fragments"),
    [c[1:] for c in BAD_CASES],
    ids=[c[0] for c in BAD_CASES],
)
def test_bad_config_via_load_config(
    example: Path, overrides: list[str], field: str, fragments: tuple[str, ...]
) -> None:
    with pytest.raises(ConfigError) as info:
        load_config(example, overrides=overrides)
    assert_one_line_naming(info.value, field, *fragments)


@pytest.mark.parametrize(
    ("example", "overrides", "field", "fragments"),
    [c[1:] for c in BAD_CASES],
    ids=[c[0] for c in BAD_CASES],
)
def test_bad_config_via_parse_config(
    example: Path, overrides: list[str], field: str, fragments: tuple[str, ...]
) -> None:
    data = apply_overrides(read_toml(example), overrides)
    with pytest.raises(ConfigError) as info:
        parse_config(data)
    assert_one_line_naming(info.value, field, *fragments)
    assert isinstance(info.value, PalmError)


def test_nan_written_as_toml_literal(tmp_path: Path) -> None:
    path = tmp_path / "nan.toml"
    path.write_text(
        DGX.read_text().replace(
            'preset = "dgx-a100"', 'preset = "dgx-a100"\nhbm_bandwidth_gbps = nan'
        )
    )
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert_one_line_naming(info.value, "hardware.hbm_bandwidth_gbps", "nan")


def test_nan_in_a_dict() -> None:
    data = read_toml(DGX)
    data["hardware"]["hbm_bandwidth_gbps"] = math.nan
    with pytest.raises(ConfigError) as info:
        parse_config(data)
    assert_one_line_naming(info.value, "hardware.hbm_bandwidth_gbps")


def test_nested_nan_in_a_dict() -> None:
    data = read_toml(DGX)
    data["hardware"]["peak_tflops"] = {"fp16": math.nan, "bf16": 312.0}
    with pytest.raises(ConfigError) as info:
        parse_config(data)
    assert_one_line_naming(info.value, "hardware.peak_tflops.fp16")


def test_malformed_toml(tmp_path: Path) -> None:
    path = tmp_path / "broken.toml"
    path.write_text('[model\npreset = "t-18b"\n')
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert_one_line_naming(info.value, "config file", "broken.toml", "TOML")


def test_non_utf8_file(tmp_path: Path) -> None:
    path = tmp_path / "latin1.toml"
    path.write_bytes(b'[model]\npreset = "\xff"\n')
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert_one_line_naming(info.value, "config file", "latin1.toml")


def test_missing_file(tmp_path: Path) -> None:
    path = tmp_path / "does-not-exist.toml"
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert_one_line_naming(info.value, "config file", "does-not-exist.toml")


def test_directory_instead_of_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as info:
        load_config(tmp_path)
    assert_one_line_naming(info.value, "config file")


@pytest.mark.parametrize("item", ["parallelism.tp", "", "tp=4", "foo.tp=4", "parallelism.=4"])
def test_bad_set_syntax(item: str) -> None:
    with pytest.raises(ConfigError) as info:
        load_config(DGX, overrides=[item])
    assert_one_line_naming(info.value, "--set")


def test_bad_set_syntax_via_apply_overrides() -> None:
    with pytest.raises(ConfigError) as info:
        apply_overrides({}, ["parallelism.tp"])
    assert_one_line_naming(info.value, "--set", "parallelism.tp")


@pytest.mark.parametrize(
    ("data", "field"),
    [
        ({"hardware": {"preset": "dgx-a100"}}, "model"),
        ({"model": {"preset": "t-18b"}}, "hardware"),
        (
            {"model": {"preset": "t-18b"}, "hardware": {"preset": "dgx-a100"}, "optimizer": {}},
            "optimizer",
        ),
        ({"model": 5, "hardware": {"preset": "dgx-a100"}}, "model"),
        ({"model": {"preset": "t-18b"}, "hardware": {"topology": "torus"}}, "hardware.topology"),
        ({"model": {"preset": "t-18b"}, "hardware": {"topology": "gpu-cluster"}}, "hardware."),
        ({"model": {"preset": 5}, "hardware": {"preset": "dgx-a100"}}, "model.preset"),
    ],
    ids=[
        "no-model",
        "no-hardware",
        "unknown-table",
        "model-not-a-table",
        "unknown-topology",
        "custom-hardware-missing-field",
        "preset-not-a-string",
    ],
)
def test_bad_table_structure(data: dict[str, Any], field: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_config(data)
    assert_one_line_naming(info.value, field)
