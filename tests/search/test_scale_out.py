"""A study that outgrows one machine, run as Optuna users run it (docs/tuning.md "Many
machines"): workers in different working directories on PostgreSQL (or behind Optuna's gRPC
storage proxy) with an artifact store they all reach, a dashboard started elsewhere that
opens every best trial's artifacts, the screening run once per study, storage URLs that plain
Optuna opens, and a storage that several workers cannot share refused before any work.

Servers: the local PostgreSQL server (tests skip, with the reason, when none answers) and, for
the S3 artifact store, moto's S3-compatible server (the PyPI package ``moto[server]``, a
development dependency) on the loopback address: it stands in for S3, nothing leaves the
machine."""

from __future__ import annotations

import json
import re
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import optuna
import pytest

import search
from palm.errors import ConfigError
from search.once import is_lock
from search.storage import open_storage
from tests.benchmark_module import load_benchmark
from tests.cli_run import WAFER, Run, assert_usage_error, env, postgres_database, run

optuna.logging.set_verbosity(optuna.logging.WARNING)
pytestmark = pytest.mark.filterwarnings("ignore::optuna.exceptions.ExperimentalWarning")

STUDY = f"""[study]
name = "scale"
base = "{WAFER}"
set = ["training.global_batch=16"]
sampler = "tpe"
trials = 6
seed = 0
screen = 12
screen_top = 2

[space]
tp_group = ["compact", "strided"]
recompute = ["full", "selective"]
micro_batch = [1, 2, 4]
"""

#: a script that opens a storage with Optuna alone (no palm-tune on its path), the way the
#: Optuna documentation opens each kind, and prints the study's trial count
_PLAIN = """
import sys, optuna
url, name = sys.argv[1], sys.argv[2]
if url.startswith("grpc://"):
    host, port = url[len("grpc://"):].rsplit(":", 1)
    storage = optuna.storages.GrpcStorageProxy(host=host, port=int(port))
elif "://" not in url:  # a journal file, as optuna-dashboard takes it
    from optuna.storages.journal import JournalFileBackend
    storage = optuna.storages.JournalStorage(JournalFileBackend(url))
else:
    storage = url  # an RDB URL as it is: optuna.load_study(storage="postgresql://...")
print(len(optuna.load_study(study_name=name, storage=storage).trials))
"""


def _study_file(directory: Path) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "scale.toml"
    path.write_text(STUDY, encoding="utf-8")
    return path


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _printed_urls(stdout: str) -> set[str]:
    """Every storage URL in a ``tune`` summary: the study line's and each ``--storage``."""
    found = set(re.findall(r"^study\s+\S+ in (\S+): ", stdout, re.M))
    found |= set(re.findall(r"--storage (\S+)", stdout))
    assert found, stdout
    return found


def _plain_optuna_trials(url: str, name: str, cwd: Path) -> int:
    proc = subprocess.run(
        [sys.executable, "-c", _PLAIN, url, name],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 0, (url, proc.stderr[-1500:])
    return int(proc.stdout.strip().splitlines()[-1])


def _tune(study: Path, storage: str, *extra: str, cwd: Path) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "search.cli", "tune", str(study), "--storage", storage,
         "--no-progress", *extra],
        cwd=cwd, env=env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip


def _finish(procs: list[subprocess.Popen[str]]) -> list[Run]:
    out = []
    for p in procs:
        stdout, stderr = p.communicate(timeout=300)
        out.append(Run(p.returncode, stdout, stderr))
        assert p.returncode == 0, stderr[-2000:]
        assert "Traceback" not in stderr, stderr
    return out


def _screened_by(runs: list[Run]) -> list[str]:
    return [m for r in runs for m in re.findall(r"simulated first \((by \w+ run)\)", r.stdout)]


def _get(url: str) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=120) as response:  # noqa: S310 - loopback
            return response.status, response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


def _every_artifact_opens(base: str, name: str) -> int:
    """Through the dashboard's HTTP API: every artifact of every trial of study ``name``
    answers 200 with a PNG or a JSON trace; returns how many there were. The study's best
    trial has all three."""
    status, body = _get(f"{base}/api/studies")
    assert status == 200
    (summary,) = [s for s in json.loads(body)["study_summaries"] if s["study_name"] == name]
    study_id = summary["study_id"]
    status, body = _get(f"{base}/api/studies/{study_id}")
    assert status == 200
    detail = json.loads(body)
    (best,) = detail["best_trials"]
    n = best["number"]
    assert sorted(a["filename"] for a in best["artifacts"]) == [
        f"trial{n}-gantt.png",
        f"trial{n}-links.png",
        f"trial{n}-trace.json",
    ]
    opened = 0
    for trial in detail["trials"]:
        for artifact in trial["artifacts"]:
            url = f"{base}/artifacts/{study_id}/{trial['trial_id']}/{artifact['artifact_id']}"
            status, content = _get(url)
            assert status == 200, (artifact["filename"], status, content[:300])
            if artifact["filename"].endswith(".png"):
                assert content[:4] == b"\x89PNG"
            else:
                assert json.loads(content)["traceEvents"]
            opened += 1
    return opened


