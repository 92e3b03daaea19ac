"""benchmarks/generalisation.py: a source held out is predicted by constants fitted without
it, and a generation measured by one source only is not counted as held out."""

from __future__ import annotations

import dataclasses

from palm.validation_modern import load_modern_cases
from tests.benchmark_module import load_benchmark

gen = load_benchmark("generalisation")


def test_the_source_of_a_row_is_its_recorded_family() -> None:
    assert gen.source_of({"source_family": "mosaicml/llm-foundry benchmarking README"}) == (
        "llm-foundry"
    )
    assert gen.source_of({"source_family": "NVIDIA NeMo / Megatron-Bridge performance"}) == (
        "NeMo / Megatron-Bridge"
    )
    assert gen.source_of({}) == "unknown"


def test_leave_one_source_out_holds_out_only_what_another_source_can_fit() -> None:
    data = load_modern_cases()
    keep = {
        "foundry-h100-80gb-mpt-1b-16g-s2048",
        "foundry-a100-40gb-mpt-1b-8g-s2048",
        "mlm-weak-h100-1.7b-48g",
        "mlm-weak-h100-16b-192g",
    }
    small = dataclasses.replace(data, cases=tuple(c for c in data.cases if c.case_id in keep))
    out = gen.leave_one_source_out(small, rounds=1)
    # the H100 rows of each source are predicted from the other's; the A100 row has no
    # A100 row of another source and is left to the generation split
    assert set(out["llm-foundry"]) == {"foundry-h100-80gb-mpt-1b-16g-s2048"}
    assert set(out["Megatron-LM"]) == {"mlm-weak-h100-1.7b-48g", "mlm-weak-h100-16b-192g"}
    assert all(abs(e) < 1.0 for errs in out.values() for e in errs.values())
    text = gen.table(
        out, {"A100": {"foundry-a100-40gb-mpt-1b-8g-s2048": 0.1}, "H100": out["llm-foundry"]}
    )
    assert "every source in turn" in text and "every generation in turn" in text
