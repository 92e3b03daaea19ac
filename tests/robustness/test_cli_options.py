"""Class 4: every command-line option is checked before anything is created: one line, exit 2,
and no storage file left behind."""

from __future__ import annotations

from pathlib import Path

import optuna
import pytest

from tests.cli_run import REPO, assert_usage_error, run


@pytest.mark.parametrize(
    ("option", "value"),
    [
        ("--timeout", "nan"),
        ("--timeout", "-5"),
        ("--timeout", "0"),
        ("--timeout", "inf"),
        ("--workers", "0"),
        ("--workers", "-3"),
        ("--workers", "100000"),  # 100,000 processes would take the machine down
        ("--trials", "0"),
        ("--trials", "nan"),
        ("--seed", "-1"),
        ("--seed", "4294967296"),
        ("--study-name", ""),
    ],
)
def test_tune_options_are_refused_before_a_study_is_created(
    small_study: Path, tmp_path: Path, option: str, value: str
) -> None:
    db = tmp_path / "x.db"
    journal = tmp_path / "palm-tune.journal"
    r = run("tune", str(small_study), "--storage", f"sqlite:///{db}", option, value, cwd=tmp_path)
    assert_usage_error(r, option)
    assert not db.exists() and not journal.exists()


@pytest.mark.parametrize("command", ["tune", "best", "report", "dashboard"])
def test_an_empty_storage_is_not_the_default(
    small_study: Path, tmp_path: Path, command: str
) -> None:
    args = [str(small_study)] if command == "tune" else []
    r = run(command, *args, "--storage", "", cwd=tmp_path)
    assert_usage_error(r, "--storage")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["small.toml"]


def test_workers_zero_without_storage_creates_nothing(small_study: Path, tmp_path: Path) -> None:
    r = run("tune", str(small_study), "--workers", "0", cwd=tmp_path)
    assert_usage_error(r, "--workers")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["small.toml"]


def test_report_out_on_an_existing_file(tuned_db: str, tmp_path: Path) -> None:
    target = tmp_path / "taken.png"
    target.write_bytes(b"not a directory")
    r = run("report", "--storage", tuned_db, "--out", str(target), cwd=tmp_path)
    assert_usage_error(r, "--out")
    assert target.read_bytes() == b"not a directory"


def test_report_writes_every_trial_to_csv(tuned_db: str, tmp_path: Path) -> None:
    import pandas as pd

    out = tmp_path / "rep"
    r = run("report", "--storage", tuned_db, "--out", str(out), cwd=tmp_path, timeout_s=180)
    assert r.code == 0, r.stderr
    table = pd.read_csv(out / "trials.csv")
    study = optuna.load_study(study_name="small", storage=tuned_db)
    assert list(table["number"]) == [t.number for t in study.trials]
    assert list(table["state"]) == [t.state.name for t in study.trials]
    done = table[table["state"] == "COMPLETE"]
    assert (done["throughput_samples_per_s"] > 0).all()
    assert {"params_recompute", "params_tp_group", "value_throughput", "iteration_time_s"} <= set(
        table
    )


@pytest.mark.parametrize("port", ["-1", "0", "65536", "99999"])
def test_dashboard_port_out_of_range(tmp_path: Path, port: str) -> None:
    r = run("dashboard", "--storage", f"sqlite:///{tmp_path}/x.db", "--port", port, cwd=tmp_path)
    assert_usage_error(r, "--port")
    assert not (tmp_path / "x.db").exists()


@pytest.mark.parametrize("host", ["256.1.1.1", "no-such-host.invalid"])
def test_dashboard_address_that_cannot_be_listened_on(tmp_path: Path, host: str) -> None:
    r = run(
        "dashboard",
        "--storage",
        f"sqlite:///{tmp_path}/x.db",
        "--host",
        host,
        "--port",
        "8999",
        cwd=tmp_path,
    )
    assert_usage_error(r, "--host", host)
    assert r.stdout == ""  # no banner of a server that never started


