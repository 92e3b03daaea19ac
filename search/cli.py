"""The ``palm-tune`` command: simulator commands from :mod:`palm.cli` plus the tuner's.

Exit codes (docs/tuning.md): 0 success, 2 bad input (one line on stderr, no traceback),
1 internal error. Set ``PALM_TUNE_DEBUG=1`` to see the traceback of an internal error.
"""

from __future__ import annotations

import os
import signal
import sys
import traceback
from collections.abc import Sequence
from typing import Any, NoReturn


def _interrupted_early(signum: int, frame: object) -> None:
    """Ctrl-C while the modules below load (optuna takes a second): one line, exit 130."""
    sys.stderr.write("palm-tune: interrupted\n")
    os._exit(130)


_SCRIPT = __name__ == "__main__" or os.path.basename(sys.argv[0]) == "palm-tune"
_MASKABLE = hasattr(signal, "pthread_sigmask")
if _SCRIPT:  # pragma: no cover
    # one BLAS thread (unless the user sets one): the tuner's models are small matrices,
    # parallelism comes from --workers, and OpenBLAS threads on busy cores made a 100 x 3000
    # product 20-40 times slower than one thread (docs/tuning.md)
    for _blas in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ.setdefault(_blas, "1")
    signal.signal(signal.SIGINT, _interrupted_early)
    if _MASKABLE:
        # the threads that libraries start while they load (OpenBLAS under numpy) inherit
        # this mask: with SIGINT blocked in them, a Ctrl-C always reaches the main thread,
        # also while search.lifecycle.supervise starts workers with Ctrl-C ignored
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})

import argparse  # noqa: E402
import contextlib  # noqa: E402

import palm  # noqa: E402
from palm.cli import add_commands as add_simulator_commands  # noqa: E402
from palm.errors import ConfigError  # noqa: E402
from search.failures import (  # noqa: E402
    WorkersFailed,
    mask_credentials,
    os_error,
    storage_failure,
)
from search.lifecycle import (  # noqa: E402
    Terminated,
    install_sigterm,
    one_line_warnings,
    quiet_optuna_logs,
    quiet_thread_errors,
    stop_received,
)

if _SCRIPT and _MASKABLE:  # pragma: no cover - a Ctrl-C during the imports is handled now
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})

__all__ = ["main", "build_parser"]


