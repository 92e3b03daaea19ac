"""DRAM traffic of one matrix product (palm.cost.blocking): hand-worked small products, the
closed form of output-stationary blocking, the Hong-Kung lower bound on a randomized sweep,
monotonicity in SRAM, and the multicast on a memory domain of several cores."""

from __future__ import annotations

import math
import random
from typing import Any

import pytest

from palm.cost.blocking import PANEL_DEPTH, hong_kung_bound_bytes, product_traffic
from palm.cost.sram import OpFootprint, allocate_sram

MiB = 2**20


def test_bound_by_hand() -> None:
    # 1000^3 in 8 MB of 2-byte elements: S_e = 4e6, sqrt 2000, 2e9 / 2000 = 1e6 elements
    bound = hong_kung_bound_bytes(m=1000, n=1000, k=1000, sram_bytes=8e6, elem_bytes=2)
    assert bound == pytest.approx(2e6)


def test_operands_that_fit_move_once() -> None:
    # 64^3 bf16: A = B = C = 8 KiB, all fit in 1 MB: read A and B, write C
    t = product_traffic(m=64, n=64, k=64, a_bytes=2, b_bytes=2, c_bytes=2, sram_bytes=1e6)
    assert (t.strategy, t.dram_read_bytes, t.dram_write_bytes) == ("resident", 16384, 8192)
    # an fp32 accumulator is read and written once
    acc = product_traffic(
        m=64, n=64, k=64, a_bytes=2, b_bytes=2, c_bytes=4, sram_bytes=1e6, accumulate=True
    )
    assert (acc.dram_read_bytes, acc.dram_write_bytes) == (8192 * 2 + 16384, 16384)
    assert t.multicast_bytes == 0.0  # one core: nothing to share


def test_one_stationary_operand_is_enough_for_compulsory_traffic() -> None:
    # weights 256 x 256 bf16 = 128 KiB stay; activations 100000 x 256 stream by rows:
    # 128 KiB + 2 (256 x 2 + 256 x 2) = 133120 B <= 140 KB
    t = product_traffic(
        m=100_000, n=256, k=256, a_bytes=2, b_bytes=2, c_bytes=2, sram_bytes=140_000
    )
    assert t.strategy == "resident"
    assert t.dram_bytes == 100_000 * 256 * 2 * 2 + 256 * 256 * 2


def test_resident_operands_move_nothing() -> None:
    t = product_traffic(
        m=4096,
        n=4096,
        k=4096,
        a_bytes=2,
        b_bytes=2,
        c_bytes=2,
        sram_bytes=1e6,
        resident=frozenset({"b"}),
    )
    assert (t.dram_read_bytes, t.dram_write_bytes) == (4096 * 4096 * 2, 4096 * 4096 * 2)
    t = product_traffic(
        m=8,
        n=8,
        k=8,
        a_bytes=2,
        b_bytes=2,
        c_bytes=4,
        sram_bytes=1e6,
        resident=frozenset({"a", "b", "c"}),
        accumulate=True,
    )
    assert t.dram_bytes == 0.0


def test_too_large_products_take_the_closed_form() -> None:
    # 1024^3 bf16 in S = 256^2 x 2 + 2 x 32 x (256 x 2 + 256 x 2) = 196608 B: square 256 blocks
    # fill it exactly; A and B are each read 1024 / 256 = 4 times, C written once
    s = 256 * 256 * 2 + 2 * PANEL_DEPTH * (256 * 2 + 256 * 2)
    t = product_traffic(m=1024, n=1024, k=1024, a_bytes=2, b_bytes=2, c_bytes=2, sram_bytes=s)
    size = 1024 * 1024 * 2
    assert t.strategy == "output-stationary"
    assert (t.dram_read_bytes, t.dram_write_bytes) == (8 * size, size)
    # the leading term of the bound, 2 mnk e^1.5 / sqrt(S), is 13.7 MB: within 38%
    bound = hong_kung_bound_bytes(m=1024, n=1024, k=1024, sram_bytes=s, elem_bytes=2)
    assert bound == pytest.approx(13.70e6, rel=1e-3)
    assert 1.0 < t.dram_bytes / bound < 1.38


