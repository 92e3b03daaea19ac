"""``palm-tune``'s simulator commands do not load the tuner's dependencies (issue 11: Optuna
took 0.16 s of a 0.6 s ``simulate``); the tuner's commands still do."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
DGX = REPO / "examples" / "t18b-dgx-a100.toml"

_PROBE = """
import sys
from search.cli import main
code = main(sys.argv[1:])
print("optuna" in sys.modules, "spaces" in sys.modules, code)
"""


def _loaded(*argv: str) -> list[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    out = subprocess.run(
        [sys.executable, "-c", _PROBE, *argv],
        capture_output=True,
        text=True,
        check=True,
        cwd=REPO,
        env=env,
    ).stdout
    return out.split("\n")[-2].split()


def test_simulate_does_not_import_optuna() -> None:
    assert _loaded("simulate", str(DGX)) == ["False", "False", "0"]


def test_presets_does_not_import_optuna() -> None:
    assert _loaded("presets") == ["False", "False", "0"]


def test_tuner_command_imports_optuna() -> None:
    optuna, _spaces, code = _loaded("best", "--storage", "sqlite:///:memory:")
    assert optuna == "True"
    assert code == "2"  # no study in an empty storage: bad input
