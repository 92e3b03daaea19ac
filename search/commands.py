"""The tuner's commands: ``tune``, ``best``, ``report``, ``dashboard`` (docs/tuning.md)."""

from __future__ import annotations

import argparse
import importlib.util
import json
import math
import os
import socket
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any, TextIO

import optuna
from optuna.trial import TrialState

from palm.errors import ConfigError
from search.api import best_config, best_trial, counts, create_study, optimize, pricing
from search.artifacts import ArtifactStore, Stores, artifact_location, artifact_note
from search.failures import mask_credentials
from search.metrics import display_names, is_overflow
from search.objective import RESULT_FIELDS
from search.once import is_lock
from search.plots import write_study_plots
from search.progress import RunCounts, study_counts
from search.screen import SCREEN_ATTR
from search.storage import (
    DEFAULT_STORAGE,
    check_workers,
    open_storage,
    printed_url,
    storage_file,
)
from search.study_file import SAMPLERS, check_seed

__all__ = ["add_commands"]

#: the storage of a multi-worker run: a plain journal path, as optuna-dashboard takes it
_JOURNAL_FOR_WORKERS = "palm-tune.journal"
#: worker processes on one machine (each holds a simulator and Optuna, about 200 MB):
#: four per CPU
MAX_WORKERS = 4 * (os.cpu_count() or 1)


def add_commands(sub: argparse._SubParsersAction[Any]) -> None:
    """The tuner's commands: tune, best, report, dashboard, storage-proxy."""
    _add_tune(sub)
    _add_readers(sub)
    _add_servers(sub)


def _add_tune(sub: argparse._SubParsersAction[Any]) -> None:
    t = sub.add_parser(
        "tune",
        help="search the fastest configuration described by a study file (Optuna)",
        description="Run a study: each trial is a configuration from the study's space, checked "
        "for memory and simulated; a configuration that overflows memory is not simulated and "
        "is told to the sampler as a violated constraint. Each new best trial gets its trace, "
        "Gantt chart and heat map attached. Running it again continues the same study.",
    )
    t.add_argument("study", metavar="STUDY.toml", help="study file (see studies/)")
    t.add_argument("--trials", type=int, help="trials to add (default: the study file's budget)")
    t.add_argument("--timeout", type=float, metavar="S", help="stop starting trials after S s")
    _storage_args(t, study_file=True)
    t.add_argument("--sampler", choices=SAMPLERS, help="override the study file's sampler")
    t.add_argument("--seed", type=int, help="override the study file's seed")
    t.add_argument(
        "--workers",
        type=int,
        default=1,
        help="worker processes on this machine (default 1; more than one needs a "
        f"journal, PostgreSQL or gRPC proxy storage, {_JOURNAL_FOR_WORKERS} by default)",
    )
    _artifacts_arg(t)
    t.add_argument(
        "--no-progress",
        action="store_true",
        help="no progress bar (it counts every worker's trials, with rate and time left)",
    )
    t.set_defaults(handler=_cmd_tune)


def _add_readers(sub: argparse._SubParsersAction[Any]) -> None:
    """``best`` and ``report``: read a study in a storage."""
    b = sub.add_parser(
        "best",
        help="print the best trial's parameters, values, configuration",
        description="Print the best trial of a study in a storage (the one with the most "
        "throughput on the Pareto front of a multi-objective study). It takes no study file: "
        "--storage and --study-name name the study.",
    )
    _storage_args(b)
    b.add_argument(
        "--json",
        action="store_true",
        help="print as JSON (keys params, values, objectives (each value by its name and "
        "unit), config and the result fields)",
    )
    b.set_defaults(handler=_cmd_best)

    r = sub.add_parser(
        "report",
        help="write a study's trials as CSV and its plots (history, importance, Pareto, "
        "best trial's Gantt chart and heat map)",
        description="Write trials.csv (one row per trial) and PNG plots of a study to --out: "
        "history and importance per objective, the Pareto front of several objectives (axes "
        "named with their units, memory in GiB), and the best trial's Gantt chart and heat map.",
    )
    _storage_args(r)
    r.add_argument(
        "--out",
        metavar="DIR",
        default="palm-report",
        help="output directory: trials.csv (every trial) and the plots",
    )
    r.set_defaults(handler=_cmd_report)


