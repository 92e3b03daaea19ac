"""The spaces of ``benchmarks/sampler_efficiency.py`` and their exhaustive tables.

Each space is a study file's tables. :func:`exhaustive` evaluates every configuration of a
space once (memory check, analytical engine, event engine) and keeps the values in
``<name>.jsonl`` beside this file, one line per configuration, so that the benchmark replays
them instead of simulating again; a missing or partial file is completed where it stopped.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

from palm.api import memory_check, plan_for, simulate_plan
from palm.config import config_to_dict, parse_config
from search.dedup import config_key
from search.study_file import StudySpec, study_from_tables
from spaces import enumerate_space

__all__ = ["SPACES", "spec_of", "exhaustive", "stored", "evaluate", "rekey", "Row"]

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
WAFER = str(ROOT / "examples" / "wafer-t18b.toml")

Row = dict[str, Any]

SPACES: dict[str, tuple[str, dict[str, Any]]] = {
    "gpt3-175b-a100": (
        "GPU-cluster plan: GPT-3 175B on 1024 A100s, global batch 1536",
        {
            "study": {"base": str(HERE / "gpt3-175b-a100.toml")},
            "space": {
                "parallelism": {"tp": [1, 2, 4, 8, 16]},
                "micro_batch": [1, 2, 4, 8],
                "schedule": ["1f1b", "interleaved-1f1b"],
                "interleave": [2, 3, 4],
                "recompute": ["none", "selective", "full"],
                "sequence_parallel": [True, False],
                "zero": [0, 1],
            },
        },
    ),
    "wafer-t18b-mapping": (
        "wafer mapping: T-18B on the PALM wafer (studies/quickstart.toml's space)",
        {
            "study": {"base": WAFER, "set": ["training.global_batch=32"]},
            "space": {
                "parallelism": True,
                "micro_batch": [1, 2, 4],
                "schedule": ["1f1b", "interleaved-1f1b"],
                "interleave": [2],
                "recompute": ["full", "selective"],
                "layout": ["line", "s-shape"],
                "tp_group": ["compact", "strided"],
            },
        },
    ),
    "wafer-t18b-whatif": (
        "hardware what-if: T-18B on the PALM wafer, SRAM / link / DRAM channel grid with the plan",
        {
            "study": {"base": WAFER, "set": ["training.global_batch=32"]},
            "space": {
                "parallelism": {"tp": [4]},
                "micro_batch": [1, 2],
                "recompute": ["full", "selective"],
                "hardware": {
                    "sram_per_core_mib": {"values": [2, 4, 8]},
                    "inter_tile_link_gbps": {"values": [128, 256, 512]},
                    "dram_channel_bandwidth_gbps": {"values": [128, 256, 512]},
                },
            },
        },
    ),
    "llama3-70b-h100": (
        "dense GPU plan: a Llama-3-70B-shaped model on 512 H100s, global batch 1024 x 8192 tokens",
        {
            "study": {"base": str(ROOT / "examples" / "llama3-70b-h100.toml")},
            "space": {
                "parallelism": {"tp": [2, 4, 8], "pp": [1, 2, 4, 8]},
                "cp": [1, 2, 4],
                "micro_batch": [1, 2],
                "schedule": ["1f1b", "interleaved-1f1b"],
                "interleave": [2, 5],
                "recompute": ["none", "selective", "full"],
                "sequence_parallel": [True, False],
                "zero": [0, 1, 3],
            },
        },
    ),
    "mixtral-8x22b-h100": (
        "mixture of experts: Mixtral 8x22B on 256 H100s, global batch 512 x 4096 tokens, "
        "expert and expert-tensor parallelism and the precision with the plan",
        {
            "study": {"base": str(HERE / "mixtral-8x22b-h100.toml")},
            "space": {
                "parallelism": {"tp": [1, 2, 4, 8], "pp": [1, 2, 4, 8]},
                "micro_batch": [1, 2],
                "schedule": ["1f1b", "interleaved-1f1b"],
                "interleave": [2, 7],
                "recompute": ["none", "selective", "full"],
                "precision": ["bf16", "fp8"],
                "ep": [1, 2, 4, 8],
                "etp": [1, 2],
            },
        },
    ),
    "wafer-t39b-design": (
        "wafer design: T-39B on the PALM wafer, plan, stage layout and TP placement with an "
        "SRAM / inter-tile link / DRAM channel count grid",
        {
            "study": {
                "base": WAFER,
                "set": ["training.global_batch=64", 'model.preset="t-39b"'],
            },
            "space": {
                "parallelism": True,
                "recompute": ["full", "selective"],
                "layout": ["line", "s-shape"],
                "tp_group": ["compact", "strided"],
                "hardware": {
                    "sram_per_core_mib": {"values": [4, 8, 16]},
                    "inter_tile_link_gbps": {"values": [128, 256, 512]},
                    "dram_channels": {"values": [10, 20, 40]},
                },
            },
        },
    ),
}


def spec_of(name: str, *, sampler: str = "tpe", seed: int = 0, trials: int = 100) -> StudySpec:
    _, tables = SPACES[name]
    study = {
        **tables["study"],
        "name": name,
        "objectives": ["throughput"],
        "sampler": sampler,
        "seed": seed,
        "trials": trials,
    }
    return study_from_tables({"study": study, "space": tables["space"]})


def evaluate(config: Any) -> Row:
    """One configuration's row (see :func:`exhaustive`)."""
    t0 = time.perf_counter()
    mem = memory_check(config)
    row: Row = {"overflow": mem.overflow_bytes, "memory_s": time.perf_counter() - t0}
    if mem.overflow_bytes > 0:
        return row
    for engine in ("analytical", "event"):
        t0 = time.perf_counter()
        result, _ = simulate_plan(plan_for(config, engine=engine), engine=engine)
        row[engine] = result.throughput_samples_per_s
        row[f"{engine}_s"] = time.perf_counter() - t0
    return row


