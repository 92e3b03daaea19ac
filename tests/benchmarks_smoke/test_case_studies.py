"""Smoke tests of the three case-study scripts (benchmarks/case_*.py, docs/case-studies.md):
each runs in --quick mode into a temporary folder, writes real PNGs and prints its tables, and
its quick results pass a few physical checks."""

from __future__ import annotations

from pathlib import Path
from types import ModuleType

import pytest

from tests.benchmark_module import load_benchmark

pytest.importorskip("matplotlib")

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def congestion() -> ModuleType:
    return load_benchmark("case_congestion")


@pytest.fixture(scope="module")
def wafer() -> ModuleType:
    return load_benchmark("case_wafer_mapping")


@pytest.fixture(scope="module")
def intergroup() -> ModuleType:
    return load_benchmark("case_intergroup")


def _assert_png(path: Path) -> None:
    data = path.read_bytes()
    assert data[:8] == PNG_SIGNATURE, path
    assert len(data) > 10_000, path  # a drawn figure, not an empty canvas


def test_congestion_quick(
    congestion: ModuleType, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert congestion.main(["--quick", "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "| tasks |" in out and "| 1 | 0.0% |" in out
    _assert_png(tmp_path / "congestion.png")


def test_congestion_error_is_never_negative_and_zero_alone(congestion: ModuleType) -> None:
    points = congestion.study(congestion.QUICK_SIZES_MB, congestion.QUICK_MAX_TASKS)
    settings, scenarios = len(congestion.SETTINGS), len(congestion.SCENARIOS)
    assert len(points) == settings * scenarios * 2 * congestion.QUICK_MAX_TASKS
    for p in points:
        assert p.event_s >= p.analytical_s * (1 - 1e-12), p  # contention never speeds up
        if p.tasks == 1:  # one task alone costs exactly its closed form
            assert p.error == pytest.approx(0.0, abs=1e-12), p
    # two tasks on one tile's ring: exclusive, the all-to-all waits for the all-reduce; fair,
    # they share the ring's links; the links carry the same work, so the makespan is
    # T_AR + T_A2A either way
    two = [p for p in points if p.scenario == "one tile" and p.tasks == 2]
    assert all(p.error == pytest.approx(1 / 3, rel=1e-9) for p in two)


def test_congestion_fair_sharing_of_one_ring(congestion: ModuleType) -> None:
    """Fair sharing: the all-to-all (half the all-reduce's time alone) moves at half its rate
    while both run, so it ends at twice its lone time; the all-reduce then runs alone."""
    fair = congestion.SETTINGS[-1]
    assert fair.noc_model == "fair"
    hw = congestion.wafer(fair)
    ar, a2a = (congestion.make_task(hw, kind, (0, 0), 8e6) for kind in ("all-reduce", "all-to-all"))
    assert a2a.links == ar.links  # palm prices the all-to-all on the same ring
    ends = congestion.run_fair(hw, [ar, a2a])
    assert ends[1] == pytest.approx(2 * a2a.alone_s, rel=1e-9)
    assert ends[0] == pytest.approx(ar.alone_s + a2a.alone_s, rel=1e-9)
    assert congestion.run_fair(hw, [ar]) == [pytest.approx(ar.alone_s, rel=1e-12)]


def test_congestion_writes_its_doc_section(congestion: ModuleType, tmp_path: Path) -> None:
    doc = tmp_path / "case-studies.md"
    doc.write_text(
        "intro\n<!-- BEGIN case_congestion -->\nold\n<!-- END case_congestion -->\nafter\n",
        encoding="utf-8",
    )
    argv = ["--quick", "--out", str(tmp_path), "--write-docs", "--doc", str(doc)]
    assert congestion.main(argv) == 0
    text = doc.read_text(encoding="utf-8")
    assert text.startswith("intro\n<!-- BEGIN case_congestion -->\n")
    assert text.endswith("<!-- END case_congestion -->\nafter\n")
    assert "old" not in text and "| tasks |" in text


def test_wafer_mapping_quick(
    wafer: ModuleType, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert wafer.main(["--quick", "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "| T-18B | 8, 2 |" in out
    assert "palm / paper" in out
    _assert_png(tmp_path / "wafer_mapping.png")
    _assert_png(tmp_path / "wafer_crosscheck.png")


def test_wafer_mapping_quick_points(wafer: ModuleType) -> None:
    points = wafer.sweep(wafer.QUICK_MODELS, wafer.QUICK_SPLITS)
    assert len(points) == 2 * len(wafer.MAPPINGS) * len(wafer.NETWORKS)
    assert all(p.throughput > 0 and p.fits for p in points)  # T-18B fits at TP=2 and TP=8
    # the baseline's DRAM reads share the channels and the links along the mesh edges:
    # cutting the DRAM traffic can only make it faster, and so does pricing it per matrix
    # product instead of Algorithm 1's per-layer penalty
    a = wafer.anatomy("t-18b", paper=7.3457)
    assert a.diagnostic > a.throughput > a.throughput_algorithm1
    # the same flows on every link, fair-shared, are no faster than on the aggregates (which
    # see the edge links' shared load as one resource), and exclusive holds are slower still
    assert a.throughput >= a.throughput_link > a.throughput_exclusive
    assert "link[" not in a.busiest_links and "->" in a.busiest_links


def test_intergroup_quick(
    intergroup: ModuleType, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert intergroup.main(["--quick", "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "| adapters | S1 total |" in out and "ring-shaped (12 tiles)" in out
    _assert_png(tmp_path / "intergroup.png")
    _assert_png(tmp_path / "intergroup_size.png")


def test_intergroup_ring_allreduce_is_the_closed_form(intergroup: ModuleType) -> None:
    """Strategy 1's source all-reduce on the 3 x 4 ring-shaped group is palm's closed form
    2 (n-1)/n B/bw + 2 (n-1) lat for n = 12 on one-hop links, whatever the adapter count."""
    nbytes = intergroup.activation_bytes()
    expected = (
        2 * 11 / 12 * nbytes / (intergroup.LINK_GBPS * 1e9) + 2 * 11 * intergroup.HOP_NS * 1e-9
    )
    points = intergroup.study(intergroup.QUICK_ADAPTERS)
    ring = [
        p for p in points if p.shape == intergroup.SHAPES[0] and p.strategy == "allreduce-broadcast"
    ]
    assert ring
    for p in ring:
        assert p.parts.reduce_s == pytest.approx(expected, rel=1e-12)
        assert p.parts.adapters_allreduce_s == 0.0
    for p in points:
        parts = p.parts
        total = parts.reduce_s + parts.transfer_s + parts.adapters_allreduce_s + parts.broadcast_s
        assert min(parts.reduce_s, parts.transfer_s, parts.broadcast_s) >= 0
        assert p.total_s == pytest.approx(total)
