"""Reading the files a user names (configurations, Hugging Face configs, validation sets,
study files, results) with one bound and one set of one-line errors.

A file larger than :data:`MAX_INPUT_BYTES` is refused before it is parsed: reading
``/dev/zero`` or a multi-gigabyte file by mistake would otherwise run out of memory. A UTF-8
byte-order mark (what some Windows editors write) is accepted.
"""

from __future__ import annotations

from pathlib import Path

from palm.errors import ConfigError

__all__ = ["MAX_INPUT_BYTES", "read_input"]

#: the largest input file read (a configuration with an operator graph of 10,000 layers is
#: about 2 MiB)
MAX_INPUT_BYTES = 16 * 2**20


def read_input(path: str | Path, *, field: str, kind: str) -> str:
    """The text of ``path``; every failure is a :class:`ConfigError` naming ``field`` (e.g.
    ``"config file"``) and what was expected (``kind``, e.g. ``"TOML file"``)."""
    try:
        with open(path, "rb") as f:
            data = f.read(MAX_INPUT_BYTES + 1)
    except FileNotFoundError:
        raise ConfigError(field, str(path), f"an existing {kind}") from None
    except OSError as exc:
        reason = exc.strerror or str(exc)
        raise ConfigError(field, str(path), f"a readable {kind} ({reason})") from None
    if len(data) > MAX_INPUT_BYTES:
        raise ConfigError(field, str(path), f"a {kind} of at most {MAX_INPUT_BYTES // 2**20} MiB")
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise ConfigError(field, str(path), f"a UTF-8 {kind} ({exc})") from None
