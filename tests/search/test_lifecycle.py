"""Stop signals never cut a journal-lock operation in half (search.lifecycle.signals_deferred)."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest

from search import storage
from search.lifecycle import (
    guarded,
    interruptible,
    quiet_thread_errors,
    signals_deferred,
    trial_signals,
)


def test_a_signal_inside_a_deferred_block_is_raised_when_the_block_ends() -> None:
    reached_end_of_block = False

    def objective(trial: object) -> float:
        nonlocal reached_end_of_block
        with interruptible(), signals_deferred():
            os.kill(os.getpid(), signal.SIGINT)
            reached_end_of_block = True
        raise AssertionError("the deferred signal was not raised")

    with pytest.raises(KeyboardInterrupt), trial_signals():
        guarded(objective)(None)
    assert reached_end_of_block


def test_a_signal_as_the_journal_lock_is_released_still_releases_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    journal = tmp_path / "s.journal"
    journal.touch()
    lock = storage._SignalSafeLock(str(journal), grace_period=storage.GRACE_PERIOD_S)
    real_rename = os.rename

    def ctrl_c_then_rename(src: str, dst: str) -> None:
        # Ctrl-C inside Optuna's release, before its rename: undeferred, its ``except
        # BaseException`` unlinks a renamed file that does not exist (FileNotFoundError)
        os.kill(os.getpid(), signal.SIGINT)
        real_rename(src, dst)

    def objective(trial: object) -> float:
        with interruptible():  # e.g. a storage write from inside the simulation's block
            lock.acquire()
            monkeypatch.setattr(os, "rename", ctrl_c_then_rename)
            lock.release()
        raise AssertionError("the deferred signal was not raised")

    with pytest.raises(KeyboardInterrupt) as caught, trial_signals():
        guarded(objective)(None)
    assert type(caught.value) is KeyboardInterrupt  # not FileNotFoundError from a half release
    assert sorted(p.name for p in tmp_path.iterdir()) == ["s.journal"]  # no lock, no .rename


def test_a_failing_background_thread_is_one_line_or_none_for_a_storage_failure(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    import errno
    import threading

    monkeypatch.setattr(threading, "excepthook", threading.excepthook)  # restored afterwards
    quiet_thread_errors()

    def fail(exc: BaseException) -> None:
        def body() -> None:
            raise exc

        t = threading.Thread(target=body, name="heartbeat")
        t.start()
        t.join()

    fail(ValueError("bad\nvalue"))
    assert capsys.readouterr().err == "palm-tune: warning: heartbeat: ValueError: bad value\n"
    fail(OSError(errno.ENOSPC, "No space left on device"))  # the main thread reports it
    assert capsys.readouterr().err == ""