# ------------------------------------------------------------------------------- refusals


def test_workers_on_sqlite_are_refused_before_any_work(tmp_path: Path) -> None:
    study = _study_file(tmp_path)
    r = run("tune", str(study), "--storage", "sqlite:///s.db", "--workers", "2", cwd=tmp_path)
    assert_usage_error(r, "--storage", "sqlite:///s.db", "--workers 2")
    assert not (tmp_path / "s.db").exists()  # nothing created, nothing screened
    # the Python API refuses it as early: no screening, no trial
    tuning = search.create_study(study, storage=f"sqlite:///{tmp_path}/api.db")
    with pytest.raises(ConfigError, match="--workers 2"):
        search.optimize(tuning, workers=2)
    assert tuning.trials == [] and "screening" not in tuning.user_attrs


# ------------------------------------------------------------------ URLs plain Optuna opens


@pytest.mark.parametrize("kind", ["sqlite", "journal", "postgresql"])
def test_every_storage_url_palm_tune_prints_opens_with_plain_optuna(
    tmp_path: Path, kind: str
) -> None:
    with postgres_database("ux_urls") if kind == "postgresql" else _nothing(kind, tmp_path) as url:
        study = _study_file(tmp_path)
        r = run("tune", str(study), "--storage", url, "--trials", "2", "--no-progress",
                cwd=tmp_path, timeout_s=240)  # fmt: skip
        assert r.code == 0, r.stderr
        printed = _printed_urls(r.stdout)
        assert printed == {url if kind != "journal" else "s.journal"}, printed
        m = re.search(r"^study\s+scale in \S+: (\d+) trials$", r.stdout, re.M)
        assert m, r.stdout
        for shown in printed:
            assert _plain_optuna_trials(shown, "scale", tmp_path) == int(m[1])


@contextmanager
def _nothing(kind: str, tmp_path: Path) -> Iterator[str]:
    # a relative journal:/// URL prints as the plain path that Optuna's documentation and
    # optuna-dashboard open
    yield "sqlite:///s.db" if kind == "sqlite" else "journal:///s.journal"


# ------------------------------------------------------- many machines: PostgreSQL, shared


def test_two_workers_in_two_directories_share_postgresql_artifacts_and_a_dashboard(
    tmp_path: Path,
) -> None:
    with postgres_database("ux_scale") as url:
        shared = tmp_path / "shared" / "artifacts"  # the file system every machine mounts
        study_a = _study_file(tmp_path / "a")
        study_b = _study_file(tmp_path / "b")
        runs = _finish(
            [
                _tune(study_a, url, "--artifacts", str(shared), cwd=tmp_path / "a"),
                _tune(study_b, url, "--artifacts", str(shared), cwd=tmp_path / "b"),
            ]
        )
        # the screening ran once, by whichever worker came first; the other waited for it
        assert sorted(_screened_by(runs)) == ["by another run", "by this run"], runs
        study = optuna.load_study(study_name="scale", storage=url)  # plain Optuna, as printed
        assert [s.study_name for s in optuna.get_all_study_summaries(url)] == ["scale"]
        assert len(study.user_attrs["screening"]["enqueued"]) == 2
        assert sum(1 for t in study.trials if t.system_attrs.get("fixed_params")) == 2
        assert not any((tmp_path / d / "palm-tune-artifacts").exists() for d in "ab")
        # a dashboard in a third directory finds the store through the study
        third = tmp_path / "c"
        third.mkdir()
        shot = load_benchmark("dashboard_screenshot")
        with shot.dashboard(url, third) as base:
            assert _every_artifact_opens(base, "scale") >= 3
        assert str(shared) in (third / "dashboard.log").read_text()


def test_the_screening_runs_once_for_two_concurrent_workers_on_a_journal(tmp_path: Path) -> None:
    study = _study_file(tmp_path)
    journal = str(tmp_path / "s.journal")
    runs = _finish([_tune(study, journal, "--trials", "2", cwd=tmp_path) for _ in range(2)])
    assert sorted(_screened_by(runs)) == ["by another run", "by this run"], runs
    stored = optuna.load_study(study_name="scale", storage=open_storage(journal))
    assert not any(is_lock(s.study_name) for s in optuna.get_all_study_summaries(stored._storage))


