"""Command-line front end of the simulator: ``simulate`` and ``presets``.

The ``palm-tune`` entry point (:mod:`search.cli`) registers these next to the tuner's
commands; this module knows nothing of the tuner. Every handler returns an exit code and lets
:class:`~palm.errors.ConfigError` propagate to the entry point, which prints its one line and
exits with 2.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any, TextIO

from palm.api import ENGINES, simulate
from palm.config import load_config
from palm.hardware.presets import HARDWARE_PRESETS
from palm.hardware.spec import GpuClusterHardware
from palm.result import Result
from palm.strategy import SimConfig
from palm.workload.model import build_workload
from palm.workload.presets import MODEL_PRESETS, MODEL_SOURCES

__all__ = ["add_commands", "format_summary"]


def add_commands(sub: argparse._SubParsersAction[Any]) -> None:
    """Register ``simulate`` and ``presets`` on ``sub``."""
    p = sub.add_parser(
        "simulate",
        help="simulate one configuration (TOML) and print its throughput, memory and timings",
        description="Simulate one training or inference iteration of the configuration in FILE.",
    )
    p.add_argument("file", metavar="FILE", help="simulation configuration (TOML, SPEC sec. 3)")
    p.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="SECTION.FIELD=VALUE",
        help="override a field, e.g. --set parallelism.tp=4 (repeatable)",
    )
    p.add_argument(
        "--engine",
        choices=ENGINES,
        default=ENGINES[0],
        help=f"simulation engine (default: {ENGINES[0]})",
    )
    p.add_argument("--json", action="store_true", help="print the result as one JSON object")
    p.set_defaults(handler=_cmd_simulate)

    q = sub.add_parser(
        "presets",
        help="list model and hardware presets with their key figures",
        description="List the model and hardware presets.",
    )
    q.add_argument("--json", action="store_true", help="print as JSON")
    q.set_defaults(handler=_cmd_presets)


def _cmd_simulate(args: argparse.Namespace, out: TextIO | None = None) -> int:
    out = out or sys.stdout
    config = load_config(args.file, overrides=args.overrides)
    result = simulate(config, engine=args.engine)
    if args.json:
        out.write(result.to_json() + "\n")
    else:
        out.write(format_summary(config, result))
    return 0


def _gib(x: float) -> str:
    return f"{x / 2**30:,.1f} GiB"


def format_summary(config: SimConfig, result: Result) -> str:
    """The human-readable summary of one simulation."""
    par, tr = config.parallelism, config.training
    unit = result.sample_unit
    lines = [
        f"model      {config.model.name} on {config.hardware.name} ({result.devices} devices)",
        f"plan       {tr.mode}, TP={par.tp} PP={par.pp} DP={par.dp}, schedule {par.schedule}"
        + (f" x{par.chunks}" if par.chunks > 1 else "")
        + f", micro-batch {tr.micro_batch} x {result.micro_batches}, {tr.precision}, "
        + f"recompute {tr.recompute}, ZeRO {tr.zero}",
        f"engine     {result.engine} ({result.sim_wall_s * 1e3:.1f} ms"
        + (f", {result.events_simulated} events)" if result.events_simulated else ")"),
        "",
        f"throughput {result.throughput_samples_per_s:,.3f} {unit}/s"
        + (f"  ({result.tokens_per_s:,.0f} tokens/s)" if result.tokens_per_s else ""),
        f"iteration  {result.iteration_time_s:.4f} s   bubble {result.bubble_fraction:.1%}",
        f"compute    {result.model_tflops_per_device:.1f} model TFLOP/s per device, "
        f"{result.hardware_tflops_per_device:.1f} hardware, MFU {result.mfu:.1%}",
        f"memory     {_gib(result.peak_memory_bytes)} of {_gib(result.memory_capacity_bytes)} "
        f"per device: weights {_gib(result.memory.weights_bytes)}, grads "
        f"{_gib(result.memory.gradients_bytes)}, optimizer {_gib(result.memory.optimizer_bytes)}, "
        f"activations {_gib(result.memory.activations_bytes)}",
    ]
    if not result.fits_memory:
        lines.append(f"           DOES NOT FIT: over by {_gib(result.memory_overflow_bytes)}")
    lines += [
        "",
        "stage  layers  fwd/mb (ms)  bwd/mb (ms)  busy    bubble (s)  DP exposed (s)  memory",
    ]
    shown = result.stages if len(result.stages) <= 12 else result.stages[:6] + result.stages[-6:]
    for s in shown:
        lines.append(
            f"{s.stage:>5}  {s.layers:>6}  {s.forward_s * 1e3:>11.2f}  "
            f"{s.backward_s * 1e3:>11.2f}  {s.busy_fraction:>5.1%}  {s.bubble_s:>10.3f}  "
            f"{s.dp_exposed_s:>14.4f}  {_gib(s.memory_bytes)}"
        )
    if len(result.stages) > 12:
        lines.append(f"       ({len(result.stages) - 12} stages not shown; --json has all)")
    return "\n".join(lines) + "\n"


def _cmd_presets(args: argparse.Namespace, out: TextIO | None = None) -> int:
    out = out or sys.stdout
    models: list[dict[str, object]] = []
    for name, m in MODEL_PRESETS.items():
        w = build_workload(m)
        models.append(
            {
                "name": name,
                "family": m.family,
                "params": w.params,
                "params_b": w.params / 1e9,
                "layers": m.layers,
                "hidden": m.hidden,
                "heads": m.heads,
                "seq_len": m.seq_len,
                "source": MODEL_SOURCES.get(name, ""),
            }
        )
    hardware = []
    for name, hw in HARDWARE_PRESETS.items():
        if isinstance(hw, GpuClusterHardware):
            hardware.append(
                {
                    "name": name,
                    "topology": hw.topology,
                    "devices": "per strategy",
                    "peak_bf16_tflops_per_device": hw.peak_tflops.bf16,
                    "memory_gib_per_device": hw.hbm_gib,
                    "link_gbps": f"{hw.switch_bandwidth_gbps:g} in node / "
                    f"{hw.inter_node_bandwidth_gbps:g} across",
                }
            )
        else:
            hardware.append(
                {
                    "name": name,
                    "topology": hw.topology,
                    "devices": f"{hw.device_count} cores ({hw.tiles[0]}x{hw.tiles[1]} tiles "
                    f"of {hw.cores_per_tile[0]}x{hw.cores_per_tile[1]})",
                    "peak_bf16_tflops_per_device": hw.core_peak_tflops.bf16,
                    "memory_gib_per_device": hw.device_memory_bytes / 2**30,
                    "link_gbps": f"{hw.intra_tile_link_gbps:g} in tile / "
                    f"{hw.inter_tile_link_gbps:g} across",
                }
            )
    if args.json:
        import json

        out.write(json.dumps({"models": models, "hardware": hardware}, indent=2) + "\n")
        return 0
    out.write("models\n")
    out.write(
        f"  {'name':<12} {'family':<9} {'params':>10} {'layers':>6} {'hidden':>6} "
        f"{'heads':>5} {'seq':>5}  source\n"
    )
    for row in models:
        out.write(
            f"  {row['name']:<12} {row['family']:<9} {row['params_b']:>9.2f}B {row['layers']:>6} "
            f"{row['hidden']:>6} {row['heads']:>5} {row['seq_len']:>5}  {row['source']}\n"
        )
    out.write("\nhardware\n")
    out.write(
        f"  {'name':<11} {'topology':<12} {'bf16 TF/dev':>11} {'mem/dev':>10}  "
        "devices; links (GB/s)\n"
    )
    for h in hardware:
        out.write(
            f"  {h['name']:<11} {h['topology']:<12} {h['peak_bf16_tflops_per_device']:>11.2f} "
            f"{h['memory_gib_per_device']:>6.1f} GiB  {h['devices']}; {h['link_gbps']}\n"
        )
    return 0
