"""Command-line front end of the simulator: ``simulate``, ``plot``, ``validate``, ``presets``.

The ``palm-tune`` entry point (:mod:`search.cli`) registers these next to the tuner's
commands; this module knows nothing of the tuner. Every handler returns an exit code and lets
:class:`~palm.errors.ConfigError` propagate to the entry point, which prints its one line and
exits with 2.
"""

from __future__ import annotations

import argparse
import dataclasses
import errno
import json
import sys
from pathlib import Path
from typing import Any, TextIO

from palm.api import DEFAULT_ENGINE, ENGINES, simulate, simulate_timeline
from palm.config import apply_overrides, config_to_dict, load_config, parse_config
from palm.errors import ConfigError
from palm.hardware.presets import HARDWARE_PRESETS
from palm.hardware.spec import GpuClusterHardware, Hardware, Mesh2DHardware
from palm.inputs import read_input
from palm.result import Result
from palm.strategy import SimConfig
from palm.validation import load_cases
from palm.validation_files import validation_file_kind
from palm.validation_report import modern_report, report_modern, write_modern
from palm.validation_tiled import load_tiled_cases
from palm.validation_tiled_report import tiled_report, write_tiled_tables
from palm.workload.model import build_workload
from palm.workload.presets import MODEL_PRESETS, MODEL_SOURCES

__all__ = ["add_commands", "format_summary"]

#: a write that failed for want of room (ENOSPC, EFBIG past a file-size limit, EDQUOT): the
#: entry point reports it as a full disk with exit 1 (docs/tuning.md, "Guarantees"); any other
#: failure to write an output the user named is bad input (exit 2)
_DISK_FULL = (errno.ENOSPC, errno.EFBIG, errno.EDQUOT)


def add_commands(sub: argparse._SubParsersAction[Any]) -> None:
    """Register ``simulate``, ``plot``, ``validate`` and ``presets`` on ``sub``."""
    _add_simulate_and_plot(sub)
    _add_validate_and_presets(sub)


def _add_simulate_and_plot(sub: argparse._SubParsersAction[Any]) -> None:
    p = sub.add_parser(
        "simulate",
        help="simulate one configuration (TOML) and print its throughput, memory and timings",
        description="Simulate one training or inference iteration of the configuration in FILE.",
    )
    p.add_argument(
        "file", metavar="FILE", help="simulation configuration (TOML, see docs/config.md)"
    )
    _add_overrides(p)
    p.add_argument(
        "--engine",
        choices=ENGINES,
        default=DEFAULT_ENGINE,
        help=f"simulation engine (default: {DEFAULT_ENGINE})",
    )
    p.add_argument(
        "--json",
        action="store_true",
        help="print the result as one JSON object (with the resolved configuration)",
    )
    p.add_argument(
        "--trace",
        metavar="OUT.json",
        help="write a Chrome/Perfetto trace of the timeline (event engine)",
    )
    p.add_argument(
        "--no-wall-time",
        action="store_true",
        help="report sim_wall_s as null, so that the same input gives byte-identical output",
    )
    p.set_defaults(handler=_cmd_simulate)

    g = sub.add_parser(
        "plot",
        help="draw the pipeline Gantt chart and the link-utilisation heat map (PNG)",
        description="Simulate FILE with the event engine and write gantt.png and links.png to "
        "--out. FILE is a configuration (TOML) or a result written by 'simulate --json', whose "
        "stored configuration is simulated again (the simulator is deterministic).",
    )
    g.add_argument("file", metavar="RESULT_OR_CONFIG", help="configuration TOML or result JSON")
    _add_overrides(g)
    g.add_argument(
        "--out", metavar="DIR", default="palm-plots", help="output directory (default: palm-plots)"
    )
    g.set_defaults(handler=_cmd_plot)