# ------------------------------------------------------------------- Optuna's gRPC proxy


@contextmanager
def _proxy(storage: str, cwd: Path) -> Iterator[str]:
    port = _free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "search.cli", "storage-proxy", "--storage", storage,
         "--port", str(port)],
        cwd=cwd, env=env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        while True:
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", port)) == 0:
                    break
            if proc.poll() is not None or time.monotonic() > deadline:
                raise AssertionError(proc.communicate()[1])
            time.sleep(0.2)
        yield f"grpc://127.0.0.1:{port}"
    finally:
        proc.terminate()
        proc.communicate(timeout=30)


def test_workers_share_a_study_through_the_grpc_storage_proxy(tmp_path: Path) -> None:
    pytest.importorskip("grpc", reason="grpcio (the grpc extra) is not installed")
    study = _study_file(tmp_path)
    with _proxy(f"sqlite:///{tmp_path}/behind.db", tmp_path) as url:
        r = run("tune", str(study), "--storage", url, "--workers", "2", "--trials", "4",
                "--no-progress", cwd=tmp_path, timeout_s=300)  # fmt: skip
        assert r.code == 0, r.stderr
        assert _printed_urls(r.stdout) == {url}
        trials = _plain_optuna_trials(url, "scale", tmp_path)
        assert trials >= 4
    # behind the proxy: the database itself, with every trial finished
    study_db = optuna.load_study(study_name="scale", storage=f"sqlite:///{tmp_path}/behind.db")
    assert len(study_db.trials) == trials
    assert all(t.state.is_finished() for t in study_db.trials)
    workers = {t.user_attrs.get("palm_tune_worker") for t in study_db.trials}
    assert len(workers - {None}) == 2


# --------------------------------------------------------------------- S3 artifact store


@contextmanager
def _s3(monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """moto's S3-compatible server (PyPI moto[server]) on a loopback port, a bucket in it,
    and the environment boto3 reads (endpoint, region, dummy credentials); yields the
    bucket's location ``s3://BUCKET``."""
    try:
        from moto.server import ThreadedMotoServer
    except ImportError as exc:
        pytest.skip(f"no local S3-compatible server: moto[server] is not installed ({exc})")
    boto3 = pytest.importorskip("boto3", reason="boto3 (the s3 extra) is not installed")
    port = _free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    try:
        server.start()
    except Exception as exc:  # noqa: BLE001 - any failure to start: skip with the reason
        pytest.skip(f"moto's S3 server did not start on 127.0.0.1:{port}: {exc}")
    try:
        for key, value in {
            "AWS_ENDPOINT_URL_S3": f"http://127.0.0.1:{port}",
            "AWS_ACCESS_KEY_ID": "testing",
            "AWS_SECRET_ACCESS_KEY": "testing",
            "AWS_DEFAULT_REGION": "us-east-1",
        }.items():
            monkeypatch.setenv(key, value)
        boto3.client("s3").create_bucket(Bucket="palm-tune-artifacts")
        yield "s3://palm-tune-artifacts"
    finally:
        server.stop()


def test_artifacts_in_an_s3_store_open_in_the_dashboard_and_in_plain_optuna(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with _s3(monkeypatch) as bucket:
        study = _study_file(tmp_path / "a")
        r = run("tune", str(study), "--storage", "sqlite:///s.db", "--artifacts", bucket,
                "--trials", "3", "--no-progress", cwd=tmp_path / "a", timeout_s=240)  # fmt: skip
        assert r.code == 0, r.stderr
        assert f"in {bucket}" in r.stdout
        url = f"sqlite:///{tmp_path}/a/s.db"
        stored = optuna.load_study(study_name="scale", storage=url)
        best = search.best_trial(stored)
        from optuna.artifacts import Boto3ArtifactStore, download_artifact, get_all_artifact_meta

        metas = get_all_artifact_meta(best, storage=stored._storage)
        trace = next(m for m in metas if m.filename.endswith("trace.json"))
        out = tmp_path / "trace.json"  # drawn by tune at the end of the run: Optuna alone reads it
        download_artifact(
            artifact_store=Boto3ArtifactStore("palm-tune-artifacts"),
            artifact_id=trace.artifact_id,
            file_path=str(out),
        )
        assert json.loads(out.read_text())["traceEvents"]
        shot = load_benchmark("dashboard_screenshot")
        (tmp_path / "c").mkdir()
        with shot.dashboard(url, tmp_path / "c") as base:  # the store named by the study
            assert _every_artifact_opens(base, "scale") >= 3
