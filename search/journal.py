"""The journal file's lock, and a journal opened for reading only.

**The lock** (:class:`JournalLock`) is Optuna's: a symbolic link ``FILE.lock`` made with
``symlink`` (atomic; ``optuna.storages.journal.JournalFileSymlinkLock``), so palm-tune and
any other Optuna process exclude each other. Three things are added:

* The link points at the journal by its *absolute* path. Optuna links to the path as given:
  for ``--storage jl/rel.journal`` the link ``jl/rel.journal.lock`` resolves from inside
  ``jl/`` and dangles, so Optuna's wait loop (which stats the link's target) never sleeps and
  never starts its grace period: a resume after a killed worker group spun at 100% CPU.
* The holder: right after taking the lock its process writes ``host:pid`` to
  ``FILE.lock.holder`` (and removes it before releasing). A lock whose holder is a process of
  this host that no longer exists is taken over at once; a lock of a live or unknown holder
  is taken over once it is older than its grace period (``GRACE_PERIOD_S``, Optuna's own is
  30 s). A holder note older than the lock is not its holder's (a crashed process left it).
* Waiting is said once, in one line naming the lock, its holder when known and its age,
  instead of Optuna's multi-line log warning every 10 s.

**Reading** (:class:`ReadOnlyJournal`): ``best`` and ``report`` read the journal without
its lock and without writing: records are read up to the last whole line (a writer may be
appending), and a record torn by a crash with the next one glued to it is read as the whole
record (:func:`whole_record`), as ``palm-tune tune`` repairs it in the file.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from optuna.storages.journal import BaseJournalBackend, JournalFileSymlinkLock

from palm.errors import ConfigError
from search.lifecycle import signals_deferred

__all__ = ["JournalLock", "ReadOnlyJournal", "whole_record", "pid_alive", "WAIT_NOTICE_S"]

#: a wait for the lock longer than this is said (once per process)
WAIT_NOTICE_S = 2.0
_RECORD_START = b'{"op_code"'


def whole_record(line: bytes) -> bytes | None:
    """``line`` if it is one JSON record; the whole record at its end if a torn record was
    glued in front of it (the next append continued a line cut by a crash); else None."""
    try:
        json.loads(line)
        return line
    except ValueError:
        pass
    start = line.rfind(_RECORD_START)
    if start <= 0:
        return None
    try:
        json.loads(line[start:])
    except ValueError:
        return None
    return line[start:]


def pid_alive(pid: int) -> bool:
    """Whether process ``pid`` of this host is running: it exists and is not a zombie (a
    killed worker whose parent died too stays a zombie until the system reaps it, which a
    container's first process may never do)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return True  # no /proc (not Linux): it exists


def _alive(host: str, pid: int) -> bool | None:
    """Whether process ``pid`` of ``host`` runs (None: another host, unknowable)."""
    if host != socket.gethostname():
        return None
    return pid_alive(pid)


class JournalLock(JournalFileSymlinkLock):
    """Optuna's symlink lock on the journal at the absolute ``path``, with its holder recorded
    and a dead holder's lock taken over (see the module docstring). Acquire and release are
    never cut in half by a stop signal (:func:`search.lifecycle.signals_deferred`)."""

    _told = False  # the wait was said once in this process

    def __init__(self, path: Path, *, grace_period: int) -> None:
        super().__init__(str(path.absolute()), grace_period=grace_period)
        self.grace_s = float(grace_period)
        self.holder_file = Path(self._lock_file + ".holder")

    def holder(self) -> tuple[str, int] | None:
        """``(host, pid)`` of the process holding the lock, when it recorded itself after the
        lock was made; None when there is no lock or its holder is unknown."""
        try:
            made = os.lstat(self._lock_file).st_mtime
            noted = os.stat(self.holder_file).st_mtime
            text = self.holder_file.read_text(encoding="utf-8").strip()
        except (OSError, UnicodeDecodeError):
            return None
        host, _, pid = text.rpartition(":")
        if noted < made - 1e-3 or not host or not pid.isdigit():
            return None  # left by an earlier holder that crashed, or being written
        return host, int(pid)

    def stale(self) -> str | None:
        """Why the current lock may be taken over (its holder is gone, or it is older than the
        grace period), or None (no lock, or a live holder within its grace)."""
        try:
            age = time.time() - os.lstat(self._lock_file).st_mtime
        except FileNotFoundError:
            return None
        holder = self.holder()
        if holder is not None and _alive(*holder) is False:
            return f"its holder {holder[0]}:{holder[1]} is gone"
        if age > self.grace_s:
            return f"{age:.0f} s old"
        return None

    def take_over(self) -> bool:
        """Remove the current lock as Optuna's release does (rename, then unlink: of several
        processes taking it over, one removes it); False if it was gone already."""
        moved = f"{self._lock_file}.{uuid.uuid4().hex}.stale"
        try:
            os.rename(self._lock_file, moved)
        except FileNotFoundError:
            return False
        os.unlink(moved)
        return True

    def acquire(self) -> bool:
        with signals_deferred():
            return self._acquire()

    def _acquire(self) -> bool:
        pause, started = 0.001, time.monotonic()
        while True:
            try:
                os.symlink(self._lock_target_file, self._lock_file)
            except FileExistsError:
                pass
            else:
                self._note_holder()
                return True
            if self.stale() is not None:
                self.take_over()
                continue
            if not JournalLock._told and time.monotonic() - started > WAIT_NOTICE_S:
                JournalLock._told = True
                sys.stderr.write(f"palm-tune: {self.describe()}; waiting\n")
            time.sleep(pause)
            pause = min(2 * pause, 0.1)

    def describe(self) -> str:
        """One line on the lock: where, whose, how old, when it is taken over."""
        holder = self.holder()
        try:
            age = f"{time.time() - os.lstat(self._lock_file).st_mtime:.0f} s old"
        except FileNotFoundError:
            age = "just released"
        who = f"process {holder[0]}:{holder[1]}" if holder else "an unknown process"
        return (
            f"journal lock {self._lock_file} is held by {who} ({age}; a lock is taken over "
            f"once its holder is gone or it is {self.grace_s:.0f} s old)"
        )

    def _note_holder(self) -> None:
        with contextlib.suppress(OSError):  # the note is a courtesy: the lock itself is held
            self.holder_file.write_text(f"{socket.gethostname()}:{os.getpid()}\n")

    def release(self) -> None:
        with signals_deferred():
            with contextlib.suppress(OSError):
                self.holder_file.unlink(missing_ok=True)
            super().release()


class ReadOnlyJournal(BaseJournalBackend):
    """A journal file read without its lock and never written (see the module docstring).
    Records already read are kept, so each storage sync reads only what was appended since."""

    def __init__(self, path: Path) -> None:
        self._path = path
        self._offset = 0  # bytes of whole lines consumed
        self._records: list[dict[str, Any]] = []

    def read_logs(self, log_number_from: int) -> Iterator[dict[str, Any]]:
        with open(self._path, "rb") as f:
            f.seek(self._offset)
            data = f.read()
        end = data.rfind(b"\n") + 1
        for line in data[:end].splitlines(keepends=True):
            record = whole_record(line)
            if record is None:
                number = len(self._records) + 1
                raise ConfigError(
                    "--storage", str(self._path), f"a readable journal (line {number} is corrupt)"
                )
            self._records.append(json.loads(record))
        self._offset += end
        yield from self._records[log_number_from:]

    def append_logs(self, logs: list[dict[str, Any]]) -> None:
        raise ConfigError(
            "--storage", str(self._path), "a storage opened for writing (this command only reads)"
        )