def test_a_shallow_product_takes_algorithm_1s_panels() -> None:
    # k = 64 is shallow: a piece of A (mb rows, all of k) needs no partial sums of C, so A in
    # pieces with B re-read per piece beats C blocks with streamed panels. mb = (65536 - 2 x 64
    # x 2) / (64 x 2 + 2 x 2) = 494 rows, two pieces for m = 512: Q = |A| + 2 |B| + |C|
    m, n, k, s = 512, 100_000, 64, 65536
    t = product_traffic(m=m, n=n, k=k, a_bytes=2, b_bytes=2, c_bytes=2, sram_bytes=s)
    size_a, size_b, size_c = m * k * 2, k * n * 2, m * n * 2
    assert t.strategy == "panel-a-stationary"
    assert t.dram_bytes == size_a + 2 * size_b + size_c


def _brute_force_blocked(m: int, n: int, k: int, e: float, s: float) -> float:
    kb = min(k, PANEL_DEPTH)
    best = math.inf
    for mb in range(1, m + 1):
        for nb in range(1, n + 1):
            if mb * nb * e + 2 * kb * (mb * e + nb * e) <= s:
                q = m * k * e * math.ceil(n / nb) + k * n * e * math.ceil(m / mb)
                best = min(best, q)
    return best + m * n * e