def _add_servers(sub: argparse._SubParsersAction[Any]) -> None:
    """``dashboard`` and ``storage-proxy``: serve a storage."""
    d = sub.add_parser(
        "dashboard",
        help="start optuna-dashboard on a storage (extra: dashboard)",
        description="Serve optuna-dashboard for the storage, with the artifact store that "
        "holds the best trials' traces and plots (each on its trial's page). The storage URL "
        "is the one tune used (optuna-dashboard URL takes the same).",
    )
    d.add_argument(
        "--storage",
        metavar="URL",
        type=_nonempty,
        default=DEFAULT_STORAGE,
        help=f"storage URL (default: {DEFAULT_STORAGE})",
    )
    _artifacts_arg(d)
    d.add_argument("--host", default="127.0.0.1", help="address to listen on (default: loopback)")
    d.add_argument("--port", type=int, default=8080, help="port (default 8080)")
    d.set_defaults(handler=_cmd_dashboard)

    g = sub.add_parser(
        "storage-proxy",
        help="serve a storage to workers through Optuna's gRPC storage proxy (extra: grpc)",
        description="Run Optuna's gRPC storage proxy (optuna.storages.run_grpc_proxy_server) "
        "in front of a storage, so that many workers share one database connection pool: "
        "start the workers with --storage grpc://HOST:PORT. Ctrl-C stops it.",
    )
    g.add_argument(
        "--storage",
        metavar="URL",
        type=_nonempty,
        default=DEFAULT_STORAGE,
        help=f"the storage it serves (default: {DEFAULT_STORAGE}; postgresql://... on a cluster)",
    )
    g.add_argument("--host", default="127.0.0.1", help="address to listen on (default: loopback)")
    g.add_argument("--port", type=int, default=13000, help="port (default 13000, Optuna's)")
    g.set_defaults(handler=_cmd_storage_proxy)


def _artifacts_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--artifacts",
        metavar="DIR|s3://BUCKET",
        type=_nonempty,
        default=None,
        help="artifact store of the best trials' traces and plots: a directory every worker "
        "and the dashboard reach (a shared file system on a cluster) or s3://BUCKET (extra: "
        "s3); recorded in the study for the other workers and the dashboard (default: the "
        "study's record, else next to a storage file, else ./palm-tune-artifacts)",
    )


def _nonempty(text: str) -> str:
    """An option's value that must not be empty (an empty storage or name would silently mean
    the default)."""
    if not text.strip():
        raise argparse.ArgumentTypeError("a non-empty value is required")
    return text


def _storage_args(p: argparse.ArgumentParser, *, study_file: bool = False) -> None:
    p.add_argument(
        "--storage",
        metavar="URL",
        type=_nonempty,
        default=None,
        help=f"sqlite:///FILE (default {DEFAULT_STORAGE}), a journal file FILE.journal or "
        "FILE.log (several workers), postgresql://... or grpc://HOST:PORT (palm-tune "
        "storage-proxy); optuna-dashboard takes each as is",
    )
    p.add_argument(
        "--study-name",
        metavar="NAME",
        type=_nonempty,
        help="study in the storage (default: "
        + ("the study file's name)" if study_file else "the only study there)"),
    )


def _describe(config_tables: dict[str, Any]) -> str:
    par, tr = config_tables["parallelism"], config_tables["training"]
    plc = config_tables.get("placement", {})
    parts = [
        f"TP={par['tp']} PP={par['pp']} DP={par['dp']}"
        + (f" EP={par['ep']} ETP={par['etp'] or par['tp']}" if par.get("ep", 1) > 1 else ""),
        f"micro-batch {tr['micro_batch']}",
        f"recompute {tr['recompute']}",
        f"ZeRO {tr['zero']}",
    ]
    if par["pp"] > 1:
        sched = par["schedule"] + (f" x{par['interleave']}" if par["interleave"] > 1 else "")
        parts.append(f"schedule {sched}")
    if config_tables["hardware"].get("topology") == "mesh2d":
        parts.append(f"layout {plc.get('layout')}, TP {plc.get('tp_group')}")
    return ", ".join(parts)


def _run_trials(study: optuna.Study) -> int:
    """Trials that ran or run (not the screened ones still waiting in the queue)."""
    waiting = optuna.trial.TrialState.WAITING
    return sum(1 for t in study.get_trials(deepcopy=False) if t.state != waiting)


