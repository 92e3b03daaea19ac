"""LLM serving: prefill and decode with a KV cache (``training.mode = "serve"``).

*What* is served is :class:`ServingConfig` (the ``[serving]`` table); *how* it costs is
:mod:`.model` (layers, weights and KV cache per device), :mod:`.kernels` (products, attention),
:mod:`.comm` (collectives), :mod:`.step` (one forward step), :mod:`.memory` (memory and
``max_batch``) and :mod:`.scenario` (static or continuous batching, offline or at a request
rate); :mod:`.simulate` turns it into a :class:`palm.result.Result`. docs/serving.md describes
the model with its sources. (This package's top level imports only the table, so that
:mod:`palm.strategy` can hold it.)
"""

from palm.serving.spec import ServingConfig

__all__ = ["ServingConfig"]