def _add_validate_and_presets(sub: argparse._SubParsersAction[Any]) -> None:
    v = sub.add_parser(
        "validate",
        help="compare the simulator with published runs and print the errors",
        description="Simulate every case of a validation file (default: the packaged visible "
        "cases, Megatron SC21 Table 1, and the visible Tenstorrent Wormhole n150 matrix products "
        "and DRAM bandwidths) and print predicted against published iteration time (bandwidth) "
        "with the signed error, then the mean and max absolute error. Reports, does not judge: "
        "the exit code is 0 whatever the errors.",
    )
    v.add_argument(
        "file",
        metavar="FILE",
        nargs="?",
        default=None,
        help="validation JSON of the shape of visible.json, visible_tiled.json, "
        "visible_modern.json or visible_inference.json",
    )
    v.add_argument(
        "--engine",
        choices=ENGINES,
        default=DEFAULT_ENGINE,
        help=f"simulation engine (default: {DEFAULT_ENGINE})",
    )
    v.add_argument("--json", action="store_true", help="print the report as JSON")
    v.add_argument(
        "--suite",
        choices=("all", "megatron", "modern", "tiled", "inference", "kernels"),
        default="all",
        help="without FILE: the packaged Megatron A100 cases, the modern GPU set "
        "(visible_modern.json: H100, B200, GB200, A100 FSDP runs), the Tenstorrent Wormhole "
        "set (visible_tiled.json) or all three (default); 'inference': the LLM serving rows "
        "(visible_inference.json: MLPerf, TensorRT-LLM, tt-metal); 'kernels': published GEMM "
        "and attention kernel measurements (kernels.json) against the kernel models",
    )
    v.set_defaults(handler=_cmd_validate)

    q = sub.add_parser(
        "presets",
        help="list model and hardware presets with their key figures",
        description="List the model and hardware presets.",
    )
    q.add_argument("--json", action="store_true", help="print as JSON")
    q.set_defaults(handler=_cmd_presets)


def _add_overrides(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="SECTION.FIELD=VALUE",
        help="override a field, e.g. --set parallelism.tp=4 (repeatable)",
    )


def _cmd_simulate(args: argparse.Namespace, out: TextIO | None = None) -> int:
    out = out or sys.stdout
    config = load_config(args.file, overrides=args.overrides)
    if config.training.mode == "serve":  # LLM serving (palm.serving)
        return _simulate_serving(args, config, out)
    if args.trace and args.engine != "event":
        raise ConfigError("--trace", args.trace, "the event engine (--engine event) for a trace")
    # the timeline is recorded only for a trace (it costs about a third more engine time)
    result, timeline = simulate_timeline(config, engine=args.engine, record=bool(args.trace))
    if args.no_wall_time:
        result = dataclasses.replace(result, sim_wall_s=None)
    if args.trace:
        assert timeline is not None
        _write_trace(Path(args.trace), result, timeline, config)
    return _emit(args, config, result, format_summary(config, result), out)


def _emit(
    args: argparse.Namespace, config: SimConfig, result: Result, summary: str, out: TextIO
) -> int:
    """Print ``simulate``'s result: JSON with the resolved configuration, or ``summary``."""
    if args.json:
        data = result.to_dict()
        data["config"] = config_to_dict(config)
        out.write(json.dumps(data, indent=2) + "\n")
    else:
        out.write(summary)
        if args.trace:
            out.write(f"\ntrace      {args.trace}\n")
    return 0


def _simulate_serving(args: argparse.Namespace, config: SimConfig, out: TextIO) -> int:
    """``simulate`` of a served configuration: its result, readable summary and trace."""
    import time

    from palm.serving.simulate import serving_result, serving_run
    from palm.serving.timeline import format_serving, write_serving_trace

    start = time.perf_counter()
    run = serving_run(config)
    result = serving_result(run, started=start, engine=args.engine)
    if args.no_wall_time:
        result = dataclasses.replace(result, sim_wall_s=None)
    if args.trace:
        try:
            write_serving_trace(Path(args.trace), run)
        except OSError as exc:
            raise ConfigError(
                "--trace", args.trace, f"a writable file path ({exc.strerror})"
            ) from None
    return _emit(args, config, result, format_serving(run, result), out)


