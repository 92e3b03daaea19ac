"""Fixtures shared by the tests that run ``palm-tune`` in subprocesses (tests/robustness,
tests/search/test_workers.py): the study files and a PostgreSQL database (tests/cli_run.py)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.cli_run import SLOW_STUDY, SMALL_STUDY, postgres_database


@pytest.fixture
def small_study(tmp_path: Path) -> Path:
    """Three quick trials (random sampler) in ``tmp_path/small.toml``."""
    path = tmp_path / "small.toml"
    path.write_text(SMALL_STUDY, encoding="utf-8")
    return path


@pytest.fixture
def slow_study(tmp_path: Path) -> Path:
    """About a second a trial, every trial different, in ``tmp_path/slow.toml``."""
    path = tmp_path / "slow.toml"
    path.write_text(SLOW_STUDY, encoding="utf-8")
    return path


@pytest.fixture
def postgres_url() -> Iterator[str]:
    """A fresh database on the local server, dropped afterwards; skips without a server."""
    with postgres_database("palm_tune_test") as url:
        yield url
