"""Signals, worker processes and logs of a tuning run: nothing is orphaned, nothing is lost,
no traceback reaches the user.

* ``SIGTERM`` (``kill``, batch schedulers) raises :class:`Terminated` in the main thread, a
  :class:`KeyboardInterrupt` so that Optuna marks the running trial FAIL before it unwinds
  (``optuna/study/_optimize.py``: ``except (Exception, KeyboardInterrupt)``), exactly as Ctrl-C.
* Workers (:func:`supervise`) are told to stop with ``SIGTERM`` when the parent is interrupted
  or terminated; each fails its own running trial and exits. Stragglers are killed after
  :data:`STOP_GRACE_S`, and the RUNNING trials of dead workers are failed by
  :func:`search.storage.sweep_stale_trials`.
* If the parent dies without a chance to act (``SIGKILL``), the kernel sends each worker
  ``SIGTERM`` (Linux ``prctl(PR_SET_PDEATHSIG)``; elsewhere a thread watching the parent pid).
* Optuna's log of a failed trial carries the exception's traceback; :func:`quiet_optuna_logs`
  keeps its first line.
"""

from __future__ import annotations

import ctypes
import logging
import multiprocessing.process
import os
import signal
import sys
import threading
import time
import warnings
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

__all__ = [
    "Terminated",
    "STOP_GRACE_S",
    "install_sigterm",
    "stop_received",
    "one_line_warnings",
    "quiet_thread_errors",
    "quiet_optuna_logs",
    "worker_main",
    "supervise",
    "guarded",
    "signals_deferred",
    "interruptible",
    "stop_if_signalled",
    "trial_signals",
]

#: how long stopped workers get to fail their trial and exit before they are killed
STOP_GRACE_S = 10.0
_PR_SET_PDEATHSIG = 1


class Terminated(KeyboardInterrupt):
    """The process received SIGTERM."""


class _Received:
    """The stop the process was told to make (SIGTERM or Ctrl-C), whatever became of the
    exception that told it: a signal that lands while a library imports or cleans up can be
    swallowed there, and what fails next is its consequence (see :func:`stop_received`)."""

    stop: type[KeyboardInterrupt] | None = None
    at_s = 0.0  # time.monotonic() when it came


def _stop_once(exc: type[KeyboardInterrupt]) -> None:
    """Raise a stop signal, but drop another that comes within :data:`STOP_GRACE_S` of the
    first: the process is stopping, and a second exception raised while it fails its trial and
    exits would cut that short and print a traceback. Second signals happen: Ctrl-C reaches a
    worker with its process group and the supervisor's SIGTERM follows (:func:`supervise`),
    and Linux sends the parent-death signal each time the thread a worker is parented to exits,
    so a SIGKILLed parent with two threads can send it twice (``kernel/exit.c``,
    ``forget_original_parent`` reparents to a live thread of the same process first). After
    the grace a signal raises again, so a process whose first stop was swallowed by a library
    can still be stopped."""
    if not _already_stopping(exc):
        raise exc()


def _already_stopping(exc: type[KeyboardInterrupt]) -> bool:
    """Whether the process is already stopping (a stop received less than
    :data:`STOP_GRACE_S` ago); if not, record ``exc`` as the stop it now makes."""
    now = time.monotonic()
    if _Received.stop is not None and now - _Received.at_s < STOP_GRACE_S:
        return True
    _Received.stop, _Received.at_s = exc, now
    return False


def _raise_terminated(signum: int, frame: Any) -> None:
    _stop_once(Terminated)


def _raise_interrupted(signum: int, frame: Any) -> None:
    """``signal.default_int_handler``, remembered and raised once (:func:`_stop_once`)."""
    _stop_once(KeyboardInterrupt)


def stop_received() -> type[KeyboardInterrupt] | None:
    """:class:`Terminated` or ``KeyboardInterrupt`` once the process received SIGTERM or
    SIGINT through the handlers :func:`install_sigterm` installs, else None."""
    return _Received.stop


def _ignore(signum: int, frame: Any) -> None:
    """Drop the signal."""