def _write_trace(path: Path, result: Result, timeline: Any, config: SimConfig) -> None:
    from palm.trace import write_chrome_trace

    try:
        write_chrome_trace(path, result=result, timeline=timeline, config=config)
    except OSError as exc:
        if exc.errno in _DISK_FULL:  # not the user's input: exit 1, as a full disk anywhere
            raise OSError(exc.errno, exc.strerror, exc.filename or str(path)) from None
        raise ConfigError("--trace", str(path), f"a writable file path ({exc.strerror})") from None


def load_config_or_result(path: str, overrides: list[str]) -> SimConfig:
    """A configuration from a TOML file, or the one stored in a ``simulate --json`` result."""
    if not path.endswith(".json"):
        return load_config(path, overrides=overrides)
    text = read_input(path, field="result file", kind="JSON file")
    try:
        data = json.loads(text)
    except (ValueError, RecursionError) as exc:
        raise ConfigError("result file", path, f"valid JSON ({exc})") from None
    if not isinstance(data, dict) or not isinstance(data.get("config"), dict):
        raise ConfigError(
            "result file", path, "a result written by 'palm-tune simulate --json' (with its config)"
        )
    return parse_config(apply_overrides(data["config"], overrides), base_dir=Path(path).parent)


def _cmd_plot(args: argparse.Namespace, out: TextIO | None = None) -> int:
    from palm.plots import plot_all

    out = out or sys.stdout
    config = load_config_or_result(args.file, args.overrides)
    try:
        paths = plot_all(args.out, config=config)
    except OSError as exc:
        if exc.errno in _DISK_FULL:
            raise
        raise ConfigError("--out", args.out, f"a writable directory ({exc.strerror})") from None
    for path in paths:
        out.write(f"wrote {path}\n")
    return 0


def _cmd_validate(args: argparse.Namespace, out: TextIO | None = None) -> int:
    out = out or sys.stdout
    suite = getattr(args, "suite", "all")
    kind = validation_file_kind(args.file) if args.file is not None else None
    if kind == "inference" or (kind is None and suite == "inference"):
        from palm.serving.report import report_inference  # LLM serving rows

        return report_inference(args.file, as_json=args.json, out=out)
    if kind == "kernels" or (kind is None and suite == "kernels"):
        from palm.validation_kernels import kernel_report, write_kernel_report

        kreport = kernel_report(args.file)
        if args.json:
            out.write(json.dumps(kreport, indent=2) + "\n")
        else:
            write_kernel_report(kreport, out=out)
        return 0
    if kind == "modern" or (kind is None and suite == "modern"):
        return report_modern(args.file, engine=args.engine, as_json=args.json, out=out)
    tiled_only = kind == "tiled" or (kind is None and suite == "tiled")
    rows = [] if tiled_only else _gpu_rows(args)
    errors = [abs(float(r["error"])) for r in rows]  # type: ignore[arg-type]
    summary: dict[str, Any] = {
        "engine": args.engine,
        "cases": rows,
        "mean_abs_error": sum(errors) / len(errors) if errors else None,
        "max_abs_error": max(errors) if errors else None,
    }
    if tiled_only or (args.file is None and suite == "all"):
        summary["tiled"] = tiled_report(load_tiled_cases(args.file), engine=args.engine)
    if args.file is None and suite == "all":
        summary["modern"] = modern_report(None, engine=args.engine)
    if args.json:
        out.write(json.dumps(summary, indent=2) + "\n")
        return 0
    if rows:
        _write_gpu_table(out, rows, summary)
    if "tiled" in summary:
        write_tiled_tables(out, summary["tiled"])
    if "modern" in summary:
        out.write("\n")
        write_modern(summary["modern"], engine=args.engine, out=out)
    return 0


