"""Why T-18B's stages 10-19 are busier than stages 0-9 on the wafer in ``link`` mode
(docs/model.md sec. 7, "Why the second half of the pipeline is busier").

Usage:
    python benchmarks/wafer_symmetry.py [--at 5.1325]

``examples/wafer-t18b.toml`` (TP 8, PP 20, DP 2, line layout, one tile per stage) with
``communication.noc_granularity = "link"``, three ways: as placed; with every stage moved to
the tile of stage ``19 - s`` (``placement.layout = "explicit"``: the wafer turned by 180
degrees, under which its channels and links map onto themselves); and in ``group`` mode. Prints
the throughput and every stage's busy time, then, at simulated time ``--at``, the full links
of the as-placed run and the stages whose DRAM reads they carry, with each read's rate; then
how long each stage waits for its DRAM reads, with 32 and with 128 micro-batches.
"""

from __future__ import annotations

import argparse
from collections.abc import Generator
from typing import Any

import palm
from palm.api import plan_for
from palm.engines.event.engine import _Run
from palm.engines.event.networks import FairNet
from palm.engines.event.resource_table import resource_label

EXAMPLE = "examples/wafer-t18b.toml"
LINK = 'communication.noc_granularity="link"'


def reversed_tiles(config: palm.SimConfig) -> list[str]:
    """Overrides that put stage ``s`` on the tile of stage ``pp - 1 - s`` of the line layout
    (tiles numbered row by row; the line walks down each tile column)."""
    rows, cols = config.hardware.tiles  # type: ignore[union-attr]
    pp = config.parallelism.pp
    tiles = []
    for s in range(pp):
        c, r = divmod(pp - 1 - s, rows)
        tiles.append([r * cols + c])
    return ['placement.layout="explicit"', f"placement.stage_tiles={tiles}"]


def show(name: str, config: palm.SimConfig) -> None:
    r = palm.simulate(config)
    busy = " ".join(f"{s.busy_s:.2f}" for s in r.stages)
    print(f"{name}: {r.throughput_samples_per_s:.4f} samples/s; busy s per stage: {busy}")


def dram_waits(name: str, config: palm.SimConfig) -> None:
    """Seconds each stage waits for its DRAM reads after its compute (the engine's own run,
    with the network's ``read`` and ``wait`` timed)."""
    plan = plan_for(config, engine="event")
    comm = config.communication
    run = _Run(plan, granularity=comm.noc_granularity, noc_model=comm.noc_model, record=False)
    net, env = run.net, run.env
    waits = [0.0] * run.p
    stage_of: dict[int, int] = {}
    read, wait = net.read, net.wait

    def timed_read(s: int, nbytes: float) -> Any:
        token = read(s, nbytes)
        stage_of[id(token)] = s
        return token

    def timed_wait(token: Any) -> Generator[Any, Any, None]:
        start = float(env.now)
        yield from wait(token)
        waits[stage_of[id(token)]] += float(env.now) - start

    net.read, net.wait = timed_read, timed_wait  # type: ignore[method-assign,assignment]
    for s in range(run.p):
        run.env.process(run.stage(s))
    run.env.run()
    print(f"{name}: DRAM wait s per stage: " + " ".join(f"{w:.2f}" for w in waits))


def bottlenecks(config: palm.SimConfig, at_s: float) -> None:
    """The links that are full at ``at_s`` and the stages whose DRAM reads load them (read
    from the fair network's flows in flight by a callback at ``at_s``)."""
    plan = plan_for(config, engine="event")
    comm = config.communication
    run = _Run(plan, granularity=comm.noc_granularity, noc_model=comm.noc_model, record=False)
    assert isinstance(run.net, FairNet)
    fair = run.net.net
    stage_of = {id(route): s for s, route in enumerate(run.net._reads)}  # noqa: SLF001
    lines: list[str] = []

    def snapshot(_event: object) -> None:
        reads = sorted(
            (stage_of[id(f.route)], f.rate)
            for f in fair._active  # noqa: SLF001
            if id(f.route) in stage_of
        )
        lines.append("  " + ", ".join(f"{s}: {rate / 1e9:.1f}" for s, rate in reads))
        for r, key in enumerate(run.fabric.keys):
            if fair._used[r] < fair.capacity[r] * (1 - 1e-9):  # noqa: SLF001
                continue
            on = fair._on[r]  # noqa: SLF001
            users = sorted(stage_of[id(f.route)] for f in on if id(f.route) in stage_of)
            assert isinstance(key, tuple)
            node, direction = divmod(int(key[1]), 4)
            row, col = divmod(node, config.hardware.core_grid[1])  # type: ignore[union-attr]
            where = f"from core ({row}, {col}) going {'EWSN'[direction]}"
            lines.append(f"  full: {resource_label(key)} ({where}), reads of stages {users}")

    run.env.timeout(at_s).callbacks.append(snapshot)
    for s in range(run.p):
        run.env.process(run.stage(s))
    run.env.run()
    print(f"at t = {at_s} s, DRAM reads in flight (stage: GB/s per core):")
    print("\n".join(lines))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--at", type=float, default=5.1325, help="simulated time of the snapshot (s)")
    args = ap.parse_args()
    base = palm.load_config(EXAMPLE, overrides=[LINK])
    show("link, as placed", base)
    show("link, stage s on the tile of stage 19 - s", palm.load_config(
        EXAMPLE, overrides=[LINK, *reversed_tiles(base)]
    ))  # fmt: skip
    show("group, as placed", palm.load_config(EXAMPLE))
    bottlenecks(base, args.at)
    dram_waits("link, 32 micro-batches", base)
    longer = palm.load_config(EXAMPLE, overrides=[LINK, "training.global_batch=128"])
    dram_waits("link, 128 micro-batches", longer)


if __name__ == "__main__":
    main()
