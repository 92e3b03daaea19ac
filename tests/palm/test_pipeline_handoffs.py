"""Pipeline hand-offs under tensor parallelism: Megatron's scatter/gather (SC21 sec. 4.1)
all-gathers the received activation over the TP group; under sequence parallelism the
activation is already split by sequence and nothing is gathered (Megatron-LM
``p2p_communication.py``)."""

from __future__ import annotations

import pytest

from palm.config import parse_config
from palm.cost.collectives import Collective, collective_time
from palm.plan import build_plan
from palm.plan.context import plan_context
from palm.plan.rings import stage_rings
from palm.strategy import SimConfig


def _config(sp: bool) -> SimConfig:
    return parse_config(
        {
            "model": {
                "family": "gpt",
                "layers": 4,
                "hidden": 1024,
                "heads": 16,
                "ffn_hidden": 4096,
                "seq_len": 1024,
                "vocab": 32000,
            },
            "hardware": {"preset": "dgx-a100"},
            "training": {"global_batch": 8, "micro_batch": 2},
            "parallelism": {"tp": 4, "pp": 2, "sequence_parallel": sp},
        }
    )


def test_sequence_parallel_hand_offs_are_not_regathered() -> None:
    plain, split = build_plan(_config(False)), build_plan(_config(True))
    # without sequence parallelism: the second chunk all-gathers the 2 x 1024 x 1024 x 2 B
    # activation over its 4 TP ranks, and the first one the gradient
    ctx = plan_context(_config(False), with_links=False)
    ring = stage_rings(ctx).tp[1]
    want = collective_time(Collective("all-gather", 2 * 1024 * 1024 * 2.0), n=4, step=ring)
    assert plain.chunks[1].recv_forward_s == pytest.approx(want, rel=1e-12)
    assert plain.chunks[0].recv_backward_s > 0
    # with it: each rank sends and keeps its own 1/4 of the sequence
    assert split.chunks[1].recv_forward_s == 0.0 and split.chunks[0].recv_backward_s == 0.0
    assert split.chunks[0].send_bytes == plain.chunks[0].send_bytes
