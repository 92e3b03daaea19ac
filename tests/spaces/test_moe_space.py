"""The expert-parallel space part: every draft obeys Megatron-Core's layout rules, every
refused draw really breaks one (reported to the sampler as infeasible instead of being drawn
from choices that depend on earlier draws), and the MoE study of ``studies/`` runs."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import optuna
import pytest

import palm
from palm.config import load_config
from palm.errors import ConfigError
from spaces import Infeasible, SpaceContext, space_from_table

REPO = Path(__file__).resolve().parents[2]
MIXTRAL = REPO / "examples" / "mixtral-8x7b-h100.toml"  # 64 H100s, TP=1 PP=4 DP=16 EP=8
STUDY = REPO / "studies" / "moe-mixtral-h100.toml"

optuna.logging.set_verbosity(optuna.logging.WARNING)


def _degree(params: dict[str, Any], name: str) -> int | None:
    if f"log2_{name}" in params:
        return 1 << int(params[f"log2_{name}"])
    return params.get(name)


def _drafts(
    table: dict[str, Any], n: int, overrides: list[str] | None = None
) -> tuple[list[Any], list[tuple[dict[str, Any], Infeasible]]]:
    """``n`` feasible drafts of random draws, and the refused draws met on the way."""
    ctx = SpaceContext.of(load_config(MIXTRAL, overrides=overrides or []))
    space = space_from_table(table, ctx)
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=1))
    drafts, refused = [], []
    while len(drafts) < n and len(study.trials) < 30 * n:
        trial = study.ask()
        try:
            drafts.append(space.sample(trial, ctx))
        except Infeasible as exc:
            refused.append((dict(trial.params), exc))
        study.tell(trial, 0.0)
    assert len(drafts) == n
    return drafts, refused


def test_expert_degrees_obey_megatron_core_or_are_refused() -> None:
    table = {
        "parallelism": {"tp": [1, 2, 4, 8]},
        "sequence_parallel": [True, False],
        "ep": [1, 2, 4, 8, 16],
        "etp": [1, 2, 4],
    }
    seen = set()
    drafts, refused = _drafts(table, 60)
    for draft in drafts:
        par = draft["parallelism"]
        stage = par["tp"] * par["dp"]
        assert 8 % par["ep"] == 0 and stage % (par["ep"] * par["etp"]) == 0
        assert par["tp"] == 1 or par["sequence_parallel"] is True  # Megatron-Core's MoE rule
        palm.parse_config(draft)  # every draft is a valid configuration
        seen.add((par["ep"], par["etp"]))
    assert {1, 2, 4, 8} <= {ep for ep, _ in seen} and {1, 2} <= {etp for _, etp in seen}
    # a refused expert degree really breaks the layout (64 GPUs; tp x pp x dp = 64)
    experts = [(p, e) for p, e in refused if e.field in ("ep", "etp")]
    assert experts, "no expert degree was ever refused: the test no longer covers refusals"
    for params, exc in experts:
        tp, pp = _degree(params, "tp") or 1, _degree(params, "pp") or 4
        stage, ep, etp = 64 // pp, _degree(params, "ep") or 1, _degree(params, "etp") or 1
        assert 8 % ep or stage % ep or (stage // ep) % etp, (params, exc)
        assert tp * pp <= 64


def test_searching_parallelism_keeps_the_base_expert_degrees_where_valid() -> None:
    drafts, refused = _drafts({"parallelism": True}, 30)
    assert all(exc.field not in ("ep", "etp") for _, exc in refused)  # a kept degree: no draw
    for draft in drafts:
        par = draft["parallelism"]
        stage = par["tp"] * par["dp"]
        expected = 8 if stage % 8 == 0 else 1
        assert par["ep"] == expected
        palm.parse_config(draft)


def test_expert_choices_on_a_dense_model_are_refused() -> None:
    ctx = SpaceContext.of(
        load_config(MIXTRAL, overrides=['model.preset="llama2-7b"', "parallelism.ep=1"])
    )
    with pytest.raises(ConfigError, match=r"^space.ep = \[2\] .*no experts"):
        space_from_table({"ep": [2]}, ctx)
    with pytest.raises(ConfigError, match=r"^space.etp = 0 .*positive integer"):
        space_from_table({"etp": [0]}, SpaceContext.of(load_config(MIXTRAL)))


@pytest.mark.slow
def test_the_moe_study_runs(tmp_path: Path) -> None:
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "search.cli",
            "tune",
            str(STUDY),
            "--trials",
            "4",
            "--storage",
            f"sqlite:///{tmp_path / 'moe.db'}",
            "--no-progress",
        ],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert ": 4 trials\nthis run   4 trials: 4 simulated" in proc.stdout, proc.stdout
    assert ", 0 failed" in proc.stdout
    assert "EP=" in proc.stdout or "TP=" in proc.stdout