def test_dashboard_port_already_taken(tmp_path: Path) -> None:
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        r = run(
            "dashboard",
            "--storage",
            f"sqlite:///{tmp_path}/x.db",
            "--port",
            str(port),
            cwd=tmp_path,
        )
    assert_usage_error(r, "--port", str(port))


@pytest.mark.parametrize("target", [0, -1.5, '"fast"', "null", "1e999"])
def test_validate_with_a_bad_published_time(tmp_path: Path, target: object) -> None:
    import json

    data = json.loads((REPO / "palm" / "data" / "visible.json").read_text(encoding="utf-8"))
    case = data["gpu_training"][0]
    case["derived"]["iteration_time_s"] = "@@"
    data["gpu_training"] = [case]
    path = tmp_path / "v.json"
    path.write_text(json.dumps(data).replace('"@@"', str(target)), encoding="utf-8")
    r = run("validate", str(path), cwd=tmp_path)
    assert_usage_error(r, "iteration_time_s")


def _foreign_study(url: str, *, with_trial: bool) -> None:
    study = optuna.create_study(study_name="foreign", storage=url)
    if with_trial:
        study.optimize(lambda t: t.suggest_float("x", 0, 1), n_trials=2)


@pytest.mark.parametrize("command", ["best", "report"])
@pytest.mark.parametrize("with_trial", [True, False])
def test_best_and_report_on_a_study_not_made_by_palm_tune(
    tmp_path: Path, command: str, with_trial: bool
) -> None:
    url = f"sqlite:///{tmp_path}/foreign.db"
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    _foreign_study(url, with_trial=with_trial)
    args = ["--out", str(tmp_path / "rep")] if command == "report" else []
    r = run(command, "--storage", url, *args, cwd=tmp_path, timeout_s=120)
    if command == "report" and not with_trial:
        assert r.code == 0, r.stderr  # an empty study: its (empty) trials.csv, no plots
        return
    assert_usage_error(r, "foreign" if with_trial else "study")


@pytest.mark.parametrize("suffix", ["journal:///{}/gone.journal", "{}/gone.log", "{}/gone.journal"])
@pytest.mark.parametrize("command", ["best", "report"])
def test_best_on_a_missing_storage_file_creates_nothing(
    tmp_path: Path, suffix: str, command: str
) -> None:
    url = suffix.format(tmp_path)
    r = run(command, "--storage", url, cwd=tmp_path)
    assert_usage_error(r, "--storage")
    assert not list(tmp_path.glob("gone*"))


def test_help_texts_cite_no_file_outside_the_repository() -> None:
    for command in [
        "",
        "simulate",
        "plot",
        "validate",
        "presets",
        "tune",
        "best",
        "report",
        "dashboard",
    ]:
        r = run(*([command] if command else []), "--help")
        assert r.code == 0, r.stderr
        for absent in ("SP" + "EC", "shared" + "/"):
            assert absent not in r.stdout, (command, absent)


@pytest.mark.parametrize(
    ("args", "option"),
    [
        (["plot", "{dgx}", "--out", "{file}"], "--out"),
        (["simulate", "{dgx}", "--trace", "{dir}"], "--trace"),
        (["simulate", "{dgx}", "--set", "training.global_batch=nan"], "training.global_batch"),
        (["simulate", "{dgx}", "--set", "parallelism.dp_bucket_mib=-inf"], "dp_bucket_mib"),
        (["simulate", "{dgx}", "--set", "model"], "--set"),
    ],
)
def test_simulator_options_with_unusable_values(
    tmp_path: Path, args: list[str], option: str
) -> None:
    taken = tmp_path / "taken"
    taken.write_text("x", encoding="utf-8")
    values = {
        "dgx": str(REPO / "examples" / "t18b-dgx-a100.toml"),
        "file": str(taken),
        "dir": str(tmp_path),
    }
    r = run(*[a.format(**values) for a in args], cwd=tmp_path)
    assert_usage_error(r, option)
    assert taken.read_text(encoding="utf-8") == "x"
