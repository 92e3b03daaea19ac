"""The fair network is four modules (filling, flowclass, clock, fair) compiled as one unit
(palm/engines/event/builds.py): the unit's text is theirs joined, without the imports between
them, defines every name each of them defines, and its digest changes with any of them (so a
build made before a part changed is never run)."""

from __future__ import annotations

import ast
import shutil
from pathlib import Path

from palm.engines.event import builds

EVENT = Path(builds.__file__).resolve().parent


def _top_level_names(text: str) -> set[str]:
    names: set[str] = set()
    for node in ast.parse(text).body:
        if isinstance(node, ast.FunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Assign):
            names.update(t.id for t in node.targets if isinstance(t, ast.Name))
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
    return names


def test_the_unit_defines_every_name_of_its_parts_without_importing_them() -> None:
    unit = builds.unit_source(EVENT, "fair")
    for part in builds.parts("fair"):
        assert f"from palm.engines.event.{part} import" not in unit
    assert unit.count("from __future__ import annotations") == 1
    defined = _top_level_names(unit)
    for part in builds.parts("fair"):
        own = _top_level_names((EVENT / f"{part}.py").read_text(encoding="utf-8"))
        assert own - {"__all__"} <= defined, part
    namespace: dict[str, object] = {"__name__": "palm.engines.event._fair_unit"}
    exec(compile(unit, "fair unit", "exec"), namespace)  # noqa: S102 - the repository's code
    for name in ("FairNetwork", "FlowEnvironment", "Route", "_Filler", "_Class", "fair_rates"):
        assert name in namespace


def test_a_single_module_build_is_its_own_source() -> None:
    text = (EVENT / "dram_system.py").read_text(encoding="utf-8")
    assert builds.parts("dram_system") == ("dram_system",)
    assert builds.unit_source(EVENT, "dram_system") == text


def test_the_digest_follows_every_part(tmp_path: Path) -> None:
    for name in ("fair.pxd", *(f"{p}.py" for p in builds.parts("fair"))):
        shutil.copy(EVENT / name, tmp_path / name)
    before = builds.source_digest(tmp_path, "fair")
    assert before == builds.source_digest(EVENT, "fair")
    for part in builds.parts("fair"):
        path = tmp_path / f"{part}.py"
        text = path.read_text(encoding="utf-8")
        path.write_text(text + "\n# changed\n", encoding="utf-8")
        assert builds.source_digest(tmp_path, "fair") != before, part
        path.write_text(text, encoding="utf-8")
