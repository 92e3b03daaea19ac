"""The Python example of docs/tuning.md runs as written."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def test_tuning_doc_example_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    text = (ROOT / "docs" / "tuning.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", text, re.S)
    assert blocks, "docs/tuning.md has no Python example"
    (tmp_path / "studies").symlink_to(ROOT / "studies")
    (tmp_path / "examples").symlink_to(ROOT / "examples")
    monkeypatch.chdir(tmp_path)
    exec(compile(blocks[-1], "docs/tuning.md", "exec"), {})  # noqa: S102 - the doc's own code
    assert os.path.exists(tmp_path / "example.db")
