"""Fixtures of the robustness suite (the shared ones are in tests/conftest.py): a study that
has finished trials."""

from __future__ import annotations

import pytest

from tests.cli_run import SMALL_STUDY, tune


@pytest.fixture(scope="module")
def tuned_db(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A SQLite study made by palm-tune with three finished trials (shared by a module)."""
    folder = tmp_path_factory.mktemp("tuned")
    study = folder / "small.toml"
    study.write_text(SMALL_STUDY, encoding="utf-8")
    url = f"sqlite:///{folder}/tuned.db"
    r = tune(study, url, cwd=folder, timeout_s=180)
    assert r.code == 0, r.stderr
    return url
