"""The guided sampler's candidates (``search.pool``): the whole space when it can be listed,
a seeded sample when not, each candidate's parameters replaying to its configuration, and
features that mean the same in every draw."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np

from search.pool import Encoder, candidate_pool, params_key, replay_draft
from search.study_file import study_from_tables
from spaces import count_configurations

REPO = Path(__file__).resolve().parents[2]
DGX = REPO / "examples" / "t18b-dgx-a100.toml"  # t-18b on 256 A100s
WAFER = REPO / "examples" / "wafer-t18b.toml"


def _spec(space: dict[str, Any], base: Path = DGX, **study: Any) -> Any:
    return study_from_tables({"study": {"base": str(base), **study}, "space": space})


def test_a_listable_space_is_the_pool_each_candidate_replaying_to_its_draft() -> None:
    spec = _spec({"parallelism": {"tp": [1, 2, 4, 8]}, "micro_batch": [1, 2], "zero": [0, 1]})
    pool = candidate_pool(spec)
    assert pool.complete
    assert len(pool) == count_configurations(spec.space, spec.context, limit=10_000)
    assert len({params_key(p) for p in pool.params}) == len(pool)
    for params, draft in zip(pool.params, pool.drafts, strict=True):
        assert replay_draft(spec, params) == draft
    assert pool.features.shape[0] == len(pool)
    assert pool.features.min() >= 0.0 and pool.features.max() <= 1.0


def test_features_are_read_off_the_configuration() -> None:
    """tp 1..8 is log2-scaled to 0, 1/3, 2/3, 1; dp, which no parameter draws, is a column;
    ZeRO 0 / 1 is a number; a categorical field is one-hot at 1/sqrt(2)."""
    spec = _spec(
        {"parallelism": {"tp": [1, 2, 4, 8]}, "zero": [0, 1], "recompute": ["none", "full"]}
    )
    pool = candidate_pool(spec)
    names = [c.name for c in pool.encoder.columns]
    assert "parallelism.dp" in names and "parallelism.tp" in names
    tp_col = sum(c.width for c in pool.encoder.columns[: names.index("parallelism.tp")])
    tps = [d["parallelism"]["tp"] for d in pool.drafts]
    assert np.allclose(pool.features[:, tp_col], [math.log2(t) / 3 for t in tps])
    rec = pool.encoder.columns[names.index("training.recompute")]
    assert rec.categories and rec.width == 2
    start = sum(c.width for c in pool.encoder.columns[: names.index("training.recompute")])
    block = pool.features[:, start : start + 2]
    assert np.allclose(block.sum(1), 1 / math.sqrt(2))  # exactly one category set per row


def test_a_continuous_space_is_a_seeded_sample() -> None:
    spec = _spec(
        {
            "micro_batch": [1, 2],
            "hardware": {"inter_node_bandwidth_gbps": {"low": 10.0, "high": 100.0}},
        }
    )
    a = candidate_pool(spec, seed=3, sample=40)
    b = candidate_pool(spec, seed=3, sample=40)
    c = candidate_pool(spec, seed=4, sample=40)
    assert not a.complete and len(a) == 40
    assert a.params == b.params and a.params != c.params
    bandwidths = [d["hardware"]["inter_node_bandwidth_gbps"] for d in a.drafts]
    assert all(10.0 <= x <= 100.0 for x in bandwidths)


def test_a_configuration_from_outside_the_pool_is_added_with_its_features() -> None:
    spec = _spec({"micro_batch": [1, 2, 4]})
    pool = candidate_pool(spec)
    n = len(pool)
    params = dict(pool.params[0])
    assert pool.add(params, pool.drafts[0]) == 0  # known: not added again
    draft = replay_draft(spec, {"log2_micro_batch": 1})
    assert draft is not None
    i = pool.add({"log2_micro_batch": 1, "extra": 1}, draft)
    assert i == n and pool.features.shape == (n + 1, pool.encoder.width)
    assert replay_draft(spec, {"other": 1}) is None  # a parameter the space draws is missing


def test_encoder_ignores_what_never_varies() -> None:
    enc = Encoder.fit([{"a": {"x": 1, "y": "k"}}, {"a": {"x": 1, "y": "k"}}], [{}, {}])
    assert enc.columns == () and enc.width == 1  # a constant column keeps the GP well posed
