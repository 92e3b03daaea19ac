"""``palm-tune dashboard`` serves optuna-dashboard for a storage, with the artifact store that
holds the best trial's trace and plots (SPEC sec. 6)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]
WAFER = REPO / "examples" / "wafer-t18b.toml"

pytest.importorskip("optuna_dashboard", reason="optuna-dashboard is not installed")


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


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


def test_dashboard_serves_the_study_and_its_artifacts(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "PALM_TUNE_DEBUG"}
    # this tree's packages, not an installed copy, whatever the working directory
    env["PYTHONPATH"] = os.pathsep.join(
        filter(None, [str(Path(__file__).resolve().parents[2]), env.get("PYTHONPATH")])
    )
    study_file = tmp_path / "dash.toml"
    study_file.write_text(
        f"""
[study]
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
    storage = f"sqlite:///{tmp_path}/dash.db"
    tune = subprocess.run(
        [
            sys.executable,
            "-m",
            "search.cli",
            "tune",
            str(study_file),
            "--storage",
            storage,
            "--no-progress",
        ],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=env,
        timeout=120,
        check=False,
    )
    assert tune.returncode == 0, tune.stderr

    port = _free_port()
    base = f"http://127.0.0.1:{port}"
    log = (tmp_path / "dashboard.log").open("w")
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "search.cli",
            "dashboard",
            "--storage",
            storage,
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
        ],
        cwd=tmp_path,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        deadline = time.monotonic() + 20
        status = 0
        while time.monotonic() < deadline:
            assert proc.poll() is None, (tmp_path / "dashboard.log").read_text()
            try:
                status, _ = _get(f"{base}/api/studies", timeout=1)
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                status = 0
            if status == 200:
                break
            time.sleep(0.2)
        assert status == 200, (
            "the dashboard did not answer within 20 s: " + (tmp_path / "dashboard.log").read_text()
        )

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
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()
    assert f"http://127.0.0.1:{port}/" in (tmp_path / "dashboard.log").read_text()
