"""Unit constants and precision sizes used across the simulator.

All internal quantities are SI: seconds, bytes, FLOP, bytes per second. Configuration fields
carry their unit in their name (``link_bandwidth_gbps`` is 10^9 bytes/s, ``sram_per_core_mib``
is 2^20 bytes) and are converted once, here.
"""

from __future__ import annotations

from typing import Final

__all__ = [
    "GB",
    "GIB",
    "MB",
    "MIB",
    "NS",
    "US",
    "TERA",
    "PRECISIONS",
    "bytes_per_element",
]

GB: Final = 1e9
GIB: Final = float(2**30)
MB: Final = 1e6
MIB: Final = float(2**20)
NS: Final = 1e-9
US: Final = 1e-6
TERA: Final = 1e12

#: Supported numeric precisions and the size of one element in bytes. The block floating-point
#: formats of Tenstorrent chips share one 8-bit exponent among 16 values, so a 32x32 tile of
#: ``bfp8`` takes 1024 + 64 = 1088 B (1.0625 B per value) and of ``bfp4`` 512 + 64 = 576 B
#: (0.5625 B): tt-metal ``tt_metal/api/tt-metalium/constants.hpp`` (``BFLOAT8_B_TILE_HW``,
#: ``BFLOAT4_B_TILE_HW``).
PRECISIONS: Final[dict[str, float]] = {
    "fp32": 4,
    "bf16": 2,
    "fp16": 2,
    "fp8": 1,
    "int8": 1,
    "bfp8": 1.0625,
    "bfp4": 0.5625,
    # NVFP4: 4-bit values in blocks of 16 sharing one 8-bit scale (palm.serving.spec)
    "fp4": 0.5625,
}


def bytes_per_element(precision: str) -> float:
    """Size in bytes of one element stored in ``precision`` (e.g. ``"bf16"`` -> 2, ``"bfp8"``
    -> 1.0625)."""
    return PRECISIONS[precision]
