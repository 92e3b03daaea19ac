"""The software a published run states it used, as a ``[software]`` table (:mod:`palm.software`).

A validation row says which stack it ran in its own words: the container named in its table's
caption ("25.09 NeMo Container", "Container NeMo 24.07"), the library versions it records
(``source.run_versions``: "torchtitan 9dec370 / torch 2.8.0a0"), the framework-specific
settings and launchers it states ("Composer/FSDP", llm-foundry's ``submit_benchmarks.py``,
"Megatron-Core r0.8.0"). :func:`stated_software` reads those words only; it never reads a
row's id, its source repository, path or commit, its model's name, or a family label
(``tests/palm/test_validation_software.py`` scrambles them and checks the configuration).

Patterns are tried in the order of :data:`PATTERNS` (the most specific first) over the row's
stated text (:func:`stated_text`); the first that matches names the framework and, where the
words carry one, the version.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

__all__ = ["PATTERNS", "stated_software", "stated_text"]

_V = r"v?(\d+(?:\.\d+)*)"

#: (pattern, framework): the first group, when it matched, is the version
PATTERNS: tuple[tuple[re.Pattern[str], str], ...] = (
    # NVIDIA's containers: "Container NeMo24.07", "NeMo 25.02", "26.04.01 NeMo Container"
    (re.compile(r"\bNeMo ?(\d\d\.\d\d(?:\.\d\d)?)\b"), "nemo"),
    (re.compile(r"\b(\d\d\.\d\d(?:\.\d\d)?) NeMo Container"), "nemo"),
    (re.compile(r"\bMegatron-Core r?" + _V), "megatron-core"),
    (re.compile(r"\btorchtitan\b"), "torchtitan"),
    # MosaicML's LLM code and its benchmark launcher (scripts/train/benchmarking)
    (re.compile(r"\bllm-foundry\b|\bsubmit_benchmarks\.py\b"), "llm-foundry"),
    (re.compile(r"\bComposer\b"), "composer"),
    (re.compile(r"\bDeepSpeed(?: " + _V + r")?"), "deepspeed"),
    (re.compile(r"\bMegatron-LM(?: " + _V + r")?"), "megatron-lm"),
    (re.compile(r"\bPyTorch FSDP\b"), "pytorch-fsdp"),
)


def _strings(value: Any) -> Iterable[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, Mapping):
        for v in value.values():
            yield from _strings(v)
    elif isinstance(value, (list, tuple)):
        for v in value:
            yield from _strings(v)


def stated_text(row: Mapping[str, Any]) -> str:
    """The words a row states about how it ran: its table caption and recorded versions,
    its notes, the values of its training and parallelism tables and of its model's
    architecture notes (``arch_extra``), and a ``software`` entry if it has one."""
    source = row.get("source")
    source = source if isinstance(source, Mapping) else {}
    model = row.get("model")
    model = model if isinstance(model, Mapping) else {}
    parts = [
        source.get("table"),
        source.get("run_versions"),
        row.get("software"),
        row.get("notes"),
        row.get("training"),
        row.get("parallelism"),
        model.get("arch_extra"),
    ]
    return "\n".join(s for part in parts for s in _strings(part))


def stated_software(row: Mapping[str, Any]) -> dict[str, str]:
    """The ``[software]`` table of a row (``{}`` when it states none). A row may carry one
    as ``software = {framework, version}``; otherwise it is read from its stated words."""
    given = row.get("software")
    if isinstance(given, Mapping) and isinstance(given.get("framework"), str):
        version = given.get("version")
        return {
            "framework": given["framework"],
            **({"version": str(version)} if version else {}),
        }
    text = stated_text(row)
    for pattern, framework in PATTERNS:
        match = pattern.search(text)
        if match is not None:
            version = next((g for g in match.groups() if g), "")
            return {"framework": framework, **({"version": version} if version else {})}
    return {}
