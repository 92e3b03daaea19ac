"""Stores a command may only read, stores of another program, and journal locks.

* ``best`` and ``report`` open a store read-only: a SQLite study the user can read but not
  write (read-only file and folder, read-only file system) is read, and nothing is written.
* A SQLite file that is not Optuna's (another program's ``studies`` table, or not a database)
  is refused with exit 2 before anything is written: the file stays byte for byte the same.
* A journal given by a relative path with a folder, whose lock a killed worker left, is
  resumed: the lock names its holder, a dead holder's lock is taken over at once, a live
  one's is waited for with one line naming it, and reading the journal takes no lock.
"""

from __future__ import annotations

import os
import signal
import socket
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from tests.cli_run import (
    HANG_GUARD,
    SMALL_STUDY,
    assert_clean,
    assert_usage_error,
    read_only_mount,
    run,
    spawn,
    trial_states,
    tune,
    unprivileged,
)


def _snapshot(folder: Path) -> dict[str, bytes]:
    """Every file under ``folder`` with its bytes."""
    return {str(p.relative_to(folder)): p.read_bytes() for p in folder.rglob("*") if p.is_file()}


@pytest.fixture(scope="module")
def tuned_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder holding a SQLite study of three finished trials, t.db (closed: no -wal)."""
    folder = tmp_path_factory.mktemp("tuned-ro")
    study = folder / "small.toml"
    study.write_text(SMALL_STUDY, encoding="utf-8")
    r = tune(study, f"sqlite:///{folder}/t.db", cwd=folder, timeout_s=180)
    assert r.code == 0, r.stderr
    return folder


def _copy_study(tuned_folder: Path, tmp_path: Path) -> Path:
    folder = tmp_path / "store"
    folder.mkdir()
    (folder / "t.db").write_bytes((tuned_folder / "t.db").read_bytes())
    return folder


@pytest.mark.parametrize("command", ["best", "report"])
@pytest.mark.parametrize("how", ["file-and-folder", "file-system"])
def test_a_read_only_sqlite_study_is_read(
    tuned_folder: Path, tmp_path: Path, command: str, how: str
) -> None:
    """ "attempt to write a readonly database" (exit 2) before: reading commands opened the
    store for writing."""
    folder = _copy_study(tuned_folder, tmp_path)
    db = folder / "t.db"
    before = db.read_bytes()
    if how == "file-and-folder":
        prefix = unprivileged()
        db.chmod(0o444)
        folder.chmod(0o555)
    else:
        prefix = read_only_mount(folder)
    out = tmp_path / "report"
    out.mkdir(mode=0o777)
    out.chmod(0o777)  # the unprivileged user writes the report here
    args = ["--out", str(out)] if command == "report" else []
    try:
        r = run(command, "--storage", f"sqlite:///{db}", *args, cwd=tmp_path, prefix=prefix)
    finally:
        folder.chmod(0o755)
        db.chmod(0o644)
    assert r.code == 0, r.stderr
    assert_clean(r)
    assert db.read_bytes() == before
    if command == "best":
        assert r.stdout.startswith("study   small, trial ")
    else:
        assert (out / "trials.csv").read_text().count("\n") == 4  # header and three trials


@pytest.mark.parametrize("command", ["tune", "best", "report"])
@pytest.mark.parametrize("kind", ["other-studies-table", "not-a-database"])
def test_a_foreign_sqlite_file_is_refused_unchanged(
    small_study: Path, tmp_path: Path, command: str, kind: str
) -> None:
    """``tune`` on another program's database exited 1 ("no such column: studies.study_id")
    after adding Optuna's tables to it."""
    folder = tmp_path / "theirs"
    folder.mkdir()
    db = folder / "app.db"
    if kind == "other-studies-table":
        with sqlite3.connect(db) as conn:
            conn.execute("CREATE TABLE studies (id INTEGER PRIMARY KEY, title TEXT)")
            conn.execute("INSERT INTO studies VALUES (1, 'a study of theirs')")
        conn.close()
    else:
        db.write_bytes(b"a text file, not a database\n" * 10)
    before = _snapshot(folder)
    url = f"sqlite:///{db}"
    args = {
        "tune": ["tune", str(small_study), "--storage", url, "--no-progress"],
        "best": ["best", "--storage", url],
        "report": ["report", "--storage", url, "--out", str(tmp_path / "rep")],
    }[command]
    r = run(*args, cwd=tmp_path)
    assert_usage_error(r, "--storage", "app.db", "an Optuna study database", "left unchanged")
    assert _snapshot(folder) == before  # byte for byte, and no -journal / -wal file left


def _dead_pid() -> int:
    proc = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        text=True,
        capture_output=True,
        check=True,
    )
    return int(proc.stdout)


def _left_lock(folder: Path, name: str, holder: int | None) -> Path:
    """The lock Optuna leaves when its holder is killed inside an append: a symbolic link
    to the journal *as the path was given* (relative: it dangles inside the folder), and
    palm-tune's note of its holder."""
    lock = folder / f"{name}.lock"
    os.symlink(f"{folder.name}/{name}", lock)
    if holder is not None:
        (folder / f"{name}.lock.holder").write_text(f"{socket.gethostname()}:{holder}\n")
    return lock


