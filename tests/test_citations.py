"""Code and docs cite only what a reader of the repository can open: docs/ files, papers by
name and section, data files in the repository, public sources by name. A citation of a
document that is not in the repository (a product spec's section, a project issue number, a
path in a directory outside it) fails here, with the file and line."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
#: where the rule holds: the packages, the docs, the benchmarks and the tests
SCANNED = ("palm", "search", "spaces", "docs", "benchmarks", "tests", "README.md")
SUFFIXES = {".py", ".pyx", ".pxd", ".md", ".toml", ".json", ".txt", ".cfg"}

# built from pieces so that this file does not match itself
_SPEC = re.compile(r"\b" + "SP" + r"EC\b")
_ISSUE = re.compile(r"\b[Ii]ssues? #?\d+")
_SHARED = re.compile(r"(?<![/\w.-])" + "sha" + "red/")
#: an issue of a public repository, named with its owner and name, is a public source
_PUBLIC_REPO = re.compile(r"[\w.-]+/[\w.-]+\s+(GitHub\s+)?$")


def _files() -> list[Path]:
    found: list[Path] = []
    for name in SCANNED:
        path = ROOT / name
        if path.is_file():
            found.append(path)
            continue
        for file in sorted(path.rglob("*")):
            if file.suffix in SUFFIXES and file.is_file() and "__pycache__" not in file.parts:
                found.append(file)
    return found


def offenders(text: str) -> list[str]:
    """The citations in ``text`` of documents outside the repository."""
    bad = [m.group() for m in _SPEC.finditer(text)]
    bad += [m.group() for m in _SHARED.finditer(text)]
    for m in _ISSUE.finditer(text):
        if not _PUBLIC_REPO.search(text[max(0, m.start() - 80) : m.start()]):
            bad.append(m.group())
    return bad


def test_the_rule_catches_each_kind() -> None:
    assert offenders("see " + "SP" + "EC sec. 6") == ["SP" + "EC"]
    assert offenders("(iss" + "ue 13, item 4)") == ["iss" + "ue 13"]
    assert offenders("``" + "sha" + "red/validation/x.json``") == ["sha" + "red/"]
    # a public repository's issue, a directory named by a user, and plain words pass
    assert offenders("pytorch/pytorch iss" + "ue #104509 measures") == []
    assert offenders("--artifacts /" + "sha" + "red/palm-artifacts") == []
    assert offenders("ServingSpec, [SPECS] docs.tenstorrent.com, an issue of style") == []


@pytest.mark.parametrize("name", SCANNED)
def test_no_citation_outside_the_repository(name: str) -> None:
    found = []
    for file in _files():
        if file.relative_to(ROOT).parts[0] != name:
            continue
        text = file.read_text(encoding="utf-8")
        found += [f"{file.relative_to(ROOT)}: {hit!r}" for hit in offenders(text)]
    assert not found, "cite docs/ or a paper by name and section instead:\n" + "\n".join(found)
