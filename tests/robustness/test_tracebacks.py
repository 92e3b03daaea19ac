"""Class 5: no traceback reaches the user through Optuna's failed-trial log, a crashing worker
process, input nested too deeply to parse, input files that are not text or never end, an
output pipe closed by its reader (``| head``) or a closed standard stream."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from palm.inputs import MAX_INPUT_BYTES
from tests.cli_run import DGX, REPO, assert_clean, assert_usage_error, env, run


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
        env=env(),
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
    r = run(  # a full disk: every worker's write fails
        "tune",
        str(small_study),
        "--storage",
        str(journal),
        "--workers",
        "2",
        "--trials",
        "6",
        "--no-progress",
        cwd=tmp_path,
        timeout_s=180,
        file_bytes=6000,
    )
    assert r.code == 1, r.stderr
    assert "Traceback" not in r.stderr, r.stderr
    lines = r.stderr.strip().splitlines()
    assert lines and all(line.startswith("palm-tune: ") for line in lines), r.stderr
    assert lines[-1].startswith("palm-tune: error: "), r.stderr
    # the workers' lines and the command's, or the command's alone (its own first write failed);
    # a worker whose write was cut by the full disk leaves a torn last record, which the next
    # process to open the journal cuts and reports on a line of its own (search/storage.py)
    allowed = ("disk is full", "worker(s) failed", "cut a torn last record")
    assert all(any(a in line for a in allowed) for line in lines), r.stderr


@pytest.mark.parametrize(
    ("make", "words"),
    [
        (lambda p: p.write_bytes(DGX.read_bytes() + b"# caf\xe9\n"), ["UTF-8"]),  # Latin-1
        (lambda p: p.write_bytes(DGX.read_text().encode("utf-16")), ["UTF-8"]),
        (lambda p: p.mkdir(), ["regular file", "directory"]),  # a directory named like a file
        (lambda p: p.write_bytes(DGX.read_bytes() + b"\x00\n"), ["valid TOML"]),
        (  # a huge file (all comments): refused before it is read, in bounded memory
            lambda p: p.write_bytes(DGX.read_bytes() + b"#" * (MAX_INPUT_BYTES + 10) + b"\n"),
            ["16 MiB"],
        ),
    ],
    ids=["latin1", "utf16", "directory", "nul-byte", "huge"],
)
@pytest.mark.parametrize("command", ["simulate", "tune", "plot"])
def test_input_files_that_are_not_a_toml_text(
    tmp_path: Path, make: object, words: list[str], command: str
) -> None:
    path = tmp_path / "c.toml"
    make(path)  # type: ignore[operator]
    r = run(command, str(path), cwd=tmp_path, memory_bytes=2 * 2**30)
    assert_usage_error(r, str(path), *words)


@pytest.mark.parametrize("command", ["simulate", "validate", "tune"])
def test_an_endless_input_file_is_refused_in_bounded_memory(tmp_path: Path, command: str) -> None:
    r = run(command, "/dev/zero", cwd=tmp_path, memory_bytes=2 * 2**30)
    assert_usage_error(r, "/dev/zero", "regular file", "character device")


def test_a_byte_order_mark_is_accepted(tmp_path: Path) -> None:
    path = tmp_path / "bom.toml"
    path.write_bytes(b"\xef\xbb\xbf" + DGX.read_bytes())
    r = run("simulate", str(path), "--engine", "analytical", cwd=tmp_path)
    assert r.code == 0, r.stderr
    assert_clean(r)


@pytest.mark.parametrize(
    "args",
    [
        ["presets"],
        ["simulate", str(DGX), "--engine", "analytical"],
        ["simulate", str(DGX), "--engine", "analytical", "--json"],
    ],
)
def test_output_piped_to_a_reader_that_went_away(args: list[str]) -> None:
    """``palm-tune ... | head -1``: the reader closes the pipe before we write; exit as a
    process killed by SIGPIPE would (141), no traceback, no "Exception ignored" line."""
    import os

    read, write = os.pipe()
    os.close(read)  # the reader is gone before the first write
    try:
        proc = subprocess.run(
            [sys.executable, "-m", "search.cli", *args],
            cwd=REPO,
            env=env(),
            stdout=write,
            stderr=subprocess.PIPE,
            text=True,
            timeout=60,
        )
    finally:
        os.close(write)
    assert proc.returncode == 141, proc.stderr
    assert proc.stderr == "", proc.stderr


def test_a_closed_stdout_is_not_an_internal_error() -> None:
    """``palm-tune presets >&-``: nothing to print to, nothing to fail on."""
    proc = subprocess.run(
        [sys.executable, "-m", "search.cli", "presets"],
        cwd=REPO,
        env=env(),
        stdout=None,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        text=True,
        timeout=60,
        pass_fds=(),
        preexec_fn=lambda: __import__("os").close(1),
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == ""
