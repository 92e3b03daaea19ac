"""Run a piece of work once per study, whichever of its workers gets there first (the
screening, :mod:`search.screen`): the first worker does it, the others wait and see its
result.

Optuna's storage API has no compare-and-set, but every storage creates a study name at most
once: ``create_new_study`` raises ``DuplicatedStudyError`` for a name that exists (a unique
key in an RDB storage, the order of the log in a journal, the server's storage behind a gRPC
proxy). So the lock is a study of its own, ``<study>:palm-tune-lock:<purpose>``: a worker
that creates it holds the lock, does the work, records it in the study (a user attribute)
and deletes the lock study; a worker that finds it waits until the record appears. The
holder stamps the lock study every :data:`BEAT_S` seconds; a lock whose stamp is older than
:data:`STALE_S` (its holder was killed), or whose holder is a process of this host that no
longer exists, is removed, and the waiting workers try again.
"""

from __future__ import annotations

import contextlib
import os
import socket
import threading
import time
from collections.abc import Callable
from typing import TypeVar

import optuna
from optuna.exceptions import DuplicatedStudyError
from optuna.study import StudyDirection

from search.journal import pid_alive  # a process of this host that still exists

__all__ = ["once_per_study", "lock_name", "is_lock", "BEAT_S", "STALE_S", "LOCK_MARK"]

T = TypeVar("T")

#: how often the holder stamps its lock; how old a stamp may be before the lock is broken
BEAT_S = 2.0
STALE_S = 60.0
#: what the name of a lock study contains (commands that list studies leave these out)
LOCK_MARK = ":palm-tune-lock:"
_POLL_S = 0.5
_HOLDER, _BEAT = "holder", "beat"


def lock_name(study_name: str, purpose: str) -> str:
    return f"{study_name}{LOCK_MARK}{purpose}"


def is_lock(study_name: str) -> bool:
    """A study that is one of these locks, not a study of trials."""
    return LOCK_MARK in study_name


def _me() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


def once_per_study(
    study: optuna.Study,
    *,
    purpose: str,
    done: Callable[[], T | None],
    work: Callable[[], T],
    poll_s: float = _POLL_S,
) -> tuple[T, bool]:
    """``work()`` in exactly one of the processes that call this for ``study`` and
    ``purpose`` (``work`` records its result in the study), the others waiting for it;
    ``done()`` reads that record (None while there is none). Returns the result and whether
    this process did the work."""
    storage = study._storage  # noqa: SLF001 - create_new_study is the atomic primitive
    name = lock_name(study.study_name, purpose)
    first_seen: dict[int, float] = {}
    while True:
        result = done()
        if result is not None:
            return result, False
        try:
            lock = storage.create_new_study([StudyDirection.MINIMIZE], name)
        except DuplicatedStudyError:
            _break_if_stale(storage, name, first_seen)
            time.sleep(poll_s)
            continue
        try:
            result = done()  # the holder before us may have finished just now
            if result is not None:
                return result, False
            with _beating(storage, lock):
                return work(), True
        finally:
            storage.delete_study(lock)


class _beating:
    """Stamp the lock study from a thread while the work runs."""

    def __init__(self, storage: optuna.storages.BaseStorage, lock: int) -> None:
        self.storage, self.lock = storage, lock
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _stamp(self) -> None:
        self.storage.set_study_user_attr(self.lock, _BEAT, time.time())

    def _run(self) -> None:
        while not self.stop.wait(BEAT_S):
            try:
                self._stamp()
            except Exception:  # noqa: BLE001 - a busy storage: stamp again next time
                continue

    def __enter__(self) -> None:
        self.storage.set_study_user_attr(self.lock, _HOLDER, _me())
        self._stamp()
        self.thread.start()

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join()


def _break_if_stale(
    storage: optuna.storages.BaseStorage, name: str, first_seen: dict[int, float]
) -> None:
    """Delete the lock ``name`` when its holder is gone: a process of this host that no longer
    exists, a stamp older than :data:`STALE_S`, or no stamp for :data:`STALE_S` since this
    process first saw the lock."""
    try:
        lock = storage.get_study_id_from_name(name)
        attrs = storage.get_study_user_attrs(lock)
    except KeyError:  # released meanwhile
        return
    now = time.time()
    holder, beat = attrs.get(_HOLDER), attrs.get(_BEAT)
    seen = first_seen.setdefault(lock, now)
    stale = now - (beat if isinstance(beat, (int, float)) else seen) > STALE_S
    if isinstance(holder, str) and ":" in holder:
        host, pid = holder.rsplit(":", 1)
        if host == socket.gethostname() and pid.isdigit() and not pid_alive(int(pid)):
            stale = True
    if stale:
        with contextlib.suppress(KeyError):
            storage.delete_study(lock)