class _Signals:
    """Whether a trial's objective is running, and a stop signal received outside it."""

    inside = False
    pending: type[KeyboardInterrupt] | None = None


def _on_signal(signum: int, frame: Any) -> None:
    """Inside an objective: unwind it now (Optuna fails the trial). Elsewhere (Optuna asking
    for or telling a trial): remember it, so that no trial is left RUNNING without an owner;
    :func:`guarded` and :func:`stop_if_signalled` act on it a moment later."""
    exc = Terminated if signum == signal.SIGTERM else KeyboardInterrupt
    _already_stopping(exc)  # recorded: the handlers restored after the trials drop a second one
    if _Signals.inside:
        signal.signal(signal.SIGINT, _ignore)
        signal.signal(signal.SIGTERM, _ignore)
        raise exc()
    _Signals.pending = exc


def guarded(objective: Callable[[Any], Any]) -> Callable[[Any], Any]:
    """``objective`` that does not start after a stop signal; inside it, the signal interrupts
    only the :func:`interruptible` blocks (see :func:`_on_signal`)."""

    def run(trial: Any) -> Any:
        if _Signals.pending is not None:
            raise _Signals.pending()
        return objective(trial)

    return run


@contextmanager
def signals_deferred() -> Iterator[None]:
    """A storage operation that a stop signal must not cut in half, even inside an objective.

    Optuna's journal lock renames then unlinks its lock file on release, and unlinks the renamed
    file if *any* exception interrupts it (``JournalFileSymlinkLock.release``): a Ctrl-C that
    lands between the two turns into ``FileNotFoundError`` and a failed trial with a second
    line of output. Inside this block a signal is only remembered; it is raised on leaving the
    block if an objective was running, as :func:`_on_signal` would have raised it."""
    was_inside = _Signals.inside
    _Signals.inside = False
    try:
        yield
    finally:
        _Signals.inside = was_inside
    if was_inside and _Signals.pending is not None:
        signal.signal(signal.SIGINT, _ignore)
        signal.signal(signal.SIGTERM, _ignore)
        raise _Signals.pending()


@contextmanager
def interruptible() -> Iterator[None]:
    """A block of an objective that a stop signal interrupts at once (planning, simulating).
    Elsewhere, e.g. while Optuna writes the trial's attributes, the signal waits until the
    next such block or the end of the trial: a journal write cut in half would leave the
    journal's lock held by a dead process."""
    if _Signals.pending is not None:
        raise _Signals.pending()
    _Signals.inside = True
    try:
        yield
    finally:
        _Signals.inside = False


def stop_if_signalled(study: Any, trial: Any) -> None:
    """Optuna callback: end ``optimize`` after a trial if a stop signal came meanwhile."""
    if _Signals.pending is not None:
        study.stop()


