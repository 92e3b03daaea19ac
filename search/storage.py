"""Where studies live (SPEC sec. 6).

* ``sqlite:///palm-tune.db`` (default): one file in the working directory; works with
  ``optuna-dashboard sqlite:///palm-tune.db``.
* ``journal:///path/to/study.journal`` (or any path ending in ``.journal``): Optuna's
  JournalStorage on a file, for several worker processes on one machine.
* ``postgresql://user@host:port/db``: many machines sharing a study, the documented way to
  outgrow one machine.

A worker killed mid-trial leaves its trial RUNNING. RDB storages (SQLite, PostgreSQL) get
Optuna's heartbeat, which fails such trials once their heartbeat is stale. JournalStorage has no
heartbeat in Optuna 5, so every trial records its worker (host and process id) and
:func:`sweep_stale_trials` fails the RUNNING trials whose worker process on this host is gone;
``palm-tune tune`` sweeps before it starts.
"""

from __future__ import annotations

import importlib.util
import os
import socket
from pathlib import Path

import optuna
from optuna.storages import BaseStorage, JournalStorage, RDBStorage
from optuna.storages.journal import JournalFileBackend
from optuna.trial import TrialState

from palm.errors import ConfigError

__all__ = [
    "DEFAULT_STORAGE",
    "open_storage",
    "sweep_stale_trials",
    "worker_id",
    "HEARTBEAT_INTERVAL_S",
    "GRACE_PERIOD_S",
    "artifact_dir",
]

DEFAULT_STORAGE = "sqlite:///palm-tune.db"
HEARTBEAT_INTERVAL_S = 5
GRACE_PERIOD_S = 15
WORKER_ATTR = "palm_tune_worker"


def worker_id() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


def _journal_path(url: str) -> Path | None:
    # like SQLAlchemy's sqlite URLs: journal:///relative/path, journal:////absolute/path
    if url.startswith("journal:///"):
        return Path(url[len("journal:///") :])
    if url.endswith(".journal") and "://" not in url:
        return Path(url)
    return None


def open_storage(url: str | None) -> BaseStorage:
    """The Optuna storage behind ``url`` (see module docstring); errors name the URL."""
    url = url or DEFAULT_STORAGE
    journal = _journal_path(url)
    try:
        if journal is not None:
            journal.parent.mkdir(parents=True, exist_ok=True)
            return JournalStorage(JournalFileBackend(str(journal)))
        if (
            url.startswith("postgresql://")
            and importlib.util.find_spec("psycopg") is None
            and importlib.util.find_spec("psycopg2") is not None
        ):
            # SQLAlchemy 2.1 defaults to psycopg 3; the postgres extra installs psycopg2
            url = "postgresql+psycopg2://" + url[len("postgresql://") :]
        if url.startswith(("sqlite:", "postgresql", "mysql")):
            return RDBStorage(
                url,
                heartbeat_interval=HEARTBEAT_INTERVAL_S,
                grace_period=GRACE_PERIOD_S,
                engine_kwargs={"pool_pre_ping": True} if not url.startswith("sqlite") else None,
            )
    except ImportError as exc:
        raise ConfigError(
            "--storage", url, f"a storage whose driver is installed ({exc})"
        ) from None
    except Exception as exc:  # noqa: BLE001 - a database that does not answer, a bad path...
        message = " ".join(str(exc).split())[:200]
        raise ConfigError("--storage", url, f"a reachable storage ({message})") from None
    raise ConfigError("--storage", url, "sqlite:///FILE, journal:///FILE or postgresql://...")


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
