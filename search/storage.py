"""Where studies live (SPEC sec. 6).

* ``sqlite:///palm-tune.db`` (default): one file in the working directory; works with
  ``optuna-dashboard sqlite:///palm-tune.db``.
* ``journal:///path/to/study.journal`` (or any path ending in ``.journal``): Optuna's
  JournalStorage on a file, for several worker processes on one machine.
* ``postgresql://user@host:port/db``: many machines sharing a study, the documented way to
  outgrow one machine. The URL is handed to Optuna as it is, so ``optuna.load_study`` and
  ``optuna-dashboard`` open the same string (the ``postgres`` extra installs the drivers
  SQLAlchemy picks for a plain ``postgresql://``: psycopg 3 from SQLAlchemy 2.1 on, psycopg2
  before).
* ``grpc://host:port``: Optuna's gRPC storage proxy (``palm-tune storage-proxy``, or
  ``optuna.storages.run_grpc_proxy_server``) in front of any of the above, for many workers
  that should not each hold database connections (the ``grpc`` extra installs grpcio).
* an Optuna storage object (``JournalStorage``, ``RDBStorage``, ``GrpcStorageProxy``...),
  from the Python API.

A worker killed mid-trial leaves its trial RUNNING. RDB storages (SQLite, PostgreSQL) get
Optuna's heartbeat, which fails such trials once their heartbeat is stale. JournalStorage has no
heartbeat in Optuna 5, so every trial records its worker (host and process id) and
:func:`sweep_stale_trials` fails the RUNNING trials whose worker process on this host is gone;
``palm-tune tune`` sweeps before it starts.
"""

from __future__ import annotations

import json
import os
import socket
import sys
import time
import warnings
from pathlib import Path
from typing import Any

import optuna
from optuna.storages import BaseStorage, JournalStorage, RDBStorage
from optuna.storages.journal import JournalFileBackend, JournalFileSymlinkLock
from optuna.trial import TrialState

from palm.errors import ConfigError
from search.lifecycle import signals_deferred

__all__ = [
    "DEFAULT_STORAGE",
    "open_storage",
    "printed_url",
    "is_server",
    "object_url",
    "check_workers",
    "GRPC_READY_S",
    "sweep_stale_trials",
    "worker_id",
    "HEARTBEAT_INTERVAL_S",
    "GRACE_PERIOD_S",
    "artifact_dir",
    "storage_file",
    "repair_journal",
    "grpc_address",
    "JOURNAL_SUFFIXES",
    "WORKER_ATTR",
]

DEFAULT_STORAGE = "sqlite:///palm-tune.db"
HEARTBEAT_INTERVAL_S = 5
GRACE_PERIOD_S = 15
#: a plain path with one of these endings is a journal file (what optuna-dashboard accepts)
JOURNAL_SUFFIXES = (".journal", ".log")
_CREATE_ATTEMPTS = 8
#: how long a worker waits for a gRPC storage proxy to answer before it gives up
GRPC_READY_S = 10.0
#: the extra that installs each storage's driver, for the error when it is missing
_EXTRA = {"postgresql": "postgres", "mysql": "a MySQL driver", "grpc": "grpc"}
WORKER_ATTR = "palm_tune_worker"


def worker_id(pid: int | None = None) -> str:
    """``host:pid`` of this process (or of process ``pid`` of this host): what every trial
    records as its worker (:data:`WORKER_ATTR`)."""
    return f"{socket.gethostname()}:{os.getpid() if pid is None else pid}"


class _SignalSafeLock(JournalFileSymlinkLock):
    """Optuna's journal lock whose acquire and release a stop signal never cuts in half
    (see :func:`search.lifecycle.signals_deferred`)."""

    def acquire(self) -> bool:
        with signals_deferred():
            return super().acquire()

    def release(self) -> None:
        with signals_deferred():
            super().release()