def _gpu_rows(args: argparse.Namespace) -> list[dict[str, object]]:
    rows: list[dict[str, object]] = []
    for case in load_cases(args.file):
        result = simulate(case.config, engine=args.engine)
        par, tr = case.config.parallelism, case.config.training
        predicted = result.iteration_time_s
        rows.append(
            {
                "id": case.case_id,
                "plan": {
                    "tp": par.tp,
                    "pp": par.pp,
                    "dp": par.dp,
                    "schedule": par.schedule,
                    "interleave": par.chunks,
                    "micro_batch": tr.micro_batch,
                    "global_batch": tr.global_batch,
                    "recompute": tr.recompute,
                },
                "predicted_iteration_time_s": predicted,
                "published_iteration_time_s": case.published_iteration_time_s,
                "error": predicted / case.published_iteration_time_s - 1.0,
                "source": case.source,
            }
        )
    return rows


def _write_gpu_table(out: TextIO, rows: list[dict[str, Any]], summary: dict[str, Any]) -> None:
    out.write(
        f"{'case':<32} {'TP':>3} {'PP':>3} {'DP':>3} {'schedule':<20} {'mb':>3}  "
        f"{'predicted (s)':>13} {'published (s)':>13} {'error':>7}\n"
    )
    for r in rows:
        plan = r["plan"]
        sched = str(plan["schedule"]) if plan["pp"] > 1 else "-"
        if plan["interleave"] > 1:
            sched += f" x{plan['interleave']}"
        out.write(
            f"{r['id']:<32} {plan['tp']:>3} {plan['pp']:>3} {plan['dp']:>3} {sched:<20} "
            f"{plan['micro_batch']:>3}  {r['predicted_iteration_time_s']:>13.3f} "
            f"{r['published_iteration_time_s']:>13.3f} {r['error']:>+7.1%}\n"
        )
    out.write(
        f"\n{len(rows)} cases, engine {summary['engine']}: mean absolute error "
        f"{summary['mean_abs_error']:.1%}, max {summary['max_abs_error']:.1%}\n"
    )


