"""Activation CPU offloading: the saved activations of some transformer layers go to host
memory during the forward pass and come back for the backward pass
(``training.activation_offload``; docs/model.md sec. 9.8).

Megatron-Core's ``--cpu-offloading`` (``megatron/core/cpu_offload.py``, the same handler as
Transformer Engine's ``transformer_engine/pytorch/cpu_offload.py``,
``AsyncDoubleBufferGroupOffloadHandler``) offloads the saved tensors of ``N`` of a model
chunk's ``L`` layers (``--cpu-offloading-num-layers``): layer ``i``'s tensors are copied to
host on a side stream (``d2h_stream``) once its forward pass ends, while the next layers
compute; at the end of the window of ``w = floor(L / N)`` layers that follows
(``layer_window_map``) the compute stream waits for the copy, frees the device copy and
starts the next layer's. The backward pass mirrors it (``bulk_reload_group`` on ``h2d_stream``,
one group ahead). So a copy of ``A`` bytes at the host link's bandwidth ``B`` hides behind
``w`` layers' passes and the rest is exposed, per offloaded layer:

    E_forward  = N max(0, A / B - w c_f)
    E_backward = N max(0, A / B - w c_b)

with ``c_f`` and ``c_b`` one layer's forward and backward (recompute included) time. The
copies run on the copy engines (no SMs) and load HBM with ``A`` bytes per layer each way,
under 1/40 of its bandwidth on every preset: not priced. ``B`` is the preset's
``host_link_gbps``, per direction (PCIe for x86 hosts, NVLink-C2C for Grace).

Memory: the offloaded layers' activations leave the device for every micro-batch in flight;
the copy in progress and the layer computing keep up to two layers' worth
("at most two activation groups in GPU memory", the handler's docstring), counted once.
Host memory is not checked.
"""

from __future__ import annotations

import math

__all__ = ["offload_exposed_s", "offload_memory_bytes", "offloaded_layers"]


def offloaded_layers(*, layers: int, fraction: float) -> int:
    """How many of a chunk's ``layers`` transformer layers offload their activations:
    ``round(fraction x layers)``, at most ``layers``; 0 for ``fraction = 0``."""
    if fraction <= 0 or layers <= 0:
        return 0
    return min(layers, max(1, round(fraction * layers)))


def offload_exposed_s(
    *,
    layers: int,
    offloaded: int,
    layer_bytes: float,
    host_Bps: float,
    forward_layer_s: float,
    backward_layer_s: float,
) -> tuple[float, float]:
    """Exposed seconds of the forward and backward passes of a chunk of ``layers`` layers of
    which ``offloaded`` copy their ``layer_bytes`` of saved activations over a host link of
    ``host_Bps`` bytes per second per direction (module docstring's equations)."""
    if offloaded <= 0 or layer_bytes <= 0:
        return 0.0, 0.0
    if host_Bps <= 0:
        raise ValueError("host link bandwidth must be positive to offload activations")
    window = max(1, math.floor(layers / offloaded))
    copy = layer_bytes / host_Bps
    forward = offloaded * max(0.0, copy - window * forward_layer_s)
    backward = offloaded * max(0.0, copy - window * backward_layer_s)
    return forward, backward


def offload_memory_bytes(
    *, offloaded: int, layer_bytes: float, in_flight: float
) -> tuple[float, float]:
    """Device bytes the offload frees over the stage's ``in_flight`` micro-batches, and the
    bytes its buffers hold (two layers' activations while a copy runs), as ``(freed,
    buffers)``."""
    if offloaded <= 0 or layer_bytes <= 0:
        return 0.0, 0.0
    return offloaded * layer_bytes * in_flight, min(offloaded, 2) * layer_bytes
