"""Checks that need several tables at once: TP divides the heads, the degrees multiply to
the device count, the batch splits, operator splits fit, placements and strategies match the
pipeline. The divisibility and fit rules themselves are :mod:`palm.feasibility`'s, shared with
the search spaces."""

from __future__ import annotations

import math
import weakref

from palm import feasibility
from palm.config.bounds import (
    validate_bounds,
)
from palm.cost.execution import check_execution
from palm.errors import ConfigError
from palm.hardware.spec import (
    GpuClusterHardware,
    Mesh2DHardware,
)
from palm.serving.validate import validate_serving
from palm.strategy import (
    INTER_GROUP_STRATEGIES,
    SimConfig,
)
from palm.units import PRECISIONS
from palm.workload.model import (
    Workload,
    build_workload,
    check_tensor_parallel,
)
from palm.workload.ops import Conv2d, Linear, Op, Pool

__all__ = ["validate"]


#: the configurations validated in this process, by identity: a SimConfig is frozen, so one
#: that passed stays valid, and a trial's configuration is validated once however many steps
#: (parsing, the plan context) ask for it
_VALIDATED: dict[int, weakref.ref[SimConfig]] = {}
_VALIDATED_MAX = 4096


def validate(config: SimConfig) -> None:
    """Checks that involve more than one table. Raises :class:`ConfigError`. A configuration
    object that passed before is not checked again."""
    seen = _VALIDATED.get(id(config))
    if seen is not None and seen() is config:
        return
    _validate(config)
    if len(_VALIDATED) >= _VALIDATED_MAX:
        _VALIDATED.clear()
    _VALIDATED[id(config)] = weakref.ref(config)


def _validate(config: SimConfig) -> None:
    """:func:`validate`'s checks."""
    m, hw, tr, par = config.model, config.hardware, config.training, config.parallelism
    validate_bounds(config)
    check_execution(config)
    if m.family == "gemm":
        _validate_gemm(config)
        return
    if validate_serving(config):  # training.mode = "serve" (palm.serving.validate)
        return
    if m.is_transformer:
        check_tensor_parallel(m, par.tp)
    workload = build_workload(m)
    allowed = feasibility.pipeline_depth(
        pp=par.pp,
        blocks=workload.blocks,
        chunks=par.chunks,
        transformer=workload.transformer,
        uneven=bool(par.first_stage_layers or par.last_stage_layers),
    )
    if allowed is not None:
        raise ConfigError("parallelism.pp", par.pp, allowed)
    _validate_modern_parallelism(config, workload)
    if par.interleave > 1 and par.schedule != "interleaved-1f1b" and par.pp > 1:
        raise ConfigError(
            "parallelism.interleave", par.interleave, "1 unless schedule = 'interleaved-1f1b'"
        )
    # the degrees before the batch: a wrong dp is a degree error, not a batch one
    if isinstance(hw, Mesh2DHardware):
        if par.devices != hw.device_count:
            raise ConfigError(
                "parallelism.tp*pp*dp",
                f"{par.tp}*{par.pp}*{par.dp} = {par.devices}",
                f"degrees whose product equals the {hw.device_count} cores of {hw.name}",
            )
    elif hw.gpus and par.devices != hw.gpus:
        names, values = ("tp*pp*dp", f"{par.tp}*{par.pp}*{par.dp}")
        if par.cp > 1:
            names, values = (names + "*cp", values + f"*{par.cp}")
        raise ConfigError(
            f"parallelism.{names}",
            f"{values} = {par.devices}",
            f"degrees whose product equals hardware.gpus = {hw.gpus}",
        )
    allowed = feasibility.batch_split(
        global_batch=tr.global_batch, dp=par.dp, micro_batch=tr.micro_batch
    ) or feasibility.interleave_batches(
        micro_batches=tr.global_batch // (par.dp * tr.micro_batch), pp=par.pp, chunks=par.chunks
    )
    if allowed is not None:
        raise ConfigError("training.global_batch", tr.global_batch, allowed)
    peak = hw.peak_tflops if isinstance(hw, GpuClusterHardware) else hw.core_peak_tflops
    if peak.get(tr.precision) <= 0:
        ok = [p for p in PRECISIONS if peak.get(p) > 0]
        raise ConfigError("training.precision", tr.precision, f"one of {ok} on {hw.name}")
    _validate_offload(config)
    if tr.mode == "train" and tr.precision in ("int8", "bfp8", "bfp4", "fp4"):
        raise ConfigError(
            "training.precision", tr.precision, "fp32, bf16, fp16 or fp8 for training"
        )
    _validate_operator_widths(config, workload)
    _validate_moe_parallelism(config)
    _validate_splits(config, workload)
    _validate_placement(config)
    _validate_communication(config)


