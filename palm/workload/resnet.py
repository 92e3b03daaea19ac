"""ResNet-50 (He et al. 2016, Table 1) as its real chain of layers.

Version 1.5 (stride on the 3x3 convolution of each bottleneck), as in torchvision and in the
MLPerf reference: 25,557,032 parameters and about 4.1 G multiply-adds per 224x224 image.
The projection shortcut of each stage's first block is listed after the block's last
convolution; pipeline cuts between operators treat the chain as sequential, which is how a
pipelined inference compiler streams it.
"""

from __future__ import annotations

from palm.workload.ops import Conv2d, Linear, Op, Pool

__all__ = ["resnet50_ops"]

#: (blocks, bottleneck width) of stages conv2_x .. conv5_x (He et al. 2016, Table 1)
_STAGES: tuple[tuple[int, int], ...] = ((3, 64), (4, 128), (6, 256), (3, 512))
_EXPANSION = 4


def resnet50_ops(*, image_size: int = 224, classes: int = 1000) -> tuple[Op, ...]:
    """The operators of ResNet-50 for square ``image_size`` inputs."""
    ops: list[Op] = []
    size = image_size
    stem = Conv2d(
        name="conv1",
        in_channels=3,
        out_channels=64,
        in_hw=(size, size),
        kernel=7,
        stride=2,
        padding=3,
    )
    ops.append(stem)
    size = stem.out_hw[0]
    pool = Pool(name="maxpool", channels=64, in_hw=(size, size), kernel=3, stride=2, padding=1)
    ops.append(pool)
    size = pool.out_hw[0]
    channels = 64
    for stage, (blocks, width) in enumerate(_STAGES, start=2):
        out_channels = width * _EXPANSION
        for block in range(blocks):
            stride = 2 if (block == 0 and stage > 2) else 1
            prefix = f"conv{stage}_{block + 1}"
            a = Conv2d(
                name=f"{prefix}a",
                in_channels=channels,
                out_channels=width,
                in_hw=(size, size),
                kernel=1,
            )
            b = Conv2d(
                name=f"{prefix}b",
                in_channels=width,
                out_channels=width,
                in_hw=(size, size),
                kernel=3,
                stride=stride,
                padding=1,
            )
            out_size = b.out_hw[0]
            c = Conv2d(
                name=f"{prefix}c",
                in_channels=width,
                out_channels=out_channels,
                in_hw=(out_size, out_size),
                kernel=1,
            )
            ops.extend((a, b, c))
            if block == 0:
                ops.append(
                    Conv2d(
                        name=f"{prefix}_down",
                        in_channels=channels,
                        out_channels=out_channels,
                        in_hw=(size, size),
                        kernel=1,
                        stride=stride,
                    )
                )
            channels, size = out_channels, out_size
    ops.append(Pool(name="avgpool", channels=channels, in_hw=(size, size), kernel=0, kind="avg"))
    ops.append(Linear(name="fc", in_features=channels, out_features=classes))
    return tuple(ops)