def _configs_line(study: optuna.Study, screened_here: bool | None = None) -> str:
    """How many distinct configurations the engine ran, and what the other trials cost."""
    k = study_counts(study)
    screened = study.user_attrs.get(SCREEN_ATTR)
    line = (
        f"configs    {k.simulated} distinct configurations simulated; not simulated: "
        f"{k.overflow} over memory, {k.invalid} invalid choices, "
        f"{k.duplicate} duplicate proposals\n"
    )
    if screened:
        line += (
            f"screening  {screened['drawn']} configurations ranked by the analytical engine "
            f"in {screened['wall_s']:.1f} s, the best {len(screened['enqueued'])} simulated first"
            + {True: " (by this run)", False: " (by another run)", None: ""}[screened_here]
            + "\n"
        )
    priced = pricing(study)
    if priced:
        line += (
            f"pricing    {priced['memory_checks']:.0f} configurations memory-checked "
            f"({priced['overflows']:.0f} did not fit), {priced['analytical_runs']:.0f} priced "
            f"by the analytical engine, {priced['pricing_s']:.1f} s (guided sampler)\n"
        )
    return line


def _run_line(run: RunCounts | None) -> str:
    """The closing line of the progress bar, in words: what this run's trials were."""
    if run is None:
        return ""
    return f"this run   {run.done} trials: {run.kinds()}\n"


def _check_tune_options(args: argparse.Namespace) -> None:
    """Every option checked before anything is created or opened."""
    if args.trials is not None and args.trials < 1:
        raise ConfigError("--trials", args.trials, "an integer >= 1")
    if args.timeout is not None and not (math.isfinite(args.timeout) and args.timeout > 0):
        raise ConfigError("--timeout", args.timeout, "a finite number of seconds > 0")
    if not 1 <= args.workers <= MAX_WORKERS:
        raise ConfigError("--workers", args.workers, f"an integer in 1..{MAX_WORKERS}")
    if args.seed is not None:
        check_seed(args.seed, "--seed")


def _cmd_tune(args: argparse.Namespace, out: TextIO | None = None) -> int:
    out = out or sys.stdout
    storage = args.storage
    if storage is None:
        storage = _JOURNAL_FOR_WORKERS if args.workers > 1 else DEFAULT_STORAGE
    _check_tune_options(args)
    check_workers(storage, args.workers)  # before the study is created or screened
    optuna.logging.set_verbosity(optuna.logging.WARNING)  # the bar and the summary say it
    study = create_study(
        args.study,
        storage=storage,
        study_name=args.study_name,
        sampler=args.sampler,
        seed=args.seed,
        artifacts=args.artifacts,
    )
    optimize(
        study,
        n_trials=args.trials,
        timeout=args.timeout,
        workers=args.workers,
        progress=not args.no_progress,
    )
    shown = mask_credentials(printed_url(storage))  # never the storage's password
    c = counts(study)
    out.write(f"\nstudy      {study.study_name} in {shown}: {_run_trials(study)} trials\n")
    out.write(_run_line(study.last_run))
    out.write(f"trials     {c['complete']} completed, {c['pruned']} pruned, {c['failed']} failed\n")
    out.write(_configs_line(study, study.screened_here))
    try:
        best = best_trial(study)
    except ConfigError:
        out.write("best       none: no trial completed\n")
        return 0
    result = best.user_attrs.get("result", {})
    out.write(f"best       trial {best.number}: {_describe(best.user_attrs['config'])}\n")
    out.write(
        f"           {result.get('throughput_samples_per_s', float('nan')):,.4g} samples/s, "
        f"iteration {result.get('iteration_time_s', float('nan')):.4g} s, "
        f"peak memory {result.get('peak_memory_bytes', 0) / 2**30:.1f} GiB\n"
    )
    note = artifact_note(study, study.artifacts, best)
    if note:
        out.write(f"artifacts  {note}\n")
    flag = f" --storage {shown}" if shown != DEFAULT_STORAGE else ""
    out.write(
        f"next       palm-tune best{flag} --study-name {study.study_name}  |  "
        f"palm-tune report{flag} --study-name {study.study_name}  |  "
        f"palm-tune dashboard --storage {shown}\n"
    )
    return 0


def _open(args: argparse.Namespace) -> optuna.Study:
    url = args.storage or DEFAULT_STORAGE
    file = storage_file(url)
    if file is not None and not file.is_file():  # opening would create an empty storage
        raise ConfigError("--storage", url, "an existing study storage (run palm-tune tune first)")
    backend = open_storage(url, read_only=True)  # best and report only read
    names = _study_names(backend)
    name = args.study_name
    if name is None:
        if len(names) != 1:
            raise ConfigError(
                "--study-name", None, f"one of the studies in {url}: {', '.join(names) or '(none)'}"
            )
        name = names[0]
    if name not in names:
        raise ConfigError(
            "--study-name", name, f"one of the studies in {url}: {', '.join(names) or '(none)'}"
        )
    return optuna.load_study(study_name=name, storage=backend)


