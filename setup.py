"""Build step of palm-tune beyond ``pyproject.toml``: the optional compiled fair network.

``palm/engines/event/fair.py`` (the fair network, pure Python and always installed) is also
compiled by Cython, with the C types that ``fair.pxd`` declares for its classes and hot paths,
into the extension ``palm.engines.event._fair_compiled``. The engine runs that build when it is
present and was built from the current ``fair.py`` and ``fair.pxd`` (the SHA-256 of the two is
compiled into it); otherwise it runs ``fair.py`` (:mod:`palm.engines.event.accel`). Both give
the same results bit for bit (tests/palm/test_fair_compiled.py).

The extension is optional: without Cython or a C compiler the install goes on without it, and
the engine is only slower (docs/benchmarks.md).
"""

from __future__ import annotations

import hashlib
import sys
from pathlib import Path

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

HERE = Path(__file__).resolve().parent
EVENT = Path("palm") / "engines" / "event"
#: where the copy of fair.py that Cython compiles is written (with its sources' digest)
GENERATED = Path("build") / "cython-src"
NAME = "_fair_compiled"


def _digest() -> str:
    """SHA-256 of fair.py and fair.pxd (palm.engines.event.accel.source_digest computes it
    again at import, to tell a current build from a stale one)."""
    digest = hashlib.sha256()
    for name in ("fair.py", "fair.pxd"):
        digest.update((HERE / EVENT / name).read_bytes())
        digest.update(b"\0")
    return digest.hexdigest()


def _extensions() -> list[Extension]:
    """The compiled fair network, or nothing when Cython is missing or cannot compile it."""
    try:
        from Cython.Build import cythonize
    except ImportError:
        print("palm-tune: Cython not found; the fair network stays pure Python", file=sys.stderr)
        return []
    # a package tree of its own (empty __init__ files), so that Cython names the module
    # palm.engines.event._fair_compiled and finds its .pxd beside it
    out = HERE / GENERATED / EVENT
    out.mkdir(parents=True, exist_ok=True)
    for package in (out, out.parent, out.parent.parent):
        (package / "__init__.py").touch()
    source = (HERE / EVENT / "fair.py").read_text(encoding="utf-8")
    # appended, so that line numbers in tracebacks are fair.py's
    (out / f"{NAME}.py").write_text(f'{source}\nSOURCE_SHA256 = "{_digest()}"\n', "utf-8")
    (out / f"{NAME}.pxd").write_bytes((HERE / EVENT / "fair.pxd").read_bytes())
    ext = Extension(
        f"palm.engines.event.{NAME}", [str(GENERATED / EVENT / f"{NAME}.py")], optional=True
    )
    try:
        return cythonize(  # type: ignore[no-any-return]
            [ext],
            # types come from fair.pxd alone: fair.py's annotations are for readers and mypy
            compiler_directives={"language_level": 3, "annotation_typing": False},
            build_dir=str(Path("build") / "cython-c"),
            quiet=True,
        )
    except Exception as exc:  # noqa: BLE001 - any failure leaves the pure-Python network
        _skipped(exc)
        return []


class _OptionalBuildExt(build_ext):
    """``build_ext`` that goes on without the compiled fair network when it cannot be built
    (no C compiler, a compiler error): ``Extension(optional=True)`` alone is not honoured by
    every path of setuptools (an editable install failed outright without a compiler)."""

    def run(self) -> None:
        try:
            super().run()
        except Exception as exc:  # noqa: BLE001 - any failure leaves the pure-Python network
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
    print(f"palm-tune: the fair network stays pure Python ({exc})", file=sys.stderr)


setup(ext_modules=_extensions(), cmdclass={"build_ext": _OptionalBuildExt})
