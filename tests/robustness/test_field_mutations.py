"""Class 1 at scale: every field of every example configuration, set to each of a handful of
hostile values (zero, negative, huge, a string, a boolean, an empty or a wrong-shaped array),
either simulates or is refused with the one-line error (exit 2, ``palm-tune: error: ...``):
never an internal error. Run in process (``search.cli.main``) with the analytical engine, so
the ~1,400 runs take seconds; tests/robustness/test_unbounded.py bounds time and memory of the
inputs that do simulate. A mutation of this kind found the floorplan misfit
(``hardware.cores_per_tile = [12, 12]`` on ``wormhole-n150``) that is now refused."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

from search.cli import main
from tests.cli_run import REPO

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib  # type: ignore[import-not-found,unused-ignore]

EXAMPLES = sorted((REPO / "examples").glob("*.toml"))
#: TOML literals, as ``--set section.field=VALUE`` takes them
HOSTILE = ("0", "-1", "1000000000", "1e300", '"x"', "true", "[]", "[12, 12]", "[1, 1, 1]")
#: fields a file may leave to its preset, mutated as well
EXTRA = (
    "parallelism.tp",
    "parallelism.pp",
    "parallelism.dp",
    "training.micro_batch",
    "hardware.tiles",
    "hardware.cores_per_tile",
    "hardware.compute_grid",
)


def _fields(table: dict[str, Any], prefix: str = "") -> list[str]:
    out = []
    for key, value in table.items():
        if isinstance(value, dict):
            out += _fields(value, f"{prefix}{key}.")
        else:
            out.append(f"{prefix}{key}")
    return out


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda p: p.stem)
def test_every_field_set_to_a_hostile_value_simulates_or_is_refused_in_one_line(
    example: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    fields = dict.fromkeys(_fields(tomllib.loads(example.read_text(encoding="utf-8"))))
    fields.update(dict.fromkeys(EXTRA))
    failures = []
    for field in fields:
        for value in HOSTILE:
            code = main(
                ["simulate", str(example), "--set", f"{field}={value}", "--engine", "analytical"]
            )
            err = capsys.readouterr().err.strip().splitlines()
            refused = code == 2 and len(err) == 1 and err[0].startswith("palm-tune: error: ")
            if not (code == 0 or refused):
                failures.append(f"{field}={value}: exit {code}, {err[-1:] or 'no message'}")
    assert not failures, "\n".join(failures)
