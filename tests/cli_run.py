"""Run ``palm-tune`` as a user would, shared by tests/robustness and tests/search/test_workers.py:
a subprocess with real files, bounded in time and memory, and the study files and storages
those tests share.

``run`` sets ``RLIMIT_AS`` (address space) in the child before it starts, so input that makes
work grow with a value fails the test by running out of memory instead of taking the machine
down; its ``timeout_s`` is a hang guard, multiplied by :data:`HANG_GUARD` (a command that
blocks for ever fails the test instead of stalling the suite), never a check of speed: no test
asserts on wall-clock time (speed is measured by benchmarks/, e.g. benchmarks/bounds_cost.py);
``file_bytes`` sets ``RLIMIT_FSIZE`` (with ``SIGXFSZ`` ignored), so every write past it fails
with ``EFBIG`` part-way through, as on a full disk. ``assert_usage_error`` is the
one-line error contract (exit 2, one stderr line ``palm-tune: error: ...`` naming the field, no
traceback). ``trial_states`` counts a study's trials by state, for "nothing lost" checks.
"""

from __future__ import annotations

import os
import resource
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

__all__ = [
    "REPO",
    "WAFER",
    "DGX",
    "PG",
    "SMALL_STUDY",
    "SLOW_STUDY",
    "Run",
    "run",
    "tune",
    "spawn",
    "env",
    "unprivileged",
    "read_only_mount",
    "wait_for_import",
    "spawn_long_simulation",
    "wait_for_cpu",
    "HANG_GUARD",
    "assert_usage_error",
    "assert_clean",
    "trial_states",
    "postgres_database",
]

REPO = Path(__file__).resolve().parents[1]
WAFER = REPO / "examples" / "wafer-t18b.toml"  # TP=8 PP=20 DP=2 on 320 cores, t-18b
DGX = REPO / "examples" / "t18b-dgx-a100.toml"  # TP=8 PP=1 DP=32, gb 1024, mb 8
PG = "127.0.0.1:5432"
#: address-space limit of a CLI run: Python + numpy + optuna + sqlalchemy need ~1 GiB of
#: mappings; anything that builds a structure per layer or per sample goes far beyond
MEMORY_LIMIT_BYTES = 3 * 2**30

#: three quick trials (T-18B on the wafer, global batch 32)
SMALL_STUDY = f"""
[study]
name = "small"
base = "{WAFER}"
set = ["training.global_batch=32"]
sampler = "random"
trials = 3
seed = 0

[space]
recompute = ["full", "selective"]
tp_group = ["compact", "strided"]
"""

#: about a second a trial (512 micro-batches through 20 stages), every trial different (a link
#: bandwidth knob, so that no two trials share a cached result)
SLOW_STUDY = f"""
[study]
name = "slow"
base = "{WAFER}"
set = ["training.global_batch=1024"]
sampler = "random"
trials = 40
seed = 0
screen = 0

[space]
hardware = {{ inter_tile_link_gbps = {{ low = 128, high = 512 }} }}
"""


#: how many times its stated time a command may take before the test calls it hung (the
#: suite runs on two shared cores, under load in CI); ``PALM_TEST_HANG_GUARD`` changes it
HANG_GUARD = float(os.environ.get("PALM_TEST_HANG_GUARD", "5"))


@dataclass(frozen=True)
class Run:
    code: int
    stdout: str
    stderr: str


def _limits(memory_bytes: int, file_bytes: int | None) -> Callable[[], None]:
    def apply() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (memory_bytes, memory_bytes))
        if file_bytes is not None:
            signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
            resource.setrlimit(resource.RLIMIT_FSIZE, (file_bytes, file_bytes))

    return apply


