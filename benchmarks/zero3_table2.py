"""ZeRO-3 without model parallelism as DeepSpeed 0.3 ran it: Narayanan et al. 2021 (SC21),
Table 2, predicted against the iteration time its TFLOP/s per GPU imply (eq. 3).

Usage:
    python benchmarks/zero3_table2.py

Prints one row per run: the published time and the prediction with DeepSpeed 0.3's
behaviours (prefetch 0, a gather per parameter tensor), with a gather per layer instead, and
with prefetch 1 (FSDP, DeepSpeed >= 0.6), analytical engine. These runs are in no validation
suite (docs/validation.md, "ZeRO-3 without model parallelism").
"""

from __future__ import annotations

import dataclasses

import palm
from palm.config import parse_config

#: (model, layers, hidden, heads, GPUs, micro-batch, published TFLOP/s per GPU); SC21 Table 2
ROWS = (
    ("175B", 96, 12288, 96, 384, 4, 144.0),
    ("175B", 96, 12288, 96, 768, 2, 88.0),
    ("175B", 96, 12288, 96, 1536, 1, 44.0),
    ("530B", 105, 20480, 128, 640, 4, 138.0),
    ("530B", 105, 20480, 128, 1120, 2, 98.0),
    ("530B", 105, 20480, 128, 2240, 1, 48.0),
)
SEQ, VOCAB = 2048, 51200


def eq3_flops(batch: int, layers: int, hidden: int) -> float:
    """SC21 eq. (3): ``96 B s L h^2 (1 + s / 6h + V / 16 L h)`` per iteration."""
    h = hidden
    return 96 * batch * SEQ * layers * h * h * (1 + SEQ / (6 * h) + VOCAB / (16 * layers * h))


def config(layers: int, hidden: int, heads: int, gpus: int, micro: int) -> palm.SimConfig:
    """The run as DeepSpeed 0.3.13 ran it; the 530B's global batch 2240, or on 640 GPUs the
    multiple of ``gpus x micro`` 2560."""
    batch = 1536 if hidden == 12288 else (2240 if 2240 % (gpus * micro) == 0 else gpus * micro)
    return parse_config(
        {
            "model": {
                "family": "gpt",
                "layers": layers,
                "hidden": hidden,
                "heads": heads,
                "ffn_hidden": 4 * hidden,
                "seq_len": SEQ,
                "vocab": VOCAB,
                "attention": "unfused",
            },
            "hardware": {"preset": "dgx-a100"},
            "training": {
                "global_batch": batch,
                "micro_batch": micro,
                "precision": "fp16",
                "recompute": "full",
                "zero": 3,
            },
            "parallelism": {"dp": gpus},
            "software": {"framework": "deepspeed", "version": "0.3.13"},
        }
    )


def _with(c: palm.SimConfig, **training: object) -> palm.SimConfig:
    return dataclasses.replace(c, training=dataclasses.replace(c.training, **training))


def main() -> None:
    print("run | published (s) | DeepSpeed 0.3 | a gather per layer | prefetch 1")
    for name, layers, hidden, heads, gpus, micro, tflops in ROWS:
        c = config(layers, hidden, heads, gpus, micro)
        published = eq3_flops(c.training.global_batch, layers, hidden) / (tflops * 1e12 * gpus)
        cells = []
        for variant in (
            c,
            _with(c, zero3_gather_per_tensor=False),
            _with(c, zero3_gather_per_tensor=False, zero3_prefetch=1),
        ):
            t = palm.simulate(variant, engine="analytical").iteration_time_s
            cells.append(f"{t:.1f} ({100 * (t / published - 1):+.1f}%)")
        print(f"{name}, {gpus} GPUs, mbs {micro} | {published:.1f} | " + " | ".join(cells))


if __name__ == "__main__":
    main()