def _journal_path(url: str) -> Path | None:
    # like SQLAlchemy's sqlite URLs: journal:///relative/path, journal:////absolute/path
    if url.startswith("journal:///"):
        return Path(url[len("journal:///") :])
    if url.endswith(JOURNAL_SUFFIXES) and "://" not in url:
        return Path(url)  # a plain path, as optuna-dashboard takes it
    return None


def storage_file(url: str | None) -> Path | None:
    """The file a journal or SQLite storage lives in (None for a database server)."""
    url = url or DEFAULT_STORAGE
    journal = _journal_path(url)
    if journal is not None:
        return journal
    if url.startswith("sqlite:///"):
        return Path(url[len("sqlite:///") :])
    return None


def printed_url(url: str | None) -> str:
    """``url`` as palm-tune prints it: the form Optuna and optuna-dashboard open as is (a
    ``journal:///FILE`` URL, palm-tune's own spelling, prints as its plain path FILE)."""
    url = url or DEFAULT_STORAGE
    journal = _journal_path(url)
    return str(journal) if journal is not None else url


def _unwrapped(storage: BaseStorage) -> BaseStorage:
    """The storage inside Optuna's cache (``_CachedStorage`` wraps an ``RDBStorage``)."""
    from optuna.storages import _CachedStorage

    return storage._backend if isinstance(storage, _CachedStorage) else storage  # noqa: SLF001


def object_url(storage: BaseStorage) -> str | None:
    """A palm-tune URL for the file an Optuna storage object lives in (``journal:///FILE``
    for a ``JournalFileBackend``, the ``sqlite:///`` URL of a SQLite database), so that its
    artifacts go next to that file; None for a server or a backend without a file."""
    inner = _unwrapped(storage)
    if isinstance(inner, RDBStorage):
        url = str(inner.engine.url)
        return url if url.startswith("sqlite:///") else None
    backend = getattr(inner, "_backend", None)
    if isinstance(inner, JournalStorage) and isinstance(backend, JournalFileBackend):
        return f"journal:///{backend._file_path}"  # noqa: SLF001 - no public getter
    return None


def is_server(url: str | None) -> bool:
    """True for a storage other machines reach (a database server or a gRPC proxy), whose
    artifacts need a store every machine reaches too."""
    return storage_file(url) is None


def check_workers(url: str | BaseStorage | None, workers: int) -> None:
    """Refuse a storage that ``workers`` processes cannot share, before any work is done."""
    if isinstance(url, BaseStorage):
        inner = _unwrapped(url)
        url = str(inner.engine.url) if isinstance(inner, RDBStorage) else "an Optuna storage"
    url = url or DEFAULT_STORAGE
    if workers > 1 and url.startswith("sqlite"):
        raise ConfigError(
            "--storage",
            url,
            "a journal file (e.g. palm-tune.journal), postgresql://... or grpc://HOST:PORT for "
            f"--workers {workers} (SQLite serialises writers)",
        )


def open_storage(url: str | BaseStorage | None) -> BaseStorage:
    """The Optuna storage behind ``url`` (see module docstring); errors name the URL. An
    Optuna storage object is returned as it is."""
    if isinstance(url, BaseStorage):
        return url
    url = url or DEFAULT_STORAGE
    journal = _journal_path(url)
    try:
        if journal is not None:
            journal.parent.mkdir(parents=True, exist_ok=True)
            lock = _SignalSafeLock(str(journal), grace_period=GRACE_PERIOD_S)
            note = repair_journal(journal, lock)
            if note:
                sys.stderr.write(f"palm-tune: {note}\n")
            return JournalStorage(JournalFileBackend(str(journal), lock_obj=lock))
        if url.startswith("grpc://"):
            return _grpc_storage(url)
        if url.startswith(("sqlite:", "postgresql", "mysql")):
            return _rdb_storage(url)
    except ConfigError:
        raise
    except ImportError as exc:
        scheme = url.split(":", 1)[0].split("+", 1)[0]
        extra = _EXTRA.get(scheme)
        hint = f"; pip install 'palm-tune[{extra}]'" if extra and " " not in extra else ""
        raise ConfigError(
            "--storage", url, f"a storage whose driver is installed ({exc}{hint})"
        ) from None
    except Exception as exc:  # noqa: BLE001 - a database that does not answer, a bad path...
        message = " ".join(str(exc).split())[:200]
        raise ConfigError("--storage", url, f"a reachable storage ({message})") from None
    raise ConfigError(
        "--storage", url, "sqlite:///FILE, FILE.journal, postgresql://... or grpc://HOST:PORT"
    )


