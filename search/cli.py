"""The ``palm-tune`` command: simulator commands from :mod:`palm.cli` plus the tuner's.

Exit codes (SPEC sec. 6): 0 success, 2 bad input (one line on stderr, no traceback),
1 internal error. Set ``PALM_TUNE_DEBUG=1`` to see the traceback of an internal error.
"""

from __future__ import annotations

import argparse
import os
import sys
import traceback
import warnings
from collections.abc import Sequence
from typing import Any, NoReturn

import palm
from palm.cli import add_commands as add_simulator_commands
from palm.errors import ConfigError
from search.commands import add_commands as add_tuner_commands

__all__ = ["main", "build_parser"]


class _Parser(argparse.ArgumentParser):
    """argparse with usage errors reduced to one line and exit code 2."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"palm-tune: error: {' '.join(message.split())} (see {self.prog} --help)\n")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="palm-tune",
        description="Simulate deep-learning training on tiled accelerators and GPU clusters, "
        "and search for the fastest mapping.",
    )
    parser.add_argument("--version", action="version", version=f"palm-tune {palm.__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    add_simulator_commands(sub)
    add_tuner_commands(sub)
    return parser


def _one_line_warning(message: Warning | str, category: type[Warning], *_: Any, **__: Any) -> None:
    """Warnings as one line on stderr, like errors (no file name, no source line)."""
    print(f"palm-tune: warning: {' '.join(str(message).split())}", file=sys.stderr)


def main(argv: Sequence[str] | None = None) -> int:
    warnings.showwarning = _one_line_warning
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "handler", None):
        parser.print_help()
        return 2
    try:
        code: int = args.handler(args)
        return code
    except ConfigError as exc:
        print(f"palm-tune: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("palm-tune: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return 0
    except Exception as exc:  # noqa: BLE001 - last line of defence: one line, exit 1
        if os.environ.get("PALM_TUNE_DEBUG"):
            traceback.print_exc()
        message = " ".join(str(exc).split()) or type(exc).__name__
        print(
            f"palm-tune: internal error: {type(exc).__name__}: {message} "
            "(set PALM_TUNE_DEBUG=1 for the traceback)",
            file=sys.stderr,
        )
        return 1


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
