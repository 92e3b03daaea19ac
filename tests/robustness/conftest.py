"""Fixtures of the robustness suite (the shared ones are in tests/conftest.py): a study that
has finished trials, and an optional CPU hog.

``PALM_TEST_CPU_HOG=N`` runs the suite under load: N busy processes (``yes > /dev/null``;
``N = cores`` for one per core) start with the session and are stopped, by their process
ids, at its end. Nothing here measures time: the suite must pass under any load (no test
asserts on wall-clock time; commands get hang guards only, tests/cli_run.py)."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator

import pytest

from tests.cli_run import SMALL_STUDY, tune


def _die_with_parent() -> None:
    """SIGKILL to this child when the process that started it exits (Linux prctl
    ``PR_SET_PDEATHSIG``; elsewhere nothing)."""
    import ctypes
    import signal
    import sys

    if sys.platform.startswith("linux"):
        ctypes.CDLL(None).prctl(1, signal.SIGKILL, 0, 0, 0)


@pytest.fixture(scope="session", autouse=True)
def cpu_hog() -> Iterator[None]:
    """``PALM_TEST_CPU_HOG`` busy processes for the whole session (see the module)."""
    wanted = os.environ.get("PALM_TEST_CPU_HOG", "").strip()
    count = (os.cpu_count() or 1) if wanted == "cores" else int(wanted or 0)
    hogs = [
        subprocess.Popen(
            ["yes"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            preexec_fn=_die_with_parent,  # also when the session is killed
        )
        for _ in range(count)
    ]
    try:
        yield
    finally:
        for hog in hogs:
            hog.kill()
            hog.wait()


@pytest.fixture(scope="module")
def tuned_db(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A SQLite study made by palm-tune with three finished trials (shared by a module)."""
    folder = tmp_path_factory.mktemp("tuned")
    study = folder / "small.toml"
    study.write_text(SMALL_STUDY, encoding="utf-8")
    url = f"sqlite:///{folder}/tuned.db"
    r = tune(study, url, cwd=folder, timeout_s=180)
    assert r.code == 0, r.stderr
    return url
