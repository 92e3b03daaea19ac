"""Grouped and depthwise convolution (``groups`` on a conv2d; docs/model.md sec. 1): weights,
products and FLOPs by the grouped formula, worked by hand; tensor parallelism over groups; the
MobileNet V1 example against its paper's figures; bad ``groups`` refused."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

import palm
from palm.config import parse_config
from palm.errors import ConfigError
from palm.workload.model import build_workload
from palm.workload.ops import Collective, Conv2d, Gemm

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def test_grouped_convolution_is_worked_by_hand() -> None:
    """64 -> 128 channels, 3 x 3, 56 x 56, 4 groups: each output channel sees 64 / 4 = 16
    inputs, so 16 x 128 x 9 = 18,432 weights (+ 256 batch-norm) and four GEMMs of
    m = 56 x 56 per image, n = 128 / 4 = 32, k = 16 x 9 = 144: 2 x 3136 x 128 x 16 x 9 =
    115,605,504 FLOPs per image, a quarter of the dense convolution's."""
    conv = Conv2d(
        name="g", in_channels=64, out_channels=128, in_hw=(56, 56), kernel=3, padding=1, groups=4
    )
    dense = Conv2d(name="d", in_channels=64, out_channels=128, in_hw=(56, 56), kernel=3, padding=1)
    assert conv.params == 18_432 + 256
    (gemm,) = conv.forward_gemms(batch=2, tp=1)
    assert gemm == Gemm(2 * 3136, 32, 144, 4)
    assert gemm.flops == 2 * 115_605_504
    assert gemm.k * gemm.n * gemm.count == 18_432  # the products' weights are the layer's
    (full,) = dense.forward_gemms(batch=2, tp=1)
    assert full.flops == 4 * gemm.flops
    # activations in and out are the dense convolution's
    assert conv.input_bytes(batch=2, act_bytes=2) == dense.input_bytes(batch=2, act_bytes=2)
    assert conv.output_bytes(batch=2, act_bytes=2) == dense.output_bytes(batch=2, act_bytes=2)


def test_depthwise_convolution_is_worked_by_hand() -> None:
    """MobileNet's depthwise 3 x 3 on 112 x 112 x 32 (groups = channels = 32): 32 x 9 = 288
    weights (+ 64), 32 products of n = 1, k = 9: 2 x 12544 x 32 x 9 = 7,225,344 FLOPs per
    image."""
    conv = Conv2d(
        name="dw", in_channels=32, out_channels=32, in_hw=(112, 112), kernel=3, padding=1,
        groups=32,
    )  # fmt: skip
    assert conv.params == 288 + 64
    (gemm,) = conv.forward_gemms(batch=1, tp=1)
    assert (gemm.m, gemm.n, gemm.k, gemm.count) == (12_544, 1, 9, 32)
    assert gemm.flops == 7_225_344


@pytest.mark.parametrize(
    "tp, per_device", [(4, Gemm(3136, 32, 144, 1)), (2, Gemm(3136, 32, 144, 2))]
)
def test_tensor_parallelism_splits_groups(tp: int, per_device: Gemm) -> None:
    """TP 2 or 4 over 4 groups: whole groups per device; every device's FLOPs add up to the
    layer's; the input gradient is gathered, not reduced (each channel comes from one group)."""
    conv = Conv2d(
        name="g", in_channels=64, out_channels=128, in_hw=(56, 56), kernel=3, padding=1, groups=4
    )
    (gemm,) = conv.forward_gemms(batch=1, tp=tp)
    assert gemm == per_device
    (whole,) = conv.forward_gemms(batch=1, tp=1)
    assert gemm.flops * tp == whole.flops
    (back,) = conv.backward_collectives(batch=1, tp=tp, sp=False, act_bytes=2)
    assert back == Collective("all-gather", 56 * 56 * 64 * 2)


def test_tensor_parallelism_inside_groups() -> None:
    """TP 8 over 4 groups: each group's 32 output channels split over 2 devices."""
    conv = Conv2d(
        name="g", in_channels=64, out_channels=128, in_hw=(56, 56), kernel=3, padding=1, groups=4
    )
    (gemm,) = conv.forward_gemms(batch=1, tp=8)
    assert gemm == Gemm(3136, 16, 144, 1)
    (whole,) = conv.forward_gemms(batch=1, tp=1)
    assert gemm.flops * 8 == whole.flops


def test_mobilenet_v1_example_has_the_papers_size() -> None:
    """Howard et al. 2017, Table 1 (width 1.0, 224 x 224): 4.2 M parameters and 569 M
    multiply-adds; and the example simulates."""
    config = palm.load_config(EXAMPLES / "wormhole-mobilenet-v1.toml")
    ops = build_workload(config.model).ops
    assert sum(op.params for op in ops) == 4_231_976
    mult_adds = sum(g.flops / 2 for op in ops for g in op.forward_gemms(batch=1, tp=1))
    assert mult_adds == pytest.approx(569e6, rel=1e-3)
    assert palm.simulate(config).throughput_samples_per_s > 0


def test_bad_groups_name_the_field() -> None:
    path = EXAMPLES / "wormhole-mobilenet-v1.toml"
    tables = tomllib.loads(path.read_text())
    tables["model"]["ops"][1]["groups"] = 5
    with pytest.raises(ConfigError, match=r"model\.ops\[1\]\.groups = 5"):
        parse_config(tables)
    with pytest.raises(ConfigError, match="is a grouped convolution"):
        palm.load_config(path, overrides=["parallelism.conv_split=[64, 1, 1, 1]"])
