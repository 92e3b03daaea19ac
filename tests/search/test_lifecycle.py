"""Stop signals never cut a journal-lock operation in half (search.lifecycle.signals_deferred)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from search import storage
from search.journal import JournalLock
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


def test_a_stop_acted_on_does_not_outlive_its_trials() -> None:
    """A signal that unwound the trials is not raised again by a later objective run outside
    them (the Python API calling an objective, the next test of this process)."""

    def objective(trial: object) -> float:
        with interruptible(), signals_deferred():
            os.kill(os.getpid(), signal.SIGINT)
        raise AssertionError("the deferred signal was not raised")

    with pytest.raises(KeyboardInterrupt), trial_signals():
        guarded(objective)(None)
    with interruptible():  # raised here before the fix: the stop was still pending
        ran = True
    assert ran


def test_a_signal_as_the_journal_lock_is_released_still_releases_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    journal = tmp_path / "s.journal"
    journal.touch()
    lock = JournalLock(journal, grace_period=storage.GRACE_PERIOD_S)
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


_WINDOW = """
import multiprocessing, signal, sys, time
from search import lifecycle
signal.signal(signal.SIGINT, signal.default_int_handler)
if sys.argv[1] == "tracker-first":
    lifecycle._start_resource_tracker()
saved = lifecycle._block_interrupts()
p = multiprocessing.get_context("spawn").Process(target=time.sleep, args=(0,))
p.start()
blocked = signal.SIGINT in signal.pthread_sigmask(signal.SIG_BLOCK, [])
lifecycle._restore_interrupts(saved)
p.join()
print(blocked)
"""


def _fresh_python(script: str, *args: str) -> subprocess.CompletedProcess[str]:
    """``script`` run by a new interpreter (signal handlers and masks of its own) that imports
    this checkout."""
    return subprocess.run(
        [sys.executable, "-c", script, *args],
        capture_output=True,
        text=True,
        timeout=60,
        env=dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[2])),
    )


@pytest.mark.skipif(not hasattr(signal, "pthread_sigmask"), reason="no signal masks here")
@pytest.mark.parametrize(("order", "blocked"), [("tracker-first", True), ("as-before", False)])
def test_ctrl_c_stays_blocked_while_the_workers_start(order: str, blocked: bool) -> None:
    # supervise starts the workers with Ctrl-C blocked and ignored; the first spawn launches
    # multiprocessing's resource tracker, whose launch unblocks SIGINT again (CPython,
    # bpo-33613): a Ctrl-C then was discarded. Started first, the tracker leaves the mask
    # alone (a fresh interpreter: in this one the tracker may be running already)
    out = _fresh_python(_WINDOW, order)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == [str(blocked)]


_TWICE = """
import multiprocessing, os, signal, sys, time
from multiprocessing import util
from search import lifecycle

def run():
    # a second SIGTERM as the worker exits, where the CI run met one (a SIGKILLed parent
    # with two threads sends the parent-death signal twice)
    util.Finalize(None, os.kill, args=(os.getpid(), signal.SIGTERM), exitpriority=0)
    with lifecycle.trial_signals(), lifecycle.interruptible():
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(10)

if __name__ == "__main__":
    context = multiprocessing.get_context("fork")
    p = context.Process(target=lifecycle.worker_main, args=(os.getpid(), 0, run))
    p.start()
    p.join()
    print(p.exitcode)
"""

_AFTER_A_STOP = """
import os, signal, sys, time
from search import lifecycle

lifecycle.install_sigterm()
seen = []
try:
    if sys.argv[1] == "in-a-trial":
        with lifecycle.trial_signals(), lifecycle.interruptible():
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(10)
    else:
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(10)
except KeyboardInterrupt as exc:
    seen.append(type(exc).__name__)
lifecycle.STOP_GRACE_S = 1.0
for second in (signal.SIGTERM, signal.SIGINT):
    os.kill(os.getpid(), second)
    time.sleep(0.05)
seen.append("stopping")
time.sleep(1.0)
try:  # a stop insisted on after the grace is raised again
    os.kill(os.getpid(), signal.SIGINT)
    time.sleep(10)
except KeyboardInterrupt as exc:
    seen.append(type(exc).__name__)
print(*seen)
"""


@pytest.mark.parametrize("where", ["in-a-trial", "between-trials"])
def test_a_second_stop_signal_is_dropped_within_the_grace_and_raised_after(where: str) -> None:
    out = _fresh_python(_AFTER_A_STOP, where)
    assert (out.returncode, out.stdout.split()) == (
        0,
        ["Terminated", "stopping", "KeyboardInterrupt"],
    ), out.stderr


def test_a_worker_stopped_twice_exits_quietly() -> None:
    # tests/robustness/test_signals.py failed once in CI this way: the first SIGTERM failed
    # the trial, a second one landed in multiprocessing's exit code and printed a traceback
    out = _fresh_python(_TWICE)
    assert out.stdout.split() == ["130"]
    assert "Traceback" not in out.stderr, out.stderr


_HELD_AT_START = """
import multiprocessing, os, signal, sys, time
from search import lifecycle

def blocked_in(pid):
    time.sleep(0.5)  # its interpreter started (the mask it was born with, left alone)
    with open(f"/proc/{pid}/status", encoding="ascii") as f:
        line = next(x for x in f if x.startswith("SigBlk:"))
    return bool(int(line.split()[1], 16) >> (signal.SIGTERM - 1) & 1)

if __name__ == "__main__":
    lifecycle.install_sigterm()
    lifecycle._start_resource_tracker()
    saved = lifecycle._block_interrupts()
    os.kill(os.getpid(), signal.SIGTERM)  # as workers start: held, not raised
    time.sleep(0.05)
    print(signal.SIGTERM in signal.sigpending(), flush=True)
    p = multiprocessing.get_context("spawn").Process(target=time.sleep, args=(2,))
    p.start()  # the start completes: the child gets its arguments
    print(blocked_in(p.pid), flush=True)
    try:
        lifecycle._restore_interrupts(saved)
        time.sleep(1)
        print("not delivered")
    except lifecycle.Terminated:
        print("delivered", flush=True)
    p.join()
"""

_BORN_TERMINATED = """
import os, signal, sys
from search import lifecycle

def run():
    print("ran")

signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})  # as supervise starts a worker
os.kill(os.getpid(), signal.SIGTERM)  # the parent stopping it while it loads
lifecycle.worker_main(os.getppid(), 0, run)
"""


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="no /proc here")
def test_sigterm_is_held_while_the_workers_start_and_delivered_after() -> None:
    # CI once: a SIGTERM inside Process.start, between the worker's spawn and the hand-over of
    # its arguments, left the worker an empty pipe and multiprocessing's EOFError traceback
    out = _fresh_python(_HELD_AT_START)
    # pending here while the worker starts; the worker inherits the block; delivered after
    assert out.stdout.split() == ["True", "True", "delivered"], out.stderr
    assert "Traceback" not in out.stderr, out.stderr


@pytest.mark.skipif(not hasattr(signal, "pthread_sigmask"), reason="no signal masks here")
def test_a_worker_started_with_sigterm_pending_exits_quietly() -> None:
    out = _fresh_python(_BORN_TERMINATED)
    assert (out.returncode, out.stdout, out.stderr) == (130, "", "")
