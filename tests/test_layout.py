"""The README's Layout is a map a newcomer can trust: it names every package and subpackage
of ``palm``, ``search`` and ``spaces`` (a directory with an ``__init__.py``) and every module
it names exists."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _layout() -> str:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    start = text.index("## Layout")
    end = text.find("\n## ", start + 1)
    return text[start : end if end > 0 else len(text)]


def test_the_layout_names_every_package() -> None:
    layout = _layout()
    packages = sorted(
        init.parent.relative_to(ROOT).as_posix()
        for name in ("palm", "search", "spaces")
        for init in (ROOT / name).rglob("__init__.py")
        if "__pycache__" not in init.parts
    )
    missing = [p for p in packages if f"{p}/" not in layout]
    assert not missing, f"README.md's Layout does not name {missing}"


def test_the_modules_it_names_exist() -> None:
    named = set(re.findall(r"\b([a-z_]+(?:\*)?\.py)\b", _layout()))
    homes = [ROOT / d for d in ("palm", "palm/engines", "search", "spaces", "tests", "benchmarks")]
    for name in sorted(named):
        if name == "setup.py":
            continue
        found = any(list(home.glob(name)) for home in homes)
        assert found, f"README.md's Layout names {name}, which is not in the repository"
