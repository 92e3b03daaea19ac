"""What is simulated, part 3: how the job is run (training, parallelism, placement,
communication) and the complete configuration of one simulation."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from palm.hardware.spec import Hardware
from palm.serving.spec import ServingConfig
from palm.software import SoftwareConfig
from palm.workload.model import ModelConfig

__all__ = [
    "TrainingConfig",
    "ParallelismConfig",
    "PlacementConfig",
    "CommunicationConfig",
    "SimConfig",
    "SCHEDULES",
    "RECOMPUTE_MODES",
    "OPTIMIZERS",
    "MODES",
    "LAYOUTS",
    "TP_GROUPS",
    "INTER_GROUP_STRATEGIES",
]

SCHEDULES: tuple[str, ...] = ("gpipe", "1f1b", "interleaved-1f1b")
RECOMPUTE_MODES: tuple[str, ...] = ("none", "selective", "full", "auto")
OPTIMIZERS: tuple[str, ...] = ("sgd", "adam")
MODES: tuple[str, ...] = ("train", "inference", "serve")
LAYOUTS: tuple[str, ...] = ("line", "s-shape", "explicit")
TP_GROUPS: tuple[str, ...] = ("compact", "strided")
INTER_GROUP_STRATEGIES: tuple[str, ...] = ("allreduce-broadcast", "reduce-adapters")


@dataclass(frozen=True)
class TrainingConfig:
    """``[training]``. ``precision`` is the compute precision; training in a 16- or 8-bit
    precision is mixed precision with fp32 master weights. ``zero`` is the ZeRO stage
    (Rajbhandari et al. 2020): 1 shards optimizer states, 2 also gradients, 3 also weights
    over the data-parallel group. ``fsdp = true`` is an alias of ``zero = 3`` (PyTorch FSDP /
    FSDP2 ``FULL_SHARD``, DeepSpeed ZeRO stage 3: weights, gradients and optimizer states
    sharded, weights all-gathered one layer ahead of use and gradients reduce-scattered
    during the backward pass; docs/model.md). ``fsdp = true`` with ``zero = 2`` is PyTorch
    FSDP ``SHARD_GRAD_OP``: the weights are gathered layer by layer in the forward pass and
    kept through the backward pass, gradients reduce-scattered layer by layer; ``zero = 2``
    alone is a distributed optimizer's ZeRO-2 (DeepSpeed, Megatron-Core), which reduces at
    the step's end. ``recompute = "auto"`` recomputes only when
    memory forces it: the least of none, selective and full with which every stage fits. ``bfp8``
    and ``bfp4`` are Tenstorrent's block floating-point formats (inference only), ``fp4``
    NVIDIA's NVFP4 (serving only). ``mode = "serve"`` is LLM serving with a KV cache, described
    by the ``[serving]`` table (:mod:`palm.serving`).

    ``recompute_early_stop``: full recompute stops once the last tensor the backward pass saved
    is rebuilt, before the MLP down-projection (PyTorch's non-reentrant checkpoint from 2.1),
    instead of re-running the whole layer (Megatron's and DeepSpeed's reentrant checkpoint);
    its default comes from ``[software]`` (:mod:`palm.software`), and without one it is
    ``fsdp`` (a PyTorch FSDP job). GPU clusters only. ``grad_accumulation_fusion = false``:
    each micro-batch's weight gradients are added to the accumulation buffer by a kernel of
    their own (Megatron-LM before 2022's ``--gradient-accumulation-fusion``), one more pass
    over every gradient in each backward pass (:func:`palm.plan.chunks.accumulation_s`).
    ``zero3_prefetch``: how many operators ahead ZeRO-3 / FSDP issues a weight all-gather (1:
    PyTorch FSDP and FSDP2; 0: on demand, every collective serialised with the compute, as
    DeepSpeed ZeRO-3 before 0.6 ran; more: deeper prefetch), which bounds the
    communication the compute hides (:func:`palm.cost.overlap.prefetch_exposed_s`).
    ``zero3_gather_per_tensor``: ZeRO-3 gathers each parameter tensor by a collective of its
    own (DeepSpeed before 0.6), each paying the ring's latency, instead of one per operator
    (:func:`palm.cost.overlap.parameter_tensors`).
    ``activation_offload``: the fraction of each model chunk's transformer layers whose saved
    activations go to host memory during the forward pass and come back for the backward pass
    (Megatron-Core ``--cpu-offloading-num-layers`` over the chunk's layers), over the preset's
    ``host_link_gbps``, overlapped with the compute of the layers that follow
    (:mod:`palm.cost.offload`); GPU clusters, training only."""

    mode: Literal["train", "inference", "serve"] = "train"
    global_batch: int = 8
    micro_batch: int = 1
    precision: Literal["fp32", "bf16", "fp16", "fp8", "int8", "bfp8", "bfp4", "fp4"] = "bf16"
    optimizer: Literal["sgd", "adam"] = "adam"
    recompute: Literal["none", "selective", "full", "auto"] = "none"
    zero: int = 0
    fsdp: bool = False
    recompute_early_stop: bool = False
    grad_accumulation_fusion: bool = True
    zero3_prefetch: int = 1
    zero3_gather_per_tensor: bool = False
    activation_offload: float = 0.0

    @property
    def zero_stage(self) -> int:
        """The ZeRO stage in effect (``fsdp = true`` means 3, or 2 with ``zero = 2``)."""
        if self.fsdp:
            return 2 if self.zero == 2 else 3
        return self.zero


@dataclass(frozen=True)
class ParallelismConfig:
    """``[parallelism]``: tensor (``tp``), pipeline (``pp``) and data (``dp``) degrees, the
    pipeline schedule, ``interleave`` model chunks per device for the interleaved schedule,
    Megatron sequence parallelism, and the DP gradient bucket size (PyTorch DDP's default is
    25 MiB). ``linear_split = [b, m, n, k]``, ``conv_split = [b, c, i, k]`` and
    ``pool_split = [b, c, i]`` run the Linear, Conv2d and Pool operators of a stage with the
    operator-level splits of paper Table III (their product must be the stage group size
    ``tp x dp``); empty keeps tensor parallelism by output features.

    ``cp`` is context parallelism (Megatron-Core ``--context-parallel-size``): each sequence is
    cut into ``cp`` parts held by ``cp`` ranks that exchange K and V round a ring; gradients
    are reduced over ``dp x cp`` ranks. Ranks are ordered TP fastest, then CP, DP, PP, as in
    Megatron-Core. ``first_stage_layers`` / ``last_stage_layers`` (0: balanced) give the
    first and last pipeline stage fewer layers, like Megatron's
    ``--decoder-first-pipeline-num-layers`` / ``--decoder-last-pipeline-num-layers``; the
    other stages share the rest evenly, and each stage's layers are spread over its
    ``interleave`` chunks. ``tp_comm_overlap`` pipelines the TP collectives with the linear
    products (Megatron-Core ``--tp-comm-overlap``; :mod:`palm.cost.overlap`).

    ``ep`` (expert parallelism) and ``etp`` (expert tensor parallelism) lay the experts of a
    mixture-of-experts model over the same ``tp x cp x dp`` devices of a stage, Megatron-Core
    style: experts split ``ep`` ways, each expert's MLP ``etp`` ways, expert gradients reduced
    over the other ``tp x cp x dp / (ep x etp)`` devices (:mod:`palm.workload.moe`); ``etp = 0``
    (the default) means ``etp = tp``, Megatron-Core's default. ``moe_dispatcher`` is how
    tokens reach their experts: ``"alltoall"`` (Megatron-Core's all-to-all dispatcher, one
    copy per expert over the network) or ``"deepep"`` (the ``flex`` dispatcher with DeepEP or
    HybridEP: one copy per remote node, forwarded over NVLink there;
    :mod:`palm.cost.collectives`). ``overlap_param_gather`` (ZeRO 1 / 2 only) all-gathers the
    updated weights of the distributed optimizer bucket by bucket during the next
    iteration's first forward pass instead of at the step's end (Megatron-Core
    ``--overlap-param-gather``; :func:`palm.cost.overlap.param_gather_chain_exposed_s`).
    ``moe_a2a_overlap`` hides the dispatch and combine behind
    the compute of another micro-batch (Megatron-Core ``--overlap-moe-expert-parallel-comm``;
    :mod:`palm.cost.overlap`). ``overlap_grad_reduce = false`` reduces the data-parallel
    gradients in one piece after the last backward pass (Megatron-LM's local DDP, and
    Megatron-Core without ``--overlap-grad-reduce``) instead of bucket by bucket as the
    backward pass makes them ready (PyTorch DDP). ``tp_async_backward`` overlaps the input-
    gradient collective of each column-parallel linear with its weight-gradient product
    (Megatron's asynchronous TP communication; :func:`palm.plan.chunks.async_hidden_s`)."""

    tp: int = 1
    pp: int = 1
    dp: int = 1
    schedule: Literal["gpipe", "1f1b", "interleaved-1f1b"] = "1f1b"
    interleave: int = 1
    sequence_parallel: bool = False
    dp_bucket_mib: float = 25.0
    linear_split: tuple[int, ...] = ()
    conv_split: tuple[int, ...] = ()
    pool_split: tuple[int, ...] = ()
    cp: int = 1
    first_stage_layers: int = 0
    last_stage_layers: int = 0
    tp_comm_overlap: bool = False
    ep: int = 1
    etp: int = 0
    moe_dispatcher: Literal["alltoall", "deepep"] = "alltoall"
    moe_a2a_overlap: bool = False
    overlap_param_gather: bool = False
    overlap_grad_reduce: bool = True
    tp_async_backward: bool = False

    @property
    def expert_tp(self) -> int:
        """The expert tensor-parallel degree: ``etp``, or ``tp`` when ``etp = 0``."""
        return self.etp or self.tp

    @property
    def expert_dp(self) -> int:
        """Expert data parallelism: the devices of a stage over ``ep x etp``."""
        return self.tp * self.cp * self.dp // (self.ep * self.expert_tp)

    @property
    def devices(self) -> int:
        return self.tp * self.pp * self.dp * self.cp

    @property
    def data_ranks(self) -> int:
        """Ranks of a stage that hold the same weights: ``dp x cp`` (gradient reduction and
        ZeRO sharding run over them)."""
        return self.dp * self.cp

    @property
    def chunks(self) -> int:
        """Model chunks per device: ``interleave`` under the interleaved schedule, else 1."""
        if self.schedule == "interleaved-1f1b" and self.pp > 1:
            return self.interleave
        return 1


@dataclass(frozen=True)
class PlacementConfig:
    """``[placement]`` (paper sec. V-B): where stages sit on a mesh (``line``, ``s-shape`` or
    ``explicit`` tile ids per stage in ``stage_tiles``) and whether tensor-parallel partners are
    neighbours (``compact``) or spread over the stage's group (``strided``)."""

    layout: Literal["line", "s-shape", "explicit"] = "line"
    tp_group: Literal["compact", "strided"] = "compact"
    stage_tiles: tuple[tuple[int, ...], ...] = ()


@dataclass(frozen=True)
class CommunicationConfig:
    """``[communication]`` (paper sec. V-C): how activations cross between stage tile groups:
    strategy 1 ``allreduce-broadcast`` (Eq. 7) or strategy 2 ``reduce-adapters`` (Eq. 8) with
    ``adapters`` tiles per group; ``boundary_strategies`` sets one strategy per pipeline
    boundary (``pp x interleave - 1`` of them) instead. ``noc_granularity`` chooses how finely
    the event engine models contention: ``group`` aggregates the links of each stage group (the
    default; cost independent of the tile count) and ``link`` keeps every link (small meshes).
    ``noc_model`` chooses how concurrent flows share them: ``fair`` (default) gives every flow a
    max-min fair share of every link and DRAM channel it loads, ``exclusive`` holds them first
    come first served (the paper, sec. IV-C)."""

    inter_group: Literal["allreduce-broadcast", "reduce-adapters"] = "allreduce-broadcast"
    adapters: int = 1
    noc_granularity: Literal["group", "link"] = "group"
    noc_model: Literal["fair", "exclusive"] = "fair"
    boundary_strategies: tuple[str, ...] = ()


@dataclass(frozen=True)
class SimConfig:
    """Everything one simulation needs: the model, the machine and the plan, and the training
    software it names (whose defaults are already in the other tables)."""

    model: ModelConfig
    hardware: Hardware
    training: TrainingConfig
    parallelism: ParallelismConfig
    placement: PlacementConfig = PlacementConfig()
    communication: CommunicationConfig = CommunicationConfig()
    serving: ServingConfig = ServingConfig()
    software: SoftwareConfig = SoftwareConfig()
