"""A property test (hypothesis) of the configuration loader: whatever TOML document and
``--set`` values a user writes, ``palm.load_config`` returns a configuration or raises one
:class:`~palm.errors.ConfigError` whose message is one line of bounded length, and no other
exception.

Documents are arbitrary text, random tables of the loader's sections and fields with values
of every TOML type (huge, negative, non-finite, nested), and the shipped examples with fields
replaced at random; overrides are random ``section.field=value`` lines and arbitrary text.
Bounded work is checked without a clock on the wall: each example runs under a CPU-time alarm
(``setitimer(ITIMER_PROF)``, this process's own CPU, whatever the load) that fails it past
:data:`CPU_LIMIT_S`.
"""

from __future__ import annotations

import dataclasses
import math
import signal
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from palm.config import load_config  # noqa: E402
from palm.errors import ConfigError  # noqa: E402
from palm.strategy import SimConfig  # noqa: E402
from tests.cli_run import REPO  # noqa: E402

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

#: CPU seconds one example may take (loading a configuration takes milliseconds; the bounds
#: of docs/config.md keep every accepted one to well under a second)
CPU_LIMIT_S = 20.0
#: the longest error line (a field, a value and an allowed text, each abbreviated)
MAX_MESSAGE_CHARS = 2000

SECTIONS = ["model", "hardware", "training", "parallelism", "placement", "communication"]
EXAMPLES = sorted((REPO / "examples").glob("*.toml"))


def _fields() -> list[str]:
    from palm.hardware.spec import GpuClusterHardware, Mesh2DHardware
    from palm.strategy import (
        CommunicationConfig,
        ParallelismConfig,
        PlacementConfig,
        TrainingConfig,
    )
    from palm.workload.model import ModelConfig

    classes = [
        ModelConfig,
        GpuClusterHardware,
        Mesh2DHardware,
        TrainingConfig,
        ParallelismConfig,
        PlacementConfig,
        CommunicationConfig,
    ]
    names = {f.name for cls in classes for f in dataclasses.fields(cls)}
    return sorted(names | {"preset", "topology", "hf_config"})


FIELDS = _fields()
keys = st.one_of(st.sampled_from(FIELDS), st.text(min_size=1, max_size=12))
scalars = st.one_of(
    st.integers(),
    st.sampled_from([0, 1, -1, 2**53, 2**53 + 1, 2**63 - 1, -(2**63), 10**15]),
    st.floats(allow_nan=True, allow_infinity=True),
    st.booleans(),
    st.text(max_size=20),
    st.sampled_from(["t-18b", "dgx-a100", "wafer-palm", "gpt", "graph", "gemm", "explicit"]),
)
values = st.recursive(
    scalars,
    lambda inner: st.one_of(st.lists(inner, max_size=5), st.dictionaries(keys, inner, max_size=4)),
    max_leaves=12,
)


def _key(key: str) -> str:
    return key if key.replace("_", "").replace("-", "").isalnum() and key.isascii() else _str(key)


def _str(text: str) -> str:
    out = "".join(
        ch
        if ch.isprintable() and ch not in '"\\'
        else f"\\u{ord(ch):04x}"
        if ord(ch) < 0x10000
        else f"\\U{ord(ch):08x}"
        for ch in text
    )
    return f'"{out}"'


def toml_value(value: Any) -> str:
    """``value`` as a TOML value (inline tables and arrays)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if math.isnan(value):
            return "nan"
        if math.isinf(value):
            return "inf" if value > 0 else "-inf"
        return repr(value)
    if isinstance(value, str):
        return _str(value)
    if isinstance(value, list):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    return "{" + ", ".join(f"{_key(k)} = {toml_value(v)}" for k, v in value.items()) + "}"


def toml_document(tables: dict[str, dict[str, Any]]) -> str:
    lines = []
    for name, table in tables.items():
        lines.append(f"[{_key(name)}]")
        lines += [f"{_key(k)} = {toml_value(v)}" for k, v in table.items()]
    return "\n".join(lines) + "\n"


random_tables = st.dictionaries(
    st.one_of(st.sampled_from(SECTIONS), st.text(min_size=1, max_size=8)),
    st.dictionaries(keys, values, max_size=6),
    max_size=7,
).map(toml_document)


@st.composite
def mutated_examples(draw: st.DrawFn) -> str:
    """A shipped example with some fields replaced, added or removed."""
    path = draw(st.sampled_from(EXAMPLES))
    tables = tomllib.loads(path.read_text(encoding="utf-8"))
    for _ in range(draw(st.integers(1, 4))):
        section = draw(st.sampled_from(SECTIONS))
        table = tables.setdefault(section, {})
        if not isinstance(table, dict):
            continue
        key = draw(st.sampled_from(sorted(table) or FIELDS) if draw(st.booleans()) else keys)
        if draw(st.integers(0, 4)) == 0:
            table.pop(key, None)
        else:
            table[key] = draw(values)
    return toml_document(tables)


documents = st.one_of(st.text(max_size=400), random_tables, mutated_examples())
override_lines = st.one_of(
    st.text(max_size=60),
    st.builds(
        lambda s, k, v: f"{s}.{k}={v}",
        st.sampled_from([*SECTIONS, "study", ""]),
        keys,
        st.one_of(values.map(toml_value), st.text(max_size=20)),
    ),
)


class _OverCpu(Exception):
    pass


@contextmanager
def cpu_limit(seconds: float) -> Iterator[None]:
    """Fail the block once this process has used ``seconds`` of CPU inside it."""

    def over(signum: int, frame: object) -> None:
        raise _OverCpu(f"more than {seconds} s of CPU")

    previous = signal.signal(signal.SIGPROF, over)
    signal.setitimer(signal.ITIMER_PROF, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_PROF, 0)
        signal.signal(signal.SIGPROF, previous)


def _check(path: Path, text: str, overrides: list[str]) -> None:
    path.write_text(text, encoding="utf-8", errors="surrogatepass")
    with cpu_limit(CPU_LIMIT_S):
        try:
            config = load_config(path, overrides=overrides)
        except ConfigError as exc:
            message = str(exc)
            assert message.isprintable(), message  # one line, no terminal controls
            assert 0 < len(message) <= MAX_MESSAGE_CHARS, len(message)
            return
    assert isinstance(config, SimConfig)


FUZZ = settings(
    deadline=None,  # no clock on the wall: the CPU-time alarm bounds an example
    max_examples=150,
    derandomize=True,  # the same examples on every run (a failure is reproducible)
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)


@FUZZ
@given(text=documents, overrides=st.lists(override_lines, max_size=3))
def test_any_document_and_overrides_give_a_config_or_one_line(
    tmp_path: Path, text: str, overrides: list[str]
) -> None:
    _check(tmp_path / "fuzz.toml", text, overrides)


@FUZZ
@given(overrides=st.lists(override_lines, min_size=1, max_size=4))
def test_any_overrides_of_an_example_give_a_config_or_one_line(
    tmp_path: Path, overrides: list[str]
) -> None:
    for example in EXAMPLES[:3]:
        _check(tmp_path / "fuzz.toml", example.read_text(encoding="utf-8"), overrides)


def test_the_serialiser_round_trips() -> None:
    tables = {"model": {"a": [1, 2.5, 'x"y', {"b": True}], "c d": float("inf")}}
    assert tomllib.loads(toml_document(tables)) == tables
