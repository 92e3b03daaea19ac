"""Run ``palm-tune`` as a user would: a subprocess with real files, bounded in time and memory.

``run`` sets ``RLIMIT_AS`` (address space) in the child before it starts, so input that makes
work grow with a value fails the test by running out of memory or time instead of taking the
machine down. ``assert_usage_error`` is the one-line error contract (exit 2, one stderr line
``palm-tune: error: ...`` naming the field, no traceback).
"""

from __future__ import annotations

import os
import resource
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

__all__ = ["REPO", "Run", "run", "spawn", "assert_usage_error", "assert_clean"]

REPO = Path(__file__).resolve().parents[2]
#: address-space limit of a CLI run: Python + numpy + optuna + sqlalchemy need ~1 GiB of
#: mappings; anything that builds a structure per layer or per sample goes far beyond
MEMORY_LIMIT_BYTES = 3 * 2**30


@dataclass(frozen=True)
class Run:
    code: int
    stdout: str
    stderr: str
    wall_s: float


def _limits(memory_bytes: int) -> None:
    resource.setrlimit(resource.RLIMIT_AS, (memory_bytes, memory_bytes))


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
    env.pop("PALM_TUNE_DEBUG", None)
    env["MPLBACKEND"] = "Agg"
    return env


def run(
    *args: str,
    cwd: Path | str = REPO,
    timeout_s: float = 60.0,
    memory_bytes: int = MEMORY_LIMIT_BYTES,
    stdin: str | None = None,
) -> Run:
    """``python -m search.cli ARGS`` in ``cwd``; fails the test if it outlives ``timeout_s``."""
    start = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-m", "search.cli", *args],
        cwd=cwd,
        env=_env(),
        capture_output=True,
        text=True,
        timeout=timeout_s,
        input=stdin,
        preexec_fn=lambda: _limits(memory_bytes),
    )
    return Run(proc.returncode, proc.stdout, proc.stderr, time.perf_counter() - start)


def spawn(*args: str, cwd: Path | str = REPO) -> subprocess.Popen[str]:
    """Start ``palm-tune ARGS`` in the background (for signals); stdout/stderr are pipes."""
    return subprocess.Popen(
        [sys.executable, "-m", "search.cli", *args],
        cwd=cwd,
        env=_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # its own process group, as a shell job: killpg = Ctrl-C
        preexec_fn=lambda: _limits(MEMORY_LIMIT_BYTES),
    )


def assert_clean(r: Run) -> None:
    """No traceback and no Python warning on either stream."""
    for stream in (r.stdout, r.stderr):
        assert "Traceback" not in stream, stream
        assert "Error:" not in stream.replace("palm-tune: error:", ""), stream


def assert_usage_error(r: Run, *names: str) -> None:
    """Exit 2 and one stderr line ``palm-tune: error: ...`` that names each of ``names``."""
    assert r.code == 2, (r.code, r.stderr[-2000:])
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr[-2000:]
    assert lines[0].startswith("palm-tune: error:"), lines[0]
    for name in names:
        assert name in lines[0], (name, lines[0])
    assert_clean(r)
