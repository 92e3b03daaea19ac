"""Special files as inputs: a FIFO (named pipe with no writer), a character device and a
socket given as the configuration, as ``model.hf_config``, as a study file or its base, or as
a validation file are refused by name (exit 2, one line) without reading from them: a FIFO
with no writer blocked the command until it was killed."""

from __future__ import annotations

import os
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.cli_run import assert_usage_error, run

KINDS = {"fifo": "FIFO", "chardev": "character device", "socket": "socket"}


@pytest.fixture(params=sorted(KINDS))
def special(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[Path, str]]:
    """A special file of each kind in ``tmp_path`` and the words that name its kind."""
    kind = request.param
    if kind == "chardev":
        yield Path("/dev/null"), KINDS[kind]
        return
    path = tmp_path / f"input.{kind}"
    if kind == "fifo":
        os.mkfifo(path)
        yield path, KINDS[kind]
        return
    server = socket.socket(socket.AF_UNIX)
    try:
        server.bind(str(path))
        yield path, KINDS[kind]
    finally:
        server.close()


def test_as_the_configuration(special: tuple[Path, str], tmp_path: Path) -> None:
    path, kind = special
    for command in ("simulate", "plot"):
        r = run(command, str(path), cwd=tmp_path, timeout_s=30)
        assert_usage_error(r, "config file", str(path), "regular file", kind)


def test_as_hf_config(special: tuple[Path, str], tmp_path: Path) -> None:
    path, kind = special
    config = tmp_path / "hf.toml"
    config.write_text(f'[model]\nhf_config = "{path}"\n[hardware]\npreset = "dgx-a100"\n')
    r = run("simulate", str(config), cwd=tmp_path, timeout_s=30)
    assert_usage_error(r, "model.hf_config", str(path), "regular file", kind)


def test_as_a_study_file_or_its_base(special: tuple[Path, str], tmp_path: Path) -> None:
    path, kind = special
    url = f"sqlite:///{tmp_path}/s.db"
    r = run("tune", str(path), "--storage", url, cwd=tmp_path, timeout_s=30)
    assert_usage_error(r, "study file", str(path), "regular file", kind)
    study = tmp_path / "s.toml"
    study.write_text(f'[study]\nbase = "{path}"\n[space]\nrecompute = ["full", "none"]\n')
    r = run("tune", str(study), "--storage", url, cwd=tmp_path, timeout_s=30)
    assert_usage_error(r, str(path), "regular file", kind)
    assert not (tmp_path / "s.db").exists()  # refused before the storage is made


def test_as_a_validation_file(special: tuple[Path, str], tmp_path: Path) -> None:
    path, kind = special
    r = run("validate", str(path), cwd=tmp_path, timeout_s=30)
    assert_usage_error(r, "validation file", str(path), "regular file", kind)


def test_a_directory_is_named_as_one(tmp_path: Path) -> None:
    r = run("simulate", str(tmp_path), cwd=tmp_path, timeout_s=30)
    assert_usage_error(r, str(tmp_path), "regular file", "directory")
