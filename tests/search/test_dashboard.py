"""``palm-tune dashboard`` serves optuna-dashboard for a storage, with the artifact store that
holds the best trial's trace and plots (docs/tuning.md): through its API, and rendered by a real
headless browser (``benchmarks/dashboard_screenshot.py`` provides the steps and takes the
screenshot in docs/tuning.md)."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.benchmark_module import load_benchmark

REPO = Path(__file__).resolve().parents[2]
WAFER = REPO / "examples" / "wafer-t18b.toml"

pytest.importorskip("optuna_dashboard", reason="optuna-dashboard is not installed")

shot = load_benchmark("dashboard_screenshot")

STUDY = f"""[study]
name = "dash"
base = "{WAFER}"
set = ["training.global_batch=16"]
sampler = "random"
trials = 3
seed = 0

[space]
tp_group = ["compact", "strided"]
recompute = ["full", "selective"]
"""


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    """A 3-trial study tuned by ``palm-tune tune`` and served by ``palm-tune dashboard``:
    (base URL, working directory)."""
    workdir = tmp_path_factory.mktemp("dash")
    (workdir / "dash.toml").write_text(STUDY, encoding="utf-8")
    storage = shot.tune(workdir, trials=3, study=workdir / "dash.toml")
    with shot.dashboard(storage, workdir) as base:
        yield base, workdir
    assert f"{base}/" in (workdir / "dashboard.log").read_text()


def _get(url: str, timeout: float = 5) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:  # noqa: S310 - loopback
            return response.status, response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


def _get_json(url: str) -> Any:
    status, body = _get(url)
    assert status == 200, (url, status, body[:300])
    return json.loads(body)


def test_dashboard_serves_the_study_and_its_artifacts(served: tuple[str, Path]) -> None:
    base, _ = served
    studies = _get_json(f"{base}/api/studies")["study_summaries"]
    (summary,) = [s for s in studies if s["study_name"] == "dash"]
    study_id = summary["study_id"]
    assert summary["directions"] == ["maximize"]

    detail = _get_json(f"{base}/api/studies/{study_id}")
    assert detail["name"] == "dash"
    assert len(detail["trials"]) == 3
    assert detail["objective_names"] == ["throughput [samples/s]"]
    # the best trial's trace and plots, attached by tune to that trial, are served
    best = max(
        (t for t in detail["trials"] if t["state"] == "Complete"),
        key=lambda t: t["values"][0],
    )
    n = best["number"]
    names = {a["filename"]: a["artifact_id"] for a in best["artifacts"]}
    assert set(names) == {f"trial{n}-trace.json", f"trial{n}-gantt.png", f"trial{n}-links.png"}
    assert detail["artifacts"] == []  # none on the study itself
    gantt = names[f"trial{n}-gantt.png"]
    status, body = _get(f"{base}/artifacts/{study_id}/{best['trial_id']}/{gantt}")
    assert status == 200 and body[:4] == b"\x89PNG"

    status, page = _get(f"{base}/dashboard/studies/{study_id}")
    assert status == 200 and b"<html" in page.lower()
    status, _ = _get(f"{base}/dashboard")
    assert status == 200


@pytest.mark.skipif(
    shot.chromium() is None,
    reason="no headless browser: Debian's chromium is not installed (apt-get install -y chromium)",
)
def test_the_best_trials_page_lists_its_artifacts_in_a_browser(served: tuple[str, Path]) -> None:
    base, workdir = served
    url, number, names = shot.best_trial_page(base)
    assert names == [f"trial{number}-{n}" for n in ("gantt.png", "links.png", "trace.json")]
    dom = shot.browse(url, workdir)
    assert f"Trial {number}" in dom
    assert "Artifacts" in dom
    for name in names:
        assert name in dom, f"{name} is not on the rendered page of trial {number}"
