"""A validation row is translated from its stated facts only: scrambling every field that says
where a row came from or what it is called leaves its configuration unchanged; the software
a row states is read from its own words (:mod:`palm.validation_software`)."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from palm.config import config_to_dict, parse_config
from palm.validation_modern import default_modern_file, load_modern_cases, modern_case_tables
from palm.validation_software import stated_software

#: the fields that identify a row or say where it came from, never what it ran
IDENTIFYING = (
    ("id",),
    ("source", "repo"),
    ("source", "path"),
    ("source", "commit"),
    ("source", "url"),
    ("source", "last_modified_commit"),
    ("source", "numbers_added_in"),
    ("source", "also_seen_at"),
    ("source_family",),
    ("split_group",),
    ("model", "name"),
    ("model", "key"),
    ("model", "arch_source"),
)


def _rows() -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = json.loads(default_modern_file().read_text())["cases"]
    return rows


def _set(row: dict[str, Any], path: tuple[str, ...], value: Any) -> None:
    node = row
    for key in path[:-1]:
        node = node.setdefault(key, {})
    node[path[-1]] = value


def _get(row: dict[str, Any], path: tuple[str, ...]) -> Any:
    node: Any = row
    for key in path:
        if not isinstance(node, dict) or key not in node:
            return None
        node = node[key]
    return node


def _scrambled(rows: list[dict[str, Any]], shift: int) -> list[dict[str, Any]]:
    """Each row with the identifying fields of the row ``shift`` places on (another source,
    another model's name, another family), or a meaningless string where that row has none."""
    out = copy.deepcopy(rows)
    for i, row in enumerate(out):
        other = rows[(i + shift) % len(rows)]
        for path in IDENTIFYING:
            value = _get(other, path)
            _set(row, path, value if value is not None else f"scrambled-{i}-{'.'.join(path)}")
    return out


def _config(row: dict[str, Any]) -> dict[str, Any] | str:
    """The resolved configuration of a row without its display name (or why it fails)."""
    try:
        tables, _ = modern_case_tables(row)
        data = config_to_dict(parse_config(tables))
    except Exception as exc:  # noqa: BLE001 - a failure must fail the same way
        return f"{type(exc).__name__}: {exc}".replace(str(row["id"]), "<id>")
    data["model"].pop("name")
    return data


@pytest.mark.parametrize("shift", [1, 97])
def test_scrambling_every_identifying_field_leaves_every_configuration_unchanged(
    shift: int,
) -> None:
    rows = _rows()
    scrambled = _scrambled(rows, shift)
    changed = [
        row["id"]
        for row, other in zip(rows, scrambled, strict=True)
        if _config(row) != _config(other)
    ]
    assert changed == []
    # and the scramble did change what it scrambles, on every row
    assert all(
        _get(a, p) != _get(b, p) for a, b in zip(rows, scrambled, strict=True) for p in (("id",),)
    )


def test_the_rows_left_out_are_left_out_for_the_same_reason_when_scrambled(
    tmp_path: Any,
) -> None:
    rows = _rows()
    path = tmp_path / "scrambled.json"
    path.write_text(json.dumps({"cases": _scrambled(rows, 13)}))
    plain, scrambled = load_modern_cases(), load_modern_cases(path)
    assert len(plain.cases) == len(scrambled.cases)
    assert [x.reason for x in plain.left_out] == [x.reason for x in scrambled.left_out]


@pytest.mark.parametrize(
    ("row", "software"),
    [
        (
            {"source": {"table": "Pretraining (Container NeMo24.07, System DGX-H100)"}},
            ("nemo", "24.07"),
        ),
        ({"source": {"table": "26.04.01 NeMo Container > Model: X"}}, ("nemo", "26.04.01")),
        (
            {"source": {"table": "weak scaling; Megatron-Core r0.8.0 per image"}},
            ("megatron-core", "0.8.0"),
        ),
        (
            {"source": {"table": "T", "run_versions": "torchtitan e7c0cae / torch 2.8.0a0"}},
            ("torchtitan", ""),
        ),
        (
            {
                "notes": "Composer/FSDP data parallel",
                "model": {"arch_extra": {"norm": "set by submit_benchmarks.py"}},
            },
            ("llm-foundry", ""),
        ),
        ({"notes": "Composer/FSDP data parallel only"}, ("composer", "")),
        ({"notes": "DeepSpeed 0.3.13 ZeRO-3 without model parallelism"}, ("deepspeed", "0.3.13")),
        ({"source": {"table": "H100 80GB BF16"}}, ("", "")),
        ({"software": {"framework": "megatron-lm", "version": "2.5"}}, ("megatron-lm", "2.5")),
    ],
)
def test_stated_software_reads_the_rows_own_words(
    row: dict[str, Any], software: tuple[str, str]
) -> None:
    got = stated_software(row)
    assert (got.get("framework", ""), got.get("version", "")) == software


def test_the_software_a_row_states_sets_its_defaults() -> None:
    """A NeMo row takes NeMo's distributed optimizer with its overlapped weight gather, a
    llm-foundry row PyTorch's early-stopping recompute; a row of NeMo before 25.04 on DGX
    B200 the first Blackwell attention kernels (docs/config.md, "[software]")."""
    data = load_modern_cases()
    by_id = {c.case_id: c.config for c in data.cases}
    nemo = by_id["nemo2407-h100-gpt3-175b-128g"]
    assert (nemo.software.framework, nemo.software.version) == ("nemo", "24.07")
    assert nemo.training.zero == 1 and nemo.parallelism.overlap_param_gather
    assert nemo.parallelism.tp_comm_overlap and nemo.parallelism.sequence_parallel
    assert not nemo.training.recompute_early_stop
    foundry = by_id["foundry-a100-40gb-mpt-1b-8g-s2048"]
    assert foundry.software.framework == "llm-foundry" and foundry.training.fsdp
    assert foundry.training.recompute_early_stop
    mlm = by_id["mlm-weak-h100-32b-384g"]  # its flags are stated in the row
    assert mlm.software.framework == "megatron-core" and mlm.parallelism.overlap_param_gather
    assert data.epochs == {
        i: "nemo<25.04" for i in by_id if i.startswith("nemo2502-b200-")
    }  # the 25.02 DGX B200 rows
    old, new = by_id["nemo2502-b200-llama3-8b-8g"], by_id["mb2509-b200-llama3-8b-8g-fp8"]
    assert old.hardware.attention_efficiency < new.hardware.attention_efficiency
