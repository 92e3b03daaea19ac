"""What each ``hardware.execution`` style of a mesh cannot run, refused in one line
(:class:`~palm.errors.ConfigError`): weight streaming (docs/model.md sec. 7d,
:mod:`palm.cost.weight_streaming`) and bulk-synchronous execution (sec. 7e,
:mod:`palm.plan.bsp`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from palm.errors import ConfigError
from palm.hardware.spec import Mesh2DHardware

if TYPE_CHECKING:
    from palm.strategy import SimConfig

__all__ = ["check_execution"]


def check_execution(config: SimConfig) -> None:
    """Refuse what the mesh's execution style cannot run: the ``gemm`` and serving workloads
    (single products and request traffic, priced without passes) under either style, and what
    :func:`_check_weight_streaming` and :func:`_check_bulk_synchronous` name."""
    hw = config.hardware
    if not isinstance(hw, Mesh2DHardware) or hw.execution == "overlapped":
        return
    if config.model.family == "gemm" or config.training.mode == "serve":
        raise ConfigError(
            "hardware.execution",
            hw.execution,
            f'"overlapped" for a {"gemm" if config.model.family == "gemm" else "serve"} run',
        )
    if hw.bulk_synchronous:
        _check_bulk_synchronous(config)
    else:
        _check_weight_streaming(config, hw)


def _check_weight_streaming(config: SimConfig, hw: Mesh2DHardware) -> None:
    """A link of no bandwidth, a pipeline (the whole mesh runs one layer at a time) and expert
    parallelism (one broadcast of a layer's weights serves every data rank)."""
    why = 'with execution = "weight-streaming"'
    if hw.external_memory_gbps <= 0:
        raise ConfigError(
            "hardware.external_memory_gbps", hw.external_memory_gbps, f"a number > 0 {why}"
        )
    par = config.parallelism
    if par.pp != 1:
        raise ConfigError("parallelism.pp", par.pp, f"1 {why} (the mesh runs one layer at a time)")
    if par.ep != 1:
        raise ConfigError("parallelism.ep", par.ep, f"1 {why}")


#: overlaps a bulk-synchronous mesh cannot run (docs/model.md sec. 7e): each hides an exchange
#: behind compute
_OVERLAPS = ("tp_comm_overlap", "tp_async_backward", "moe_a2a_overlap", "overlap_param_gather")


def _check_bulk_synchronous(config: SimConfig) -> None:
    """Refuse, under ``execution = "bulk-synchronous"``, the options that overlap an exchange
    with compute (:data:`_OVERLAPS`, context parallelism's K/V ring, ZeRO-3 / FSDP's per-layer
    gathers)."""
    par, why = config.parallelism, 'with execution = "bulk-synchronous" (no overlap)'
    for name in _OVERLAPS:
        if getattr(par, name):
            raise ConfigError(f"parallelism.{name}", True, f"false {why}")
    if par.cp != 1:
        raise ConfigError("parallelism.cp", par.cp, f"1 {why}")
    if config.training.zero_stage >= 3 or config.training.fsdp:
        raise ConfigError("training.zero", config.training.zero_stage, f"0, 1 or 2 {why}")
