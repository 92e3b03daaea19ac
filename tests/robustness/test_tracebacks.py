"""Class 5: no traceback reaches the user through Optuna's failed-trial log, a crashing worker
process or input nested too deeply to parse."""

from __future__ import annotations

import resource
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.robustness.cli_run import REPO, _env, assert_usage_error, run


@pytest.mark.parametrize("command", ["simulate", "tune", "plot"])
@pytest.mark.parametrize("shape", ["array", "table"])
def test_deeply_nested_toml(tmp_path: Path, command: str, shape: str) -> None:
    deep = "[" * 5000 + "]" * 5000 if shape == "array" else "{a=" * 5000 + "1" + "}" * 5000
    path = tmp_path / "deep.toml"
    path.write_text(f'[model]\npreset = "t-18b"\n[training]\nx = {deep}\n', encoding="utf-8")
    assert_usage_error(run(command, str(path), cwd=tmp_path), "file")


def test_deeply_nested_override() -> None:
    r = run(
        "simulate",
        str(REPO / "examples" / "t18b-dgx-a100.toml"),
        "--set",
        "training.x=" + "[" * 5000 + "]" * 5000,
    )
    assert_usage_error(r, "nested")


def test_optuna_failed_trial_log_is_one_line_per_trial() -> None:
    code = (
        "import optuna\n"
        "from search.lifecycle import quiet_optuna_logs\n"
        "quiet_optuna_logs()\n"
        "def f(t):\n"
        "    t.suggest_float('x', 0, 1)\n"
        "    raise ValueError('bad\\nsecond line')\n"
        "optuna.create_study().optimize(f, n_trials=3, catch=(ValueError,))\n"
    )
    r = subprocess.run(
        [sys.executable, "-c", code],
        cwd=REPO,
        env=_env(),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 0, r.stderr
    lines = [line for line in r.stderr.splitlines() if "failed" in line]
    assert len(lines) == 3, r.stderr
    assert "Traceback" not in r.stderr
    assert not any(line.startswith("second line") for line in r.stderr.splitlines())


def test_crashing_workers_report_one_line_each(small_study: Path, tmp_path: Path) -> None:
    journal = tmp_path / "crash.journal"

    def limits() -> None:  # a full disk: every worker's write fails
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (6000, 6000))

    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "search.cli",
            "tune",
            str(small_study),
            "--storage",
            str(journal),
            "--workers",
            "2",
            "--trials",
            "6",
            "--no-progress",
        ],
        cwd=tmp_path,
        env=_env(),
        capture_output=True,
        text=True,
        timeout=180,
        preexec_fn=limits,
    )
    assert r.returncode in (1, 2), r.stderr
    assert "Traceback" not in r.stderr, r.stderr
    lines = r.stderr.strip().splitlines()
    assert lines and all(line.startswith(("palm-tune:", "[W ")) for line in lines), r.stderr
