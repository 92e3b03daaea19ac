"""Tests of studies shared by several worker processes (docs/tuning.md, "Storage, workers,
resuming"): JournalStorage on one machine, PostgreSQL for many, and a worker killed mid-study.

``palm-tune`` runs as a subprocess (``python -m search.cli``) in ``tmp_path``, so that nothing
(artifact folders, default storages) is written into the repository.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import optuna
import pytest
from optuna.trial import TrialState

import search
from search.storage import HEARTBEAT_INTERVAL_S, artifact_dir, open_storage
from tests.cli_run import WAFER, Run, run, spawn

pytestmark = pytest.mark.filterwarnings("ignore::optuna.exceptions.ExperimentalWarning")
optuna.logging.set_verbosity(optuna.logging.WARNING)

FINISHED = (TrialState.COMPLETE, TrialState.PRUNED, TrialState.FAIL)


def _palm_tune(*args: str, cwd: Path) -> Run:
    return run(*args, cwd=cwd, timeout_s=180)


def _small_study(tmp_path: Path) -> Path:
    """A fast study (about 0.1 s a trial) with a few memory-pruned plans."""
    path = tmp_path / "small.toml"
    path.write_text(
        f"""
[study]
name = "small"
base = "{WAFER}"
set = ["training.global_batch=32"]
sampler = "tpe"
trials = 6
seed = 0

