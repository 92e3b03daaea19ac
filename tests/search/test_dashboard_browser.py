"""The best trial's page in optuna-dashboard, rendered by a real headless browser, lists the
trace and plots attached to that trial (``benchmarks/dashboard_screenshot.py`` does the same
and takes the screenshot in docs/tuning.md)."""

from __future__ import annotations

import importlib.util
import shutil
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
WAFER = REPO / "examples" / "wafer-t18b.toml"

pytest.importorskip("optuna_dashboard", reason="optuna-dashboard is not installed")
if not any(shutil.which(n) for n in ("chromium", "chromium-browser", "google-chrome")):
    pytest.skip(
        "no headless browser: Debian's chromium is not installed (apt-get install -y chromium)",
        allow_module_level=True,
    )

_spec = importlib.util.spec_from_file_location(
    "dashboard_screenshot", REPO / "benchmarks" / "dashboard_screenshot.py"
)
assert _spec is not None and _spec.loader is not None
shot = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(shot)


def test_the_best_trials_page_lists_its_artifacts_in_a_browser(tmp_path: Path) -> None:
    study = tmp_path / "dash.toml"
    study.write_text(
        f"""[study]
name = "dash"
base = "{WAFER}"
set = ["training.global_batch=16"]
sampler = "random"
trials = 3
seed = 0

[space]
tp_group = ["compact", "strided"]
recompute = ["full", "selective"]
""",
        encoding="utf-8",
    )
    storage = shot.tune(tmp_path, trials=3, study=study)
    with shot.dashboard(storage, tmp_path) as base:
        url, number, names = shot.best_trial_page(base)
        assert names == [f"trial{number}-{n}" for n in ("gantt.png", "links.png", "trace.json")]
        dom = shot.browse(url, tmp_path)
    assert f"Trial {number}" in dom
    assert "Artifacts" in dom
    for name in names:
        assert name in dom, f"{name} is not on the rendered page of trial {number}"
