"""A PostgreSQL server stopped in the middle of a study (``pg_ctl stop -m fast`` and ``-m
immediate``): the command ends with one line naming the storage failure (exit 1), never
``internal error: UnboundLocalError`` (the failure was found only as the outermost exception,
not in its chain), and the URL's password appears nowhere in the output.

The server is this test's own, made with ``initdb`` in a temporary folder on a free port and
stopped by it: the shared server on 127.0.0.1:5432 is never touched. Skipped, saying why, where
PostgreSQL's server programs are not installed.
"""

from __future__ import annotations

import glob
import os
import shutil
import socket
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.cli_run import spawn, trial_states, unprivileged

pytestmark = pytest.mark.slow

PASSWORD = "hunter2-not-shown"


@dataclass(frozen=True)
class Server:
    data: Path
    port: int
    prefix: tuple[str, ...]
    pg_ctl: str

    def url(self) -> str:
        return f"postgresql://postgres:{PASSWORD}@127.0.0.1:{self.port}/postgres"

    def stop(self, mode: str) -> None:
        subprocess.run(
            [*self.prefix, self.pg_ctl, "-D", str(self.data), "-m", mode, "-w", "stop"],
            capture_output=True,
            timeout=120,
            check=False,
        )


def _programs() -> tuple[str, str]:
    for folder in sorted(glob.glob("/usr/lib/postgresql/*/bin"), reverse=True):
        initdb, pg_ctl = Path(folder, "initdb"), Path(folder, "pg_ctl")
        if initdb.exists() and pg_ctl.exists():
            return str(initdb), str(pg_ctl)
    initdb, pg_ctl = shutil.which("initdb"), shutil.which("pg_ctl")
    if initdb and pg_ctl:
        return initdb, pg_ctl
    pytest.skip("PostgreSQL's initdb and pg_ctl are not installed (/usr/lib/postgresql/*/bin)")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def server(tmp_path: Path) -> Iterator[Server]:
    """A PostgreSQL server of this test (trust authentication: any password is taken)."""
    pytest.importorskip("psycopg2")
    initdb, pg_ctl = _programs()
    prefix = tuple(unprivileged())  # initdb refuses to run as root
    data = tmp_path / "pg"
    made = subprocess.run(
        [*prefix, initdb, "-D", str(data), "-U", "postgres", "--auth=trust", "-E", "UTF8"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    if made.returncode != 0:
        pytest.skip(f"initdb failed here: {made.stderr.strip()[-300:]}")
    port = _free_port()
    options = f"-p {port} -k {tmp_path} -c listen_addresses=127.0.0.1 -c fsync=off"
    started = subprocess.run(
        [
            *prefix,
            pg_ctl,
            "-D",
            str(data),
            "-l",
            str(tmp_path / "pg.log"),
            "-o",
            options,
            "-w",
            "start",
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    if started.returncode != 0:
        pytest.skip(f"pg_ctl could not start a server here: {started.stderr.strip()[-300:]}")
    srv = Server(data, port, prefix, pg_ctl)
    try:
        yield srv
    finally:
        srv.stop("immediate")


@pytest.mark.parametrize("mode", ["fast", "immediate"])
def test_a_server_stopped_mid_study_is_one_line(
    server: Server, slow_study: Path, tmp_path: Path, mode: str
) -> None:
    from tests.robustness.test_signals import _wait_until_simulating_rdb

    url = server.url()
    proc = spawn("tune", str(slow_study), "--storage", url, "--no-progress", cwd=tmp_path)
    try:
        _wait_until_simulating_rdb(url, proc)
        server.stop(mode)
        out, err = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 1, err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("palm-tune: error: the storage failed"), lines[0]
    assert "UnboundLocalError" not in err and "internal error" not in err
    assert PASSWORD not in out + err
    assert os.path.isdir(server.data)


def test_a_failure_is_found_anywhere_in_the_exception_chain() -> None:
    """Optuna raised UnboundLocalError while handling its StorageInternalError (the commit
    of a trial's state failed): the storage failure is in the chain, not on top."""
    from optuna.exceptions import StorageInternalError

    from search.failures import storage_failure

    root = ConnectionRefusedError(f"postgresql://u:{PASSWORD}@h/db refused")
    wrapped = StorageInternalError("An exception is raised during the commit")
    wrapped.__cause__ = root
    chained = UnboundLocalError("cannot access local variable 'updated_state'")
    chained.__context__ = wrapped
    line = storage_failure(chained)
    assert line is not None and line.startswith("the storage failed: ConnectionRefusedError")
    assert PASSWORD not in line and "u:***@" in line


def test_trials_are_kept_when_the_server_comes_back(
    server: Server, small_study: Path, tmp_path: Path
) -> None:
    from tests.cli_run import tune

    r = tune(small_study, server.url(), cwd=tmp_path, timeout_s=120)
    assert r.code == 0, r.stderr
    assert PASSWORD not in r.stdout + r.stderr
    assert "postgres:***@" in r.stdout
    assert trial_states(server.url(), "small").get("COMPLETE", 0) >= 1
