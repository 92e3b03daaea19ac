"""What is simulated, part 1: the model and its operator graph."""

from palm.workload.model import FAMILIES, ModelConfig, Workload, build_workload
from palm.workload.ops import (
    Collective,
    Conv2d,
    Embedding,
    Gemm,
    Linear,
    Logits,
    Op,
    Pool,
    TransformerLayer,
)
from palm.workload.presets import MODEL_PRESETS, MODEL_SOURCES, model_preset

__all__ = [
    "FAMILIES",
    "MODEL_PRESETS",
    "MODEL_SOURCES",
    "Collective",
    "Conv2d",
    "Embedding",
    "Gemm",
    "Linear",
    "Logits",
    "ModelConfig",
    "Op",
    "Pool",
    "TransformerLayer",
    "Workload",
    "build_workload",
    "model_preset",
]