def test_a_relative_journal_resumes_past_a_dead_holders_lock(
    small_study: Path, tmp_path: Path
) -> None:
    """``--storage jl/rel.journal`` after a worker group was killed inside an append: Optuna's
    lock dangled from inside ``jl/`` and its wait loop spun at 100% CPU for ever, printing
    multi-line warnings. The holder is gone: taken over at once, said in one line."""
    (tmp_path / "jl").mkdir()
    url = "jl/rel.journal"
    assert tune(small_study, url, trials=1, cwd=tmp_path).code == 0
    pid = _dead_pid()
    lock = _left_lock(tmp_path / "jl", "rel.journal", pid)
    r = tune(small_study, url, trials=1, cwd=tmp_path, timeout_s=60)
    assert r.code == 0, r.stderr
    assert_clean(r)
    (line,) = r.stderr.strip().splitlines()
    assert "removed a stale lock rel.journal.lock" in line, line
    assert f"{socket.gethostname()}:{pid} is gone" in line, line
    assert not lock.is_symlink()


def test_a_relative_journal_resumes_past_an_unknown_holders_lock(
    small_study: Path, tmp_path: Path
) -> None:
    """The same lock without a note of its holder (left by Optuna itself, or an older
    palm-tune): waited for in one line, then taken over at its grace period, no spin."""
    (tmp_path / "jl").mkdir()
    url = "jl/rel.journal"
    assert tune(small_study, url, trials=1, cwd=tmp_path).code == 0
    lock = _left_lock(tmp_path / "jl", "rel.journal", None)
    r = tune(small_study, url, trials=1, cwd=tmp_path, timeout_s=60)
    assert r.code == 0, r.stderr
    assert_clean(r)
    lines = r.stderr.strip().splitlines()
    assert all(line.startswith("palm-tune: ") for line in lines), r.stderr
    assert not any("[W" in line for line in lines), r.stderr
    assert not lock.is_symlink()


def test_reading_a_journal_takes_no_lock_and_a_wait_names_the_holder(
    small_study: Path, tmp_path: Path
) -> None:
    """A lock held by a live process (this test, keeping it fresh as a slow writer would):
    ``best`` reads without it and leaves it; a writer waits, says so once naming the holder,
    and goes on when the holder releases the lock. Synchronised on the writer's line, so the
    machine's load changes nothing."""
    (tmp_path / "jl").mkdir()
    url = "jl/held.journal"
    assert tune(small_study, url, trials=1, cwd=tmp_path).code == 0
    lock = tmp_path / "jl" / "held.journal.lock"
    holder = tmp_path / "jl" / "held.journal.lock.holder"
    os.symlink(tmp_path / "jl" / "held.journal", lock)
    holder.write_text(f"{socket.gethostname()}:{os.getpid()}\n")
    holding = threading.Event()
    holding.set()

    def keep_fresh() -> None:  # the holder is at work: its lock is never stale
        while holding.is_set():
            os.utime(lock, follow_symlinks=False)
            os.utime(holder)
            time.sleep(0.2)

    fresh = threading.Thread(target=keep_fresh, daemon=True)
    fresh.start()
    try:
        r = run("best", "--storage", url, cwd=tmp_path, timeout_s=30)
        assert r.code == 0, r.stderr
        assert r.stderr == "", r.stderr
        assert lock.is_symlink()  # not taken over by a reader
        proc = spawn(
            "tune",
            str(small_study),
            "--storage",
            url,
            "--trials",
            "1",
            "--no-progress",
            cwd=tmp_path,
            group=False,
        )
        assert proc.stderr is not None
        said = proc.stderr.readline()  # the writer's first line: it waits
    finally:
        holding.clear()
        fresh.join()
    holder.unlink()
    lock.unlink()  # the holder releases the lock
    out, rest = proc.communicate(timeout=120 * HANG_GUARD)
    assert proc.returncode == 0, said + rest
    assert "journal lock" in said and "waiting" in said, said
    assert f"held by process {socket.gethostname()}:{os.getpid()}" in said, said
    assert not any("journal lock" in line or "[W" in line for line in rest.splitlines()), rest


@pytest.mark.slow
def test_a_killed_worker_group_on_a_relative_journal_resumes(
    slow_study: Path, tmp_path: Path
) -> None:
    """The issue's case as a user meets it: ``tune --workers 2 --storage jl/rel.journal``
    killed (SIGKILL to the group) while trials run, then resumed."""
    from tests.robustness.test_signals import _wait_until_simulating

    (tmp_path / "jl").mkdir()
    url = "jl/rel.journal"
    proc = spawn(
        "tune", str(slow_study), "--storage", url, "--workers", "2", "--no-progress", cwd=tmp_path
    )
    try:
        _wait_until_simulating(f"journal:///{tmp_path}/{url}", tmp_path / url, proc)
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    r = tune(slow_study, url, trials=1, cwd=tmp_path, timeout_s=120)
    assert r.code == 0, r.stderr
    assert not any("[W" in line for line in r.stderr.splitlines()), r.stderr
    states = trial_states(f"journal:///{tmp_path}/{url}", "slow")
    assert states.get("RUNNING", 0) == 0, (states, r.stdout, r.stderr)


def test_a_password_is_masked_in_a_refused_url(tmp_path: Path) -> None:
    url = "postgresql://postgres:hunter2secret@127.0.0.1:5432/palm_tune_no_such_database"
    r = run("best", "--storage", url, cwd=tmp_path)
    assert "hunter2secret" not in r.stderr + r.stdout
    if r.code == 2:  # a server answered (or the driver said why not)
        assert_usage_error(r, "--storage", "postgres:***@")