def _validate_operator_widths(config: SimConfig, workload: Workload) -> None:
    """Tensor parallelism over a graph model's operators: a divisor of every unsplit
    operator's output width, and a divisor or a multiple of every convolution's groups."""
    par = config.parallelism
    if par.tp > 1 and not workload.transformer:
        for op in workload.ops:
            width = (
                op.out_features
                if isinstance(op, Linear)
                else (op.out_channels if isinstance(op, Conv2d) else 0)
            )
            split = par.linear_split if isinstance(op, Linear) else par.conv_split
            groups = op.groups if isinstance(op, Conv2d) else 1
            if groups > 1 and not split and groups % par.tp and par.tp % groups:
                raise ConfigError(
                    "parallelism.tp",
                    par.tp,
                    f"a divisor or a multiple of every convolution's groups ({op.name} has "
                    f"{groups})",
                )
            if width and not split and width % par.tp:
                raise ConfigError(
                    "parallelism.tp",
                    par.tp,
                    f"a divisor of every operator's output width ({op.name} has {width})",
                )


def _validate_communication(config: SimConfig) -> None:
    """One inter-group strategy per pipeline boundary, and no more adapters than a stage's
    devices."""
    par = config.parallelism
    comm = config.communication
    group = par.tp * par.dp
    boundaries = par.pp * par.chunks - 1
    if comm.boundary_strategies:
        if len(comm.boundary_strategies) != boundaries:
            raise ConfigError(
                "communication.boundary_strategies",
                list(comm.boundary_strategies),
                f"one strategy per pipeline boundary ({boundaries})",
            )
        for i, name in enumerate(comm.boundary_strategies):
            if name not in INTER_GROUP_STRATEGIES:
                raise ConfigError(
                    f"communication.boundary_strategies[{i}]",
                    name,
                    f"one of {', '.join(INTER_GROUP_STRATEGIES)}",
                )
    if comm.adapters > group:
        raise ConfigError(
            "communication.adapters", comm.adapters, f"at most the {group} devices of a stage"
        )


def _validate_offload(config: SimConfig) -> None:
    """``training.activation_offload > 0`` needs a GPU cluster whose preset knows its host link,
    and a training run (:mod:`palm.cost.offload`)."""
    hw, tr = config.hardware, config.training
    if tr.activation_offload <= 0:
        return
    if not isinstance(hw, GpuClusterHardware):
        raise ConfigError(
            "training.activation_offload", tr.activation_offload, "0 on a mesh (GPU clusters only)"
        )
    if tr.mode != "train":
        raise ConfigError(
            "training.activation_offload", tr.activation_offload, "0 unless training.mode = 'train'"
        )
    if hw.host_link_gbps <= 0:
        raise ConfigError(
            "training.activation_offload",
            tr.activation_offload,
            f"0 on {hw.name}, whose host link is not known (set hardware.host_link_gbps > 0)",
        )