def stored(name: str) -> dict[str, Row]:
    """The rows stored for space ``name`` so far, by configuration key."""
    table: dict[str, Row] = {}
    for part in sorted(HERE.glob(f"{name}*.jsonl")):
        for line in part.read_text(encoding="utf-8").splitlines():
            if line.strip():
                row = json.loads(line)
                table[row.pop("key")] = row
    return table


def exhaustive(
    name: str, *, shard: int = 0, shards: int = 1, log: Any = sys.stderr
) -> dict[str, Row]:
    """Every configuration of space ``name`` by key: ``overflow`` (bytes, > 0: does not fit),
    ``memory_s`` and, when it fits, ``analytical`` / ``event`` throughput (samples/s) with
    the wall time of each engine (plan build included). ``shard`` of ``shards`` evaluates
    only every ``shards``-th missing configuration (processes run side by side, each
    appending to its own ``<name>.<shard>.jsonl``; all files are read)."""
    path = HERE / (f"{name}.jsonl" if shards == 1 else f"{name}.{shard}.jsonl")
    table = stored(name)
    spec = spec_of(name)
    todo = []
    seen = set(table)
    space_keys = set()
    for draw in enumerate_space(spec.space, spec.context):
        if draw.draft is None:
            continue
        config = parse_config(draw.draft)
        key = config_key(config_to_dict(config))
        space_keys.add(key)
        if key not in seen:
            seen.add(key)
            todo.append((key, config))
    todo = todo[shard::shards]
    if todo:
        log.write(f"{name}: {len(table)} stored, {len(todo)} to evaluate\n")
    with path.open("a", encoding="utf-8") as out:
        for i, (key, config) in enumerate(todo):
            row = evaluate(config)
            out.write(json.dumps({"key": key, **row}) + "\n")
            out.flush()
            table[key] = row
            if (i + 1) % 100 == 0:
                log.write(f"{name}: {i + 1}/{len(todo)}\n")
                log.flush()
    return {k: v for k, v in table.items() if k in space_keys}


def rekey(name: str, *, added: dict[str, Any]) -> tuple[int, int]:
    """Rename the stored rows of space ``name`` after configuration fields were added whose
    values (``added``: a dotted path, ``"section.field"``, a nested ``"section.table.field"``
    or a whole ``"section"``, -> the value every configuration of the space takes) simulate
    as before: a row's old key is the key of its configuration's tables
    without those fields (a field the configuration lacks, e.g. a GPU cluster's, is left as it
    is). Values are kept (re-simulate a sample to check the claim). Returns
    the rows renamed and the rows stored; rewrites ``<name>.jsonl`` in enumeration order."""
    table = stored(name)
    spec = spec_of(name)
    rows: dict[str, Row] = {}
    for draw in enumerate_space(spec.space, spec.context):
        if draw.draft is None:
            continue
        tables = config_to_dict(parse_config(draw.draft))
        new = config_key(tables)
        for path, value in added.items():
            *outer, field = path.split(".")
            node = tables
            for part in outer:
                node = node.get(part, {})
            if node.pop(field, value) != value:
                raise ValueError(f"{path} = {value!r} is not what {new} takes")
        old = config_key(tables)
        if old in table:
            rows[new] = table[old]
        elif new in table:
            rows[new] = table[new]
    text = "".join(json.dumps({"key": k, **row}) + "\n" for k, row in rows.items())
    for part in HERE.glob(f"{name}*.jsonl"):
        part.unlink()
    (HERE / f"{name}.jsonl").write_text(text, encoding="utf-8")
    return len(rows), len(table)
