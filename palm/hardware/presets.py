"""Named hardware presets: ``HARDWARE_PRESETS`` (name -> ``Hardware``) and
:func:`hardware_preset`. The presets are data, ``palm/data/hardware/*.toml`` (every figure with
its source) and ``palm/data/fitted/*.toml`` (the constants the calibration scripts fit); the
layout and how to add a preset are in :mod:`palm.hardware.preset_data`, which reads them on the
first lookup (``import palm`` parses nothing) and caches the result."""

from __future__ import annotations

from collections.abc import Iterator, Mapping

from palm.hardware.spec import Hardware

__all__ = ["HARDWARE_PRESETS", "hardware_preset"]


def _by_name() -> Mapping[str, Hardware]:
    from palm.hardware.preset_data import preset_hardware

    return preset_hardware()


class _Presets(Mapping[str, Hardware]):
    """The presets by name, in listing order, read on first use."""

    def __getitem__(self, name: str) -> Hardware:
        return _by_name()[name]

    def __iter__(self) -> Iterator[str]:
        return iter(_by_name())

    def __len__(self) -> int:
        return len(_by_name())


HARDWARE_PRESETS: Mapping[str, Hardware] = _Presets()


def hardware_preset(name: str) -> Hardware | None:
    """The preset called ``name`` (case-insensitive), or ``None``."""
    return _by_name().get(name.lower())