def _gib(x: float) -> str:
    """Bytes in the largest binary unit that keeps the number >= 1 (B, KiB, MiB, GiB, TiB), so
    that a small chip's SRAM does not print as 0.0 GiB."""
    for unit, size in (("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if abs(x) >= size:
            return f"{x / size:,.1f} {unit}"
    return f"{x:,.0f} B"


def _params_line(config: SimConfig) -> list[str]:
    """``params     46,702,792,704 total (46.7B), 12,879,921,152 active (12.9B)``: the
    model's parameters and those one token uses (a mixture of experts' ``top_k``), as
    :class:`~palm.workload.model.Workload` counts them; none for a single product."""
    if config.model.family == "gemm":
        return []
    w = build_workload(config.model)

    def count(n: int) -> str:
        return f"{n:,} ({n / 1e9:.3g}B)" if n >= 1e9 else f"{n:,} ({n / 1e6:.3g}M)"

    return [f"params     {count(w.params)} total, {count(w.active_params)} active"]


def format_summary(config: SimConfig, result: Result) -> str:
    """The human-readable summary of one simulation."""
    par, tr = config.parallelism, config.training
    unit = result.sample_unit
    lines = [
        f"model      {config.model.name} on {config.hardware.name} ({result.devices} devices)",
        *_params_line(config),
        f"plan       {tr.mode}, TP={par.tp} PP={par.pp} DP={par.dp}"
        + (f" EP={par.ep} ETP={par.expert_tp}" if config.model.is_moe else "")
        + f", schedule {par.schedule}"
        + (f" x{par.chunks}" if par.chunks > 1 else "")
        + f", micro-batch {tr.micro_batch} x {result.micro_batches}, {tr.precision}, "
        + f"recompute {tr.recompute}, ZeRO {tr.zero}",
        f"engine     {result.engine} ("
        + (f"{result.sim_wall_s * 1e3:.1f} ms" if result.sim_wall_s is not None else "untimed")
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


def _preset_model_rows() -> list[dict[str, object]]:
    """One row per model preset for ``palm-tune presets``."""
    models: list[dict[str, object]] = []
    for name, m in MODEL_PRESETS.items():
        w = build_workload(m)
        models.append(
            {
                "name": name,
                "family": m.family,
                "params": w.params,
                "params_b": w.params / 1e9,
                "active_params": w.active_params,
                "active_b": w.active_params / 1e9,
                "layers": m.layers,
                "hidden": m.hidden,
                "heads": m.heads,
                "seq_len": m.seq_len,
                "source": MODEL_SOURCES.get(name, ""),
            }
        )
    return models


def _preset_hardware_row(name: str, hw: Hardware) -> dict[str, object]:
    """One hardware preset's row for ``palm-tune presets``."""
    if isinstance(hw, GpuClusterHardware):
        return {
            "name": name,
            "topology": hw.topology,
            "devices": "per strategy",
            "peak_bf16_tflops_per_device": hw.peak_tflops.bf16,
            "memory_gib_per_device": hw.hbm_gib,
            "link_gbps": f"{hw.switch_bandwidth_gbps:g} in node / "
            f"{hw.inter_node_bandwidth_gbps:g} across",
        }
    assert isinstance(hw, Mesh2DHardware)
    chips = (
        f"{hw.chip_links_per_edge} x {hw.inter_tile_link_gbps:g} per chip edge"
        if hw.chip_links_per_edge
        else f"{hw.inter_tile_link_gbps:g} across"
    )
    external = f" / {hw.external_memory_gbps:g} to external memory" if hw.weight_streaming else ""
    return {
        "name": name,
        "topology": hw.topology,
        "devices": f"{hw.device_count} cores ({hw.tiles[0]}x{hw.tiles[1]} tiles "
        f"of {hw.cores_per_tile[0]}x{hw.cores_per_tile[1]})",
        "peak_bf16_tflops_per_device": hw.core_peak_tflops.bf16,
        "memory_gib_per_device": hw.device_memory_bytes / 2**30,
        "link_gbps": f"{hw.intra_tile_link_gbps:g} in tile / {chips}{external}",
        "execution": hw.execution,
    }


def _cmd_presets(args: argparse.Namespace, out: TextIO | None = None) -> int:
    out = out or sys.stdout
    models = _preset_model_rows()
    hardware = [_preset_hardware_row(name, hw) for name, hw in HARDWARE_PRESETS.items()]
    if args.json:
        out.write(json.dumps({"models": models, "hardware": hardware}, indent=2) + "\n")
        return 0
    out.write("models\n")
    # columns as wide as their longest entry, so that every row lines up
    width = max(len("name"), *(len(str(row["name"])) for row in models))
    out.write(
        f"  {'name':<{width}} {'family':<9} {'params':>10} {'active':>9} {'layers':>6} "
        f"{'hidden':>6} {'heads':>5} {'seq':>5}  source\n"
    )
    for row in models:
        out.write(
            f"  {row['name']:<{width}} {row['family']:<9} {row['params_b']:>9.2f}B "
            f"{row['active_b']:>8.2f}B {row['layers']:>6} "
            f"{row['hidden']:>6} {row['heads']:>5} {row['seq_len']:>5}  {row['source']}\n"
        )
    out.write("\nhardware\n")
    width = max(len("name"), *(len(str(h["name"])) for h in hardware))
    out.write(
        f"  {'name':<{width}} {'topology':<12} {'bf16 TF/dev':>11} {'mem/dev':>10}  "
        "devices; links (GB/s)\n"
    )
    for h in hardware:
        out.write(
            f"  {h['name']:<{width}} {h['topology']:<12} {h['peak_bf16_tflops_per_device']:>11.2f} "
            f"{h['memory_gib_per_device']:>6.1f} GiB  {h['devices']}; {h['link_gbps']}"
            + (f"; {h['execution']}" if h.get("execution", "overlapped") != "overlapped" else "")
            + "\n"
        )
    return 0
