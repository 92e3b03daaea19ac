"""Tuning serving plans: the [space] choices of a served configuration, latency limits as
constraints every sampler sees (a plan over one is pruned), and the ready study's best plan
within its limits."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import optuna
import pytest

from palm import load_config
from palm.serving.spec import ServingConfig
from tests.cli_run import REPO, run

STUDY = REPO / "studies" / "serve-llama31-70b-h100.toml"


def test_limit_excess_is_signed_and_covers_a_saturated_server() -> None:
    sv = ServingConfig(tpot_limit_s=0.04, ttft_limit_s=2.0)
    within = sv.limit_excess(tpot_s=0.03, ttft_s=1.0)
    assert within == pytest.approx({"tpot_over_limit_s": -0.01, "ttft_over_limit_s": -1.0})
    over = sv.limit_excess(tpot_s=0.05, ttft_s=None)
    assert over["tpot_over_limit_s"] > 0 and over["ttft_over_limit_s"] >= 3600
    assert ServingConfig().limit_excess(tpot_s=1.0, ttft_s=1.0) == {}


def test_the_serving_study_keeps_to_its_latency_limits(tmp_path: Path) -> None:
    storage = f"sqlite:///{tmp_path / 's.db'}"
    out = run("tune", str(STUDY), "--trials", "24", "--storage", storage, timeout_s=300)
    assert out.code == 0, out.stderr
    study = optuna.load_study(study_name="serve-llama31-70b-h100", storage=storage)
    done = [t for t in study.trials if t.state == optuna.trial.TrialState.COMPLETE]
    assert done
    for t in done:  # every completed plan is within both limits
        assert t.constraints["tpot_over_limit_s"] <= 0
        assert t.constraints["ttft_over_limit_s"] <= 0
    over = [t for t in study.trials if "latency" in str(t.user_attrs.get("pruned", ""))]
    assert all(
        t.constraints["tpot_over_limit_s"] > 0 or t.constraints["ttft_over_limit_s"] > 0
        for t in over
    )
    best = run("best", "--storage", storage, "--study-name", "serve-llama31-70b-h100", "--json")
    assert best.code == 0, best.stderr
    data: dict[str, Any] = json.loads(best.stdout)
    config = data["config"]
    assert config["training"]["mode"] == "serve"
    base = load_config(STUDY.parent / "../examples/serve-llama31-70b-h100.toml")
    assert config["serving"]["batch"] in (8, 16, 32, 64, 128, 256, 512, 1024)
    assert base.serving.input_tokens == config["serving"]["input_tokens"]


def _study_file(tmp_path: Path, **study: Any) -> Path:
    """The ready serving study with ``study`` keys replaced, written beside ``tmp_path``."""
    text = STUDY.read_text().replace('base = "../examples/', f'base = "{REPO}/examples/')
    for key, value in study.items():
        lines = [ln for ln in text.splitlines() if not ln.startswith(f"{key} =")]
        at = lines.index("[study]") + 1
        lines.insert(at, f"{key} = {json.dumps(value)}")
        text = "\n".join(lines) + "\n"
    path = tmp_path / "study.toml"
    path.write_text(text)
    return path


def test_a_pareto_study_of_throughput_and_time_per_token(tmp_path: Path) -> None:
    """objectives = ["throughput", "tpot"]: the front's plans are each within the limits and
    none is dominated; the recorded tpot is the plan's, in ms."""
    path = _study_file(tmp_path, objectives=["throughput", "tpot"], sampler="nsga2", trials=16)
    storage = f"sqlite:///{tmp_path / 'p.db'}"
    out = run("tune", str(path), "--storage", storage, timeout_s=300)
    assert out.code == 0, out.stderr
    study = optuna.load_study(study_name="serve-llama31-70b-h100", storage=storage)
    assert [d.name for d in study.directions] == ["MAXIMIZE", "MINIMIZE"]
    front = study.best_trials
    assert front
    for t in front:
        assert t.constraints["tpot_over_limit_s"] <= 0
        assert t.values[1] == pytest.approx((t.constraints["tpot_over_limit_s"] + 0.04) * 1e3)
        for other in front:  # no plan of the front is better in both
            assert not (other.values[0] > t.values[0] and other.values[1] < t.values[1])
    # NSGA-II reads COMPLETE trials only: a plan over a limit ends COMPLETE, infeasible, with
    # the values it ran at, and never on the front
    over = [t for t in study.trials if "latency" in str(t.user_attrs.get("pruned", ""))]
    for t in over:
        assert t.state == optuna.trial.TrialState.COMPLETE
        assert t.constraints["tpot_over_limit_s"] > 0 or t.constraints["ttft_over_limit_s"] > 0
        assert t.values[1] == pytest.approx((t.constraints["tpot_over_limit_s"] + 0.04) * 1e3)
        assert t.number not in {f.number for f in front}


def test_the_guided_sampler_keeps_to_the_latency_limits(tmp_path: Path) -> None:
    path = _study_file(tmp_path, sampler="guided", trials=10)
    storage = f"sqlite:///{tmp_path / 'g.db'}"
    out = run("tune", str(path), "--storage", storage, timeout_s=300)
    assert out.code == 0, out.stderr
    study = optuna.load_study(study_name="serve-llama31-70b-h100", storage=storage)
    done = [t for t in study.trials if t.state == optuna.trial.TrialState.COMPLETE]
    assert done
    for t in done:
        assert t.constraints["tpot_over_limit_s"] <= 0
        assert t.constraints["ttft_over_limit_s"] <= 0


def test_tpot_needs_a_served_base(tmp_path: Path) -> None:
    path = tmp_path / "train.toml"
    path.write_text(
        f'[study]\nbase = "{REPO}/examples/llama3-70b-h100.toml"\nobjectives = ["tpot"]\n'
        "[space]\nparallelism = true\n"
    )
    out = run("tune", str(path), "--trials", "1")
    assert out.code == 2
    assert "study.objectives" in out.stderr and "Traceback" not in out.stderr