def grpc_address(url: str) -> tuple[str, int]:
    """``grpc://host:port`` -> (host, port); the field, value and form on a bad one."""
    rest = url[len("grpc://") :].rstrip("/")
    host, _, port = rest.rpartition(":")
    if not host or not port.isdigit() or not 1 <= int(port) <= 65535:
        raise ConfigError("--storage", url, "grpc://HOST:PORT with a TCP port in 1..65535")
    return host.strip("[]"), int(port)


def _grpc_storage(url: str) -> BaseStorage:
    """Optuna's gRPC storage proxy client, once the proxy answers (within
    :data:`GRPC_READY_S`)."""
    from optuna.exceptions import ExperimentalWarning
    from optuna.storages import GrpcStorageProxy

    host, port = grpc_address(url)
    with warnings.catch_warnings():  # experimental since Optuna 4.2; said once in the docs
        warnings.simplefilter("ignore", ExperimentalWarning)
        proxy = GrpcStorageProxy(host=host, port=port)
    try:
        proxy.wait_server_ready(timeout=GRPC_READY_S)
    except Exception:
        proxy.close()
        raise ConfigError(
            "--storage",
            url,
            f"a gRPC storage proxy that answers within {GRPC_READY_S:.0f} s "
            "(start one with palm-tune storage-proxy)",
        ) from None
    return proxy


def _rdb_storage(url: str) -> RDBStorage:
    """RDBStorage, retried when another process creates the same database's tables at the
    same moment (alembic's UNIQUE / duplicate-key errors): the second one then finds them."""
    for attempt in range(_CREATE_ATTEMPTS):
        try:
            storage = RDBStorage(
                url,
                heartbeat_interval=HEARTBEAT_INTERVAL_S,
                grace_period=GRACE_PERIOD_S,
                engine_kwargs={"pool_pre_ping": True} if not url.startswith("sqlite") else None,
            )
            if url.startswith("sqlite"):
                _fewer_syncs(storage)
            return storage
        except Exception as exc:  # noqa: BLE001 - sqlalchemy's errors, without importing it
            racing = any(w in str(exc) for w in ("UNIQUE", "duplicate key", "already exists"))
            if not racing or attempt == _CREATE_ATTEMPTS - 1:
                raise
            time.sleep(0.05 * (attempt + 1))
    raise AssertionError("unreachable")  # pragma: no cover


def _fewer_syncs(storage: RDBStorage) -> None:
    """SQLite in write-ahead-log mode with ``synchronous = NORMAL`` (SQLite's documented
    setting for WAL, https://www.sqlite.org/pragma.html#pragma_synchronous): a commit appends
    to the log without waiting for the disk, which a trial's two dozen small commits otherwise
    do (measured by benchmarks/tuner_overhead.py). A process that crashes or is killed loses
    nothing committed; a power loss may lose the last commits but never corrupts the file.
    The log is copied back into the database every 16 pages (64 KiB; SQLite's default is
    1000 pages, 4 MiB), so that the files a study writes stay about the size of the study:
    on a nearly full disk the log never needs much more room than the study has."""
    from sqlalchemy import event

    with storage.engine.connect() as conn:
        conn.exec_driver_sql("PRAGMA journal_mode=WAL")

    @event.listens_for(storage.engine, "connect")
    def _on_connect(dbapi_connection: Any, _record: Any) -> None:
        dbapi_connection.execute("PRAGMA synchronous=NORMAL")
        dbapi_connection.execute("PRAGMA wal_autocheckpoint=16")

    storage.engine.dispose()  # pooled connections were opened before the listener


