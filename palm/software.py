"""The training software as an input: the ``[software]`` table (docs/config.md).

``[software]`` names the stack a run used, ``framework`` and ``version``; each framework's
documented behaviours are defaults of fields of the other tables, which any field given there
overrides, field by field (:func:`with_software_defaults`). An empty ``version`` is the current
release; no ``[software]`` table keeps the simulator's own defaults, which follow current
releases too (FlashAttention on a GPU cluster; PyTorch FSDP's early-stopping recompute with
``fsdp = true``; nothing overlapped that a framework must switch on).

Every behaviour below cites where the framework documents it (docs/config.md, "The software
stack", lists them as a table). Versions compare number by number (``"25.09" < "26.04.01"``,
``"2.5" < "22.05"``); a behaviour holds from its ``since`` version (inclusive) until its
``until`` version (exclusive); an empty version is newer than any.

The fields a framework sets, and why they matter (docs/config.md):

* ``model.attention``: the attention kernel, ``unfused`` (scores in memory, Megatron-LM of
  2021-2022) or ``flash`` (FlashAttention / cuDNN fused attention);
* ``training.grad_accumulation_fusion``: whether each micro-batch's weight gradients are
  added to the accumulation buffer inside the weight-gradient GEMM or by a pass of their own
  (Megatron-LM before 2022);
* ``training.recompute_early_stop``: whether full recompute stops before the MLP
  down-projection (PyTorch's non-reentrant checkpoint from 2.1) or re-runs the whole layer
  (Megatron's and DeepSpeed's reentrant ``CheckpointFunction``);
* ``training.zero`` and ``parallelism.overlap_param_gather``: the distributed optimizer and
  its weight all-gather overlapped with the next forward pass;
* ``parallelism.overlap_grad_reduce``: the data-parallel gradient reduction bucket by bucket
  during the last backward pass, or in one piece after it;
* ``parallelism.tp_async_backward``: Megatron's asynchronous TP communication in the
  backward pass (from 2021-09);
* ``parallelism.sequence_parallel`` and ``parallelism.tp_comm_overlap``: sequence
  parallelism and the TP collectives pipelined with the linear products;
* ``training.zero3_prefetch``: how far ahead ZeRO-3 / FSDP gathers weights (0: on demand,
  serialised, DeepSpeed before 0.6);
* ``training.zero3_gather_per_tensor``: one all-gather per parameter tensor (DeepSpeed before
  0.6) or per operator;
* ``hardware.attention_efficiency`` where a release's kernels differ measurably from the
  current ones on the same GPU (NeMo before 25.04 on Blackwell).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal, cast

from palm.errors import ConfigError

__all__ = [
    "FRAMEWORKS",
    "Behaviour",
    "SoftwareConfig",
    "behaviours",
    "parse_software",
    "version_key",
    "with_software_defaults",
]

Framework = Literal[
    "",
    "megatron-lm",
    "megatron-core",
    "nemo",
    "deepspeed",
    "pytorch-fsdp",
    "torchtitan",
    "composer",
    "llm-foundry",
]

Tables = Mapping[str, Mapping[str, Any]]
#: a default that depends on the plan: a function of the tables (defaults applied so far
#: included) returning the value, or ``None`` to leave the field unset
Rule = Callable[[Tables], Any]

_NEWEST = (10**9,)


@dataclass(frozen=True)
class SoftwareConfig:
    """``[software]``: ``framework`` (empty: none stated) and ``version`` (empty: the current
    release), e.g. ``framework = "nemo"``, ``version = "25.09"``."""

    framework: Framework = ""
    version: str = ""


@dataclass(frozen=True)
class Behaviour:
    """One documented behaviour: ``field`` (``"table.name"``) defaults to ``value`` (or to
    what the :data:`Rule` returns for the tables) for versions in ``[since, until)``."""

    field: str
    value: Any
    source: str
    since: tuple[int, ...] = ()
    until: tuple[int, ...] | None = None

    def holds(self, version: tuple[int, ...]) -> bool:
        return self.since <= version and (self.until is None or version < self.until)


def version_key(text: str) -> tuple[int, ...]:
    """``"25.09"`` -> ``(25, 9)``, ``"v0.3.13"`` -> ``(0, 3, 13)``, ``"2.8.0a0"`` ->
    ``(2, 8, 0)``; ``""`` (the current release) -> newer than any; else a ConfigError."""
    if text == "":
        return _NEWEST
    match = re.fullmatch(r"[vr]?(\d+(?:\.\d+)*)(?:[a-z+][\w.+-]*)?", text.strip())
    if match is None:
        raise ConfigError(
            "software.version", text, 'a release number such as "25.09", "0.3.13" or "2.5"'
        )
    return tuple(int(part) for part in match.group(1).split("."))


def _get(tables: Tables, field: str) -> Any:
    table, name = field.split(".")
    return tables.get(table, {}).get(name)


def _tp(tables: Tables) -> int:
    tp = _get(tables, "parallelism.tp")
    return tp if isinstance(tp, int) and not isinstance(tp, bool) else 1


def _fsdp(tables: Tables) -> bool:
    return _get(tables, "training.fsdp") is True


def _with_tp(tables: Tables) -> bool | None:
    """On with tensor parallelism (``tp > 1``), else left unset."""
    return True if _tp(tables) > 1 else None


def _distributed_optimizer(tables: Tables) -> int | None:
    """ZeRO-1 (the distributed optimizer) unless the plan shards with FSDP."""
    return None if _fsdp(tables) else 1


def _param_gather_overlap(tables: Tables) -> bool | None:
    """On with the distributed optimizer (ZeRO 1-2 without FSDP), else left unset."""
    zero = _get(tables, "training.zero")
    return True if zero in (1, 2) and not _fsdp(tables) else None


def _fsdp_early_stop(tables: Tables) -> bool:
    """The value of ``fsdp``: with no framework named, ``fsdp = true`` names PyTorch FSDP, whose
    jobs checkpoint with the non-reentrant ``torch.utils.checkpoint`` (early stop from PyTorch
    2.1, the current ones)."""
    return _fsdp(tables)


#: NVIDIA's Blackwell presets, whose first software stack (NeMo 25.02) had slower attention
_BLACKWELL = ("dgx-b200", "gb200-nvl72")


def _first_blackwell_attention(tables: Tables) -> float | None:
    """NeMo before 25.04 on a Blackwell preset: the first Blackwell attention kernels' fitted
    efficiency (``benchmarks/calibrate_gpus.py``, constant ``attention_efficiency@nemo<25.04``;
    docs/validation.md, "The software stack as a calibration input")."""
    preset = _get(tables, "hardware.preset")
    return FIRST_BLACKWELL_ATTENTION if preset in _BLACKWELL else None


#: the attention efficiency of NeMo's first Blackwell stack (25.02), fitted on its dense rows
FIRST_BLACKWELL_ATTENTION = 0.279


def _te_attention_kernel(tables: Tables) -> str | None:
    """cuDNN's fused attention on Hopper and later (compute capability 9.0+), where
    Transformer Engine prefers it to FlashAttention; left unset elsewhere."""
    arch = _get(tables, "hardware.kernel_arch")
    preset = _get(tables, "hardware.preset")
    if arch is None and isinstance(preset, str):
        from palm.hardware.presets import HARDWARE_PRESETS

        hw = HARDWARE_PRESETS.get(preset)
        arch = getattr(hw, "kernel_arch", None)
    return "cudnn" if arch in ("sm90", "sm100") else None


_TE_CUDNN = (
    "Transformer Engine get_attention_backend (transformer_engine/pytorch/attention.py, "
    "dot_product_attention/utils.py): with both available on compute capability 9.0+, "
    '"Disabling FlashAttention to give FusedAttention preference on Hopper+ for performance '
    "reasons\" (cuDNN's F16_arbitrary_seqlen backend)"
)

_MEGATRON_2021 = (
    "Megatron-LM v2.5 (2021-08, the SC21 artifact's tag) megatron/model/transformer.py "
    "ParallelAttention: scores by torch.baddbmm, softmax by FusedScaleMaskSoftmax, the "
    "probabilities kept; --use-flash-attn (opt-in) only from 23.04 (d693034ecf, 2022-12-08)"
)
_REENTRANT_MEGATRON = (
    "mpu/random.py @v2.5 / core tensor_parallel/random.py CheckpointFunction: a reentrant "
    "autograd Function re-running the whole checkpointed layer"
)
_TE_ATTENTION = (
    "--transformer-impl transformer_engine by default (megatron/training/arguments.py "
    "@core_r0.8.0): Transformer Engine's DotProductAttention runs FlashAttention or cuDNN "
    "fused attention"
)

#: framework -> its documented behaviours, applied in order (a later one sees the earlier)
FRAMEWORKS: dict[str, tuple[Behaviour, ...]] = {
    "": (Behaviour("training.recompute_early_stop", _fsdp_early_stop, "palm-tune default"),),
    "megatron-lm": (
        Behaviour("model.attention", "unfused", _MEGATRON_2021),
        Behaviour("training.recompute_early_stop", False, _REENTRANT_MEGATRON),
        Behaviour(
            "parallelism.overlap_grad_reduce",
            False,
            "--DDP-impl local (the default, megatron/arguments.py @v2.5): train_step calls "
            "allreduce_gradients() on the contiguous buffer after forward_backward_func "
            "(megatron/training.py @v2.5); --DDP-impl torch overlaps it",
        ),
        Behaviour(
            "training.grad_accumulation_fusion",
            False,
            "megatron/model/distributed.py _make_param_hook @v2.5: main_grad.add_(grad) per "
            "parameter and micro-batch; fused into the weight-gradient GEMM from 83b1e42f30 "
            "(2022-02-13, --no-gradient-accumulation-fusion to disable)",
            until=(22, 2),
        ),
        Behaviour(
            "parallelism.tp_async_backward",
            True,
            "--async-tensor-model-parallel-allreduce from b462d2545d (2021-09-07, on by "
            "default: --no-async-tensor-model-parallel-allreduce @841f789f48)",
            since=(21, 9),
        ),
    ),
    "megatron-core": (
        Behaviour("model.attention", "flash", _TE_ATTENTION),
        Behaviour("model.attention_kernel", _te_attention_kernel, _TE_CUDNN),
        Behaviour(
            "parallelism.tp_async_backward",
            True,
            "LinearWithGradAccumulationAndAsyncCommunication overlaps the input-gradient "
            "collective with the weight-gradient GEMM (megatron/core/tensor_parallel/layers.py)",
        ),
        Behaviour("training.recompute_early_stop", False, _REENTRANT_MEGATRON),
        Behaviour(
            "parallelism.overlap_grad_reduce",
            False,
            "--overlap-grad-reduce off by default (megatron/training/arguments.py "
            "@core_r0.8.0): the gradients are reduced after the pipeline's last backward pass",
        ),
    ),
    "nemo": (
        Behaviour("model.attention", "flash", _TE_ATTENTION),
        Behaviour("model.attention_kernel", _te_attention_kernel, _TE_CUDNN),
        Behaviour("training.recompute_early_stop", False, _REENTRANT_MEGATRON),
        Behaviour(
            "training.zero",
            _distributed_optimizer,
            "use_distributed_optimizer=True: Megatron-Bridge src/megatron/bridge/recipes/"
            "common.py @067f987df (NeMo 2 recipes: distributed_fused_adam)",
        ),
        Behaviour(
            "parallelism.overlap_param_gather",
            _param_gather_overlap,
            "DistributedDataParallelConfig(overlap_grad_reduce=True, overlap_param_gather="
            "True): Megatron-Bridge recipes/common.py @067f987df",
        ),
        Behaviour(
            "parallelism.sequence_parallel",
            _with_tp,
            "WorkloadBaseConfig.sequence_parallel whenever TP > 1 (Megatron-Bridge "
            "scripts/performance, @fa0315ae)",
        ),
        Behaviour(
            "parallelism.tp_comm_overlap",
            _with_tp,
            "CommOverlapConfig(tp_comm_overlap=bool(tensor_model_parallel_size > 1)): "
            "Megatron-Bridge scripts/performance/configs/llama/llama3_llm_pretrain.py @5776a6d9",
        ),
        Behaviour(
            "hardware.attention_efficiency",
            _first_blackwell_attention,
            "cuDNN's Blackwell kernels from 9.7.0 (cudnn-frontend v1.10 release notes, "
            "2025-01); the same Llama 3 8B plan on 8 DGX B200 runs 26006 tokens/s/GPU in NeMo "
            "25.02, 29994 in 25.09; GB200's first table (25.04) is not slower",
            until=(25, 4),
        ),
    ),
    "deepspeed": (
        Behaviour(
            "training.recompute_early_stop",
            False,
            "deepspeed/runtime/activation_checkpointing/checkpointing.py CheckpointFunction "
            "(reentrant)",
        ),
        Behaviour(
            "training.zero3_prefetch",
            0,
            "partition_parameters.py _allgather_param calls torch.cuda.synchronize() before "
            "every parameter all-gather (@v0.3.13 to v0.5.10); from v0.6.0 the fetch runs "
            "all_gather_coalesced asynchronously (stage3.py @v0.6.0)",
            until=(0, 6),
        ),
        Behaviour(
            "training.zero3_gather_per_tensor",
            True,
            "partition_parameters.py _all_gather calls _allgather_param once per parameter "
            "of the module, one NCCL all-gather each (@v0.3.13 to v0.5.10); from v0.6.0 a "
            "module's parameters go through one all_gather_coalesced (stage3.py @v0.6.0)",
            until=(0, 6),
        ),
    ),
    "pytorch-fsdp": (
        Behaviour(
            "model.attention",
            "unfused",
            "no fused attention in PyTorch before 2.0 (torch.nn.functional."
            "scaled_dot_product_attention, FlashAttention backend, from 2.0)",
            until=(2, 0),
        ),
        Behaviour(
            "training.recompute_early_stop",
            True,
            "torch.utils.checkpoint (use_reentrant=False) stops early from 2.1 "
            "(set_checkpoint_early_stop, on by default)",
            since=(2, 1),
        ),
        Behaviour(
            "training.recompute_early_stop",
            False,
            "before 2.1 the non-reentrant checkpoint re-runs the whole block",
            until=(2, 1),
        ),
    ),
    "torchtitan": (
        Behaviour(
            "training.recompute_early_stop",
            True,
            "torchtitan/models/llama3/parallelize.py ptd_checkpoint_wrapper (non-reentrant, "
            "PyTorch >= 2.1)",
        ),
        Behaviour(
            "parallelism.sequence_parallel",
            _with_tp,
            "torchtitan's TP plan shards the norms' sequence (SequenceParallel, parallelize.py)",
        ),
    ),
    "composer": (
        Behaviour(
            "training.recompute_early_stop",
            False,
            "FSDPConfig.activation_checkpointing_reentrant = True by default "
            "(composer/utils/parallelism.py @v0.32.1)",
        ),
    ),
    "llm-foundry": (
        Behaviour(
            "training.recompute_early_stop",
            True,
            "scripts/train/yamls/pretrain/mpt-*.yaml activation_checkpointing_reentrant: "
            "false, with torch>=2.1 from v0.5.0 (setup.py)",
            since=(0, 5),
        ),
        Behaviour(
            "training.recompute_early_stop",
            False,
            "v0.1.0-v0.4.0 allow torch 1.13.1 (setup.py), whose checkpoint re-runs the block",
            until=(0, 5),
        ),
    ),
}


def parse_software(table: Mapping[str, Any]) -> SoftwareConfig:
    """The ``[software]`` table, checked: a known framework, a release-number version."""
    for key in table:
        if key not in ("framework", "version"):
            raise ConfigError(f"software.{key}", table[key], "a known field: framework, version")
    framework = table.get("framework", "")
    if not isinstance(framework, str) or framework not in FRAMEWORKS:
        allowed = ", ".join(repr(f) for f in FRAMEWORKS if f)
        raise ConfigError("software.framework", framework, f"one of {allowed}")
    version = table.get("version", "")
    if not isinstance(version, str):
        raise ConfigError("software.version", version, 'a string such as "25.09"')
    version_key(version)
    if version and not framework:
        raise ConfigError("software.version", version, "a framework named beside it")
    return SoftwareConfig(framework=cast(Framework, framework), version=version)


def behaviours(software: SoftwareConfig) -> tuple[Behaviour, ...]:
    """The behaviours of ``software``'s framework that hold at its version."""
    version = version_key(software.version)
    return tuple(b for b in FRAMEWORKS[software.framework] if b.holds(version))