@contextmanager
def trial_signals() -> Iterator[None]:
    """SIGINT and SIGTERM handled by :func:`_on_signal` while trials run; a signal received
    between trials is raised when they have stopped."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = (signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM))
    _Signals.inside, _Signals.pending = False, None
    signal.signal(signal.SIGINT, _on_signal)
    signal.signal(signal.SIGTERM, _on_signal)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous[0])
        signal.signal(signal.SIGTERM, previous[1])
        # the block's signal state ends with it, also when an exception (the signal's own
        # KeyboardInterrupt, say) leaves it: a later objective run outside this block (the
        # Python API, a test) must not raise a stop that was already acted on
        pending, _Signals.pending, _Signals.inside = _Signals.pending, None, False
    if pending is not None:
        raise pending()


def _one_line_warning(message: Warning | str, category: type[Warning], *_: Any, **__: Any) -> None:
    """Warnings as one line on stderr, like errors (no file name, no source line)."""
    from search.failures import mask_credentials

    text = mask_credentials(" ".join(str(message).split()))
    print(f"palm-tune: warning: {text}", file=sys.stderr)


def one_line_warnings() -> None:
    """Show every warning of this process as one ``palm-tune: warning: ...`` line."""
    warnings.showwarning = _one_line_warning


def quiet_thread_errors() -> None:
    """An exception that ends a background thread (Optuna's RDB heartbeat) as one line instead
    of Python's traceback, and none when it is a storage failure (a full disk, a lost
    database): the main thread meets the same storage and reports that failure in its one
    line (``search.failures.storage_failure``)."""

    def hook(args: threading.ExceptHookArgs) -> None:
        from search.failures import failure_line, storage_failure

        exc = args.exc_value
        if args.exc_type is SystemExit or exc is None or storage_failure(exc):
            return
        name = args.thread.name if args.thread is not None else "a thread"
        sys.stderr.write(f"palm-tune: warning: {name}: {failure_line(exc)}\n")

    threading.excepthook = hook


def install_sigterm() -> None:
    """Turn SIGTERM into :class:`Terminated` and SIGINT into ``KeyboardInterrupt``, each
    remembered (:func:`stop_received`, forgotten here: a command starts with none); main
    thread only."""
    _Received.stop = None
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGINT, _raise_interrupted)
        signal.signal(signal.SIGTERM, _raise_terminated)


class _OneLine(logging.Filter):
    """Drop the traceback of a log record, keep the first line of its message (Optuna's
    warnings may span lines: the SQL of a failed query), with any password masked."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.exc_info and isinstance(record.exc_info[1], KeyboardInterrupt):
            return False  # an interrupted trial: the command says "interrupted" itself
        text = str(record.msg)
        if "StorageInternalError" in text or "failed with value None" in text:
            return False  # the command names the storage failure; the second line repeats
        from search.failures import mask_credentials

        record.exc_info = None
        record.exc_text = None
        message = record.getMessage()
        message = message.splitlines()[0] if message else ""
        record.msg, record.args = mask_credentials(message), None
        return True


def quiet_optuna_logs() -> None:
    """Optuna's failed-trial warnings as one line each, without the traceback."""
    logger = logging.getLogger("optuna")
    if not any(isinstance(f, _OneLine) for f in logger.filters):
        logger.addFilter(_OneLine())
    for handler in logger.handlers:
        if not any(isinstance(f, _OneLine) for f in handler.filters):
            handler.addFilter(_OneLine())


def _die_with_parent(parent: int) -> None:
    """SIGTERM to this process when ``parent`` exits."""
    if sys.platform.startswith("linux"):
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
        except (OSError, AttributeError):
            pass
        else:
            if os.getppid() != parent:  # it died before prctl took effect
                os.kill(os.getpid(), signal.SIGTERM)
            return

    def watch() -> None:  # pragma: no cover - non-Linux
        while os.getppid() == parent:
            time.sleep(1.0)
        os.kill(os.getpid(), signal.SIGTERM)

    threading.Thread(target=watch, daemon=True).start()


def worker_main(parent: int, index: int, run: Callable[..., None], *args: Any) -> None:
    """Body of worker process ``index``: dies with its parent, turns SIGTERM and Ctrl-C into a
    quiet exit after Optuna has failed the running trial, and reports a crash in one line."""
    try:
        install_sigterm()  # SIGINT too, ignored while the worker started
        _take_sigterm()  # blocked while the worker started
        _die_with_parent(parent)  # may raise Terminated at once: the parent is already gone
        quiet_optuna_logs()
        one_line_warnings()
        quiet_thread_errors()
        run(*args)
    except KeyboardInterrupt:
        sys.exit(130)
    except BaseException as exc:  # noqa: BLE001 - one line instead of a worker traceback
        if isinstance(exc, SystemExit):
            raise
        from search.failures import failure_line

        sys.stderr.write(f"palm-tune: worker {index}: {failure_line(exc)}\n")
        sys.exit(1)