def _validate_modern_parallelism(config: SimConfig, workload: Workload) -> None:
    """Context parallelism, uneven first / last pipeline stages and the FSDP alias."""
    m, par, tr = config.model, config.parallelism, config.training
    allowed = feasibility.context_parallel(
        cp=par.cp,
        seq_len=m.seq_len,
        transformer=workload.transformer,
        mesh=isinstance(config.hardware, Mesh2DHardware),
    )
    if allowed is not None:
        raise ConfigError("parallelism.cp", par.cp, allowed)
    if tr.fsdp and tr.zero not in (0, 2, 3):
        raise ConfigError(
            "training.zero", tr.zero, "0, 3 or 2 (SHARD_GRAD_OP) with training.fsdp = true"
        )
    if par.overlap_param_gather and (tr.zero_stage not in (1, 2) or tr.fsdp):
        raise ConfigError(
            "parallelism.overlap_param_gather",
            True,
            "false unless training.zero is 1 or 2 without training.fsdp (it overlaps the "
            "distributed optimizer's weight all-gather; ZeRO-3 / FSDP gathers every layer "
            "anyway)",
        )
    given = [
        (name, getattr(par, name))
        for name in ("first_stage_layers", "last_stage_layers")
        if getattr(par, name)
    ]
    if not given:
        return
    if not workload.transformer or par.pp < 2:
        name, value = given[0]
        raise ConfigError(f"parallelism.{name}", value, "0 unless a transformer with pp >= 2")
    for name, value in given:
        if value < par.chunks - 1:
            raise ConfigError(
                f"parallelism.{name}",
                value,
                f"at least one layer per chunk but the end one ({par.chunks - 1})",
            )
    rest = workload.blocks - sum(v for _, v in given)
    middle = par.pp - len(given)
    if rest < middle * par.chunks or (middle == 0 and rest != 0):
        name, value = given[-1]
        raise ConfigError(
            f"parallelism.{name}",
            value,
            f"a value leaving {middle * par.chunks or 'no'} layers or more for the other "
            f"{middle} stages (model.layers = {workload.blocks})"
            if middle
            else f"first + last = model.layers = {workload.blocks} when pp = 2",
        )


def _validate_gemm(config: SimConfig) -> None:
    """``family = "gemm"``: one product on the cores of a mesh chip, split by the chip's matmul
    library (2-D blocks) or by ``linear_split``; no pipeline, no batch, no training."""
    hw, tr, par = config.hardware, config.training, config.parallelism
    if not isinstance(hw, Mesh2DHardware):
        raise ConfigError("hardware", hw.name, "a mesh2d chip (e.g. wormhole-n150) for family gemm")
    if tr.mode != "inference":
        raise ConfigError("training.mode", tr.mode, "'inference' for family gemm (one product)")
    if tr.global_batch != 1 or tr.micro_batch != 1:
        raise ConfigError(
            "training.global_batch", tr.global_batch, "1 with micro_batch 1 for family gemm"
        )
    if hw.peak_flops(tr.precision) <= 0:
        ok = [p for p in PRECISIONS if hw.core_peak_tflops.get(p) > 0]
        raise ConfigError("training.precision", tr.precision, f"one of {ok} on {hw.name}")
    if (par.tp, par.pp, par.dp) != (1, 1, 1):
        raise ConfigError(
            "parallelism.tp*pp*dp",
            f"{par.tp}*{par.pp}*{par.dp}",
            "1*1*1 for family gemm (the product is split over the compute grid; "
            "parallelism.linear_split = [1, m, n, k] chooses the split)",
        )
    split = par.linear_split
    if split and (len(split) != 4 or split[0] != 1 or math.prod(split) != hw.device_count):
        raise ConfigError(
            "parallelism.linear_split",
            list(split),
            f"[1, m, n, k] with m x n x k = the {hw.device_count} cores of the compute grid",
        )


def _validate_splits(config: SimConfig, workload: Workload) -> None:
    par = config.parallelism
    group = par.tp * par.dp
    wanted = {
        "linear_split": (4, Linear, "(b, m, n, k)"),
        "conv_split": (4, Conv2d, "(b, c, i, k)"),
        "pool_split": (3, Pool, "(b, c, i)"),
    }
    for field, (length, cls, dims) in wanted.items():
        split = getattr(par, field)
        if not split:
            continue
        where = f"parallelism.{field}"
        if len(split) != length or any(x < 1 for x in split) or math.prod(split) != group:
            raise ConfigError(
                where,
                list(split),
                f"{length} factors {dims} >= 1 whose product is "
                f"the stage group size tp x dp = {group}",
            )
        for op in workload.ops:
            if isinstance(op, cls):
                _check_split_fits(op, split, where)


