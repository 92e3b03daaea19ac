"""One tuner trial builds each thing once: one validation of its configuration, at most one
workload (the study's space built the base model's already), one plan context; and
:func:`palm.api.evaluate`, the tuner's one entry into the simulator, gives the memory check
and the result that :func:`palm.api.memory_check` and :func:`palm.api.simulate` give, bit
for bit."""

from __future__ import annotations

import collections
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import CodeType, FrameType
from typing import Any

import optuna
import pytest

import palm.config
import palm.plan.context
import palm.workload.model
from palm.api import evaluate, memory_check, simulate
from palm.config import load_config
from search.objective import Objective
from search.study_file import load_study

ROOT = Path(__file__).resolve().parents[2]


@contextmanager
def counting() -> Iterator[collections.Counter[str]]:
    """Calls of the functions that do the work (not of their memoising wrappers), by name,
    inside the block."""
    targets: dict[CodeType, str] = {
        palm.config._validate.__code__: "validation",  # noqa: SLF001
        palm.workload.model._build_workload.__code__: "workload",  # noqa: SLF001
        palm.plan.context.plan_context.__code__: "plan context",
    }
    counts: collections.Counter[str] = collections.Counter()

    def profile(frame: FrameType, event: str, arg: Any) -> None:
        if event == "call" and frame.f_code in targets:
            counts[targets[frame.f_code]] += 1

    sys.setprofile(profile)
    try:
        yield counts
    finally:
        sys.setprofile(None)


def _fitting_trial(study_file: str) -> collections.Counter[str]:
    """The counts of the first trial of ``study_file`` that fits and is simulated."""
    spec = load_study(ROOT / "studies" / study_file)
    objective = Objective(spec)
    study = optuna.create_study(
        directions=spec.directions, sampler=optuna.samplers.RandomSampler(seed=1)
    )
    for _ in range(40):
        trial = study.ask()
        with counting() as counts:
            try:
                value = objective(trial)
            except optuna.TrialPruned:
                study.tell(trial, state=optuna.trial.TrialState.PRUNED)
                continue
        study.tell(trial, value)
        return counts
    raise AssertionError(f"no trial of {study_file} fits")


@pytest.mark.parametrize("study_file", ["quickstart.toml", "llama3-70b-h100.toml"])
def test_one_trial_validates_once_and_builds_one_plan_context(study_file: str) -> None:
    counts = _fitting_trial(study_file)
    assert counts["validation"] == 1, counts
    assert counts["workload"] <= 1, counts
    assert counts["plan context"] == 1, counts


@pytest.mark.parametrize(
    ("example", "overrides"),
    [
        ("wafer-t18b.toml", []),
        ("t18b-dgx-a100.toml", []),
        ("mixtral-8x7b-h100.toml", []),
        ("t18b-dgx-a100.toml", ["parallelism.tp=1", "parallelism.dp=32"]),  # overflows
    ],
)
@pytest.mark.parametrize("engine", ["event", "analytical"])
def test_evaluate_is_the_memory_check_then_the_result(
    example: str, overrides: list[str], engine: str
) -> None:
    config = load_config(ROOT / "examples" / example, overrides=overrides)
    evaluation = evaluate(config, engine=engine)
    assert evaluation.memory == memory_check(config)
    assert evaluation.fits == (not overrides)  # the overrides make it overflow
    if not evaluation.fits:
        assert evaluation.result is None
        return
    assert evaluation.result is not None
    alone = simulate(config, engine=engine).to_dict()
    ours = evaluation.result.to_dict()
    alone.pop("sim_wall_s"), ours.pop("sim_wall_s")
    assert ours == alone
