"""DRAM traffic of one matrix product on a memory domain with a bounded SRAM.

``C[m, n] (+)= A[m, k] B[k, n]`` runs on a *memory domain*: ``cores`` cores that share operands
and pool their SRAM (``sram_bytes`` in all). Its DRAM traffic is the cheapest of:

* ``resident``: one operand stays in SRAM while the others stream through small double
  buffers (A-stationary: ``|A| + 2 (k b + m c) <= S``; B-stationary: ``|B| + 2 (k a + n c)
  <= S``; C-stationary: ``|C| + 2 (m a + n b) <= S``), or an operand is already in SRAM
  (``resident``). Only compulsory traffic moves: every operand not in SRAM once,
  ``|X| = rows x cols x bytes``; C is written once and, when accumulated, also read once.
* ``output-stationary``: C in blocks of ``mb x nb`` held in SRAM while double-buffered panels
  of A (``mb x kb``) and B (``kb x nb``) stream through, ``kb = min(k, PANEL_DEPTH)``:
  ``mb nb c + 2 kb (mb a + nb b) <= S``. A is read ``ceil(n / nb)`` times, B ``ceil(m / mb)``
  times, C written (and, accumulated, read) once::

      Q = |A| ceil(n / nb) + |B| ceil(m / mb) + |C| (1 + accumulate)

  The block is the exact optimum of this model: for each row-block count ``q`` the smallest
  ``mb = ceil(m / q)`` leaves the widest ``nb``, and only ``O(sqrt m)`` such ``mb`` differ.
  With square blocks ``x = sqrt(S / c)`` and ``a = b = c = e`` this is ``2 mnk e / x``, the
  leading term of the lower bound below: the blocking is communication-optimal (Irony, Toledo
  & Tiskin 2004; Smith et al. 2019; Kwasniewski et al. 2019, whose COSMA schedule is this one).
* Algorithm 1's two panel strategies (PALM sec. IV-C) applied to one product: B in pieces
  of ``nb`` full-depth columns that fit beside the streams of A rows and C row segments
  (``k nb b + 2 (k a + nb c) <= S``), A re-read for each piece:
  ``Q = |B| + ceil(n / nb) |A| + |C|`` (``panel-b-stationary``; the paper's "weight
  stationary"), or the mirror image with A in pieces of ``mb`` rows (``panel-a-stationary``,
  "input stationary"). They win for shallow products (small ``k``), which need no partial sums
  of C. The paper's ``Phi = ceil(|B| / S) |A|`` leaves out the one read of the stationary
  operand itself and the room for the streams; both are counted here.
* ``unblocked`` only when not even one panel row fits: every multiply re-reads its operands.

``model = "algorithm1"`` prices the paper's rule per product instead: compulsory traffic when A,
B and C fit in SRAM together (or an operand is resident), else
``min(ceil(|B|/S) |A|, ceil(|A|/S) |B|) + |C|`` exactly as printed, for reproducing the paper.

**Lower bound.** A product whose operands start in DRAM moves at least ``2 mnk / sqrt(S_e)``
elements between DRAM and a fast memory of ``S_e`` elements, to leading order: Hong & Kung
(1981) proved the order, Irony, Toledo & Tiskin (2004) gave it for rectangular ``m, n, k``, and
Smith et al. (2019) and Kwasniewski et al. (2019) the tight constant 2 (rigorously
``2 mnk / sqrt(S_e) - 2 S_e``; COSMA adds ``+ mn`` for writing C). We use the leading term. In
bytes, with elements of at least ``e`` bytes, ``S_e <= S / e`` and every element moved costs
``>= e`` bytes, so (:func:`hong_kung_bound_bytes`)::

    Q_bytes >= 2 mnk e / sqrt(S / e) = 2 mnk e^1.5 / sqrt(S),    e = min(a, b, c)

The leading term alone is not a theorem for every size, but every strategy above respects it,
by AM-GM: the panels move ``u |A| + |C| >= 2 sqrt(u |A| |C|) >= 2 mnk sqrt(abc / S)`` with
``u >= |B| / S``; the blocks ``e mnk (1/nb + 1/mb) >= 2 e mnk / sqrt(mb nb)`` with
``mb nb <= S / c``; a stationary B that fits, ``|A| + |C| >= 2 sqrt(|A| |C|) >= 2 mnk
sqrt(abc / S)`` since ``|B| <= S`` (likewise for A and C). The tests check it on a randomized
sweep rather than by clamping. It does not apply when an operand is already resident (that
operand was loaded before).

References: J.-W. Hong, H. T. Kung, "I/O complexity: the red-blue pebble game", STOC 1981;
D. Irony, S. Toledo, A. Tiskin, "Communication lower bounds for distributed-memory matrix
multiplication", JPDC 64(9), 2004; T. M. Smith, B. Lowery, J. Langou, R. A. van de Geijn,
"A tight I/O lower bound for matrix multiplication", arXiv:1702.02017 (2019); G. Kwasniewski
et al., "Red-blue pebbling revisited: near optimal parallel matrix-matrix multiplication"
(COSMA), SC'19.

**Multicast.** The domain's work (each block, or the whole product) is split over a
``pr x pc`` grid of its cores (``pr pc = cores``); every element of A is needed by the ``pc``
cores of its grid row and every element of B by the ``pr`` cores of its column. One DRAM read
(or, for a resident operand, the one SRAM copy) delivers it to one core; the NoC carries the
others: ``multicast = A_delivered (pc - 1) + B_delivered (pr - 1)``, on the grid given
(``grid``, e.g. the DP x TP structure of a stage) or else the one that minimises it (the 2-D
multicast of Tenstorrent's matmul kernels and COSMA's processor grid). C stays where it is
computed.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

__all__ = [
    "PANEL_DEPTH",
    "SRAM_MODELS",
    "ProductTraffic",
    "product_traffic",
    "hong_kung_bound_bytes",
]

PANEL_DEPTH = 32
"""Depth ``kb`` of one streamed panel of A and B: one 32 x 32 tile edge (the tile of Tenstorrent's
matrix engine, and the k-step of GPU GEMM kernels)."""

SRAM_MODELS: tuple[str, ...] = ("blocked", "algorithm1")
_OPERANDS = frozenset({"a", "b", "c"})


@dataclass(frozen=True)
class ProductTraffic:
    """DRAM and NoC bytes of one product on its memory domain (all of the domain's cores)."""

    dram_read_bytes: float
    dram_write_bytes: float
    multicast_bytes: float
    strategy: str
    multicast_a_bytes: float = 0.0  # the part of multicast_bytes that carries A
    multicast_b_bytes: float = 0.0  # and B

    @property
    def dram_bytes(self) -> float:
        return self.dram_read_bytes + self.dram_write_bytes


def hong_kung_bound_bytes(*, m: int, n: int, k: int, sram_bytes: float, elem_bytes: float) -> float:
    """``2 mnk e^1.5 / sqrt(S)``: the fewest bytes any schedule of ``C[m,n] = A[m,k] B[k,n]``
    moves between DRAM and an SRAM of ``S`` bytes, elements of ``e`` bytes (Hong & Kung 1981;
    tight leading term of Smith et al. 2019, Kwasniewski et al. 2019)."""
    s_elems = sram_bytes / elem_bytes
    return 2.0 * m * n * k / math.sqrt(s_elems) * elem_bytes


def product_traffic(
    *,
    m: int,
    n: int,
    k: int,
    a_bytes: float,
    b_bytes: float,
    c_bytes: float,
    sram_bytes: float,
    cores: int = 1,
    resident: frozenset[str] = frozenset(),
    accumulate: bool = False,
    model: str = "blocked",
    grid: tuple[int, int] | None = None,
) -> ProductTraffic:
    """C[m,n] (+)= A[m,k] B[k,n] on a memory domain of `cores` cores pooling `sram_bytes` in all;
    a_bytes/b_bytes/c_bytes are bytes per element (block formats may be fractional);
    `resident` names operands already in SRAM ("a", "b", "c"); `accumulate` = C is read and
    written (fp32 weight-gradient accumulator). model="algorithm1" = the paper's rule.
    `grid` = (pr, pc), pr x pc = cores, fixes the cores' grid (pc cores share each element of
    A, pr cores each element of B); None takes the grid with the least multicast.

    Raises ValueError naming the argument for sizes below 1, non-positive bytes, an unknown
    operand or model."""
    _check(m=m, n=n, k=k, a=a_bytes, b=b_bytes, c=c_bytes, s=sram_bytes, cores=cores)
    if grid is not None and (len(grid) != 2 or min(grid) < 1 or grid[0] * grid[1] != cores):
        raise ValueError(f"grid = {grid} is not allowed: expected (pr, pc) with pr x pc = {cores}")
    if not resident <= _OPERANDS:
        raise ValueError(f"resident = {sorted(resident)} is not allowed: expected 'a', 'b', 'c'")
    if model not in SRAM_MODELS:
        raise ValueError(f"model = {model!r} is not allowed: expected one of {SRAM_MODELS}")
    size_a, size_b, size_c = float(m * k * a_bytes), float(k * n * b_bytes), float(m * n * c_bytes)
    s = float(sram_bytes)
    acc = 1.0 if accumulate else 0.0
    # (strategy, A reads, B reads, C reads, C writes); resident operands move nothing
    compulsory = (
        "resident",
        0.0 if "a" in resident else size_a,
        0.0 if "b" in resident else size_b,
        0.0 if "c" in resident else acc * size_c,
        0.0 if "c" in resident else size_c,
    )
    if model == "algorithm1":  # the paper's rule: compulsory only when all three fit together
        fits = size_a + size_b + size_c <= s
    else:
        fits = _fits(m=m, n=n, k=k, a=a_bytes, b=b_bytes, c=c_bytes, s=s)
    if resident or fits:
        return _priced(compulsory, size_a, size_b, resident, cores, grid)
    cands: list[tuple[str, float, float]]  # (strategy, A reads, B reads)
    if model == "algorithm1":  # input stationary first: the paper takes it on a tie
        cands = [
            ("algorithm1-input-stationary", 0.0, math.ceil(size_a / s) * size_b),
            ("algorithm1-weight-stationary", math.ceil(size_b / s) * size_a, 0.0),
        ]
    else:
        cands = _panels(m=m, n=n, k=k, a=a_bytes, b=b_bytes, c=c_bytes, s=s)
        blocked = _output_stationary(m=m, n=n, k=k, a=a_bytes, b=b_bytes, c=c_bytes, s=s)
        if blocked is not None:
            cands.insert(0, ("output-stationary", *blocked))
        if not cands:  # not even a panel row fits: a scalar accumulator, operands re-read
            cands = [("unblocked", size_a * n, size_b * m)]
    full = [(name, ra, rb, acc * size_c, size_c) for name, ra, rb in cands]
    best = min(full, key=lambda x: x[1] + x[2] + x[3] + x[4])  # first of equals
    return _priced(best, size_a, size_b, resident, cores, grid)


def _check(*, m: int, n: int, k: int, a: float, b: float, c: float, s: float, cores: int) -> None:
    for name, v in (("m", m), ("n", n), ("k", k), ("cores", cores)):
        if v < 1:
            raise ValueError(f"{name} = {v} is not allowed: expected an integer >= 1")
    for name, x in (("a_bytes", a), ("b_bytes", b), ("c_bytes", c), ("sram_bytes", s)):
        if not x > 0:
            raise ValueError(f"{name} = {x} is not allowed: expected a number > 0")


def _fits(*, m: int, n: int, k: int, a: float, b: float, c: float, s: float) -> bool:
    """Whether one operand fits in SRAM beside double buffers for a row or column of the
    others, so that every operand moves once."""
    return (
        m * k * a + 2 * (k * b + m * c) <= s  # A stationary: stream B and C by columns
        or k * n * b + 2 * (k * a + n * c) <= s  # B stationary: stream A and C by rows
        or m * n * c + 2 * (m * a + n * b) <= s  # C stationary: outer products of A and B
    )


def _panels(
    *, m: int, n: int, k: int, a: float, b: float, c: float, s: float
) -> list[tuple[str, float, float]]:
    """Algorithm 1's two panel strategies, with room for their streams: B in pieces of ``nb``
    full-depth columns (``k nb b + 2 (k a + nb c) <= S``) with A re-read for each, or A in
    pieces of ``mb`` rows (``mb k a + 2 (k b + mb c) <= S``) with B re-read for each."""
    out: list[tuple[str, float, float]] = []
    nb = min(n, math.floor((s - 2 * k * a) / (k * b + 2 * c)))
    if nb >= 1:
        out.append(("panel-b-stationary", math.ceil(n / nb) * m * k * a, k * n * b))
    mb = min(m, math.floor((s - 2 * k * b) / (k * a + 2 * c)))
    if mb >= 1:
        out.append(("panel-a-stationary", m * k * a, math.ceil(m / mb) * k * n * b))
    return out


def _output_stationary(
    *, m: int, n: int, k: int, a: float, b: float, c: float, s: float
) -> tuple[float, float] | None:
    """Reads of A and B of the best ``mb x nb`` output-stationary blocking (None if not even
    a 1 x 1 block fits)."""
    kb = min(k, PANEL_DEPTH)
    r = math.isqrt(m)
    q = np.arange(1, r + 1, dtype=np.int64)
    mb = np.unique(np.concatenate([-(-m // q), np.arange(1, r + 2, dtype=np.int64)]))
    mb = mb[mb <= m]
    nb = np.floor((s - 2 * kb * mb * a) / (mb * c + 2 * kb * b))
    nb = np.minimum(nb, n)
    ok = nb >= 1
    if not ok.any():
        return None
    mb, nb = mb[ok], nb[ok]
    reads_a = m * k * a * np.ceil(n / nb)
    reads_b = k * n * b * np.ceil(m / mb)
    i = int(np.argmin(reads_a + reads_b))
    return float(reads_a[i]), float(reads_b[i])


def _priced(
    cand: tuple[str, float, float, float, float],
    size_a: float,
    size_b: float,
    resident: frozenset[str],
    cores: int,
    grid: tuple[int, int] | None,
) -> ProductTraffic:
    strategy, reads_a, reads_b, reads_c, writes_c = cand
    deliver_a = size_a if "a" in resident else reads_a
    deliver_b = size_b if "b" in resident else reads_b
    if grid is None:  # the grid with the least multicast (fewest rows first on a tie)
        grids = [(pr, cores // pr) for pr in range(1, cores + 1) if cores % pr == 0]
        grid = min(grids, key=lambda g: deliver_a * (g[1] - 1) + deliver_b * (g[0] - 1))
    pr, pc = grid
    multicast_a, multicast_b = deliver_a * (pc - 1), deliver_b * (pr - 1)
    return ProductTraffic(
        dram_read_bytes=reads_a + reads_b + reads_c,
        dram_write_bytes=writes_c,
        multicast_bytes=multicast_a + multicast_b,
        strategy=strategy,
        multicast_a_bytes=multicast_a,
        multicast_b_bytes=multicast_b,
    )