def _check_split_fits(op: Op, split: tuple[int, ...], where: str) -> None:
    if isinstance(op, Linear):
        pairs = [
            ("m", split[1], op.tokens),
            ("n", split[2], op.out_features),
            ("k", split[3], op.in_features),
        ]
    elif isinstance(op, Conv2d):
        if op.groups > 1 and math.prod(split) > 1:
            raise ConfigError(
                where, list(split), f"[1, 1, 1, 1]: {op.name} is a grouped convolution"
            )
        pairs = [
            ("c", split[1], op.in_channels),
            ("i", split[2], op.out_hw[0]),
            ("k", split[3], op.out_channels),
        ]
    else:
        assert isinstance(op, Pool)
        pairs = [("c", split[1], op.channels), ("i", split[2], op.out_hw[0])]
    for dim, factor, size in pairs:
        if size % factor:
            raise ConfigError(
                where, list(split), f"a split whose {dim} divides {size} (operator {op.name})"
            )


def _validate_placement(config: SimConfig) -> None:
    pl, hw, par = config.placement, config.hardware, config.parallelism
    if pl.layout != "explicit":
        if pl.stage_tiles:
            raise ConfigError(
                "placement.stage_tiles",
                [list(t) for t in pl.stage_tiles],
                "empty unless layout = 'explicit'",
            )
        return
    if not isinstance(hw, Mesh2DHardware):
        raise ConfigError("placement.layout", pl.layout, "'line' or 's-shape' on a gpu-cluster")
    if len(pl.stage_tiles) != par.pp:
        raise ConfigError(
            "placement.stage_tiles",
            [list(t) for t in pl.stage_tiles],
            f"one tile list per stage ({par.pp} lists, one per pipeline stage)",
        )
    n_tiles = hw.tiles[0] * hw.tiles[1]
    seen: set[int] = set()
    for s, tiles in enumerate(pl.stage_tiles):
        for t in tiles:
            if not 0 <= t < n_tiles:
                raise ConfigError(
                    f"placement.stage_tiles[{s}]", t, f"a tile id in 0..{n_tiles - 1}"
                )
            if t in seen:
                raise ConfigError(
                    f"placement.stage_tiles[{s}]", t, "a tile not used by another stage"
                )
            seen.add(t)
        if len(tiles) * hw.cores_per_tile_count != par.tp * par.dp:
            raise ConfigError(
                f"placement.stage_tiles[{s}]",
                list(tiles),
                f"{par.tp * par.dp // max(1, hw.cores_per_tile_count)} tiles "
                f"(tp x dp = {par.tp * par.dp} cores of {hw.cores_per_tile_count} per tile)",
            )


def _validate_moe_parallelism(config: SimConfig) -> None:
    """Megatron-Core's expert layout rules (parallel_state.initialize_model_parallel): the
    ``tp x cp x dp`` devices of a stage are regrouped as ``etp x ep x edp``."""
    m, par = config.model, config.parallelism
    if not m.is_moe:
        if par.ep != 1:
            raise ConfigError("parallelism.ep", par.ep, "1 for a dense model (model.experts = 0)")
        if par.etp > 1:
            raise ConfigError(
                "parallelism.etp", par.etp, "0 or 1 for a dense model (model.experts = 0)"
            )
        return
    etp = par.expert_tp
    allowed = feasibility.expert_parallel(ep=par.ep, experts=m.experts)
    if allowed is not None:
        raise ConfigError("parallelism.ep", par.ep, allowed)
    allowed = feasibility.expert_tensor_parallel(etp=etp, moe_ffn_hidden=m.moe_ffn_hidden)
    if allowed is not None:
        raise ConfigError("parallelism.etp", etp, allowed)
    stage = par.tp * par.cp * par.dp
    allowed = feasibility.expert_layout(ep=par.ep, etp=etp, stage_devices=stage)
    if allowed is not None:
        raise ConfigError("parallelism.ep*etp", f"{par.ep}*{etp} = {par.ep * etp}", allowed)
    if par.tp > 1 and not par.sequence_parallel:
        raise ConfigError(
            "parallelism.sequence_parallel",
            par.sequence_parallel,
            "true when tp > 1 with a MoE model (Megatron-Core requires it)",
        )
