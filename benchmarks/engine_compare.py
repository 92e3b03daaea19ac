"""Before/after check for changes to the event engine: simulates the engine-speed benchmark's
cases and the examples/ configurations under both NoC models, and either saves every result
(``--save FILE``) or compares them with a saved file (``--check FILE``).

Usage:
    python benchmarks/engine_compare.py --save before.json      # on the old code
    python benchmarks/engine_compare.py --check before.json     # on the new code

GPU cases must be bit-identical; mesh (tiled) cases equal within ``--rtol`` (1e-12 relative by
default): an exact rearrangement of the max-min fair computation may round differently.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import sys
from pathlib import Path
from typing import Any

import palm
from palm.validation import load_cases

sys.path.insert(0, str(Path(__file__).resolve().parent))
from engine_speed import EXAMPLES, T145B_TP4, wafer_config  # noqa: E402 - a sibling script


def _cases() -> list[tuple[str, palm.SimConfig]]:
    cases = [(c.case_id, c.config) for c in load_cases()]
    cases += [(f"wafer-palm {p}", wafer_config(p)) for p in ("t-18b", "t-76b", "t-145b")]
    cases += [("wafer-palm t-145b TP4 PP20 DP4", T145B_TP4)]
    cases += [
        (f"wafer {t[0]}x{t[1]}", wafer_config("t-18b", tiles=t, dp=dp, channels=2 * sum(t)))
        for t, dp in (((10, 8), 8), ((20, 16), 32))
    ]
    cases += [(path.name, palm.load_config(path)) for path in sorted(EXAMPLES.glob("*.toml"))]
    # every link a resource of its own (routes of many links: the numpy filling)
    for name, cfg in (
        cases[0],
        ("wafer-t18b.toml", palm.load_config(EXAMPLES / "wafer-t18b.toml")),
    ):
        comm = dataclasses.replace(cfg.communication, noc_granularity="link")
        cases.append((f"{name} link", dataclasses.replace(cfg, communication=comm)))
    out = []
    for name, cfg in cases:
        for model in ("fair", "exclusive"):
            comm = dataclasses.replace(cfg.communication, noc_model=model)
            out.append((f"{name} [{model}]", dataclasses.replace(cfg, communication=comm)))
    return out


def _strip(x: Any) -> Any:
    """The result without its wall-clock fields."""
    if isinstance(x, dict):
        return {k: _strip(v) for k, v in x.items() if "wall" not in k}
    if isinstance(x, list):
        return [_strip(v) for v in x]
    return x


def _diff(a: Any, b: Any, path: str, rtol: float, out: list[str]) -> None:
    if isinstance(a, dict) and isinstance(b, dict):
        for k in sorted(set(a) | set(b)):
            _diff(a.get(k), b.get(k), f"{path}.{k}", rtol, out)
    elif isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        for i, (u, v) in enumerate(zip(a, b, strict=True)):
            _diff(u, v, f"{path}[{i}]", rtol, out)
    elif isinstance(a, float) and isinstance(b, float):
        if a != b and not math.isclose(a, b, rel_tol=rtol, abs_tol=1e-300):
            out.append(f"{path}: {a!r} != {b!r} (rel {abs(a - b) / max(abs(a), abs(b)):.2e})")
        elif a != b and rtol == 0.0:
            out.append(f"{path}: {a!r} != {b!r}")
    elif a != b:
        out.append(f"{path}: {a!r} != {b!r}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    group = ap.add_mutually_exclusive_group(required=True)
    group.add_argument("--save", type=Path, help="write every case's result to this file")
    group.add_argument("--check", type=Path, help="compare with the results in this file")
    ap.add_argument("--rtol", type=float, default=1e-12, help="relative tolerance on meshes")
    args = ap.parse_args()
    results = {}
    for name, cfg in _cases():
        result = palm.simulate(cfg, engine="event")
        results[name] = (cfg.hardware.topology, _strip(result.to_dict()))
    if args.save:
        args.save.write_text(json.dumps(results, indent=1, sort_keys=True))
        print(f"{len(results)} cases saved to {args.save}")
        return 0
    saved = json.loads(args.check.read_text())
    failed = 0
    new = [name for name in results if name not in saved]
    for name in new:  # an example added since the save: nothing to compare it with
        print(f"{name}: new since the save, not compared")
        del results[name]
    for name, (kind, now) in results.items():
        problems: list[str] = []
        rtol = args.rtol if kind == "mesh2d" else 0.0
        _diff(saved[name][1], now, "", rtol, problems)
        status = "ok" if not problems else f"{len(problems)} differences"
        print(f"{name} ({kind}, rtol {rtol:g}): {status}")
        for line in problems[:5]:
            print("   ", line)
        failed += bool(problems)
    print(f"{len(results) - failed}/{len(results)} cases match")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
