"""The matrix products of every pass of an operator, each on its memory domain, and their DRAM
and NoC traffic per device (:mod:`palm.cost.blocking`; ``hardware.sram_model = "blocked"``).

For a product ``C = A B`` of one device (``A`` the input activation, ``B`` the weights for
a weighted product, ``m x k`` and ``k x n``) the passes run (Megatron-LM's tensor parallelism)

* forward, and again when recomputed: ``C = A B``;
* input gradient ``dA = dC B^T`` (``m x n`` times ``n x k``);
* weight gradient ``dB += A^T dC`` (``k x m`` times ``m x n``) into an fp32 accumulator that
  is read and written once per micro-batch unless it stays in SRAM.

The **memory domain** of a product is the set of cores that share one of its operands; they
pool their SRAM and multicast the shared operand over the NoC. Cores that share ``A`` compute
different column blocks of one domain product (its ``n`` grows by their number), cores that
share ``B`` different row blocks (its ``m`` grows):

* the TP group shares the input of a column-parallel product (``n`` split: QKV, MLP up,
  Linear, logits) in the forward pass and in its weight gradient, and the output gradient of a
  row-parallel product (``k`` split: attention projection, MLP down) in its input gradient and
  weight gradient;
* the stage's DP replicas run in lockstep (every replica runs the same micro-batch slot of the
  same schedule) and share the weights in the forward pass and the input gradient. Their
  weight-gradient accumulators differ, so the weight gradient is not shared across DP;
* attention's activation-by-activation products share nothing; nor do operator splits
  (:mod:`palm.workload.opsplit`), which are priced on their own device. One head's scores stay
  in SRAM between its products when they fit (:data:`SCORES_SRAM_FRACTION`).

What stays in SRAM across operators is Algorithm 1's stage-level decision
(:mod:`palm.cost.sram`): ``activation-stream`` keeps the weights (and weight gradients) resident,
``weight-stream`` the activations, ``on-chip`` everything; otherwise every operand is in DRAM
and each product is blocked. Each product is one kernel: its operands not resident come from
DRAM and its result goes back (intermediate activations of a layer included); element-wise
operators are taken as fused into the products' epilogues (their traffic stays at SRAM
bandwidth, :mod:`palm.cost.compute`).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

from palm.cost.blocking import product_traffic
from palm.workload.ops import Conv2d, Gemm, Op, RecomputeMode
from palm.workload.opsplit import SplitOp

__all__ = [
    "ACCUMULATOR_BYTES",
    "SCORES_SRAM_FRACTION",
    "DomainProduct",
    "PassTraffic",
    "op_products",
    "pass_traffic",
]

SCORES_SRAM_FRACTION = 0.5
"""The ``s x s`` scores of one attention head stay in the core's SRAM between ``Q K^T``, the
softmax and the product with ``V`` (and likewise in the backward pass) when they take at most
this fraction of it, the rest holding the blocks of Q, K and V: a tiled chip's compiler keeps a
producer's output on chip for its consumer when it fits (Tenstorrent's TT-Buda streams between
cores; FlashAttention's tiling does the same on GPUs, Dao et al. 2022). Larger scores go through
DRAM, as unfused attention does (Megatron-LM 2021)."""

ACCUMULATOR_BYTES = 4.0
"""Bytes per element of the weight-gradient accumulator (fp32, as mixed-precision training keeps
it; Micikevicius et al. 2018)."""


@dataclass(frozen=True)
class DomainProduct:
    """One device's product ``count x (C[m,n] = A[m,k] B[k,n])`` and how it is shared: ``a_share``
    cores of group ``a_group`` share A, ``b_share`` cores of ``b_group`` share B. Operand kinds:
    ``"x"`` activation or its gradient, ``"w"`` weights, ``"g"`` weight-gradient accumulator,
    ``"s"`` attention scores (or their gradient) of one head. ``scales`` shrink an operand's
    bytes in DRAM below its elements: a convolution's implicit-GEMM input has ``kernel^2``
    times the elements of the image it is gathered from on chip."""

    m: int
    n: int
    k: int
    count: int
    kinds: tuple[str, str, str]
    a_group: str = "tp"
    a_share: int = 1
    b_group: str = "dp"
    b_share: int = 1
    accumulate: bool = False
    row_parallel: bool = False  # weights split along k under TP (the output is a partial sum)
    scales: tuple[float, float, float] = (1.0, 1.0, 1.0)  # DRAM bytes per element, relative


@dataclass(frozen=True)
class PassTraffic:
    """Per-device bytes of one pass of one operator: DRAM, and the NoC multicast per group."""

    dram_bytes: float = 0.0
    multicast_bytes: tuple[tuple[str, float], ...] = ()

    def __add__(self, other: PassTraffic) -> PassTraffic:
        groups = dict(self.multicast_bytes)
        for g, x in other.multicast_bytes:
            groups[g] = groups.get(g, 0.0) + x
        return PassTraffic(self.dram_bytes + other.dram_bytes, tuple(sorted(groups.items())))


@functools.lru_cache(maxsize=1024)
def op_products(
    op: Op,
    *,
    batch: int,
    tp: int,
    dp: int,
    recompute: RecomputeMode,
    training: bool,
    accumulate: bool = True,
) -> tuple[tuple[DomainProduct, ...], tuple[DomainProduct, ...]]:
    """The forward and the backward (recompute, input and weight gradients) products of ``op``
    on one device, with their memory domains. ``accumulate``: the weight gradient adds to an
    accumulator (more than one micro-batch per iteration) rather than initialising it."""
    fwd = op.forward_gemms(batch=batch, tp=tp)
    full = op.forward_gemms(batch=batch, tp=1)
    if len(full) != len(fwd):  # products that come and go with TP: no TP sharing to infer
        full = fwd
    attention = _positions(op.recompute_gemms(batch=batch, tp=tp, recompute="selective"), fwd)
    dp = 1 if isinstance(op, SplitOp) else dp
    forward = []
    for i, (g, g1) in enumerate(zip(fwd, full, strict=True)):
        if i in attention:
            forward.append(DomainProduct(g.m, g.n, g.k, g.count, _score_kinds(i, attention, fwd)))
        else:  # weights: column-parallel (n split) shares A over TP, all share B over DP
            col = g.n < g1.n
            forward.append(
                DomainProduct(
                    g.m, g.n, g.k, g.count, ("x", "w", "x"),
                    a_share=tp if col else 1, b_share=dp, row_parallel=g.k < g1.k,
                    scales=(_gather_scale(op), 1.0, 1.0),
                )
            )  # fmt: skip
    if not training:
        return tuple(forward), ()
    redo = op.recompute_gemms(batch=batch, tp=tp, recompute=recompute)
    backward = [  # a recomputed product that is not a forward one shares nothing
        forward[i] if i is not None else DomainProduct(g.m, g.n, g.k, g.count, ("x", "x", "x"))
        for g, i in zip(redo, _positions(redo, fwd), strict=True)
    ]
    for p in forward:
        backward += _gradients(p, tp=tp, accumulate=accumulate)
    return tuple(forward), tuple(backward)


def _score_kinds(
    i: int, attention: list[int | None], fwd: tuple[Gemm, ...]
) -> tuple[str, str, str]:
    """Operand kinds of attention product ``i``: the ``s x s`` scores that ``Q K^T`` writes and
    the next product (scores times ``V``) reads are ``"s"``."""
    kinds = ["x", "x", "x"]
    j = attention.index(i)
    nxt = attention[j + 1] if j + 1 < len(attention) else None
    prev = attention[j - 1] if j > 0 else None
    if nxt is not None and (fwd[i].m, fwd[i].n) == (fwd[nxt].m, fwd[nxt].k):
        kinds[2] = "s"  # C feeds the next product as its A
    if prev is not None and (fwd[prev].m, fwd[prev].n) == (fwd[i].m, fwd[i].k):
        kinds[0] = "s"
    return kinds[0], kinds[1], kinds[2]


def _gradients(p: DomainProduct, *, tp: int, accumulate: bool) -> list[DomainProduct]:
    """Input gradient ``dA = dC B^T`` and weight gradient ``dB (+)= A^T dC`` of forward product
    ``p``; operand kinds follow the tensors (``dC`` is of ``C``'s kind, ``dA`` of ``A``'s)."""
    a, b, c = p.kinds
    sa, sb, sc = p.scales
    weighted = b == "w"
    row = p.row_parallel
    dx = DomainProduct(
        p.m, p.k, p.n, p.count, (c, b, a),
        a_share=tp if row else 1, b_share=p.b_share, scales=(sc, sb, sa),
    )  # fmt: skip
    dw = DomainProduct(
        p.k, p.n, p.m, p.count, (a, c, "g" if weighted else b),
        a_share=p.a_share, b_group="tp", b_share=tp if row else 1,
        accumulate=weighted and accumulate, scales=(sa, sc, 1.0 if weighted else sb),
    )  # fmt: skip
    return [dx, dw]


def _gather_scale(op: Op) -> float:
    """Bytes in DRAM per element of a convolution's implicit-GEMM input: the image has
    ``H W`` pixels per channel where the GEMM has ``Ho Wo kernel^2`` (at most 1: a strided
    1 x 1 convolution reads only the pixels it uses)."""
    conv = op.inner if isinstance(op, SplitOp) else op
    if not isinstance(conv, Conv2d):
        return 1.0
    (h, w), (ho, wo) = conv.in_hw, conv.out_hw
    return min(1.0, h * w / (ho * wo * conv.kernel**2))


def _positions(subset: tuple[Gemm, ...], gemms: tuple[Gemm, ...]) -> list[int | None]:
    """Index in ``gemms`` of each product of ``subset``, matched in order (operators may repeat
    a shape: MLP up and down with ``4h / tp = h``); None for one that is not there."""
    out: list[int | None] = []
    i = 0
    for g in subset:
        j = next((j for j in range(i, len(gemms)) if gemms[j] == g), None)
        out.append(j)
        i = i if j is None else j + 1
    return out


def pass_traffic(
    products: tuple[DomainProduct, ...],
    *,
    resident_kinds: frozenset[str],
    act_bytes: float,
    weight_bytes: float,
    sram_bytes: float,
    model: str = "blocked",
) -> PassTraffic:
    """Per-device DRAM and multicast bytes of ``products``, operands of the kinds in
    ``resident_kinds`` held in SRAM. ``sram_bytes`` is one core's SRAM."""
    total = PassTraffic()
    for p in products:
        total = total + _product(p, resident_kinds, act_bytes, weight_bytes, sram_bytes, model)
    return total


