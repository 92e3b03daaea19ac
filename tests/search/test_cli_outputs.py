"""CLI outputs: traces, byte-identical JSON, plots from a configuration or a saved result."""

from __future__ import annotations

import io
import json
import subprocess
import sys
from pathlib import Path

import pytest

from palm.trace import load_chrome_trace
from search.cli import build_parser, main

ROOT = Path(__file__).resolve().parents[2]
WAFER = ROOT / "examples" / "wafer-t18b.toml"
SMALL = ["--set", "training.global_batch=8"]


def _run(*args: str) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [sys.executable, "-m", "search.cli", *args], capture_output=True, cwd=ROOT, check=False
    )


def test_same_input_gives_byte_identical_json_across_processes() -> None:
    first = _run("simulate", str(WAFER), *SMALL, "--json", "--no-wall-time")
    second = _run("simulate", str(WAFER), *SMALL, "--json", "--no-wall-time")
    assert first.returncode == 0, first.stderr
    assert first.stdout == second.stdout
    data = json.loads(first.stdout)
    assert data["sim_wall_s"] is None and data["engine"] == "event"
    assert data["config"]["parallelism"]["pp"] == 20


def test_trace_file_has_one_event_per_pass(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "trace.json"
    assert main(["simulate", str(WAFER), *SMALL, "--trace", str(out)]) == 0
    assert f"trace      {out}" in capsys.readouterr().out
    trace = load_chrome_trace(out)
    passes = [e for e in trace["traceEvents"] if e["ph"] == "X" and e["pid"] == 0]
    # 20 stages x 4 micro-batches x (forward + backward) + one optimizer step per stage
    assert len(passes) == 20 * 4 * 2 + 20
    assert trace["otherData"]["events_simulated"] > 0


def test_trace_needs_the_event_engine(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["simulate", str(WAFER), "--engine", "analytical", "--trace", "x.json"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and "--trace" in err[0]


def test_plot_from_config_and_from_saved_result(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    args = build_parser().parse_args(["simulate", str(WAFER), *SMALL, "--json"])
    buf = io.StringIO()
    assert args.handler(args, buf) == 0
    saved = tmp_path / "result.json"
    saved.write_text(buf.getvalue())
    for source, out in ((str(WAFER), tmp_path / "a"), (str(saved), tmp_path / "b")):
        plot_args = build_parser().parse_args(["plot", source, *SMALL, "--out", str(out)])
        text = io.StringIO()
        assert plot_args.handler(plot_args, text) == 0
        for name in ("gantt.png", "links.png"):
            assert (out / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
            assert f"wrote {out / name}" in text.getvalue()


def test_plot_rejects_a_json_that_is_not_a_result(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text('{"traceEvents": []}')
    assert main(["plot", str(bad), "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "result file" in err[0]