def test_output_stationary_blocks_are_the_optimum_of_the_model() -> None:
    rng = random.Random(1)
    blocked = 0
    for _ in range(60):
        m, n, k = rng.randint(1, 60), rng.randint(1, 60), rng.randint(40, 200)
        s = rng.uniform(300, 6000)
        t = product_traffic(m=m, n=n, k=k, a_bytes=2, b_bytes=2, c_bytes=2, sram_bytes=s)
        size_a, size_b, size_c = m * k * 2, k * n * 2, m * n * 2
        nb, mb = min(n, (s - 4 * k) // (2 * k + 4)), min(m, (s - 4 * k) // (2 * k + 4))
        panels = min(
            size_b + math.ceil(n / nb) * size_a if nb >= 1 else math.inf,
            size_a + math.ceil(m / mb) * size_b if mb >= 1 else math.inf,
        )
        expected = min(_brute_force_blocked(m, n, k, 2, s), panels + size_c)
        if t.strategy != "resident":
            assert t.dram_bytes == pytest.approx(expected)
            blocked += 1
    assert blocked >= 20  # the sweep does reach products that do not fit


def _random_product(rng: random.Random) -> dict[str, Any]:
    elem = [1.0625, 2.0, 4.0]
    return dict(
        m=rng.choice([1, 7, 128, 2048, rng.randint(1, 70_000)]),
        n=rng.choice([1, 3, 512, 12288, rng.randint(1, 70_000)]),
        k=rng.choice([1, 32, 128, 12288, rng.randint(1, 70_000)]),
        a_bytes=rng.choice(elem),
        b_bytes=rng.choice(elem),
        c_bytes=rng.choice(elem),
        sram_bytes=10 ** rng.uniform(3, 9),
        accumulate=rng.random() < 0.3,
        cores=rng.choice([1, 2, 4, 16, 64]),
    )


@pytest.mark.parametrize("model", ["blocked", "algorithm1"])
def test_never_below_the_hong_kung_bound(model: str) -> None:
    rng = random.Random(7)
    for _ in range(3000):
        kw = _random_product(rng)
        t = product_traffic(**kw, model=model)
        e = min(kw["a_bytes"], kw["b_bytes"], kw["c_bytes"])
        bound = hong_kung_bound_bytes(
            m=kw["m"],
            n=kw["n"],
            k=kw["k"],
            sram_bytes=kw["sram_bytes"],
            elem_bytes=e,
        )
        assert t.dram_bytes >= bound * (1 - 1e-12), (kw, t)
        if model == "blocked":  # never below compulsory traffic either (the paper's rule can be)
            m, n, k = kw["m"], kw["n"], kw["k"]
            compulsory = (
                m * k * kw["a_bytes"]
                + k * n * kw["b_bytes"]
                + m * n * kw["c_bytes"] * (2 if kw["accumulate"] else 1)
            )
            assert t.dram_bytes >= compulsory * (1 - 1e-12), (kw, t)


def test_more_sram_never_moves_more() -> None:
    rng = random.Random(3)
    for _ in range(200):
        kw = _random_product(rng)
        kw.pop("sram_bytes")
        last = math.inf
        for s in sorted(10 ** rng.uniform(3, 9) for _ in range(12)):
            q = product_traffic(**kw, sram_bytes=s).dram_bytes
            assert q <= last * (1 + 1e-12), (kw, s)
            last = q


def test_algorithm1_is_the_papers_penalty_for_one_product() -> None:
    # nothing fits: the rule of palm.cost.sram for one operator (weights B, input A, output C)
    m, n, k, s = 4096, 4096, 4096, 1.5 * MiB
    t = product_traffic(
        m=m, n=n, k=k, a_bytes=2, b_bytes=2, c_bytes=2, sram_bytes=s, model="algorithm1"
    )
    (alloc,) = allocate_sram(
        [OpFootprint("gemm", k * n * 2, 0.0, m * k * 2, m * n * 2)], sram_bytes=s, training=False
    )
    assert t.dram_bytes == alloc.forward_bytes
    assert t.strategy == "algorithm1-" + alloc.strategy
    # the blocked model moves less: about 2 mnk e^1.5 / sqrt(S) + C
    blocked = product_traffic(m=m, n=n, k=k, a_bytes=2, b_bytes=2, c_bytes=2, sram_bytes=s)
    assert blocked.dram_bytes < 0.5 * t.dram_bytes


def test_multicast_takes_the_cheapest_core_grid() -> None:
    # B resident (say weights), A streams once; 4 cores: grids 1x4, 2x2, 4x1 deliver
    # A x 3, A + B, B x 3 beyond the first copy
    m, n, k = 1000, 100, 100  # A = 200 kB, B = 20 kB
    kw = dict(m=m, n=n, k=k, a_bytes=2, b_bytes=2, c_bytes=2, sram_bytes=1e9)
    size_a, size_b = m * k * 2, k * n * 2
    t = product_traffic(**kw, cores=4, resident=frozenset({"b"}))
    assert t.multicast_bytes == min(3 * size_a, size_a + size_b, 3 * size_b) == 3 * size_b
    # the DRAM bytes of the domain do not depend on how many cores share them
    one = product_traffic(**kw, cores=1)
    assert product_traffic(**kw, cores=4).dram_bytes == one.dram_bytes


@pytest.mark.parametrize(
    ("field", "kw"),
    [
        ("m", dict(m=0)),
        ("sram_bytes", dict(sram_bytes=0.0)),
        ("cores", dict(cores=0)),
        ("resident", dict(resident=frozenset({"x"}))),
        ("model", dict(model="lru")),
    ],
)
def test_bad_arguments_name_the_field(field: str, kw: dict[str, Any]) -> None:
    base: dict[str, Any] = dict(m=8, n=8, k=8, a_bytes=2, b_bytes=2, c_bytes=2, sram_bytes=1e6)
    with pytest.raises(ValueError, match=field):
        product_traffic(**{**base, **kw})


def test_a_fixed_grid_sends_each_operand_along_its_own_cores() -> None:
    # 2 x 4 grid of 8 cores (say DP rows x TP columns): A reaches 3 more cores, B 1 more
    kw: dict[str, Any] = dict(m=512, n=512, k=512, a_bytes=2, b_bytes=2, c_bytes=2)
    t = product_traffic(**kw, sram_bytes=1e9, cores=8, grid=(2, 4))
    size = 512 * 512 * 2
    assert (t.multicast_a_bytes, t.multicast_b_bytes) == (3 * size, size)
    assert t.multicast_bytes == 4 * size
    with pytest.raises(ValueError, match="grid"):
        product_traffic(**kw, sram_bytes=1e9, cores=8, grid=(2, 2))