class _Parser(argparse.ArgumentParser):
    """argparse with usage errors reduced to one line and exit code 2."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"palm-tune: error: {' '.join(message.split())} (see {self.prog} --help)\n")


class _Version(argparse.Action):
    """``--version``: palm-tune's version and which networks the event engine runs, compiled
    or pure Python (:mod:`palm.engines.event.accel`), imported only when asked."""

    def __call__(self, parser: argparse.ArgumentParser, *_args: Any) -> NoReturn:
        from palm.engines.event.accel import IMPLEMENTATION

        print(f"palm-tune {palm.__version__} (event networks: {IMPLEMENTATION})")  # as argparse's
        parser.exit()


def _simulator_parser() -> tuple[argparse.ArgumentParser, argparse._SubParsersAction[Any]]:
    """The parser with the simulator's commands only, and its sub-command action."""
    parser = _Parser(
        prog="palm-tune",
        description="Simulate deep-learning training on tiled accelerators and GPU clusters, "
        "and search for the fastest mapping.",
    )
    parser.add_argument(
        "--version",
        action=_Version,
        nargs=0,
        help="print the version and which networks the event engine runs (compiled, or "
        "pure Python and why), then exit",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    add_simulator_commands(sub)
    return parser, sub


def build_parser(*, tuner: bool = True) -> argparse.ArgumentParser:
    """The ``palm-tune`` parser; ``tuner=False`` leaves out the tuner's commands, so that
    Optuna (which :mod:`search.commands` imports) is not loaded."""
    parser, sub = _simulator_parser()
    if tuner:
        from search.commands import add_commands as add_tuner_commands

        add_tuner_commands(sub)
    return parser


def _tuner_needed(argv: Sequence[str] | None) -> bool:
    """False when ``argv`` runs one of the simulator's commands (``simulate``, ``validate``...),
    which need neither the tuner nor Optuna; True otherwise (tuner commands, ``--help``)."""
    args = list(sys.argv[1:] if argv is None else argv)
    return not args or args[0] not in _simulator_parser()[1].choices


def _broken_pipe() -> int:
    """The reader of our output went away (``palm-tune ... | head``): stop quietly as a
    process killed by SIGPIPE would, exit 141 (128 + SIGPIPE). The streams are pointed at
    /dev/null so that Python's final flush does not complain; trials already told are kept."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):
            os.dup2(devnull, stream.fileno())
    return 128 + signal.SIGPIPE


def _stopped(stop: type[KeyboardInterrupt], *, trials: bool) -> int:
    """The one line and exit code of a stop: 143 for SIGTERM, 130 for Ctrl-C; ``trials``: the
    command ran trials (``tune``), which the stop marked failed."""
    if issubclass(stop, Terminated):
        marked = "; running trials marked failed" if trials else ""
        print(f"palm-tune: terminated (SIGTERM){marked}", file=sys.stderr)
        return 143
    print("palm-tune: interrupted", file=sys.stderr)
    return 130


def _error(message: str) -> None:
    """The one line of a failure, with any password in it masked."""
    print(f"palm-tune: error: {mask_credentials(' '.join(message.split()))}", file=sys.stderr)


def _runs_trials(args: argparse.Namespace | None) -> bool:
    """Whether the command (parsed, else not yet started) runs trials."""
    return getattr(args, "command", None) == "tune"


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command. Exit codes: 0, 2 bad input, 1 internal error, 130 Ctrl-C (SIGINT),
    141 output pipe closed, 143 SIGTERM; each failure is one line on stderr."""
    for name in ("stdout", "stderr"):  # started with the stream closed (``>&-``)
        if getattr(sys, name) is None:
            setattr(sys, name, open(os.devnull, "w", encoding="utf-8"))  # noqa: SIM115
    one_line_warnings()
    quiet_thread_errors()
    args: argparse.Namespace | None = None
    try:  # from the moment the handlers raise, everything runs inside this try
        install_sigterm()
        parser = build_parser(tuner=_tuner_needed(argv))
        # after the tuner's commands imported Optuna, which adds its log handler then: the
        # handler's filter is what keeps a failed trial's log to one line
        quiet_optuna_logs()
        args = parser.parse_args(argv)
        if not getattr(args, "handler", None):
            parser.print_help()
            return 2
        code: int = args.handler(args)
        sys.stdout.flush()  # here, where a closed pipe is caught, not at interpreter exit
        return code
    except SystemExit:  # --help, --version and usage errors: flushed here for the same reason
        try:
            sys.stdout.flush()
        except BrokenPipeError:
            return _broken_pipe()
        raise
    except ConfigError as exc:
        _error(str(exc))
        return 2
    except KeyboardInterrupt as exc:  # Ctrl-C, or SIGTERM (Terminated)
        return _stopped(type(exc), trials=_runs_trials(args))
    except RecursionError:
        _error("input nested too deeply to read")
        return 2
    except BrokenPipeError:
        return _broken_pipe()
    except MemoryError:
        _error("out of memory (an input too large for this machine?)")
        return 1
    except OSError as exc:
        _error(os_error(exc))
        return 1
    except WorkersFailed as exc:
        _error(str(exc))
        return 1
    except Exception as exc:  # noqa: BLE001 - last line of defence: one line, exit 1
        if os.environ.get("PALM_TUNE_DEBUG"):
            traceback.print_exc()
        stop = stop_received()
        if stop is not None:  # its exception was swallowed on the way: this is its consequence
            return _stopped(stop, trials=_runs_trials(args))
        storage = storage_failure(exc)
        if storage:
            _error(storage)
            return 1
        message = " ".join(str(exc).split()) or type(exc).__name__
        print(
            mask_credentials(
                f"palm-tune: internal error: {type(exc).__name__}: {message} "
                "(set PALM_TUNE_DEBUG=1 for the traceback)"
            ),
            file=sys.stderr,
        )
        return 1


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
