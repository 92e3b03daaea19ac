"""Class 8: several ``tune`` runs creating the same new study at the same moment (how a
multi-machine study starts) all succeed and add exactly their trials, on SQLite, a journal
file and PostgreSQL (skipped with the reason when no local server answers)."""

from __future__ import annotations

import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import optuna
import pytest

from search.storage import open_storage
from tests.robustness.cli_run import _env

PG = "127.0.0.1:5432"
RUNS = 2


@pytest.fixture
def postgres_url() -> Iterator[str]:
    """A fresh database on the local server, dropped afterwards."""
    psycopg2 = pytest.importorskip("psycopg2")
    try:
        admin = psycopg2.connect(
            host="127.0.0.1", port=5432, user="postgres", dbname="postgres", connect_timeout=3
        )
    except Exception as exc:  # noqa: BLE001 - any failure to connect means: no server here
        pytest.skip(f"no PostgreSQL server answers on {PG}: {' '.join(str(exc).split())}")
    admin.autocommit = True
    name = f"palm_tune_race_{uuid.uuid4().hex[:12]}"
    with admin.cursor() as cur:
        cur.execute(f"CREATE DATABASE {name}")
    try:
        yield f"postgresql://postgres@{PG}/{name}"
    finally:
        with admin.cursor() as cur:
            cur.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
        admin.close()


def _race(study: Path, url: str, cwd: Path) -> None:
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "search.cli",
                "tune",
                str(study),
                "--storage",
                url,
                "--trials",
                "1",
                "--no-progress",
            ],
            cwd=cwd,
            env=_env(),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(RUNS)
    ]
    for p in procs:
        out, err = p.communicate(timeout=240)
        assert p.returncode == 0, err
        assert "Traceback" not in err, err
        assert "(1 new)" in out, out  # each counts its own trial, not the others'
    study_ = optuna.load_study(study_name="small", storage=open_storage(url))
    # RUNS new configurations; runs with the same seed may also propose one another's
    # configuration, answered from the storage as a duplicate (search.dedup)
    new = [t for t in study_.trials if "duplicate_of" not in t.user_attrs]
    assert len(new) == RUNS
    assert all(t.state.is_finished() for t in study_.trials)


@pytest.mark.parametrize("kind", ["sqlite", "journal"])
def test_runs_creating_the_same_study_at_once_on_a_file(
    small_study: Path, tmp_path: Path, kind: str
) -> None:
    url = f"sqlite:///{tmp_path}/race.db" if kind == "sqlite" else f"{tmp_path}/race.journal"
    _race(small_study, url, tmp_path)


def test_runs_creating_the_same_study_at_once_on_postgresql(
    small_study: Path, tmp_path: Path, postgres_url: str
) -> None:
    _race(small_study, postgres_url, tmp_path)
