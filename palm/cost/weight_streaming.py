"""Weight streaming (``hardware.execution = "weight-streaming"``, docs/model.md sec. 7d): the
execution of the Cerebras CS-2 / CS-3 for models whose state does not fit the wafer (Cerebras,
"Weight Streaming Execution" whitepaper and Hot Chips 33, 2021, "Cerebras Wafer Scale Engine 2
... MemoryX and SwarmX"; the Argonne ALCF AI-testbed documentation, "activations stay present on
wafer and weights are streamed one layer at a time").

The model state lives in an external memory service (MemoryX) joined to the mesh by one link of
``B = external_memory_gbps`` (per direction). A pass runs its operators in order (the backward
pass in reverse); operator ``i`` computes for ``c_i`` seconds once its weights, ``s_i = W_i / B``
seconds of stream, have arrived. The mesh holds two weight buffers (the operator computing and
the next one: one operator of prefetch), so operator ``i``'s stream starts once ``i - 1``'s has
arrived and ``i - 2`` has finished computing, which frees its buffer:

    A_i = max(A_{i-1}, E_{i-2}) + s_i,     E_i = max(E_{i-1}, A_i) + c_i,

with ``A_{-1} = E_{-1} = E_{-2} = 0``; the pass takes ``E_last``. In the backward pass operator
``i``'s weight gradients, ``o_i = G_i / B`` seconds, stream out on the link's other direction
once it has computed, ``O_i = max(O_{i-1}, E_i) + o_i``, and the pass ends at
``max(E_last, O_last)``. The optimizer step runs in the service as the gradients arrive
(Linley Group, "Cerebras Performs Extreme Training", 2021: MemoryX "also includes processors
that execute the calculations for weight iteration and optimization"), not on the mesh.

Bounds: a pass is never shorter than its compute ``sum c_i`` nor than its stream
``sum s_i`` (+ the last operator's compute), and the recurrences are monotone: a faster link
(smaller ``s_i``, ``o_i``) never lengthens a pass."""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["streamed_forward_s", "streamed_backward_s"]


def streamed_forward_s(*, compute_s: Sequence[float], stream_s: Sequence[float]) -> float:
    """Seconds of a pass whose operator ``i`` computes ``compute_s[i]`` after its weights'
    ``stream_s[i]`` seconds on the link, with one operator of prefetch (module docstring)."""
    end, _ = _pass(compute_s, stream_s)
    return end[-1] if end else 0.0


def streamed_backward_s(
    *, compute_s: Sequence[float], stream_s: Sequence[float], out_s: Sequence[float]
) -> float:
    """Seconds of a backward pass (operators in the order they run): the forward recurrence,
    and each operator's gradients streamed out (``out_s[i]`` seconds on the link's other
    direction) once it has computed; the pass ends when the last gradient is out."""
    end, _ = _pass(compute_s, stream_s)
    out = 0.0
    for e, o in zip(end, out_s, strict=True):
        out = max(out, e) + o
    return max(end[-1], out) if end else 0.0


def _pass(compute_s: Sequence[float], stream_s: Sequence[float]) -> tuple[list[float], float]:
    """End of every operator's compute, and when the last stream arrived."""
    arrived = 0.0
    end: list[float] = []
    for i, (c, s) in enumerate(zip(compute_s, stream_s, strict=True)):
        freed = end[i - 2] if i >= 2 else 0.0  # the buffer of operator i - 2
        arrived = max(arrived, freed) + s
        end.append(max(end[-1] if end else 0.0, arrived) + c)
    return end, arrived