def _study_names(backend: optuna.storages.BaseStorage) -> list[str]:
    """The studies of a storage, without the locks of running workers (search.once)."""
    summaries = optuna.get_all_study_summaries(backend)
    return [s.study_name for s in summaries if not is_lock(s.study_name)]


def _palm_best(study: optuna.Study) -> optuna.trial.FrozenTrial:
    """The best trial, refusing a study whose trials palm-tune did not make."""
    trial = best_trial(study)
    if not isinstance(trial.user_attrs.get("config"), dict):
        raise ConfigError(
            "--study-name",
            study.study_name,
            f"a study made by palm-tune tune (trial {trial.number} has no palm-tune config)",
        )
    return trial


def _names(study: optuna.Study) -> list[str]:
    return display_names(study)[1]


def _cmd_best(args: argparse.Namespace, out: TextIO | None = None) -> int:
    out = out or sys.stdout
    study = _open(args)
    trial = _palm_best(study)
    result = trial.user_attrs.get("result", {})
    data: dict[str, Any] = {
        "study": study.study_name,
        "number": trial.number,
        "params": trial.params,
        "values": trial.values,
        "objectives": dict(zip(_names(study), trial.values, strict=True)),
        "config": trial.user_attrs.get("config"),
    }
    data.update({k: result.get(k) for k in RESULT_FIELDS})
    if args.json:
        out.write(json.dumps(data, indent=2) + "\n")
        return 0
    out.write(f"study   {study.study_name}, trial {trial.number}\n")
    out.write(f"plan    {_describe(data['config'])}\n")
    out.write(
        "values  "
        + ", ".join(f"{n} {v:,.6g}" for n, v in zip(_names(study), trial.values, strict=True))
        + "\n"
    )
    out.write(
        f"        {result.get('throughput_samples_per_s', 0):,.4g} samples/s, "
        f"iteration {result.get('iteration_time_s', 0):.4g} s, MFU "
        f"{result.get('mfu', 0):.1%}\n"
    )
    out.write("params  " + ", ".join(f"{k}={v}" for k, v in trial.params.items()) + "\n")
    return 0


def _out_dir(path: str) -> Path:
    out_dir = Path(path)
    if out_dir.exists() and not out_dir.is_dir():
        raise ConfigError("--out", path, "a directory (this is an existing file)")
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ConfigError("--out", path, f"a writable directory ({exc.strerror})") from None
    return out_dir


def write_trials_csv(study: optuna.Study, path: Path) -> Path:
    """Every trial of ``study`` as one CSV row (Optuna's ``trials_dataframe``, a pandas
    DataFrame): number, state, values, parameters, times, and the simulated result fields."""
    import pandas  # type: ignore[import-untyped,unused-ignore]

    frame = study.trials_dataframe(
        attrs=("number", "state", "values", "params", "datetime_start", "duration")
    )
    if "number" not in frame:  # no trial yet: the header alone
        frame = pandas.DataFrame(columns=["number", "state"])
    objectives = study.user_attrs.get("objectives")
    if isinstance(objectives, list) and len(objectives) == len(study.directions):
        # Optuna names the columns values_<metric name> once set_metric_names was called
        names = study.metric_names or [str(i) for i in range(len(objectives))]
        frame = frame.rename(
            columns={f"values_{m}": f"value_{o}" for m, o in zip(names, objectives, strict=True)}
        )
        frame = frame.rename(columns={"values": f"value_{objectives[0]}"})
    by_number = {t.number: t.user_attrs.get("result") for t in study.get_trials(deepcopy=False)}
    for field in RESULT_FIELDS:
        frame[field] = [
            (by_number.get(n) or {}).get(field) if isinstance(by_number.get(n), dict) else None
            for n in frame["number"]
        ]
    try:
        frame.to_csv(path, index=False)
    except OSError as exc:
        raise ConfigError("--out", str(path.parent), f"a writable directory ({exc})") from None
    return path


