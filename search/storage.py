"""Where studies live (docs/tuning.md, "Storage, workers, resuming").

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

import os
import socket
import sys
import time
import warnings
from pathlib import Path
from typing import Any
from urllib.parse import quote

import optuna
from optuna.storages import BaseStorage, JournalStorage, RDBStorage
from optuna.storages.journal import JournalFileBackend
from optuna.trial import TrialState

from palm.errors import ConfigError
from search.failures import mask_credentials
from search.journal import JournalLock, ReadOnlyJournal, pid_alive, whole_record

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
    "foreign_database",
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


def open_storage(url: str | BaseStorage | None, *, read_only: bool = False) -> BaseStorage:
    """The Optuna storage behind ``url`` (see module docstring); errors name the URL, with
    any password masked. An Optuna storage object is returned as it is. ``read_only``
    (``best``, ``report``): the store is opened so that nothing can be written to it, a journal
    without its lock (:class:`ReadOnlyJournal`) and SQLite in read-only mode
    (:func:`_read_only_rdb`), so a store the user can read but not write (a read-only file,
    folder or file system) can be read. A database of another program (not Optuna's tables)
    is refused before anything is written to it."""
    if isinstance(url, BaseStorage):
        return url
    url = given = url or DEFAULT_STORAGE
    journal = _journal_path(url)
    try:
        if journal is not None:
            # absolute: Optuna's lock links to the path as given, which dangles from inside
            # the journal's folder when the path is relative (search/journal.py)
            journal = journal.absolute()
            if read_only:
                return JournalStorage(ReadOnlyJournal(journal))
            journal.parent.mkdir(parents=True, exist_ok=True)
            lock = JournalLock(journal, grace_period=GRACE_PERIOD_S)
            note = repair_journal(journal, lock)
            if note:
                sys.stderr.write(f"palm-tune: {note}\n")
            return JournalStorage(JournalFileBackend(str(journal), lock_obj=lock))
        if url.startswith("grpc://"):
            return _grpc_storage(url)
        if url.startswith(("sqlite:", "postgresql", "mysql")):
            foreign = foreign_database(url)
            if foreign is not None:
                raise ConfigError(
                    "--storage",
                    mask_credentials(given),
                    f"an Optuna study database ({foreign}; it was left unchanged)",
                )
            return _read_only_rdb(url) if read_only else _rdb_storage(url)
    except ConfigError:
        raise
    except ImportError as exc:
        scheme = url.split(":", 1)[0].split("+", 1)[0]
        extra = _EXTRA.get(scheme)
        hint = f"; pip install 'palm-tune[{extra}]'" if extra and " " not in extra else ""
        raise ConfigError(
            "--storage",
            mask_credentials(given),
            f"a storage whose driver is installed ({exc}{hint})",
        ) from None
    except Exception as exc:  # noqa: BLE001 - a database that does not answer, a bad path...
        message = mask_credentials(" ".join(str(exc).split())[:200])
        raise ConfigError(
            "--storage", mask_credentials(given), f"a reachable storage ({message})"
        ) from None
    raise ConfigError(
        "--storage",
        mask_credentials(given),
        "sqlite:///FILE, FILE.journal, postgresql://... or grpc://HOST:PORT",
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


def _sqlite_uri(url: str, flags: str) -> str:
    """A SQLAlchemy URL opening the SQLite file of ``url`` as a URI with ``flags``
    (https://www.sqlite.org/uri.html), by its absolute path."""
    path = Path(url[len("sqlite:///") :]).absolute()
    return f"sqlite:///file:{quote(str(path))}?{flags}&uri=true"


def _read_only_rdb(url: str) -> RDBStorage:
    """An RDB storage that cannot write: no table creation, SQLite opened ``mode=ro``. A
    database in write-ahead-log mode needs its ``-shm`` file; where it cannot be made (a
    read-only folder or file system), the file is opened ``immutable=1``, which SQLite allows
    for a file nobody writes (https://www.sqlite.org/wal.html, "Read-Only Databases")."""
    if not url.startswith("sqlite:///"):
        return RDBStorage(url, skip_table_creation=True)
    try:
        return RDBStorage(_sqlite_uri(url, "mode=ro"), skip_table_creation=True)
    except Exception as exc:  # noqa: BLE001 - sqlalchemy's OperationalError, wrapped by Optuna
        if not _cannot_open_read_only(exc):
            raise
    return RDBStorage(_sqlite_uri(url, "immutable=1"), skip_table_creation=True)


def _cannot_open_read_only(exc: BaseException) -> bool:
    """Whether SQLite refused a read-only open of a write-ahead-log database for want of its
    ``-shm`` file (SQLite says "unable to open database file" or "attempt to write a readonly
    database"), anywhere in the exception's chain."""
    node: BaseException | None = exc
    seen = 0
    while node is not None and seen < 20:
        if any(w in str(node) for w in ("unable to open database", "readonly database")):
            return True
        node, seen = node.__cause__ or node.__context__, seen + 1
    return False


def foreign_database(url: str) -> str | None:
    """Why the database at ``url`` is not an Optuna study database, or None when it is one
    or is empty (a new store). Only reads: SQLite is opened ``mode=ro``. Optuna's tables, in
    a store being created by another process at this moment, may be only some of them; each
    present must have Optuna's key columns, and at least one must be there."""
    import sqlalchemy
    from optuna.storages._rdb.models import BaseModel

    probe = url
    if url.startswith("sqlite:///"):
        path = Path(url[len("sqlite:///") :])
        if not path.is_file() or path.stat().st_size == 0:
            return None
        probe = _sqlite_uri(url, "mode=ro")
    engine = sqlalchemy.create_engine(probe)
    try:
        try:
            inspector = sqlalchemy.inspect(engine)
            tables = set(inspector.get_table_names())
        except sqlalchemy.exc.OperationalError as exc:
            if _cannot_open_read_only(exc):  # a WAL store in a read-only folder: opened later
                return None
            raise
        except sqlalchemy.exc.DatabaseError as exc:  # "file is not a database"
            return f"this file is not a SQLite database: {' '.join(str(exc.orig).split())}"
        optuna_tables = BaseModel.metadata.tables
        known = tables & (set(optuna_tables) | {"alembic_version"})
        if tables and not known:
            shown = ", ".join(sorted(tables)[:6])
            return f"its tables ({shown}) are none of Optuna's"
        for name in sorted(tables & set(optuna_tables)):
            columns = {c["name"] for c in inspector.get_columns(name)}
            for key in optuna_tables[name].primary_key.columns:
                if key.name not in columns:
                    return f"its table {name} has no column {key.name}: another program's"
        return None
    finally:
        engine.dispose()


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


def repair_journal(path: Path, lock: JournalLock | None = None) -> str | None:
    """Make a journal file safe to append to after a crash or a full disk.

    Optuna appends one JSON record per line and ignores a last line without its newline; but
    the next append would continue that torn line and make the journal unreadable from there
    on. Under the journal's lock (a writer may be mid-append): a stale lock (its holder gone,
    or older than :data:`GRACE_PERIOD_S`) is removed, a torn last record is cut off, and a
    line that an earlier version poisoned (torn record + whole record) keeps its whole
    record. Returns one line saying what was done, or None."""
    lock = lock or JournalLock(path, grace_period=GRACE_PERIOD_S)
    notes = []
    why = lock.stale()
    if why is not None and lock.take_over():
        notes.append(f"removed a stale lock {path.name}.lock ({why})")
    if not path.exists() or path.stat().st_size == 0:
        return f"journal {path}: " + "; ".join(notes) if notes else None
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
        record = whole_record(line)
        if record is None:
            raise ConfigError(
                "--storage", str(path), f"a readable journal (line {i + 1} is corrupt)"
            )
        if record is not line:
            lines[i] = record
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
            and not pid_alive(int(pid))
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
