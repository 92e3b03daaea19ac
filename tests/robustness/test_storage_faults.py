"""Class 7: a crash mid-write, a full disk or a stale lock loses no completed trial; plain
journal paths are storages as for optuna-dashboard.

A full disk is a file-size limit (``RLIMIT_FSIZE``, with ``SIGXFSZ`` ignored) on the tune
process: its writes fail with ``EFBIG`` part-way through a record, as with ``ENOSPC``."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from tests.cli_run import Run, assert_clean, run, trial_states, tune


def _tune_with_file_limit(study: Path, url: str, limit: int, cwd: Path) -> Run:
    return tune(study, url, trials=40, cwd=cwd, timeout_s=240, file_bytes=limit)


def _counts(url: str, name: str) -> dict[str, int]:
    """Trials by state, read with Optuna's own storages (which neither repair nor write)."""
    return trial_states(url, name, raw=True)


def _one_line_without_traceback(stderr: str, *words: str) -> None:
    lines = stderr.strip().splitlines()
    assert len(lines) == 1, stderr
    assert "Traceback" not in stderr and "invalid data in the commit" not in stderr
    for w in words:
        assert w in lines[0], stderr


@pytest.mark.parametrize("suffix", [".journal", ".log"])
def test_a_full_disk_mid_record_loses_no_completed_trial(
    small_study: Path, tmp_path: Path, suffix: str
) -> None:
    journal = tmp_path / f"full{suffix}"
    url = str(journal) if suffix == ".log" else f"journal:///{journal}"
    small_study.write_text(small_study.read_text().replace('"random"', '"random"\n'))
    r = _tune_with_file_limit(small_study, url, 12_000, tmp_path)
    assert r.code == 1
    _one_line_without_traceback(r.stderr, "disk is full")
    assert not journal.read_bytes().endswith(b"\n"), "the limit should have torn a record"
    before = _counts(url, "small")
    resumed = tune(small_study, url, trials=2, cwd=tmp_path, timeout_s=120)
    assert resumed.code == 0, resumed.stderr
    assert "cut a torn last record" in resumed.stderr
    assert_clean(resumed)
    after = _counts(url, "small")
    assert after.get("COMPLETE", 0) + after.get("PRUNED", 0) == (
        before.get("COMPLETE", 0) + before.get("PRUNED", 0) + 2
    )
    assert after.get("RUNNING", 0) == 0
    journal.read_bytes().decode()  # and the file reads as whole lines again
    assert journal.read_bytes().endswith(b"\n")


def test_a_journal_poisoned_by_an_older_version_is_repaired(
    small_study: Path, tmp_path: Path
) -> None:
    journal = tmp_path / "p.journal"
    url = f"journal:///{journal}"
    assert tune(small_study, url, cwd=tmp_path, timeout_s=120).code == 0
    before = _counts(url, "small")
    lines = journal.read_bytes().splitlines(keepends=True)
    # a torn record with the next append glued to it, as Optuna leaves it without repair
    poisoned = b"".join(lines[:-1]) + lines[-1][:25] + lines[-1]
    journal.write_bytes(poisoned)
    r = run("best", "--storage", url, cwd=tmp_path)  # reads the whole record, writes nothing
    assert r.code == 0, r.stderr
    assert_clean(r)
    assert journal.read_bytes() == poisoned
    r = tune(small_study, url, trials=1, cwd=tmp_path, timeout_s=120)  # a writer repairs it
    assert r.code == 0, r.stderr
    assert "dropped 1 torn record" in r.stderr
    after = _counts(url, "small")
    assert after.get("COMPLETE", 0) >= before.get("COMPLETE", 0)
    assert sum(after.values()) > sum(before.values())


def test_a_stale_lock_does_not_stall(small_study: Path, tmp_path: Path) -> None:
    journal = tmp_path / "l.journal"
    url = f"journal:///{journal}"
    assert tune(small_study, url, trials=1, cwd=tmp_path, timeout_s=120).code == 0
    lock = tmp_path / "l.journal.lock"
    os.symlink(journal, lock)  # what a worker killed inside append_logs leaves
    old = time.time() - 3600
    os.utime(lock, (old, old), follow_symlinks=False)
    r = tune(small_study, url, trials=1, cwd=tmp_path, timeout_s=120)
    assert r.code == 0, r.stderr
    # taken over at once, not after Optuna's wait: no "[W ...] It is taking longer" warning
    assert [line for line in r.stderr.splitlines() if line.strip()] == [
        line for line in r.stderr.splitlines() if "removed a stale lock" in line
    ], r.stderr
    assert "removed a stale lock" in r.stderr
    assert not lock.exists()


def test_sqlite_on_a_full_disk_is_one_line(small_study: Path, tmp_path: Path) -> None:
    db = tmp_path / "full.db"
    url = f"sqlite:///{db}"
    assert tune(small_study, url, trials=1, cwd=tmp_path, timeout_s=120).code == 0
    before = _counts(url, "small")
    r = _tune_with_file_limit(small_study, url, db.stat().st_size + 4096, tmp_path)
    assert r.code == 1
    _one_line_without_traceback(r.stderr, "disk is full")
    after = _counts(url, "small")
    assert after.get("COMPLETE", 0) >= before.get("COMPLETE", 0)


@pytest.mark.parametrize("form", ["journal:///{}/a.journal", "{}/a.journal", "{}/a.log"])
def test_journal_storage_spellings(small_study: Path, tmp_path: Path, form: str) -> None:
    url = form.format(tmp_path)
    r = tune(small_study, url, trials=1, cwd=tmp_path, timeout_s=120)
    assert r.code == 0, r.stderr
    assert_clean(r)
    assert _counts(url, "small") == {"COMPLETE": 1} or sum(_counts(url, "small").values()) == 1
    b = run("best", "--storage", url, cwd=tmp_path)
    assert b.code == 0, b.stderr


def test_artifacts_and_report_on_a_full_disk_keep_every_trial(
    small_study: Path, tmp_path: Path
) -> None:
    """The study fits on the disk, the best trial's trace and plots (hundreds of kB) do not:
    one line, exit 1, and the trials are all there; then ``report`` on a full disk, the same."""
    url = f"sqlite:///{tmp_path}/a.db"
    r = run(
        "tune",
        str(small_study),
        "--storage",
        url,
        "--no-progress",
        cwd=tmp_path,
        timeout_s=180,
        file_bytes=300_000,
    )
    assert r.code == 1, r.stderr
    _one_line_without_traceback(r.stderr, "disk is full")
    assert _counts(url, "small") == {"COMPLETE": 3}
    r = run(
        "report",
        "--storage",
        url,
        "--out",
        str(tmp_path / "rep"),
        cwd=tmp_path,
        timeout_s=120,
        file_bytes=20_000,
    )
    assert r.code in (1, 2), r.stderr
    _one_line_without_traceback(r.stderr, "File too large")
    assert _counts(url, "small") == {"COMPLETE": 3}