@functools.lru_cache(maxsize=4096)
def _product(
    p: DomainProduct,
    resident_kinds: frozenset[str],
    act_bytes: float,
    weight_bytes: float,
    sram_bytes: float,
    model: str,
) -> PassTraffic:
    size = {"x": act_bytes, "s": act_bytes, "w": weight_bytes, "g": ACCUMULATOR_BYTES}
    a, b, c = p.kinds
    sa, sb, sc = p.scales
    cores = p.a_share * p.b_share
    m, n = p.m * p.b_share, p.n * p.a_share
    elements = {"a": m * p.k, "b": p.k * n, "c": m * n}
    resident = frozenset(
        x
        for x, kind in zip("abc", p.kinds, strict=True)
        if kind in resident_kinds
        or (kind == "s" and elements[x] * act_bytes <= SCORES_SRAM_FRACTION * sram_bytes)
    )
    t = product_traffic(
        m=m,
        n=n,
        k=p.k,
        a_bytes=size[a] * sa,
        b_bytes=size[b] * sb,
        c_bytes=size[c] * sc,
        sram_bytes=sram_bytes * cores,
        cores=cores,
        resident=resident,
        accumulate=p.accumulate,
        model=model,
        grid=(p.b_share, p.a_share),
    )
    per_device = p.count / cores
    groups: dict[str, float] = {}
    for group, x in ((p.a_group, t.multicast_a_bytes), (p.b_group, t.multicast_b_bytes)):
        if x > 0:
            groups[group] = groups.get(group, 0.0) + x * per_device
    return PassTraffic(t.dram_bytes * per_device, tuple(sorted(groups.items())))
