"""Bounds on the values that the simulator's work grows with (docs/config.md, "Bounds"):
beyond them a configuration is refused with a one-line error instead of running out of
time or memory."""

from __future__ import annotations

from palm.errors import ConfigError
from palm.hardware.spec import (
    Mesh2DHardware,
)
from palm.strategy import (
    SimConfig,
)

__all__ = [
    "MAX_LAYERS",
    "MAX_DEVICES",
    "MAX_PIPELINE_PASSES",
    "MAX_DRAM_CHANNELS",
    "MAX_EXPERTS",
    "WHY",
    "validate_bounds",
]


#: most routed experts of a MoE layer (the largest published models use 256; the tuner's
#: expert-parallel part enumerates the divisors)
MAX_EXPERTS = 2**16

#: Bounds on values that the simulator's work grows with (docs/config.md, "Bounds"); beyond
#: them a config is refused with a one-line error instead of running out of time or memory.
MAX_LAYERS = 10_000
MAX_DEVICES = 2**20
MAX_PIPELINE_PASSES = 2**17
MAX_DRAM_CHANNELS = 2**16
WHY = "the simulator's work grows with it"


def validate_bounds(config: SimConfig) -> None:
    """Refuse sizes whose cost grows with their value: devices (meshes, rings and placement are
    arrays over devices), DRAM channels, and micro-batches x pipeline chunks (the event engine
    simulates every forward and backward pass)."""
    hw, tr, par = config.hardware, config.training, config.parallelism
    devices = hw.device_count if isinstance(hw, Mesh2DHardware) else max(par.devices, hw.gpus)
    if devices > MAX_DEVICES:
        where = (
            "hardware.tiles x cores_per_tile"
            if isinstance(hw, Mesh2DHardware)
            else ("hardware.gpus" if hw.gpus > par.devices else "parallelism.tp*pp*dp")
        )
        raise ConfigError(where, devices, f"at most {MAX_DEVICES:,} devices ({WHY})")
    if isinstance(hw, Mesh2DHardware) and hw.dram_channels > MAX_DRAM_CHANNELS:
        raise ConfigError(
            "hardware.dram_channels", hw.dram_channels, f"at most {MAX_DRAM_CHANNELS:,} ({WHY})"
        )
    per_pipeline = tr.global_batch // max(1, par.dp * tr.micro_batch)
    if per_pipeline * par.pp * par.chunks > MAX_PIPELINE_PASSES:
        raise ConfigError(
            "training.global_batch",
            tr.global_batch,
            f"a value giving micro-batches x pp x interleave = "
            f"{per_pipeline} x {par.pp} x {par.chunks} of at most {MAX_PIPELINE_PASSES:,} "
            f"(the event engine simulates each pass)",
        )
