"""Smoke test of benchmarks/moe_nvlink_domains.py: expert groups that straddle an NVL72 rack
pay for it on the NICs."""

from __future__ import annotations

import pytest

from tests.benchmark_module import load_benchmark


def test_expert_groups_inside_64_gpu_domains_are_faster(capsys: pytest.CaptureFixture[str]) -> None:
    bench = load_benchmark("moe_nvlink_domains")
    rows = {cid: (t72, t64) for cid, t72, t64, _ in bench.rows(64)}
    # DeepSeek-V3 on 256 GB200s, ep = 64: with 72-GPU domains the groups of ranks 64-127 and
    # 192-255 cross a rack; aligned on 64 they stay on NVLink
    t72, t64 = rows["mb260401-gb200-deepseek-v3-256g-mxfp8"]
    assert t64 < 0.5 * t72
    # an 8-GPU job fits in one domain either way
    t72, t64 = rows["mb260401-gb200-qwen3-30b-a3b-8g-mxfp8"]
    assert t64 == t72
    assert bench.main([]) == 0
    assert "| case | 72 GPUs (s) |" in capsys.readouterr().out
