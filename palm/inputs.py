"""Reading the files a user names (configurations, Hugging Face configs, validation sets,
study files, results) with one bound and one set of one-line errors.

Only regular files are read: a FIFO, a socket, a character or block device or a directory is
refused by name before anything is read from it (a FIFO with no writer would otherwise block
the command for ever, ``/dev/zero`` never ends). The file is opened without blocking
(``O_NONBLOCK``, which a regular file ignores) and checked on the open descriptor, so a file
swapped for a FIFO between a check and the open cannot block either. A file larger than
:data:`MAX_INPUT_BYTES` is refused before it is parsed: reading a multi-gigabyte file by
mistake would otherwise run out of memory. A UTF-8 byte-order mark (what some Windows editors
write) is accepted.
"""

from __future__ import annotations

import os
import stat
import sys
from pathlib import Path
from typing import Any

from palm.errors import ConfigError

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib  # type: ignore[import-not-found,unused-ignore]

__all__ = ["MAX_INPUT_BYTES", "read_input", "read_toml"]

#: the largest input file read (a configuration with an operator graph of 10,000 layers is
#: about 2 MiB)
MAX_INPUT_BYTES = 16 * 2**20

#: what a file that is not a regular file is, by its ``st_mode`` (``stat.S_IFMT``)
_SPECIAL = {
    stat.S_IFIFO: "a FIFO (named pipe)",
    stat.S_IFSOCK: "a socket",
    stat.S_IFCHR: "a character device",
    stat.S_IFBLK: "a block device",
    stat.S_IFDIR: "a directory",
}


def _not_regular(mode: int) -> str | None:
    """What the file is when it is not a regular file, else None."""
    if stat.S_ISREG(mode):
        return None
    return _SPECIAL.get(stat.S_IFMT(mode), "not a regular file")


def _special(field: str, path: str | Path, kind: str, what: str) -> ConfigError:
    return ConfigError(field, str(path), f"a regular file (a {kind}), not {what}")


def read_input(path: str | Path, *, field: str, kind: str) -> str:
    """The text of ``path``; every failure is a :class:`ConfigError` naming ``field`` (e.g.
    ``"config file"``) and what was expected (``kind``, e.g. ``"TOML file"``)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        raise ConfigError(field, str(path), f"an existing {kind}") from None
    except OSError as exc:
        try:  # a socket cannot be opened (ENXIO): say what it is rather than the errno
            what = _not_regular(os.stat(path).st_mode)
        except OSError:
            what = None
        if what is not None:
            raise _special(field, path, kind, what) from None
        reason = exc.strerror or str(exc)
        raise ConfigError(field, str(path), f"a readable {kind} ({reason})") from None
    what = _not_regular(os.fstat(fd).st_mode)
    if what is not None:
        os.close(fd)
        raise _special(field, path, kind, what)
    with os.fdopen(fd, "rb") as f:
        try:
            data = f.read(MAX_INPUT_BYTES + 1)
        except OSError as exc:
            reason = exc.strerror or str(exc)
            raise ConfigError(field, str(path), f"a readable {kind} ({reason})") from None
    if len(data) > MAX_INPUT_BYTES:
        raise ConfigError(field, str(path), f"a {kind} of at most {MAX_INPUT_BYTES // 2**20} MiB")
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise ConfigError(field, str(path), f"a UTF-8 {kind} ({exc})") from None


def read_toml(path: Path, *, field: str) -> dict[str, Any]:
    """The tables of the TOML file at ``path`` (:func:`read_input`); a syntax error or tables
    nested too deeply for the parser is a :class:`ConfigError` naming ``field``."""
    text = read_input(path, field=field, kind="TOML file")
    try:
        data: dict[str, Any] = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(field, str(path), f"valid TOML ({exc})") from None
    except RecursionError:
        raise ConfigError(field, str(path), "TOML nested less deeply (tables in tables)") from None
    return data