def with_software_defaults(
    data: Mapping[str, Any],
) -> tuple[SoftwareConfig, dict[str, dict[str, Any]]]:
    """The ``[software]`` table of ``data`` and a copy of its other tables with the
    framework's behaviours filled in where a field is not given."""
    raw = data.get("software", {})
    if not isinstance(raw, Mapping):
        raise ConfigError("software", raw, "a table")
    software = parse_software(raw)
    out = {k: dict(v) for k, v in data.items() if k != "software" and isinstance(v, Mapping)}
    for b in behaviours(software):
        table, name = b.field.split(".")
        if name in out.get(table, {}):
            continue
        value = b.value(out) if callable(b.value) else b.value
        if value is not None:
            out.setdefault(table, {})[name] = value
    return software, out


def _shown(version: tuple[int, ...]) -> str:
    """``(25, 4)`` -> ``"25.04"`` (year.month releases), ``(0, 6)`` -> ``"0.6"``."""
    if not version:
        return ""
    pad = version[0] >= 20
    return ".".join(f"{x:02d}" if pad and i else str(x) for i, x in enumerate(version))


def behaviour_table() -> str:
    """The behaviours of every framework as a Markdown table (docs/config.md, "[software]":
    the block between its markers is this text, checked by the tests)."""
    rows = ["| framework | field | default | versions | source |", "|---|---|---|---|---|"]
    for framework, items in FRAMEWORKS.items():
        for b in items:
            value = b.value.__doc__.split(":")[0].strip() if callable(b.value) else repr(b.value)
            since, until = _shown(b.since), _shown(b.until or ())
            versions = (
                f"{since or 'any'} to before {until}"
                if until
                else (f"from {since}" if since else "all")
            )
            rows.append(
                f"| {framework or '(none)'} | `{b.field}` | {value} | {versions} | {b.source} |"
            )
    return "\n".join(rows)
