"""DRAM traffic of one T-145B layer on the PALM wafer, and where the iteration's time goes.

Usage:
    python benchmarks/dram_traffic.py            # print the tables
    python benchmarks/dram_traffic.py --write    # also refresh the block in docs/model.md

The case is the paper's sec. V-B one: ``wafer-palm``, T-145B, TP=4 PP=20 DP=4, micro-batch 1,
global batch 64, fp16, full recompute. Table 1 gives the forward DRAM bytes per core of one layer
under the paper's per-layer penalty (Algorithm 1), the Hong-Kung bound and the blocked traffic of
its matrix products on one core, and the same on the products' memory domains (palm's default,
``hardware.sram_model = "blocked"``). Table 2 splits one micro-batch of stage 1 into compute,
DRAM and NoC time, and gives the iteration's MFU under both models, with a back-of-envelope
check of the compute and DRAM times.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from pathlib import Path

import palm
from palm.cost.blocking import hong_kung_bound_bytes
from palm.plan import Plan, build_plan
from palm.plan.context import plan_context
from palm.plan.products import DomainProduct, op_products, pass_traffic
from palm.workload.ops import TransformerLayer

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _docblock import write_section  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
CASE = [
    'model.preset="t-145b"',
    "parallelism.tp=4",
    "parallelism.pp=20",
    "parallelism.dp=4",
    "training.global_batch=64",
]
GB = 1e9


FAST_DRAM = ["hardware.dram_channel_bandwidth_gbps=1e9"]
FAST_NOC = ["hardware.intra_tile_link_gbps=1e9", "hardware.inter_tile_link_gbps=1e9"]


def config(model: str = "blocked", extra: list[str] | None = None) -> palm.SimConfig:
    over = [*CASE, f'hardware.sram_model="{model}"', *(extra or [])]
    return palm.load_config(ROOT / "examples" / "wafer-t18b.toml", overrides=over)


def mfu_steps(model: str) -> list[tuple[str, float, float]]:
    """(what is real, iteration time, MFU) with DRAM channels and NoC links at 1e9 GB/s, then only
    the NoC, then neither (event engine)."""
    steps = [
        (
            "compute and pipeline only (DRAM channels and NoC links at 1e9 GB/s)",
            FAST_DRAM + FAST_NOC,
        ),
        ("+ DRAM channels", FAST_NOC),
        ("+ NoC links (collectives, hand-offs, multicast, DRAM reads' paths): all real", []),
    ]
    out = []
    for name, extra in steps:
        r = palm.simulate(config(model, extra))
        out.append((name, r.iteration_time_s, r.mfu))
    return out


def _one_core(p: DomainProduct) -> DomainProduct:
    return dataclasses.replace(p, a_share=1, b_share=1)


def layer_forward_bytes() -> dict[str, float]:
    """Per-core forward DRAM bytes of one layer, by model (see the module docstring)."""
    cfg = config()
    ctx = plan_context(cfg, with_links=False)
    op = next(o for o in ctx.workload.ops if isinstance(o, TransformerLayer))
    fwd, _ = op_products(
        dataclasses.replace(op, name=""), batch=1, tp=4, dp=4, recompute="full", training=True
    )
    s, e = ctx.rates.sram_bytes, float(ctx.act_bytes)

    def bound(products: tuple[DomainProduct, ...]) -> float:
        return sum(
            hong_kung_bound_bytes(
                m=p.m * p.b_share,
                n=p.n * p.a_share,
                k=p.k,
                sram_bytes=s * p.a_share * p.b_share,
                elem_bytes=e,
            )
            * p.count
            / (p.a_share * p.b_share)
            for p in products
        )

    alone = tuple(_one_core(p) for p in fwd)
    kw = dict(resident_kinds=frozenset(), act_bytes=e, weight_bytes=e, sram_bytes=s)
    penalty = dict(build_plan(config("algorithm1")).sram[0])[1].forward_bytes
    weighted = tuple(p for p in fwd if p.kinds[1] == "w")
    flash = config(extra=['model.attention="flash"'])
    flash_bytes = dict(build_plan(flash).sram[0])[1].forward_bytes
    return {
        "penalty": penalty,
        "bound_one_core": bound(alone),
        "blocked_one_core": pass_traffic(alone, **kw).dram_bytes,  # type: ignore[arg-type]
        "bound_domains": bound(fwd),
        "blocked_domains": pass_traffic(fwd, **kw).dram_bytes,  # type: ignore[arg-type]
        "blocked_domains_weighted": pass_traffic(weighted, **kw).dram_bytes,  # type: ignore[arg-type]
        "flash_domains": flash_bytes,
        "multicast_domains": sum(
            x
            for _, x in pass_traffic(fwd, **kw).multicast_bytes  # type: ignore[arg-type]
        ),
    }


def stage_breakdown(plan: Plan) -> dict[str, float]:
    """One micro-batch of stage 1 (seconds): four layers; the DRAM time is the plan's, for the
    stage alone on every channel (the event engine shares the channels between stages)."""
    ch = plan.stages[1].chunks[0]
    return {
        "compute_f": ch.forward_compute_s,
        "compute_b": ch.backward_compute_s + ch.recompute_s,
        "dram_f": ch.stream_forward_s,
        "dram_b": ch.stream_backward_s,
        "multicast_f": ch.multicast_forward_s,
        "multicast_b": ch.multicast_backward_s,
        "tp_f": ch.tp_forward_s,
        "tp_b": ch.tp_backward_s,
        "send": ch.send_s,
        "flops_f": ch.forward_flops,
        "bytes_f": ch.stream_bytes_forward,
        "bytes_b": ch.stream_bytes_backward,
        "layers": float(ch.layers),
    }


def tables() -> str:
    b = layer_forward_bytes()
    rows = [
        ('Algorithm 1 per-layer penalty (`sram_model = "algorithm1"`)', b["penalty"]),
        ("Hong-Kung bound, each product on one core (S = 3.75 MB)", b["bound_one_core"]),
        ("blocked, each product on one core", b["blocked_one_core"]),
        ("Hong-Kung bound, each product on its memory domain", b["bound_domains"]),
        ("blocked on the memory domains (default)", b["blocked_domains"]),
        ("... of which the four weight products", b["blocked_domains_weighted"]),
        ('the same with `model.attention = "flash"`', b["flash_domains"]),
    ]
    out = ["| forward DRAM bytes per core, one T-145B layer | GB |", "|---|---|"]
    out += [f"| {name} | {x / GB:.2f} |" for name, x in rows]
    multicast = b["multicast_domains"] / GB
    out.append(f"| NoC multicast per core on the memory domains | {multicast:.2f} |")
    out.append("")
    out.append(
        "| per micro-batch, stage 1 (4 layers; DRAM alone on the wafer) | compute (s) "
        "| DRAM stream (s) | multicast (s) | TP collectives (s) | iteration (s) | MFU | bubble |"
    )
    out.append("|---|---|---|---|---|---|---|---|")
    for model in ("algorithm1", "blocked"):
        plan = build_plan(config(model))
        r = palm.simulate(config(model))
        x = stage_breakdown(plan)
        for name, key in (("forward", "f"), ("backward", "b")):
            out.append(
                f"| `{model}` {name} | {x['compute_' + key]:.3f} | {x['dram_' + key]:.3f} "
                f"| {x['multicast_' + key]:.4f} | {x['tp_' + key]:.4f} "
                f"| {r.iteration_time_s:.1f} | {r.mfu:.3f} | {r.bubble_fraction:.2f} |"
            )
    out.append("")
    out.append("| `blocked`, event engine | iteration (s) | MFU |")
    out.append("|---|---|---|")
    for name, t, mfu in mfu_steps("blocked"):
        out.append(f"| {name} | {t:.1f} | {mfu:.3f} |")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--write", action="store_true", help="refresh docs/model.md")
    args = parser.parse_args(argv)
    text = tables()
    print(text)
    if args.write:
        write_section(ROOT / "docs" / "model.md", "dram-traffic", text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
