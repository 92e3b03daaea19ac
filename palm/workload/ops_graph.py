"""Generic operators of a ``family = "graph"`` model (paper Table III): :class:`Linear`,
:class:`Conv2d` (grouped or not) and :class:`Pool`, split over a tensor-parallel group by
output features."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from palm.workload.ops_base import (
    Collective,
    Gemm,
    Op,
    RecomputeMode,
)

__all__ = ["Linear", "Conv2d", "Pool"]


@dataclass(frozen=True)
class Linear(Op):
    """``Y = X W^T`` over ``tokens`` rows per sample (paper Table III: B, M=out, N=tokens, K=in).

    With ``tp > 1`` the output features are split (column parallel) and the output is
    all-gathered in the forward pass; the input gradient is all-reduced in the backward pass.
    """

    in_features: int
    out_features: int
    tokens: int = 1
    bias: bool = True

    @property
    def params(self) -> int:
        return self.in_features * self.out_features + (self.out_features if self.bias else 0)

    def forward_gemms(self, *, batch: int, tp: int) -> tuple[Gemm, ...]:
        return (Gemm(batch * self.tokens, self.out_features // tp, self.in_features),)

    def forward_vector_bytes(self, *, batch: int, tp: int, sp: bool, act_bytes: float) -> float:
        return 2.0 * batch * self.tokens * self.out_features / tp * act_bytes if self.bias else 0.0

    def activation_bytes(
        self, *, batch: int, tp: int, sp: bool, act_bytes: float, recompute: RecomputeMode
    ) -> float:
        return float(batch * self.tokens * self.in_features * act_bytes)

    def forward_collectives(
        self, *, batch: int, tp: int, sp: bool, act_bytes: float
    ) -> tuple[Collective, ...]:
        if tp == 1:
            return ()
        return (Collective("all-gather", batch * self.tokens * self.out_features * act_bytes),)

    def backward_collectives(
        self, *, batch: int, tp: int, sp: bool, act_bytes: float
    ) -> tuple[Collective, ...]:
        if tp == 1:
            return ()
        return (Collective("all-reduce", batch * self.tokens * self.in_features * act_bytes),)

    def output_bytes(self, *, batch: int, act_bytes: float) -> float:
        return float(batch * self.tokens * self.out_features * act_bytes)

    def input_bytes(self, *, batch: int, act_bytes: float) -> float:
        return float(batch * self.tokens * self.in_features * act_bytes)


def _out_size(size: int, kernel: int, stride: int, padding: int) -> int:
    return (size + 2 * padding - kernel) // stride + 1


@dataclass(frozen=True)
class Conv2d(Op):
    """2-D convolution as an implicit GEMM (``m = B*Ho*Wo``, ``n = out_channels``,
    ``k = in_channels*kernel^2``), optionally followed by batch norm and ReLU, whose traffic is
    charged as vector bytes. ``tp`` splits the output channels like :class:`Linear`.

    ``groups = g`` (grouped convolution, Krizhevsky et al. 2012; depthwise when
    ``g = in_channels = out_channels``, MobileNet, Howard et al. 2017 sec. 3.1): the channels
    fall into ``g`` groups, each output channel seeing only the ``in_channels / g`` inputs of
    its group, so the weights are ``(in_channels / g) x out_channels x kernel^2`` and the
    products are ``g`` independent GEMMs of ``m = B*Ho*Wo``, ``n = out_channels / g``,
    ``k = (in_channels / g)*kernel^2``: ``2 B Ho Wo out_channels in_channels kernel^2 / g``
    FLOPs, ``g`` times fewer than the dense convolution (PyTorch ``nn.Conv2d(groups=g)``).
    ``tp`` then splits whole groups (``g / tp`` per device when ``tp`` divides ``g``) or each
    group's output channels (when ``g`` divides ``tp``)."""

    in_channels: int
    out_channels: int
    in_hw: tuple[int, int]
    kernel: int
    stride: int = 1
    padding: int = 0
    bias: bool = False
    norm_act: bool = True
    groups: int = 1

    @property
    def out_hw(self) -> tuple[int, int]:
        h, w = self.in_hw
        return (
            _out_size(h, self.kernel, self.stride, self.padding),
            _out_size(w, self.kernel, self.stride, self.padding),
        )

    @property
    def params(self) -> int:
        weights = self.in_channels // self.groups * self.out_channels * self.kernel * self.kernel
        extra = self.out_channels if self.bias else 0
        if self.norm_act:
            extra += 2 * self.out_channels  # batch-norm scale and shift
        return weights + extra

    def _out_elems(self, batch: int) -> int:
        ho, wo = self.out_hw
        return batch * ho * wo * self.out_channels

    def forward_gemms(self, *, batch: int, tp: int) -> tuple[Gemm, ...]:
        ho, wo = self.out_hw
        g = self.groups
        k = self.in_channels // g * self.kernel * self.kernel
        if g == 1:
            return (Gemm(batch * ho * wo, self.out_channels // tp, k),)
        per_device = g // tp if g % tp == 0 else 1  # whole groups, or a share of one
        return (Gemm(batch * ho * wo, self.out_channels // tp // per_device, k, per_device),)

    def forward_vector_bytes(self, *, batch: int, tp: int, sp: bool, act_bytes: float) -> float:
        # batch norm (read, write) then ReLU (read, write) on the output
        return 4.0 * self._out_elems(batch) / tp * act_bytes if self.norm_act else 0.0

    def activation_bytes(
        self, *, batch: int, tp: int, sp: bool, act_bytes: float, recompute: RecomputeMode
    ) -> float:
        h, w = self.in_hw
        stored = float(batch * h * w * self.in_channels * act_bytes)
        if self.norm_act:
            stored += 2 * self._out_elems(batch) / tp * act_bytes  # BN input and ReLU output
        return float(stored)

    def forward_collectives(
        self, *, batch: int, tp: int, sp: bool, act_bytes: float
    ) -> tuple[Collective, ...]:
        if tp == 1:
            return ()
        return (Collective("all-gather", self._out_elems(batch) * act_bytes),)

    def backward_collectives(
        self, *, batch: int, tp: int, sp: bool, act_bytes: float
    ) -> tuple[Collective, ...]:
        if tp == 1:
            return ()
        h, w = self.in_hw
        grad = batch * h * w * self.in_channels * act_bytes
        if self.groups % tp == 0 and self.groups > 1:
            # whole groups per device: each input-gradient channel comes from one device
            return (Collective("all-gather", grad),)
        return (Collective("all-reduce", grad),)

    def output_bytes(self, *, batch: int, act_bytes: float) -> float:
        return float(self._out_elems(batch) * act_bytes)

    def input_bytes(self, *, batch: int, act_bytes: float) -> float:
        h, w = self.in_hw
        return float(batch * h * w * self.in_channels * act_bytes)


@dataclass(frozen=True)
class Pool(Op):
    """Max / average pooling (``kernel = 0`` means global pooling). No parameters, no GEMM."""

    channels: int
    in_hw: tuple[int, int]
    kernel: int
    stride: int = 1
    padding: int = 0
    kind: Literal["max", "avg"] = "max"

    @property
    def out_hw(self) -> tuple[int, int]:
        if self.kernel == 0:
            return (1, 1)
        h, w = self.in_hw
        return (
            _out_size(h, self.kernel, self.stride, self.padding),
            _out_size(w, self.kernel, self.stride, self.padding),
        )

    def forward_vector_bytes(self, *, batch: int, tp: int, sp: bool, act_bytes: float) -> float:
        h, w = self.in_hw
        ho, wo = self.out_hw
        return float(batch * self.channels * (h * w + ho * wo)) / tp * act_bytes

    def activation_bytes(
        self, *, batch: int, tp: int, sp: bool, act_bytes: float, recompute: RecomputeMode
    ) -> float:
        h, w = self.in_hw
        return float(batch * self.channels * h * w) / tp * act_bytes

    def output_bytes(self, *, batch: int, act_bytes: float) -> float:
        ho, wo = self.out_hw
        return float(batch * self.channels * ho * wo * act_bytes)

    def input_bytes(self, *, batch: int, act_bytes: float) -> float:
        h, w = self.in_hw
        return float(batch * self.channels * h * w * act_bytes)
