"""Fixtures of the robustness suite: a small study file and a study that has finished trials."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.robustness.cli_run import REPO, run

WAFER = REPO / "examples" / "wafer-t18b.toml"

#: three quick trials (T-18B on the wafer, global batch 32)
SMALL_STUDY = f"""
[study]
name = "small"
base = "{WAFER}"
set = ["training.global_batch=32"]
sampler = "random"
trials = 3
seed = 0

[space]
recompute = ["full", "selective"]
tp_group = ["compact", "strided"]
"""

#: about a second a trial (512 micro-batches through 20 stages), every trial different
SLOW_STUDY = f"""
[study]
name = "slow"
base = "{WAFER}"
set = ["training.global_batch=1024"]
sampler = "random"
trials = 40
seed = 0

[space]
hardware = {{ inter_tile_link_gbps = {{ low = 128, high = 512 }} }}
"""


@pytest.fixture
def small_study(tmp_path: Path) -> Path:
    path = tmp_path / "small.toml"
    path.write_text(SMALL_STUDY, encoding="utf-8")
    return path


@pytest.fixture
def slow_study(tmp_path: Path) -> Path:
    path = tmp_path / "slow.toml"
    path.write_text(SLOW_STUDY, encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def tuned_db(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A SQLite study made by palm-tune with three finished trials (shared by a module)."""
    folder = tmp_path_factory.mktemp("tuned")
    study = folder / "small.toml"
    study.write_text(SMALL_STUDY, encoding="utf-8")
    url = f"sqlite:///{folder}/tuned.db"
    r = run("tune", str(study), "--storage", url, "--no-progress", cwd=folder, timeout_s=180)
    assert r.code == 0, r.stderr
    return url
