"""Operator-level parallelism (paper sec. IV-B, Table III).

A stage's tile group of ``G`` devices runs each Linear, Conv2d or Pool operator under a split
whose factors multiply to ``G``. Ranks are numbered in mixed radix over the split's dimensions,
the last one fastest; the *group* of a dimension is the set of ranks that differ only in it.
Sizes below are in elements (times the element size for bytes):

Linear ``[B, M, N, K]`` split ``(b, m, n, k)``: ``B`` samples, ``M`` rows per sample (tokens),
``N`` output and ``K`` input features. Each device multiplies ``(B/b)(M/m) x K/k`` by
``K/k x N/n``, ``2 B M N K / (b m n k)`` FLOPs; forward: all-reduce of the partial output
``B M N / (b m n)`` over the ``k`` group; backward: all-reduce of the input gradient
``B M K / (b m k)`` over the ``n`` group; update: all-reduce of the weight gradient
``N K / (n k)`` over the ``b`` group and over the ``m`` group.

Conv2d ``[B, H, W, C, R, S, K]`` split ``(b, c, i, k)``: ``c`` input channels, ``i`` the image
(rows), ``k`` output channels. Forward: all-reduce ``B Ho Wo K / (b i k)`` over ``c``;
backward: ``B H W C / (b i c)`` over ``k``; update: ``R S C K / (c k)`` over ``b`` and over ``i``.

Pool split ``(b, c, i)``: no communication.

The paper's text calls the input ``X`` of shape ``N x K`` and the weights ``M x K``, but Table
III's volumes are only consistent with an input of ``M x K`` and weights of ``N x K`` (the
backward all-reduce of ``B M K`` is the input gradient, the update all-reduce of ``N K`` the
weight gradient); we follow the table. Table III leaves out re-distribution between operators:
an output split over ``n`` (Linear) or ``k`` (Conv2d) is all-gathered over that group in the
forward pass before the next operator, which needs it whole; we add that all-gather.

The group processes ``micro_batch x dp`` samples per micro-batch (the ``b`` split takes the
role that data parallelism has for transformers, whose layers keep Megatron's ``(Nd, Nm)``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from palm.workload.ops import Collective, Conv2d, Gemm, Linear, Op, RecomputeMode

__all__ = ["SplitOp", "split_group", "split_groups", "SPLIT_DIMS"]

#: dimension names of each operator's split, in rank order (last fastest)
SPLIT_DIMS: dict[str, tuple[str, ...]] = {
    "linear": ("b", "m", "n", "k"),
    "conv2d": ("b", "c", "i", "k"),
    "pool": ("b", "c", "i"),
}


def split_group(split: tuple[int, ...], axis: int) -> str:
    """The group name of ``axis`` of ``split``: ``"2x2x2x2:3"``."""
    return "x".join(str(x) for x in split) + f":{axis}"


@dataclass(frozen=True)
class SplitOp(Op):
    """``inner`` run under ``split`` by a tile group that holds ``replicas`` micro-batches'
    worth of samples (the data-parallel degree of the configuration)."""

    inner: Op
    split: tuple[int, ...]
    replicas: int = 1

    # ---- shapes per device -------------------------------------------------------------

    @property
    def _kind(self) -> str:
        if isinstance(self.inner, Linear):
            return "linear"
        if isinstance(self.inner, Conv2d):
            return "conv2d"
        return "pool"

    def _dim(self, name: str) -> int:
        return self.split[SPLIT_DIMS[self._kind].index(name)]

    def _group(self, name: str) -> str:
        return split_group(self.split, SPLIT_DIMS[self._kind].index(name))

    def _samples(self, batch: int) -> int:
        return batch * self.replicas

    @property
    def params(self) -> int:
        return self.inner.params

    def params_per_device(self, *, tp: int) -> float:
        if self._kind == "linear":
            return self.inner.params / (self._dim("n") * self._dim("k"))
        if self._kind == "conv2d":
            return self.inner.params / (self._dim("c") * self._dim("k"))
        return 0.0

    def forward_gemms(self, *, batch: int, tp: int) -> tuple[Gemm, ...]:
        big = self._samples(batch)
        op = self.inner
        if isinstance(op, Linear):
            b, m, n, k = self.split
            rows = math.ceil(big / b) * math.ceil(op.tokens / m)
            return (Gemm(rows, math.ceil(op.out_features / n), math.ceil(op.in_features / k)),)
        if isinstance(op, Conv2d):
            b, c, i, k = self.split
            ho, wo = op.out_hw
            rows = math.ceil(big / b) * math.ceil(ho / i) * wo
            inner_dim = math.ceil(op.in_channels / c) * op.kernel * op.kernel
            return (Gemm(rows, math.ceil(op.out_channels / k), inner_dim),)
        return ()

    def forward_vector_bytes(self, *, batch: int, tp: int, sp: bool, act_bytes: float) -> float:
        total = self.inner.forward_vector_bytes(
            batch=self._samples(batch), tp=1, sp=False, act_bytes=act_bytes
        )
        return total / math.prod(self.split)

    def activation_bytes(
        self, *, batch: int, tp: int, sp: bool, act_bytes: float, recompute: RecomputeMode
    ) -> float:
        total = self.inner.activation_bytes(
            batch=self._samples(batch), tp=1, sp=False, act_bytes=act_bytes, recompute=recompute
        )
        return total / math.prod(self.split)

    def input_bytes(self, *, batch: int, act_bytes: float) -> float:
        total = self.inner.input_bytes(batch=self._samples(batch), act_bytes=act_bytes)
        spread = math.prod(self.split)
        if self._kind == "linear":
            spread //= self._dim("n")  # every n-partner reads the same input
        elif self._kind == "conv2d":
            spread //= self._dim("k")
        return total / spread

    def output_bytes(self, *, batch: int, act_bytes: float) -> float:
        return self.inner.output_bytes(batch=batch, act_bytes=act_bytes)

    # ---- Table III communication -------------------------------------------------------

    def table_iii(self, *, batch: int) -> dict[str, list[tuple[str, float]]]:
        """Table III's (group, elements) of each all-reduce, by phase."""
        big = self._samples(batch)
        op = self.inner
        if isinstance(op, Linear):
            b, m, n, k = self.split
            bmn = big * op.tokens * op.out_features / (b * m * n)
            bmk = big * op.tokens * op.in_features / (b * m * k)
            nk = op.out_features * op.in_features / (n * k)
            return {
                "forward": [(self._group("k"), bmn)],
                "backward": [(self._group("n"), bmk)],
                "update": [(self._group("b"), nk), (self._group("m"), nk)],
            }
        if isinstance(op, Conv2d):
            b, c, i, k = self.split
            h, w = op.in_hw
            ho, wo = op.out_hw
            out = big * ho * wo * op.out_channels / (b * i * k)
            inp = big * h * w * op.in_channels / (b * i * c)
            wgt = op.kernel * op.kernel * op.in_channels * op.out_channels / (c * k)
            return {
                "forward": [(self._group("c"), out)],
                "backward": [(self._group("k"), inp)],
                "update": [(self._group("b"), wgt), (self._group("i"), wgt)],
            }
        return {"forward": [], "backward": [], "update": []}

    def forward_collectives(
        self, *, batch: int, tp: int, sp: bool, act_bytes: float
    ) -> tuple[Collective, ...]:
        table = self.table_iii(batch=batch)
        out = [Collective("all-reduce", e * act_bytes, group=g) for g, e in table["forward"]]
        gather = (
            self._dim("n")
            if self._kind == "linear"
            else (self._dim("k") if self._kind == "conv2d" else 1)
        )
        if gather > 1:  # re-distribution: the next operator needs the output whole
            name = "n" if self._kind == "linear" else "k"
            split_out = self.inner.output_bytes(batch=self._samples(batch), act_bytes=act_bytes)
            per_group = split_out / (math.prod(self.split) / gather)
            out.append(Collective("all-gather", per_group, group=self._group(name)))
        return tuple(out)

    def backward_collectives(
        self, *, batch: int, tp: int, sp: bool, act_bytes: float
    ) -> tuple[Collective, ...]:
        table = self.table_iii(batch=batch)
        return tuple(Collective("all-reduce", e * act_bytes, group=g) for g, e in table["backward"])

    def update_collectives(self, *, tp: int, dp: int, grad_bytes: float) -> tuple[Collective, ...]:
        table = self.table_iii(batch=1)
        return tuple(Collective("all-reduce", e * grad_bytes, group=g) for g, e in table["update"])

    def recompute_gemms(self, *, batch: int, tp: int, recompute: RecomputeMode) -> tuple[Gemm, ...]:
        if recompute == "full":
            return self.forward_gemms(batch=batch, tp=tp)
        return ()


def split_groups(split: tuple[int, ...], axis: int) -> list[tuple[int, ...]]:
    """The rank groups of ``axis``: ranks that differ only in that dimension (mixed radix over
    ``split``, last dimension fastest)."""
    size = math.prod(split)
    stride = math.prod(split[axis + 1 :])
    seen: set[int] = set()
    groups = []
    for r in range(size):
        if r in seen:
            continue
        base = r - ((r // stride) % split[axis]) * stride
        group = tuple(base + j * stride for j in range(split[axis]))
        seen.update(group)
        groups.append(group)
    return groups
