"""Algorithm 1 (paper sec. IV-C): each strategy on a small case worked by hand."""

from __future__ import annotations

import pytest

import palm
from palm.cost.sram import OpFootprint, allocate_sram

MB = 1e6


def _op(name: str, w: float, states: float, i: float, o: float) -> OpFootprint:
    return OpFootprint(name, w * MB, states * MB, i * MB, o * MB)


def test_everything_fits_on_chip_moves_nothing() -> None:
    (a,) = allocate_sram([_op("fc", 1, 2, 1, 1)], sram_bytes=10 * MB, training=True)
    assert (a.strategy, a.forward_bytes, a.backward_bytes, a.update_bytes) == ("on-chip", 0, 0, 0)


def test_activation_stream_when_only_the_model_state_fits() -> None:
    # WSG = 2 + 6 = 8 MB <= 10 MB; activations 4 + 4 MB do not fit beside it
    allocs = allocate_sram(
        [_op("a", 1, 3, 2, 2), _op("b", 1, 3, 2, 2)], sram_bytes=10 * MB, training=True
    )
    assert [x.strategy for x in allocs] == ["activation-stream"] * 2
    # forward I + O = 4 MB, backward 2 I + O = 6 MB, nothing for the update
    assert [(x.forward_bytes, x.backward_bytes, x.update_bytes) for x in allocs] == [
        (4 * MB, 6 * MB, 0.0)
    ] * 2


def test_weight_stream_when_only_the_activations_fit() -> None:
    # WSG = 4 x 4 = 16 MB > 10 MB; activations sum I = 1 + 1 = 2 MB fit
    allocs = allocate_sram(
        [_op("a", 4, 12, 1, 1), _op("b", 4, 12, 1, 1)],
        sram_bytes=10 * MB,
        training=True,
        update_bytes_per_weight_byte=14.0,
    )
    assert [x.strategy for x in allocs] == ["weight-stream"] * 2
    # forward W = 4 MB, backward 2 W = 8 MB (read weights, write gradients), update 14 W
    assert [(x.forward_bytes, x.backward_bytes, x.update_bytes) for x in allocs] == [
        (4 * MB, 8 * MB, 56 * MB)
    ] * 2
    full = allocate_sram(
        [_op("a", 4, 12, 1, 1)], sram_bytes=2 * MB, training=True, full_recompute=True
    )
    assert full[0].backward_bytes == 12 * MB  # + one more weight read for the recompute


def test_penalty_picks_weight_or_input_stationary_by_traffic() -> None:
    # nothing fits in 3 MB: Phi1 = ceil(W/S) I, Phi2 = ceil(I/S) W
    big_weights = _op("wide", 30, 0, 4, 1)  # Phi1 = 10 x 4 = 40, Phi2 = 2 x 30 = 60
    big_inputs = _op("long", 4, 0, 30, 1)  # Phi1 = 2 x 30 = 60, Phi2 = 10 x 4 = 40
    ws, is_ = allocate_sram([big_weights, big_inputs], sram_bytes=3 * MB, training=False)
    assert (ws.strategy, ws.forward_bytes) == ("weight-stationary", 41 * MB)
    assert (is_.strategy, is_.forward_bytes) == ("input-stationary", 41 * MB)
    assert ws.backward_bytes == 0 and is_.update_bytes == 0  # inference: forward only
    (t,) = allocate_sram(
        [big_weights], sram_bytes=3 * MB, training=True, update_bytes_per_weight_byte=14.0
    )
    assert (t.backward_bytes, t.update_bytes) == (81 * MB, 420 * MB)  # 2 Phi + O, 14 W


def test_inference_keeps_weights_only() -> None:
    # weights (4 MB) fit although weights + states (16 MB) would not: inference has no states
    (a,) = allocate_sram([_op("fc", 4, 12, 4, 4)], sram_bytes=10 * MB, training=False)
    assert a.strategy == "activation-stream" and a.forward_bytes == 8 * MB


@pytest.mark.parametrize(
    ("model", "penalty"),
    [("algorithm1", {"weight-stationary", "input-stationary"}), ("blocked", {"blocked"})],
)
def test_strategies_reach_the_result_and_drive_dram_traffic(model: str, penalty: set[str]) -> None:
    over = ["training.global_batch=8", f'hardware.sram_model="{model}"']
    result = palm.simulate(palm.load_config("examples/wafer-t18b.toml", overrides=over))
    assert result.operators is not None
    layers = [o for o in result.operators if o.name.startswith("layer")]
    assert len(layers) == 40 and {o.stage for o in layers} == set(range(20))
    # 3.75 MB of SRAM per core holds neither T-18B's weights nor its activations
    assert {o.strategy for o in layers} <= penalty
    roomy = palm.load_config(
        "examples/wafer-t18b.toml", overrides=[*over, "hardware.sram_per_core_mib=40000"]
    )
    fast = palm.simulate(roomy)
    assert fast.operators is not None
    assert {o.strategy for o in fast.operators} <= {"on-chip", "activation-stream"}
    assert fast.iteration_time_s < result.iteration_time_s
    assert palm.simulate(palm.load_config("examples/t18b-dgx-a100.toml")).operators is None


@pytest.mark.parametrize("sram_mib", [1.0, 4.0, 16.0, 64.0])
def test_more_sram_never_means_more_dram_traffic(sram_mib: float) -> None:
    ops = [_op("a", 8, 24, 2, 2), _op("b", 8, 24, 2, 2)]
    small = allocate_sram(ops, sram_bytes=sram_mib * MB, training=True)
    large = allocate_sram(ops, sram_bytes=2 * sram_mib * MB, training=True)
    assert sum(x.forward_bytes + x.backward_bytes for x in large) <= sum(
        x.forward_bytes + x.backward_bytes for x in small
    )
