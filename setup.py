"""Build step of palm-tune beyond ``pyproject.toml``: the optional compiled engine modules.

The event engine's hot modules, ``palm/engines/event/fair.py`` (the ``fair`` model's flows,
compiled as one unit with its parts ``filling.py``, ``flowclass.py`` and ``clock.py``),
``dram_system.py`` (the ``exclusive`` model's DRAM channels) and ``resource_table.py`` (the
resources and the ``exclusive`` model's holds), pure Python and always installed, are also
compiled by Cython, each with the C types its ``.pxd`` declares for its classes and hot paths,
into ``palm.engines.event._<name>_compiled``. The engine runs a build when it is present and
was made from the current ``.py`` and ``.pxd`` (the SHA-256 of the two is compiled into it);
otherwise the ``.py`` (:mod:`palm.engines.event.accel`). Both give the same results bit for
bit (tests/palm/test_compiled.py).

The builds are optional: without Cython or a C compiler the install goes on without them, and
the engine is only slower (docs/benchmarks.md).
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

HERE = Path(__file__).resolve().parent
EVENT = Path("palm") / "engines" / "event"
#: where the copies that Cython compiles are written (with their sources' digests)
GENERATED = Path("build") / "cython-src"


def _builds() -> ModuleType:
    """palm/engines/event/builds.py, loaded by its path: the modules to compile and the digest
    of their sources, the same that palm.engines.event.accel checks at import (importing palm
    here would need its dependencies, which a build does not have)."""
    spec = importlib.util.spec_from_file_location("_palm_builds", HERE / EVENT / "builds.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


BUILDS = _builds()


def _copy(name: str) -> Extension:
    """The extension ``palm.engines.event._<name>_compiled``, from a copy of ``<name>.py``
    (or of the unit of its parts, ``builds.PARTS``: the fair network's four modules) with its
    digest appended and of ``<name>.pxd``, in a package tree of their own (empty
    ``__init__`` files), so that Cython names the module and finds its .pxd beside it."""
    out = HERE / GENERATED / EVENT
    out.mkdir(parents=True, exist_ok=True)
    for package in (out, out.parent, out.parent.parent):
        (package / "__init__.py").touch()
    target = f"_{name}_compiled"
    source = BUILDS.unit_source(HERE / EVENT, name)
    # appended, so that line numbers in tracebacks are the .py's (a unit's: its first part's)
    digest = BUILDS.source_digest(HERE / EVENT, name)
    (out / f"{target}.py").write_text(f'{source}\nSOURCE_SHA256 = "{digest}"\n', "utf-8")
    (out / f"{target}.pxd").write_bytes((HERE / EVENT / f"{name}.pxd").read_bytes())
    return Extension(f"palm.engines.event.{target}", [str(GENERATED / EVENT / f"{target}.py")])


def _say(message: str) -> None:
    """One line for the person installing: on their terminal when there is one (pip captures
    a build's output and shows it only with -v or on failure), and on stderr."""
    line = f"palm-tune: {message}\n"
    try:
        with open("/dev/tty", "w", encoding="utf-8") as tty:
            tty.write(line)
    except OSError:  # no terminal (CI, a log): pip -v shows stderr
        pass
    sys.stderr.write(line)


def _wanted() -> bool:
    """True when this setup.py run builds something (not only its metadata)."""
    return any(a.startswith(("build", "bdist", "editable", "develop", "install")) for a in sys.argv)


def _extensions() -> list[Extension]:
    """The compiled builds, or none when Cython is missing or cannot compile them."""
    try:
        from Cython.Build import cythonize
    except ImportError:
        print("palm-tune: Cython not found; the networks stay pure Python", file=sys.stderr)
        return []
    if _wanted():
        _say(
            f"compiling the event engine's {len(BUILDS.COMPILED)} hot modules with Cython "
            f"({', '.join(f'{n}.py' for n in BUILDS.COMPILED)} in palm/engines/event/; "
            "1-3 minutes; without a C compiler the install goes on with the pure-Python ones)"
        )
    try:
        return cythonize(  # type: ignore[no-any-return]
            [_copy(name) for name in BUILDS.COMPILED],
            # types come from the .pxd files alone: the annotations are for readers and mypy
            compiler_directives={"language_level": 3, "annotation_typing": False},
            build_dir=str(Path("build") / "cython-c"),
            quiet=True,
        )
    except Exception as exc:  # noqa: BLE001 - any failure leaves the pure-Python networks
        _skipped(exc)
        return []


class _OptionalBuildExt(build_ext):
    """``build_ext`` that goes on without the compiled networks when they cannot be built
    (no C compiler, a compiler error): ``Extension(optional=True)`` alone is not honoured by
    every path of setuptools (an editable install failed outright without a compiler)."""

    def run(self) -> None:
        try:
            super().run()
        except Exception as exc:  # noqa: BLE001 - any failure leaves the pure-Python networks
            _skipped(exc)

    def build_extension(self, ext: Extension) -> None:
        try:
            super().build_extension(ext)
        except Exception as exc:  # noqa: BLE001
            _skipped(exc)

    def copy_extensions_to_source(self) -> None:
        try:
            super().copy_extensions_to_source()
        except OSError as exc:  # the extension was not built
            _skipped(exc)


def _skipped(exc: BaseException) -> None:
    print(f"palm-tune: the networks stay pure Python ({exc})", file=sys.stderr)


setup(ext_modules=_extensions(), cmdclass={"build_ext": _OptionalBuildExt})