[space]
parallelism = true
micro_batch = [1, 2]
recompute = ["full", "none"]
tp_group = ["compact", "strided"]
""",
        encoding="utf-8",
    )
    return path


def _assert_exactly_finished(storage: str, name: str, n: int) -> optuna.Study:
    study = optuna.load_study(study_name=name, storage=open_storage(storage))
    trials = study.get_trials(deepcopy=False)
    states = [t.state for t in trials]
    assert len(trials) == n, states
    assert all(s in FINISHED for s in states), states
    assert search.counts(study)["running"] == 0
    assert sorted(t.number for t in trials) == list(range(n))
    return study


def _two_workers(tmp_path: Path, storage: str, n: int = 6) -> None:
    study_file = _small_study(tmp_path)
    proc = _palm_tune(
        "tune",
        str(study_file),
        "--workers",
        "2",
        "--trials",
        str(n),
        "--storage",
        storage,
        "--no-progress",
        cwd=tmp_path,
    )
    assert proc.code == 0, proc.stderr
    assert "Traceback" not in proc.stderr
    assert f": {n} trials\nthis run   {n} trials: " in proc.stdout, proc.stdout


# ------------------------------------------------------------------------------------------
# JournalStorage
# ------------------------------------------------------------------------------------------


def test_two_workers_on_a_journal_file_complete_exactly_the_requested_trials(
    tmp_path: Path,
) -> None:
    # journal:///s.journal is relative to the working directory (tmp_path); see
    # test_an_absolute_journal_url_keeps_its_artifacts_next_to_the_file for the absolute form
    _two_workers(tmp_path, "journal:///s.journal")
    study = _assert_exactly_finished(str(tmp_path / "s.journal"), "small", 6)
    workers = {t.user_attrs.get("palm_tune_worker") for t in study.trials}
    assert len(workers) == 2, workers  # both processes ran trials
    assert search.counts(study)["complete"] >= 1
    # and the summary's best trial got its artifacts next to the journal file
    assert any((tmp_path / "s.journal.artifacts").iterdir())


def test_an_absolute_journal_url_keeps_its_artifacts_next_to_the_file(tmp_path: Path) -> None:
    url = f"journal:///{tmp_path}/abs.journal"  # journal:////tmp/...
    assert artifact_dir(url) == tmp_path / "abs.journal.artifacts"
    assert str(artifact_dir(url)).startswith(str(tmp_path))
    study_file = _small_study(tmp_path)
    proc = _palm_tune(
        "tune", str(study_file), "--trials", "2", "--storage", url, "--no-progress", cwd=tmp_path
    )
    assert proc.code == 0, proc.stderr
    assert any((tmp_path / "abs.journal.artifacts").iterdir())


# ------------------------------------------------------------------------------------------
# a worker killed mid-study
# ------------------------------------------------------------------------------------------


def _load(storage: str, name: str) -> optuna.Study | None:
    try:
        return optuna.load_study(study_name=name, storage=open_storage(storage))
    except KeyError:
        return None


def test_a_worker_killed_mid_study_loses_no_finished_trial_and_the_study_resumes(
    tmp_path: Path, slow_study: Path
) -> None:
    study_file = slow_study
    journal = tmp_path / "kill.journal"
    url = f"journal:///{journal}"
    proc = spawn(
        "tune", str(study_file), "--storage", url, "--trials", "40", "--no-progress", cwd=tmp_path
    )
    try:
        deadline = time.monotonic() + 90
        while True:
            assert proc.poll() is None, "the worker ended before it could be killed"
            assert time.monotonic() < deadline, "no RUNNING trial after 2 completed in 90 s"
            study = _load(url, "slow") if journal.exists() else None
            if study is not None:
                trials = study.get_trials(deepcopy=False)
                done = [t for t in trials if t.state == TrialState.COMPLETE]
                running = [
                    t for t in trials if t.state == TrialState.RUNNING and "config" in t.user_attrs
                ]  # simulating, not just created
                if len(done) >= 2 and running:
                    break
            time.sleep(0.05)
        os.kill(proc.pid, signal.SIGKILL)
        assert proc.wait(timeout=30) == -signal.SIGKILL
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        proc.communicate()

    after_kill = _load(url, "slow")
    assert after_kill is not None
    trials = after_kill.get_trials(deepcopy=False)
    completed = {t.number: t.values for t in trials if t.state == TrialState.COMPLETE}
    stale = [t.number for t in trials if t.state == TrialState.RUNNING]
    assert len(completed) >= 2
    assert len(stale) == 1, [t.state for t in trials]
    assert f":{proc.pid}" in trials[stale[0]].user_attrs["palm_tune_worker"]

    # resuming sweeps the stale trial: FAIL with a reason, the finished ones untouched
    tuning = search.create_study(study_file, storage=url)
    study = tuning.study
    swept = study.trials[stale[0]]
    assert swept.state == TrialState.FAIL
    assert "stale" in swept.system_attrs["fail_reason"]
    assert str(proc.pid) in swept.system_attrs["fail_reason"]
    for number, values in completed.items():
        assert study.trials[number].state == TrialState.COMPLETE
        assert study.trials[number].values == values
    assert search.counts(study)["running"] == 0

    # and the study continues where it stopped
    before = len(study.trials)
    search.optimize(tuning, n_trials=1)
    trials = study.trials
    # one new configuration (the same seed re-proposes the first run's points: those are
    # answered from the storage as duplicates, not simulated again)
    new = [t for t in trials[before:] if "duplicate_of" not in t.user_attrs]
    assert len(new) == 1
    assert trials[-1].state == TrialState.COMPLETE
    assert set(completed) <= {t.number for t in trials if t.state == TrialState.COMPLETE}


# ------------------------------------------------------------------------------------------
# PostgreSQL
# ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "scheme",
    [
        "postgresql+psycopg2",
        pytest.param("postgresql"),
    ],
)
def test_two_workers_on_postgresql_complete_exactly_the_requested_trials(
    tmp_path: Path, postgres_url: str, scheme: str
) -> None:
    url = scheme + postgres_url.removeprefix("postgresql")
    _two_workers(tmp_path, url)
    study = _assert_exactly_finished(url, "small", 6)
    workers = {t.user_attrs.get("palm_tune_worker") for t in study.trials}
    assert len(workers) == 2, workers
    # an RDB storage with heartbeats, so that trials of a crashed machine get failed
    storage = open_storage(url)
    assert isinstance(storage, optuna.storages.RDBStorage)
    assert storage.get_heartbeat_interval() == HEARTBEAT_INTERVAL_S
