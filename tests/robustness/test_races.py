"""Class 8: several ``tune`` runs creating the same new study at the same moment (how a
multi-machine study starts) all succeed and add exactly their trials, on SQLite, a journal
file and PostgreSQL (skipped with the reason when no local server answers)."""

from __future__ import annotations

import re
from pathlib import Path

import optuna
import pytest

from search.storage import open_storage
from tests.cli_run import spawn


def _assert_new_configurations(url: str, n: int) -> None:
    """The study holds ``n`` new configurations, every trial finished: runs with the same
    seed may also propose one another's configuration, answered from the storage as a
    duplicate (search.dedup) that is pruned and not counted."""
    study = optuna.load_study(study_name="small", storage=open_storage(url))
    new = [t for t in study.trials if "duplicate_of" not in t.user_attrs]
    assert len(new) == n
    assert all(t.state == optuna.trial.TrialState.COMPLETE for t in new)
    assert all(t.state.is_finished() for t in study.trials)


def _race(study: Path, url: str, cwd: Path, runs: int = 2) -> None:
    procs = [
        spawn("tune", str(study), "--storage", url, "--trials", "1", "--no-progress", cwd=cwd)
        for _ in range(runs)
    ]
    for p in procs:
        out, err = p.communicate(timeout=240)
        assert p.returncode == 0, err
        assert "Traceback" not in err and not err.strip(), err
        # each counts its own trial, not the others'; a duplicate of another run's is extra
        m = re.search(r"^this run\s+(\d+) trials: .* (\d+) cached duplicates", out, re.M)
        assert m and int(m[1]) - int(m[2]) == 1, out
    _assert_new_configurations(url, runs)


@pytest.mark.parametrize("kind", ["sqlite", "journal"])
def test_runs_creating_the_same_study_at_once_on_a_file(
    small_study: Path, tmp_path: Path, kind: str
) -> None:
    url = f"sqlite:///{tmp_path}/race.db" if kind == "sqlite" else f"{tmp_path}/race.journal"
    _race(small_study, url, tmp_path)


def test_runs_creating_the_same_study_at_once_on_postgresql(
    small_study: Path, tmp_path: Path, postgres_url: str
) -> None:
    _race(small_study, postgres_url, tmp_path, runs=3)


def test_a_run_joining_a_study_that_another_run_is_filling(
    small_study: Path, tmp_path: Path
) -> None:
    """The second machine of a study starts while the first is mid-way: both finish, every
    trial of both is kept, and each counts only its own new configurations (a run also stops
    when the study holds every configuration of the space, so together they may add fewer
    than asked, and the second may find the space full and add none: seen once the first had
    simulated all four configurations before the second asked; none is simulated twice)."""
    url = f"{tmp_path}/join.journal"
    first = spawn(
        "tune", str(small_study), "--storage", url, "--trials", "4", "--no-progress", cwd=tmp_path
    )
    second = spawn(
        "tune", str(small_study), "--storage", url, "--trials", "2", "--no-progress", cwd=tmp_path
    )
    added = []
    for p, asked in ((first, 4), (second, 2)):
        out, err = p.communicate(timeout=240)
        assert p.returncode == 0, err
        m = re.search(r"^this run\s+(\d+) trials: .* (\d+) cached duplicates", out, re.M)
        assert m, out
        new = int(m[1]) - int(m[2])  # its duplicates of the other run's trials are extra
        assert 0 <= new <= asked, out
        added.append(new)
    assert added[0] >= 1  # the first run, started first, adds at least its first trial
    _assert_new_configurations(url, sum(added))