def repair_journal(path: Path, lock: JournalFileSymlinkLock | None = None) -> str | None:
    """Make a journal file safe to append to after a crash or a full disk.

    Optuna appends one JSON record per line and ignores a last line without its newline; but
    the next append would continue that torn line and make the journal unreadable from there
    on. Under the journal's lock (a writer may be mid-append): a stale lock older than
    :data:`GRACE_PERIOD_S` is removed, a torn last record is cut off, and a line that an
    earlier version poisoned (torn record + whole record) keeps its whole record. Returns one
    line saying what was done, or None."""
    lock_file = Path(str(path) + ".lock")
    notes = []
    try:
        age = time.time() - os.lstat(lock_file).st_mtime
    except FileNotFoundError:
        age = None
    if age is not None and age > GRACE_PERIOD_S:
        lock_file.unlink(missing_ok=True)
        notes.append(f"removed a stale lock {lock_file.name} ({age:.0f} s old)")
    if not path.exists() or path.stat().st_size == 0:
        return f"journal {path}: " + "; ".join(notes) if notes else None
    lock = lock or _SignalSafeLock(str(path), grace_period=GRACE_PERIOD_S)
    lock.acquire()
    try:
        notes += _repair_records(path)
    finally:
        lock.release()
    return f"journal {path}: " + "; ".join(notes) if notes else None


def _repair_records(path: Path) -> list[str]:
    data = path.read_bytes()
    notes = []
    keep = data.rfind(b"\n") + 1
    if keep < len(data):
        notes.append(
            f"cut a torn last record ({len(data) - keep} bytes, from a crash or a full disk)"
        )
    lines = data[:keep].splitlines(keepends=True)
    fixed = 0
    for i, line in enumerate(lines):
        try:
            json.loads(line)
            continue
        except ValueError:
            pass
        start = line.rfind(b'{"op_code"')
        try:
            json.loads(line[start:]) if start > 0 else json.loads(b"x")
        except ValueError:
            raise ConfigError(
                "--storage", str(path), f"a readable journal (line {i + 1} is corrupt)"
            ) from None
        lines[i] = line[start:]
        fixed += 1
    if fixed:
        notes.append(f"dropped {fixed} torn record(s) inside the file")
    if notes:
        tmp = path.with_name(path.name + ".repair")
        tmp.write_bytes(b"".join(lines))
        os.replace(tmp, path)
    return notes


def artifact_dir(url: str | None) -> Path:
    """The artifact store that goes with a storage: a folder next to the file, or in the
    working directory for a database server."""
    url = url or DEFAULT_STORAGE
    journal = _journal_path(url)
    if journal is not None:
        return journal.with_name(journal.name + ".artifacts")
    if url.startswith("sqlite:///"):
        db = Path(url[len("sqlite:///") :])
        return db.with_name(db.name + ".artifacts")
    return Path("palm-tune-artifacts")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def sweep_stale_trials(study: optuna.Study) -> list[int]:
    """Fail the RUNNING trials whose worker process on this host no longer exists; returns
    their numbers. Trials of other hosts are left to the storage's heartbeat."""
    host = socket.gethostname()
    failed = []
    for trial in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
        worker = trial.user_attrs.get(WORKER_ATTR)
        if not isinstance(worker, str) or ":" not in worker:
            continue
        worker_host, pid = worker.rsplit(":", 1)
        if (
            worker_host == host
            and pid.isdigit()
            and int(pid) != os.getpid()
            and not _alive(int(pid))
        ):
            study._storage.set_trial_system_attr(  # noqa: SLF001 - the public API has no setter
                trial._trial_id,
                "fail_reason",  # noqa: SLF001
                f"stale trial: worker {worker} is gone",
            )
            study._storage.set_trial_state_values(  # noqa: SLF001
                trial._trial_id, TrialState.FAIL
            )  # noqa: SLF001
            failed.append(trial.number)
    return failed