def env() -> dict[str, str]:
    """The environment of a run: this tree's packages whatever the working directory, no
    debug tracebacks, a headless matplotlib."""
    out = dict(os.environ)
    out["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), out.get("PYTHONPATH")]))
    out.pop("PALM_TUNE_DEBUG", None)
    out["MPLBACKEND"] = "Agg"
    return out


def run(
    *args: str,
    cwd: Path | str = REPO,
    timeout_s: float = 60.0,
    memory_bytes: int = MEMORY_LIMIT_BYTES,
    file_bytes: int | None = None,
    stdin: str | None = None,
    prefix: Sequence[str] = (),
) -> Run:
    """``python -m search.cli ARGS`` in ``cwd``; fails the test if it outlives ``timeout_s``
    times :data:`HANG_GUARD` (hung). ``prefix``: a command that runs it (e.g.
    :func:`unprivileged`)."""
    proc = subprocess.run(
        [*prefix, sys.executable, "-m", "search.cli", *args],
        cwd=cwd,
        env=env(),
        capture_output=True,
        text=True,
        timeout=timeout_s * HANG_GUARD,
        input=stdin,
        preexec_fn=_limits(memory_bytes, file_bytes),
    )
    return Run(proc.returncode, proc.stdout, proc.stderr)


def tune(
    study: Path | str,
    storage: str,
    *args: str,
    trials: int | None = None,
    cwd: Path | str = REPO,
    timeout_s: float = 120.0,
    file_bytes: int | None = None,
) -> Run:
    """``palm-tune tune STUDY --storage STORAGE [--trials N] --no-progress ARGS``."""
    budget = ["--trials", str(trials)] if trials is not None else []
    return run(
        "tune",
        str(study),
        "--storage",
        storage,
        *budget,
        "--no-progress",
        *args,
        cwd=cwd,
        timeout_s=timeout_s,
        file_bytes=file_bytes,
    )


def spawn(
    *args: str, cwd: Path | str = REPO, group: bool = True, python: Sequence[str] = ()
) -> subprocess.Popen[str]:
    """Start ``palm-tune ARGS`` in the background (for signals and races); stdout/stderr are
    pipes. ``group``: its own process group, as a shell job (``killpg`` = Ctrl-C).
    ``python``: interpreter options (``-X importtime`` prints a readiness line per module)."""
    return subprocess.Popen(
        [sys.executable, *python, "-m", "search.cli", *args],
        cwd=cwd,
        env=env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=group,
        preexec_fn=_limits(MEMORY_LIMIT_BYTES, None),
    )


def spawn_long_simulation(cwd: Path) -> subprocess.Popen[str]:
    """``palm-tune simulate`` of about 20 s (every mesh link a resource of its own), started
    with ``-X importtime`` (a readiness line per module: :func:`wait_for_import`), in the
    process group of the test (a signal goes to it alone)."""
    return spawn(
        "simulate",
        str(WAFER),
        "--set",
        "training.global_batch=2048",
        "--set",
        'communication.noc_granularity="link"',
        cwd=cwd,
        group=False,
        python=["-X", "importtime"],
    )


def wait_for_import(proc: subprocess.Popen[str], module: str) -> str:
    """Read the stderr of ``proc`` (started with ``python=["-X", "importtime"]``) up to the
    line that says ``module`` finished importing: a readiness line, where a test would
    otherwise sleep and hope. Returns what was read."""
    assert proc.stderr is not None
    seen = []
    for line in proc.stderr:
        seen.append(line)
        if line.startswith("import time:") and line.rsplit("|", 1)[-1].strip() == module:
            return "".join(seen)
    raise AssertionError(f"{module} was never imported: {''.join(seen)[-2000:]}")


def wait_for_cpu(proc: subprocess.Popen[str], cpu_s: float) -> None:
    """Wait until ``proc`` has used ``cpu_s`` seconds of CPU (its own progress, whatever the
    load: user + system time from /proc/PID/stat); a signal sent then lands in the work that
    follows its start-up, which takes a fraction of that."""
    ticks = os.sysconf("SC_CLK_TCK")
    for _ in range(int(20 * 600 * HANG_GUARD)):  # a hang guard, not a measure: 0.05 s a poll
        assert proc.poll() is None, proc.communicate()
        with open(f"/proc/{proc.pid}/stat", encoding="ascii") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        if (int(fields[11]) + int(fields[12])) / ticks >= cpu_s:
            return
        time.sleep(0.05)
    raise AssertionError(f"the process never used {cpu_s} s of CPU")


def unprivileged() -> list[str]:
    """A command prefix that runs a process without the privilege to ignore file modes: as
    root (CI), a user namespace in which this user is ``nobody`` (files keep their owner,
    so a mode without ``w`` refuses writing, as for any user); otherwise nothing. Skips the
    test, saying why, where user namespaces are not allowed."""
    import pytest

    if os.geteuid() != 0:
        return []
    prefix = ["unshare", "--map-user=65534", "--map-group=65534"]
    probe = subprocess.run([*prefix, "true"], capture_output=True, text=True)
    if probe.returncode != 0:
        pytest.skip(f"running as root and no user namespace to drop it: {probe.stderr.strip()}")
    return prefix


def read_only_mount(folder: Path) -> list[str]:
    """A command prefix that runs a process in a mount namespace where ``folder`` is a
    read-only file system (a read-only bind mount; writes fail with EROFS, also for root).
    Skips the test, saying why, where mount namespaces are not allowed."""
    import pytest

    script = 'mount --bind "$0" "$0" && mount -o remount,bind,ro "$0" "$0" && shift && exec "$@"'
    prefix = ["unshare", "--map-root-user", "--mount", "sh", "-c", script, str(folder), "--"]
    probe = subprocess.run([*prefix, "true"], capture_output=True, text=True)
    if probe.returncode != 0:
        pytest.skip(f"no mount namespace for a read-only file system: {probe.stderr.strip()}")
    return prefix


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


def trial_states(url: str, name: str, *, raw: bool = False) -> dict[str, int]:
    """Trials of study ``name`` by state. ``raw``: read a journal or SQLite file with Optuna's
    own storages, which neither repair nor write (what another tool would see)."""
    import optuna
    from optuna.storages import JournalStorage
    from optuna.storages.journal import JournalFileBackend

    from search.storage import open_storage, storage_file

    storage: optuna.storages.BaseStorage | str
    if raw and url.startswith("sqlite"):
        storage = url
    elif raw:
        storage = JournalStorage(JournalFileBackend(str(storage_file(url))))
    else:
        storage = open_storage(url)
    study = optuna.load_study(study_name=name, storage=storage)
    out: dict[str, int] = {}
    for t in study.get_trials(deepcopy=False):
        out[t.state.name] = out.get(t.state.name, 0) + 1
    return out


@contextmanager
def postgres_database(prefix: str) -> Iterator[str]:
    """A fresh database on the local PostgreSQL server (``postgresql://postgres@127.0.0.1``),
    dropped afterwards; skips the test, with the reason, when no server answers."""
    import pytest

    psycopg2 = pytest.importorskip("psycopg2")
    try:
        admin = psycopg2.connect(
            host="127.0.0.1", port=5432, user="postgres", dbname="postgres", connect_timeout=3
        )
    except Exception as exc:  # noqa: BLE001 - any failure to connect means: no server here
        pytest.skip(f"no PostgreSQL server answers on {PG}: {' '.join(str(exc).split())}")
    admin.autocommit = True
    name = f"{prefix}_{uuid.uuid4().hex[:12]}"
    with admin.cursor() as cur:
        cur.execute(f"CREATE DATABASE {name}")
    try:
        yield f"postgresql://postgres@{PG}/{name}"
    finally:
        with admin.cursor() as cur:
            cur.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
        admin.close()
