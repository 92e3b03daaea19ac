"""Evaluate (or check) the exhaustive tables of benchmarks/sampler_spaces in one command.

Usage:
    python benchmarks/sampler_tables.py                    # complete every missing row
    python benchmarks/sampler_tables.py --redo             # re-evaluate every row (after a
                                                           # change to the simulator)
    python benchmarks/sampler_tables.py --check 20         # re-simulate 20 rows per space
    python benchmarks/sampler_tables.py --spaces llama3-70b-h100,wafer-t39b-design --redo
    python benchmarks/sampler_tables.py --agreement        # analytical vs event, per space

Each configuration of a space gets its memory check, analytical and event-engine throughput
and the wall time of each (``sampler_spaces.evaluate``), one line of
``benchmarks/sampler_spaces/<space>.jsonl``. ``--redo`` writes the new table beside the old
one and replaces it only when it is complete (an interrupted run keeps the old table and
continues where it stopped when run again). ``--check N`` re-simulates N rows per space
(seeded) and prints the largest relative change of each value: 0 means the table is current.
``--agreement`` prints, from the stored tables alone, how the analytical engine ranks the
configurations that fit against the event engine, per space (a markdown table).
Run it single-process under ``nice`` on a shared machine; it prints each space's wall time
(docs/results.md lists what it took).
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import sampler_spaces  # noqa: E402
from sampler_spaces import HERE, SPACES, evaluate, exhaustive, spec_of, stored  # noqa: E402

from palm.config import config_to_dict, parse_config  # noqa: E402
from search.dedup import config_key  # noqa: E402
from spaces import enumerate_space  # noqa: E402


def _configs(name: str) -> dict[str, object]:
    spec = spec_of(name)
    out: dict[str, object] = {}
    for draw in enumerate_space(spec.space, spec.context):
        if draw.draft is not None:
            config = parse_config(draw.draft)
            out.setdefault(config_key(config_to_dict(config)), config)
    return out


def redo(name: str) -> None:
    """Re-evaluate every row of ``name`` into ``<name>.redo.jsonl`` (continuing one left by
    an interrupted run), then replace the table with it."""
    partial = HERE / f"{name}.redo.jsonl"
    done = set()
    if partial.exists():
        for line in partial.read_text(encoding="utf-8").splitlines():
            if line.strip():
                done.add(json.loads(line)["key"])
    todo = {k: c for k, c in _configs(name).items() if k not in done}
    sys.stderr.write(f"{name}: {len(done)} re-evaluated before, {len(todo)} to go\n")
    with partial.open("a", encoding="utf-8") as out:
        for i, (key, config) in enumerate(todo.items(), start=1):
            out.write(json.dumps({"key": key, **evaluate(config)}) + "\n")
            out.flush()
            if i % 200 == 0:
                sys.stderr.write(f"{name}: {i}/{len(todo)}\n")
    for old in HERE.glob(f"{name}*.jsonl"):
        if old != partial:
            old.unlink()
    partial.rename(HERE / f"{name}.jsonl")


def check(name: str, rows: int) -> dict[str, float]:
    """The largest relative change of each stored value over ``rows`` re-simulated rows."""
    table = stored(name)
    configs = _configs(name)
    keys = random.Random(0).sample(sorted(configs), min(rows, len(configs)))
    worst = {"overflow": 0.0, "analytical": 0.0, "event": 0.0}
    for key in keys:
        now, then = evaluate(configs[key]), table[key]
        for field in worst:
            a, b = now.get(field), then.get(field)
            if (a is None) != (b is None):
                worst[field] = float("inf")
            elif a is not None and b is not None:
                worst[field] = max(worst[field], abs(a - b) / max(abs(b), 1e-300))
    return worst


def agreement(names: list[str]) -> str:
    """Rank agreement of the two engines per space, with what each engine cost in all."""
    from sampler_efficiency import rank_agreement

    lines = [
        "| space | configurations | fit | within 1% | Spearman | event top 1% in analytical "
        "top 1% / 5% | best of analytical top 10 | event / analytical / memory (s, all) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for name in names:
        table = stored(name)
        fits = {k: r for k, r in table.items() if "event" in r}
        opt = max(r["event"] for r in fits.values())
        a = rank_agreement(fits)
        seconds = [sum(r.get(f, 0.0) for r in table.values()) for f in ("event_s", "analytical_s")]
        memory = sum(r["memory_s"] for r in table.values())
        lines.append(
            f"| {name} | {len(table)} | {len(fits)} | "
            f"{sum(r['event'] >= 0.99 * opt for r in fits.values())} | {a['spearman']:.3f} | "
            f"{a['top1_in_1']:.0%} / {a['top1_in_5']:.0%} | {a['top10_best']:.1%} | "
            f"{seconds[0]:.0f} / {seconds[1]:.0f} / {memory:.0f} |"
        )
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--spaces", default=",".join(SPACES))
    ap.add_argument("--redo", action="store_true", help="re-evaluate every row")
    ap.add_argument("--check", type=int, metavar="N", help="re-simulate N rows per space")
    ap.add_argument("--agreement", action="store_true", help="print the engines' agreement")
    args = ap.parse_args()
    names = args.spaces.split(",")
    for name in names:
        if name not in SPACES:
            raise SystemExit(f"unknown space {name!r} (one of {', '.join(SPACES)})")
    if args.agreement:
        print(agreement(names))
        return 0
    for name in names:
        started = time.perf_counter()
        if args.check:
            worst = check(name, args.check)
            changes = ", ".join(f"{k} {v:.2e}" for k, v in worst.items())
            print(f"{name}: largest relative change over {args.check} rows: {changes}")
        elif args.redo:
            redo(name)
        else:
            exhaustive(name)
        rows = len(sampler_spaces.stored(name))
        print(f"{name}: {rows} rows, {time.perf_counter() - started:.0f} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
