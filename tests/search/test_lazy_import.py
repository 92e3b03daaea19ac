"""``palm-tune``'s simulator commands do not load the tuner's dependencies (Optuna
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


_IMPORT_PALM = """
import sys
import palm
import palm.errors
light = [m for m in ("numpy", "simpy", "palm.api", "palm.engines") if m in sys.modules]
from palm import ConfigError, SimConfig, simulate
print(light, "numpy" in sys.modules, set(palm.__all__) == set(palm._HOMES))
"""


def test_import_palm_defers_the_simulator_until_a_name_is_used() -> None:
    """``import palm`` (and its error module, which every command needs) loads no numpy, SimPy
    or engine; the first use of a public name imports its module (PEP 562)."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    out = subprocess.run(
        [sys.executable, "-c", _IMPORT_PALM],
        capture_output=True,
        text=True,
        check=True,
        cwd=REPO,
        env=env,
    ).stdout
    assert out.split() == ["[]", "True", "True"]


def test_palm_public_names_resolve_to_their_modules() -> None:
    import palm
    import palm.api
    import palm.strategy

    assert palm.simulate is palm.api.simulate
    assert palm.SimConfig is palm.strategy.SimConfig
    assert set(palm.__all__) <= set(dir(palm))
    try:
        palm.no_such_name  # type: ignore[attr-defined]  # noqa: B018
    except AttributeError as exc:
        assert "no_such_name" in str(exc)
    else:
        raise AssertionError("an unknown name must raise AttributeError")
