"""The ``[software]`` table (:mod:`palm.software`): a framework's documented behaviours are
defaults that any field of the other tables overrides, field by field, by version."""

from __future__ import annotations

from typing import Any

import pytest

import palm
from palm.config import config_to_dict, parse_config
from palm.errors import ConfigError
from palm.software import FIRST_BLACKWELL_ATTENTION, FRAMEWORKS, SoftwareConfig, version_key


def _tables(**changes: Any) -> dict[str, dict[str, Any]]:
    tables: dict[str, dict[str, Any]] = {
        "model": {"preset": "t-18b"},
        "hardware": {"preset": "dgx-a100"},
        "training": {"global_batch": 1024, "micro_batch": 8, "recompute": "full"},
        "parallelism": {"tp": 8, "dp": 32},
    }
    for key, value in changes.items():
        section, field = key.split("__")
        tables.setdefault(section, {})[field] = value
    return tables


def test_versions_compare_number_by_number_and_empty_is_the_newest() -> None:
    assert version_key("25.09") < version_key("26.04.01") < version_key("")
    assert version_key("2.5") < version_key("22.05") < version_key("23.04")
    assert version_key("v0.3.13") == (0, 3, 13) and version_key("2.8.0a0") == (2, 8, 0)


@pytest.mark.parametrize(
    ("software", "field"),
    [
        ({"framework": "jax"}, "software.framework"),
        ({"framework": ["nemo"]}, "software.framework"),
        ({"framework": "nemo", "version": "latest"}, "software.version"),
        ({"framework": "nemo", "version": 25.09}, "software.version"),
        ({"version": "25.09"}, "software.version"),
        ({"framework": "nemo", "release": "25.09"}, "software.release"),
    ],
)
def test_bad_software_names_the_field(software: dict[str, Any], field: str) -> None:
    with pytest.raises(ConfigError) as err:
        parse_config({**_tables(), "software": software})
    assert err.value.field == field


def test_megatron_lm_2021_prices_its_unfused_attention_and_a_field_overrides_it() -> None:
    """SC21's Megatron-LM (v2.5) had no fused attention; the same run without a [software]
    table takes the simulator's default, FlashAttention; a field given wins."""
    old = parse_config({**_tables(), "software": {"framework": "megatron-lm", "version": "2.5"}})
    assert old.model.attention == "unfused" and old.software == SoftwareConfig("megatron-lm", "2.5")
    plain = parse_config(_tables())
    assert plain.model.attention == "auto" and plain.software == SoftwareConfig()
    given = parse_config(
        {**_tables(model__attention="flash"), "software": {"framework": "megatron-lm"}}
    )
    assert given.model.attention == "flash"
    unfused, flash = (palm.simulate(c, engine="analytical") for c in (old, plain))
    assert unfused.iteration_time_s > flash.iteration_time_s


def test_nemo_defaults_follow_the_plan() -> None:
    """NeMo's distributed optimizer and its overlapped weight gather unless FSDP shards the
    weights; sequence parallelism and TP overlap only with tensor parallelism."""
    nemo = {"framework": "nemo", "version": "25.09"}
    c = parse_config({**_tables(), "software": nemo})
    assert c.training.zero == 1 and c.parallelism.overlap_param_gather
    assert c.parallelism.sequence_parallel and c.parallelism.tp_comm_overlap
    fsdp = parse_config(
        {
            **_tables(
                training__fsdp=True, training__micro_batch=4, parallelism__tp=1, parallelism__dp=256
            ),
            "software": nemo,
        }
    )
    assert fsdp.training.zero_stage == 3 and not fsdp.parallelism.overlap_param_gather
    assert not fsdp.parallelism.sequence_parallel and not fsdp.parallelism.tp_comm_overlap
    zero0 = parse_config({**_tables(training__zero=0), "software": nemo})
    assert zero0.training.zero == 0 and not zero0.parallelism.overlap_param_gather


def test_a_release_window_sets_the_behaviour_of_its_versions_only() -> None:
    def early_stop(version: str) -> bool:
        sw = {"framework": "pytorch-fsdp", "version": version}
        return parse_config(
            {**_tables(training__fsdp=True), "software": sw}
        ).training.recompute_early_stop

    assert not early_stop("1.13.1") and early_stop("2.1") and early_stop("")

    def attention(gpu: str, version: str) -> float:
        sw = {"framework": "nemo", "version": version}
        tables = _tables(hardware__preset=gpu, model__preset="llama2-7b")
        tables["parallelism"] = {"tp": 1, "dp": 8}
        tables["training"] = {"global_batch": 64, "micro_batch": 1}
        return parse_config({**tables, "software": sw}).hardware.attention_efficiency

    assert attention("dgx-b200", "25.02") == FIRST_BLACKWELL_ATTENTION
    assert attention("dgx-b200", "25.04") != FIRST_BLACKWELL_ATTENTION
    assert attention("dgx-h100", "25.02") != FIRST_BLACKWELL_ATTENTION


def test_no_framework_keeps_the_simulators_defaults() -> None:
    """Without [software], ``fsdp = true`` is PyTorch FSDP (early-stopping recompute) and
    ``zero = 3`` a reentrant checkpoint, as before the table existed."""
    fsdp = parse_config(
        _tables(
            training__fsdp=True, training__micro_batch=4, parallelism__tp=1, parallelism__dp=256
        )
    )
    zero3 = parse_config(
        _tables(training__zero=3, training__micro_batch=4, parallelism__tp=1, parallelism__dp=256)
    )
    assert fsdp.training.recompute_early_stop and not zero3.training.recompute_early_stop


def test_software_round_trips_and_is_absent_when_none_is_named() -> None:
    c = parse_config({**_tables(), "software": {"framework": "nemo", "version": "25.09"}})
    data = config_to_dict(c)
    assert data["software"] == {"framework": "nemo", "version": "25.09"}
    assert parse_config(data) == c
    assert "software" not in config_to_dict(parse_config(_tables()))


def test_every_behaviour_cites_its_source_and_names_a_real_field() -> None:
    c = parse_config(_tables())
    for framework, items in FRAMEWORKS.items():
        for b in items:
            assert len(b.source) > 10 or framework == "", (framework, b.field)
            table, name = b.field.split(".")
            assert hasattr(getattr(c, table), name), b.field


def test_cli_rejects_an_unknown_framework_in_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    from search.cli import main

    code = main(["simulate", "examples/t18b-dgx-a100.toml", "--set", 'software.framework="jax"'])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and "software.framework" in err[0]


def test_the_documented_behaviour_table_is_the_code_s() -> None:
    from pathlib import Path

    from palm.software import behaviour_table

    text = (Path(__file__).resolve().parents[2] / "docs" / "config.md").read_text()
    block = text.split("<!-- BEGIN software -->\n")[1].split("\n<!-- END software -->")[0]
    assert block == behaviour_table()
