"""benchmarks/calibrate_gpus.py: a software release's constants are their own fit group
(docs/validation.md, "The software stack as a calibration input")."""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

import pytest

import palm
from palm.software import FIRST_BLACKWELL_ATTENTION
from palm.validation import ValidationCase
from palm.validation_modern import load_modern_cases

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
import calibrate_gpus as cg  # noqa: E402 - benchmarks/ is not a package

EPOCH = "nemo<25.04"
KEY = f"attention_efficiency@{EPOCH}"
OLD = "nemo2502-b200-llama3-8b-8g"  # NeMo 25.02 on DGX B200: the early Blackwell stack
NEW = "mb2509-b200-llama3-8b-8g-fp8"  # the same plan in Megatron-Bridge 25.09


def _cases() -> tuple[dict[str, ValidationCase], dict[str, str]]:
    data = load_modern_cases()
    return {c.case_id: c for c in data.cases}, data.epochs


def test_an_epoch_row_depends_on_the_epochs_attention_not_the_generations() -> None:
    cases, epochs = _cases()
    old = cg._uses(cases[OLD], epochs.get(OLD))
    assert KEY in old and "attention_efficiency" not in old
    assert "fp8_matmul_efficiency" in old  # its GEMMs are the generation's
    assert cg._uses(cases[NEW], epochs.get(NEW)) >= {"attention_efficiency"}
    assert not any("@" in n for n in cg._uses(cases[NEW], epochs.get(NEW)))


def test_case_constants_route_each_constant_to_its_stack() -> None:
    cases, epochs = _cases()
    consts = {"attention_efficiency": 0.5, "fp8_matmul_efficiency": 0.45, KEY: 0.3}
    assert cg.case_constants(cases[OLD], consts, epochs) == {
        "attention_efficiency": 0.3,
        "fp8_matmul_efficiency": 0.45,
    }
    assert cg.case_constants(cases[NEW], consts, epochs) == {
        "attention_efficiency": 0.5,
        "fp8_matmul_efficiency": 0.45,
    }
    # no fitted epoch constant: the epoch row keeps its stored value, not the generation's
    stored = cg.case_constants(cases[OLD], {"attention_efficiency": 0.5}, epochs)
    assert stored == {}
    assert cases[OLD].config.hardware.attention_efficiency == FIRST_BLACKWELL_ATTENTION


def test_fit_groups_follow_min_rows() -> None:
    data = load_modern_cases()
    blackwell = [c for c in data.cases if c.config.hardware.name in ("dgx-b200", "gb200-nvl72")]
    names = cg.fitted_names("Blackwell", blackwell, epochs=data.epochs)
    assert KEY in names and "attention_efficiency" in names  # six 25.02 rows, the rest
    assert cg.fitted_names("Blackwell", blackwell, epochs=data.epochs, epochs_only=True) == [KEY]
    # two epoch rows are fewer than MIN_ROWS: the epoch's constant is not fitted
    two = [c for c in blackwell if c.case_id not in data.epochs] + [
        c for c in blackwell if c.case_id in data.epochs
    ][:2]
    assert KEY not in cg.fitted_names("Blackwell", two, epochs=data.epochs)
    # without epochs (e.g. H100) nothing carries an epoch name
    assert not any("@" in n for n in cg.fitted_names("Blackwell", blackwell))


def test_the_epoch_fit_recovers_a_known_attention_and_leaves_current_rows() -> None:
    """A row made to measure what the simulator predicts at attention 0.3 is fitted back to
    0.3 by the epoch's constant alone; a current-stack row's error does not depend on it."""
    cases, epochs = _cases()
    old = cases[OLD]
    hw = dataclasses.replace(old.config.hardware, attention_efficiency=0.3)
    target = palm.simulate(dataclasses.replace(old.config, hardware=hw), engine="analytical")
    made = dataclasses.replace(old, published_iteration_time_s=target.iteration_time_s)
    fitted = cg.fit([made], {KEY: 0.5}, epochs=epochs)
    assert fitted[KEY] == pytest.approx(0.3, abs=0.01)
    new = cases[NEW]
    assert cg.errors([new], {KEY: 0.2}, "analytical", epochs) == cg.errors(
        [new], {KEY: 0.6}, "analytical", epochs
    )
