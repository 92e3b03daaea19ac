"""Checks of a serving configuration that involve several tables (called by
:func:`palm.config.validate`). Each mistake raises :class:`~palm.errors.ConfigError` naming the
field, the value and what is allowed."""

from __future__ import annotations

from palm.errors import ConfigError
from palm.hardware.spec import GpuClusterHardware, Mesh2DHardware
from palm.serving.chips import chip_devices
from palm.serving.spec import ServingConfig
from palm.strategy import SimConfig
from palm.units import PRECISIONS
from palm.workload.model import check_tensor_parallel

__all__ = ["validate_serving", "serving_etp", "MAX_BATCH", "MAX_TOKENS"]

#: bounds on what the closed form's cost grows with (logarithmically: bisections over them)
MAX_BATCH = 2**30
MAX_TOKENS = 2**24


def serving_etp(config: SimConfig) -> int:
    """The expert tensor-parallel degree of a served MoE model: ``etp``, or (``etp = 0``) 1
    under expert parallelism and ``tp`` without it (vLLM's ``--enable-expert-parallel``
    places whole experts; its default splits each expert ``tp`` ways)."""
    par = config.parallelism
    if par.etp:
        return par.etp
    return 1 if par.ep > 1 else par.tp


def validate_serving(config: SimConfig) -> bool:
    """Check a ``training.mode = "serve"`` configuration; ``False`` (nothing checked) for any
    other mode, whose ``[serving]`` table must then be empty."""
    if config.training.mode != "serve":
        if config.serving != ServingConfig():
            raise ConfigError(
                "training.mode", config.training.mode, "'serve' with a [serving] table"
            )
        return False
    _check_table(config.serving)
    _check_model_and_plan(config)
    _check_hardware(config)
    return True


def _check_table(sv: ServingConfig) -> None:
    if sv.batch > MAX_BATCH:
        raise ConfigError("serving.batch", sv.batch, f"at most {MAX_BATCH:,}")
    for name in ("input_tokens", "output_tokens", "chunk_tokens"):
        if getattr(sv, name) > MAX_TOKENS:
            raise ConfigError(f"serving.{name}", getattr(sv, name), f"at most {MAX_TOKENS:,}")
    if not 0 < sv.memory_fraction <= 1:
        raise ConfigError("serving.memory_fraction", sv.memory_fraction, "a fraction in (0, 1]")
    if sv.scenario == "server" and sv.batching == "static":
        raise ConfigError("serving.batching", sv.batching, "'continuous' in the server scenario")


def _check_model_and_plan(config: SimConfig) -> None:
    m, par = config.model, config.parallelism
    if m.family not in ("gpt", "llama"):
        raise ConfigError("model.family", m.family, "a decoder ('gpt' or 'llama') to serve")
    check_tensor_parallel(m, par.tp)
    if par.pp > m.layers:
        raise ConfigError("parallelism.pp", par.pp, f"at most model.layers = {m.layers}")
    for name in ("cp", "interleave"):
        if getattr(par, name) != 1:
            raise ConfigError(f"parallelism.{name}", getattr(par, name), "1 when serving")
    if not m.is_moe:
        if par.ep != 1 or par.etp > 1:
            name, value = ("ep", par.ep) if par.ep != 1 else ("etp", par.etp)
            raise ConfigError(f"parallelism.{name}", value, "1 for a dense model")
        return
    if m.experts % par.ep:
        raise ConfigError("parallelism.ep", par.ep, f"a divisor of model.experts = {m.experts}")
    etp = serving_etp(config)
    group = par.ep * etp
    ok = tp_ok = par.tp % group == 0
    if not tp_ok:
        ok = group % par.tp == 0 and (par.tp * par.dp) % group == 0
    if not ok or m.moe_ffn_hidden % etp:
        raise ConfigError(
            "parallelism.ep*etp",
            f"{par.ep}*{etp} = {group}",
            f"a divisor of tp = {par.tp}, or a multiple of it dividing tp x dp = "
            f"{par.tp * par.dp} (attention data parallelism), with etp dividing "
            f"model.moe_ffn_hidden = {m.moe_ffn_hidden}",
        )


def _check_hardware(config: SimConfig) -> None:
    hw, tr, par = config.hardware, config.training, config.parallelism
    if isinstance(hw, GpuClusterHardware):
        if hw.peak_tflops.get(tr.precision) <= 0:
            ok = [p for p in PRECISIONS if hw.peak_tflops.get(p) > 0]
            raise ConfigError("training.precision", tr.precision, f"one of {ok} on {hw.name}")
        if hw.gpus and par.devices != hw.gpus:
            raise ConfigError(
                "parallelism.tp*pp*dp",
                f"{par.tp}*{par.pp}*{par.dp} = {par.devices}",
                f"degrees whose product equals hardware.gpus = {hw.gpus}",
            )
        return
    assert isinstance(hw, Mesh2DHardware)
    if hw.core_peak_tflops.get(tr.precision) <= 0:
        ok = [p for p in PRECISIONS if hw.core_peak_tflops.get(p) > 0]
        raise ConfigError("training.precision", tr.precision, f"one of {ok} on {hw.name}")
    chips = chip_devices(hw)
    if par.devices != chips:
        what = (
            f"degrees whose product equals the {chips} chips of {hw.name} (one device per chip)"
            if chips > 1
            else f"1*1*1 on {hw.name} (it serves as one device)"
        )
        raise ConfigError("parallelism.tp*pp*dp", f"{par.tp}*{par.pp}*{par.dp}", what)