def _block_interrupts() -> tuple[Any, set[int] | None]:
    """Stop signals held while the workers start. Ctrl-C is ignored by the processes started
    from now on (an ignored signal is inherited across exec) and kept pending for this one
    (blocked: Linux keeps a blocked signal pending even while it is ignored). SIGTERM is
    blocked too: one that landed inside ``Process.start``, between the worker's spawn and the
    hand-over of its arguments, ended the start half-way, and the worker read an empty pipe and
    printed multiprocessing's ``EOFError`` traceback (CI, once). The processes started inherit
    the blocked mask (it survives fork and exec): :func:`worker_main` unblocks SIGTERM once its
    handler is installed. Returns what :func:`_restore_interrupts` needs."""
    mask = None
    if hasattr(signal, "pthread_sigmask"):
        held = {signal.SIGINT, signal.SIGTERM}
        mask = set(signal.pthread_sigmask(signal.SIG_BLOCK, held))
    return signal.signal(signal.SIGINT, signal.SIG_IGN), mask


def _take_sigterm() -> None:
    """Unblock SIGTERM in a worker, which :func:`supervise` started with it blocked; one sent
    meanwhile (the parent stopping, or dying) is delivered now."""
    if hasattr(signal, "pthread_sigmask"):
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM})


def _start_resource_tracker() -> None:
    """Start multiprocessing's resource tracker now, before :func:`_block_interrupts`. The
    first process a spawn context starts launches it, and the launch blocks SIGINT and SIGTERM
    around the tracker's spawn and then *unblocks* them (CPython
    ``multiprocessing/resource_tracker.py``, bpo-33613): inside our window that leaves SIGINT
    unblocked while it is ignored, so a Ctrl-C then was discarded by this process and by the
    workers started after it, and the run went on to its end (seen about once in 30 in
    tests/robustness/test_signals.py). Started here, the launch is over before the window
    opens, and later starts find the tracker running and leave the mask alone."""
    from multiprocessing import resource_tracker

    resource_tracker.ensure_running()


def _restore_interrupts(saved: tuple[Any, set[int] | None]) -> None:
    """Undo :func:`_block_interrupts`; a Ctrl-C or SIGTERM received meanwhile is delivered
    now."""
    handler, mask = saved
    signal.signal(signal.SIGINT, handler)
    if mask is not None:
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)


def _stop(procs: Sequence[multiprocessing.process.BaseProcess]) -> None:
    """SIGTERM every live worker, wait up to STOP_GRACE_S, SIGKILL the rest (a signal may
    land before every worker has started)."""
    procs = [p for p in procs if p.pid is not None]
    for p in procs:
        if p.is_alive():
            p.terminate()
    deadline = time.monotonic() + STOP_GRACE_S
    for p in procs:
        p.join(max(0.0, deadline - time.monotonic()))
    for p in procs:
        if p.is_alive():
            p.kill()
            p.join()


def supervise(
    procs: Sequence[multiprocessing.process.BaseProcess], on_stop: Callable[[], object]
) -> list[int]:
    """Start and wait for ``procs``. If this process is interrupted or terminated meanwhile,
    stop them, call ``on_stop`` (fail their running trials) and re-raise. Returns the
    workers' exit codes."""
    previous = signal.getsignal(signal.SIGINT)
    try:
        _start_resource_tracker()
        # Ctrl-C while a worker's interpreter starts would print "Fatal Python error" and a
        # traceback from its site import: workers start with SIGINT ignored and take it back
        # in worker_main; this process stops them all with SIGTERM (below), which it holds
        # itself until every worker has its arguments (_block_interrupts)
        saved = _block_interrupts()
        try:
            for p in procs:
                p.start()
        finally:
            _restore_interrupts(saved)
        for p in procs:
            p.join()
    except KeyboardInterrupt:
        # Ctrl-C reaches the workers too (one process group); a signal to this pid alone does
        # not: either way each worker gets SIGTERM, fails its trial and exits
        previous_term = signal.getsignal(signal.SIGTERM)
        signal.signal(signal.SIGINT, _ignore)
        signal.signal(signal.SIGTERM, _ignore)
        try:
            _stop(procs)
            on_stop()
        finally:
            signal.signal(signal.SIGINT, previous)
            signal.signal(signal.SIGTERM, previous_term)
        raise
    return [p.exitcode or 0 for p in procs]