def _cmd_report(args: argparse.Namespace, out: TextIO | None = None) -> int:
    out = out or sys.stdout
    study = _open(args)
    if importlib.util.find_spec("matplotlib") is None:
        raise ConfigError("report", "matplotlib", "the plot extra: pip install 'palm-tune[plot]'")
    out_dir = _out_dir(args.out)
    complete = [t for t in study.trials if t.state == TrialState.COMPLETE and not is_overflow(t)]
    if complete:
        _palm_best(study)  # a study made by palm-tune, before anything is written
    written: list[Path] = [write_trials_csv(study, out_dir / "trials.csv")]
    written += write_study_plots(study, out_dir, log=out)
    if complete:
        from palm.plots import plot_all

        config = best_config(study)
        written += plot_all(out_dir / "best", config=config)
    for path in written:
        out.write(f"wrote {path}\n")
    return 0


def _cmd_dashboard(args: argparse.Namespace, out: TextIO | None = None) -> int:
    try:
        from optuna_dashboard import run_server  # type: ignore[import-untyped,unused-ignore]
    except ImportError:
        raise ConfigError(
            "dashboard",
            "optuna-dashboard",
            "the dashboard extra: pip install 'palm-tune[dashboard]'",
        ) from None
    if not 1 <= args.port <= 65535:
        raise ConfigError("--port", args.port, "a TCP port in 1..65535")
    _check_address(args.host, args.port)
    storage = open_storage(args.storage)
    locations = _artifact_locations(storage, args.storage, args.artifacts)
    stores = [ArtifactStore(where) for where in locations]
    for store in stores:
        if store.root is not None:
            store.root.mkdir(parents=True, exist_ok=True)
    (out or sys.stdout).write(
        f"optuna-dashboard on http://{args.host}:{args.port}/ "
        f"(storage {mask_credentials(printed_url(args.storage))}, "
        f"artifacts {', '.join(locations)}); Ctrl-C stops\n"
    )
    (out or sys.stdout).flush()
    run_server(
        storage,
        host=args.host,
        port=args.port,
        artifact_store=stores[0] if len(stores) == 1 else Stores(stores),
    )
    return 0


def _artifact_locations(
    storage: optuna.storages.BaseStorage, url: str, given: str | None
) -> Sequence[str]:
    """Where the artifacts of a storage's studies live: ``given`` alone, else each location
    the studies recorded and the storage's default (search.artifacts), each once."""
    if given is not None:
        return [artifact_location(None, url, given)]
    found: list[str] = []
    for name in _study_names(storage):
        study = optuna.load_study(study_name=name, storage=storage)
        found.append(artifact_location(study, url))
    found.append(artifact_location(None, url))
    return list(dict.fromkeys(found))


def _cmd_storage_proxy(args: argparse.Namespace, out: TextIO | None = None) -> int:
    """Serve ``--storage`` through Optuna's gRPC storage proxy until stopped."""
    try:
        import grpc  # type: ignore[import-untyped,unused-ignore]  # noqa: F401
        from google import protobuf  # type: ignore[import-untyped,unused-ignore]  # noqa: F401
        from optuna.storages import run_grpc_proxy_server
    except ImportError:
        raise ConfigError(
            "storage-proxy", "grpcio", "the grpc extra: pip install 'palm-tune[grpc]'"
        ) from None
    if not 1 <= args.port <= 65535:
        raise ConfigError("--port", args.port, "a TCP port in 1..65535")
    if args.storage.startswith("grpc://"):
        raise ConfigError("--storage", args.storage, "the storage behind the proxy, not a proxy")
    _check_address(args.host, args.port)
    storage = open_storage(args.storage)
    (out or sys.stdout).write(
        f"gRPC storage proxy on grpc://{args.host}:{args.port} for "
        f"{mask_credentials(printed_url(args.storage))}: "
        f"workers take --storage grpc://{args.host}:{args.port}; Ctrl-C stops\n"
    )
    (out or sys.stdout).flush()
    run_grpc_proxy_server(storage, host=args.host, port=args.port)
    return 0


def _check_address(host: str, port: int) -> None:
    """Refuse a host that does not resolve or a port already taken before the server starts
    (the server would print its banner, then fail)."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
        family, kind, proto, _, address = infos[0]
        with socket.socket(family, kind, proto) as probe:
            probe.bind(address)
    except OSError as exc:
        reason = exc.strerror or str(exc)
        raise ConfigError(
            "--host/--port", f"{host}:{port}", f"an address to listen on ({reason})"
        ) from None
