"""Tests of the tuner (``search``, docs/tuning.md): the objective's memory pruning and failure
recording, study files' errors, and the quickstart end to end through ``palm-tune``.

Study files are written into ``tmp_path`` with ``base`` pointing at the repository's examples by
absolute path; storages live in ``tmp_path``.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import optuna
import pytest
from optuna.trial import TrialState

import palm
import palm.api
import search
import search.objective
from palm.errors import ConfigError
from search.cli import main
from search.dedup import Unrepeating, configuration_counts
from search.objective import RESULT_FIELDS

REPO = Path(__file__).resolve().parents[2]
WAFER = REPO / "examples" / "wafer-t18b.toml"
QUICKSTART = REPO / "studies" / "quickstart.toml"

pytestmark = pytest.mark.filterwarnings("ignore::optuna.exceptions.ExperimentalWarning")
optuna.logging.set_verbosity(optuna.logging.WARNING)


def _study_file(tmp_path: Path, name: str, study: str, space: str = 'recompute = ["full"]') -> Path:
    path = tmp_path / f"{name}.toml"
    path.write_text(f"[study]\n{study.strip()}\n\n[space]\n{space.strip()}\n", encoding="utf-8")
    return path


def _palm_tune(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "PALM_TUNE_DEBUG"}
    # this tree's packages, not an installed copy, whatever the working directory
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    return subprocess.run(
        [sys.executable, "-m", "search.cli", *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        env=env,
        timeout=180,
        check=False,
    )


def _one_error_line(stderr: str) -> str:
    lines = stderr.strip().splitlines()
    assert len(lines) == 1, stderr
    assert lines[0].startswith("palm-tune: error: "), stderr
    assert "Traceback" not in stderr
    return lines[0]


# ------------------------------------------------------------------------------------------
# the objective
# ------------------------------------------------------------------------------------------


def test_memory_overflow_trials_are_infeasible_with_the_overflow_recorded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # t-39b without recompute on the wafer: low TP / high DP plans need more than a core holds
    path = _study_file(
        tmp_path,
        "overflow",
        f"""
name = "overflow"
base = "{WAFER}"
set = ["model.preset=\\"t-39b\\"", "training.global_batch=32", "training.recompute=\\"none\\""]
sampler = "random"
trials = 12
seed = 1
""",
        "parallelism = true\nmicro_batch = [1, 2]",
    )
    simulated: list[palm.SimConfig] = []
    real = palm.api.simulate_plan

    def spy(plan: Any, **kwargs: Any) -> Any:
        simulated.append(plan.config)
        return real(plan, **kwargs)

    monkeypatch.setattr(palm.api, "simulate_plan", spy)  # what palm.api.evaluate runs
    tuning = search.create_study(path, storage=f"sqlite:///{tmp_path}/s.db")
    search.optimize(tuning)
    trials = tuning.study.trials
    duplicates = [t for t in trials if "duplicate_of" in t.user_attrs]
    invalid = [t for t in trials if "invalid_choices" in t.constraints]
    pruned = [
        t
        for t in trials
        if t.state == TrialState.PRUNED and t not in duplicates and t not in invalid
    ]
    complete = [t for t in trials if t.state == TrialState.COMPLETE]
    assert len(complete) == 12  # the budget counts event simulations
    assert pruned, "no trial overflowed: the study no longer tests pruning"
    assert complete, "every trial overflowed: the study no longer tests feasible trials"
    assert len(pruned) + len(complete) + len(invalid) + len(duplicates) == len(trials)
    for t in invalid:  # tp x pp does not divide the cores, or dp the batch: no plan, no memory
        assert t.state == TrialState.PRUNED and t.constraints["invalid_choices"] > 0
        assert "config" not in t.user_attrs and "memory_overflow_bytes" not in t.constraints
    for t in pruned:
        overflow = t.constraints["memory_overflow_bytes"]
        assert overflow > 0
        assert t.user_attrs["memory_overflow_bytes"] == pytest.approx(overflow)
        assert t.user_attrs["peak_memory_bytes"] > overflow
        assert "result" not in t.user_attrs  # stopped before the event simulation
        assert t.values is None  # pruned: TPE reads the constraint of any state
        assert t.user_attrs["pruned"] == "memory overflow"
    assert search.best_trial(tuning).constraints["memory_overflow_bytes"] <= 0
    for t in complete:
        assert t.constraints["memory_overflow_bytes"] <= 0
        # a trial that fits writes its memory once, in its result (each attribute a commit)
        assert "memory_overflow_bytes" not in t.user_attrs
        assert t.user_attrs["result"]["memory_overflow_bytes"] <= 0
        assert t.user_attrs["result"]["peak_memory_bytes"] > 0
        assert t.user_attrs["result"]["fits_memory"] is True
        assert t.values == [t.user_attrs["result"]["throughput_samples_per_s"]]
    # memory is checked first, from the stage memories alone: only plans that fit are built
    # and simulated, each configuration once
    assert len(simulated) == len(complete)
    keys = [t.user_attrs["config_key"] for t in complete]
    assert len(set(keys)) == len(keys)
    c = search.counts(tuning.study)
    assert (c["complete"], c["pruned"], c["failed"]) == (
        len(complete),
        len(pruned) + len(invalid) + len(duplicates),
        0,
    )


def test_a_tiny_sram_override_prunes_every_trial(tmp_path: Path) -> None:
    path = _study_file(
        tmp_path,
        "tiny",
        f"""
base = "{WAFER}"
set = ["hardware.dram_capacity_gib=0.001", "hardware.sram_per_core_mib=0.01"]
sampler = "random"
trials = 3
seed = 0
""",
        'recompute = ["full", "selective"]',
    )
    tuning = search.create_study(path, storage=f"sqlite:///{tmp_path}/s.db")
    search.optimize(tuning)  # the space has 2 configurations: the run stops when it has both
    assert search.counts(tuning.study) == {"complete": 0, "pruned": 2, "failed": 0, "running": 0}
    for t in tuning.study.trials:
        assert t.constraints["memory_overflow_bytes"] > 0
        assert t.user_attrs["memory_overflow_bytes"] > 0
    with pytest.raises(ConfigError, match="at least one completed trial"):
        search.best_config(tuning)


def test_a_simulator_error_fails_the_trial_with_its_message(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = _study_file(
        tmp_path,
        "boom",
        f"""
base = "{WAFER}"
set = ["training.global_batch=16"]
sampler = "random"
trials = 5
seed = 0
""",
        """
recompute = ["full", "selective"]
tp_group = ["compact", "strided"]
hardware = { inter_tile_link_gbps = { low = 128, high = 512 } }
""",
    )
    real = palm.api.simulate_plan
    calls = []

    def flaky(plan: Any, **kwargs: Any) -> Any:
        calls.append(plan.config)
        if len(calls) == 1:
            raise RuntimeError("boom")
        return real(plan, **kwargs)

    monkeypatch.setattr(palm.api, "simulate_plan", flaky)  # what palm.api.evaluate runs
    tuning = search.create_study(path, storage=f"sqlite:///{tmp_path}/s.db")
    search.optimize(tuning)  # the failure does not stop the study
    trials = tuning.study.trials
    assert len(trials) == 5
    failed = [t for t in trials if t.state == TrialState.FAIL]
    assert len(failed) == 1
    (bad,) = failed
    assert "boom" in bad.user_attrs["error"]
    assert "RuntimeError" in bad.user_attrs["error"]
    assert "config" in bad.user_attrs  # what failed is kept
    later = [t for t in trials if t.number > bad.number]
    assert later and all(t.state == TrialState.COMPLETE for t in later)
    c = search.counts(tuning.study)
    assert c == {"complete": 4, "pruned": 0, "failed": 1, "running": 0}


def test_a_duplicate_proposal_triggers_no_simulation_and_is_not_a_new_configuration(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = _study_file(
        tmp_path,
        "dup",
        f"""
base = "{WAFER}"
set = ["training.global_batch=16"]
sampler = "random"
trials = 2
seed = 0
""",
        'tp_group = ["compact", "strided"]\nrecompute = ["full", "selective"]',
    )
    simulated: list[palm.SimConfig] = []
    real = palm.api.simulate_plan

    def spy(plan: Any, **kwargs: Any) -> Any:
        simulated.append(plan.config)
        return real(plan, **kwargs)

    monkeypatch.setattr(palm.api, "simulate_plan", spy)  # what palm.api.evaluate runs
    storage = f"sqlite:///{tmp_path}/s.db"
    tuning = search.create_study(path, storage=storage)
    same = {"tp_group": "compact", "recompute": "full"}
    tuning.study.enqueue_trial(same)
    tuning.study.enqueue_trial(same)  # proposed twice: the second is a duplicate
    search.optimize(tuning, n_trials=2)
    trials = tuning.study.trials
    assert [t.params for t in trials[:2]] == [same, same]
    first, dup = trials[0], trials[1]
    assert first.state == TrialState.COMPLETE
    assert dup.state == TrialState.PRUNED and dup.user_attrs["duplicate_of"] == first.number
    assert dup.user_attrs["config_key"] == first.user_attrs["config_key"]
    assert "result" not in dup.user_attrs and "config" not in dup.user_attrs
    # two new configurations were asked for: the duplicate did not count, a third trial ran
    new = [t for t in trials if "duplicate_of" not in t.user_attrs]
    assert len(new) == 2 and len(simulated) == 2
    assert len({t.user_attrs["config_key"] for t in new}) == 2
    counted = configuration_counts(tuning.study)
    assert counted["simulated"] == 2 and counted["duplicate"] == len(trials) - 2

    # a resumed run (a new objective, nothing in memory) finds it in the storage
    simulated.clear()
    resumed = search.create_study(path, storage=storage)
    resumed.study.enqueue_trial(same)
    search.optimize(resumed, n_trials=1)
    again = resumed.study.trials[len(trials)]
    assert again.params == same and again.user_attrs["duplicate_of"] == first.number
    assert all(
        c.placement.tp_group != "compact" or c.training.recompute != "full" for c in simulated
    )
    assert configuration_counts(resumed.study)["simulated"] == 3


def test_the_sampler_is_steered_off_a_configuration_it_keeps_proposing() -> None:
    """A sampler that always proposes the same point: after the first duplicate, one
    decision is drawn at random, then more while duplicates continue."""
    fixed = optuna.samplers.PartialFixedSampler(
        {"a": 0, "b": 0, "c": 0}, optuna.samplers.RandomSampler(seed=0)
    )
    sampler = Unrepeating(fixed, seed=0)
    study = optuna.create_study(sampler=sampler)
    seen: set[tuple[int, ...]] = set()

    def objective(trial: optuna.Trial) -> float:
        point = tuple(trial.suggest_int(n, 0, 9) for n in "abc")
        if point in seen:
            trial.set_user_attr("duplicate_of", 0)
            raise optuna.TrialPruned()
        seen.add(point)
        return 0.0

    study.optimize(objective, n_trials=40)
    new = [t for t in study.trials if "duplicate_of" not in t.user_attrs]
    assert len(new) >= 20  # the plain sampler would give 1 new point in 40
    # the first steps change one decision of the base's favourite (0, 0, 0)
    second = next(t for t in new if t.number > 0)
    assert sum(v != 0 for v in second.params.values()) == 1


# ------------------------------------------------------------------------------------------
# bad study files: exit 2, one line naming the field, no traceback
# ------------------------------------------------------------------------------------------

BAD_STUDIES: dict[str, tuple[str, str]] = {
    # id: (file content, what the error line must name)
    "malformed-toml": ("[study\nbase = 1\n", "valid TOML"),
    "unknown-sampler": (
        f'[study]\nbase = "{WAFER}"\nsampler = "annealing"\n',
        "study.sampler",
    ),
    "unknown-objective": (
        f'[study]\nbase = "{WAFER}"\nobjectives = ["latency"]\n',
        "study.objectives",
    ),
    "objective-not-a-name": (
        f'[study]\nbase = "{WAFER}"\nobjectives = [["throughput"]]\n',
        "study.objectives",
    ),
    "bad-space-key": (
        f'[study]\nbase = "{WAFER}"\n\n[space]\nparalelism = true\n',
        "space.paralelism",
    ),
    "missing-base": ('[study]\nname = "nobase"\ntrials = 3\n', "study.base"),
    "base-file-missing": ('[study]\nbase = "nope.toml"\n', "config file"),
    "unknown-hardware-field": (
        f'[study]\nbase = "{WAFER}"\n\n[space]\nhardware.warp_gbps = {{ low = 1, high = 2 }}\n',
        "space.hardware.warp_gbps",
    ),
    "zero-trials": (f'[study]\nbase = "{WAFER}"\ntrials = 0\n', "study.trials"),
    "unknown-study-key": (f'[study]\nbase = "{WAFER}"\nbudget = 3\n', "study.budget"),
    "unknown-engine": (f'[study]\nbase = "{WAFER}"\nengine = "quantum"\n', "study.engine"),
    "bad-override": (f'[study]\nbase = "{WAFER}"\nset = ["parallelism.tp=7"]\n', "tp"),
}


@pytest.mark.parametrize("case", sorted(BAD_STUDIES))
def test_a_bad_study_file_exits_2_with_one_line_naming_the_field(
    case: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    text, field = BAD_STUDIES[case]
    path = tmp_path / "bad.toml"
    path.write_text(text, encoding="utf-8")
    code = main(["tune", str(path), "--storage", f"sqlite:///{tmp_path}/s.db", "--no-progress"])
    err = capsys.readouterr().err
    assert code == 2, err
    line = _one_error_line(err)
    assert field in line, line


def test_a_missing_base_config_is_named_even_in_a_deep_directory(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    deep = tmp_path / ("d" * 40) / ("e" * 40)
    deep.mkdir(parents=True)
    path = deep / "study.toml"
    path.write_text('[study]\nbase = "no-such-config.toml"\n', encoding="utf-8")
    code = main(["tune", str(path), "--storage", f"sqlite:///{tmp_path}/s.db"])
    line = _one_error_line(capsys.readouterr().err)
    assert code == 2
    assert "no-such-config.toml" in line, line


def test_bad_study_file_errors_through_the_real_process(tmp_path: Path) -> None:
    path = tmp_path / "bad.toml"
    path.write_text(BAD_STUDIES["malformed-toml"][0], encoding="utf-8")
    proc = _palm_tune("tune", str(path), "--storage", f"sqlite:///{tmp_path}/s.db", cwd=tmp_path)
    assert proc.returncode == 2
    line = _one_error_line(proc.stderr)
    assert "study file" in line and "valid TOML" in line and "line 1" in line
    assert proc.stdout == ""


@pytest.mark.parametrize(
    ("args", "field"),
    [
        (["--trials", "0"], "--trials"),
        (["--workers", "0"], "--workers"),
        (["--workers", "2"], "--storage"),  # SQLite cannot serve several workers
    ],
)
def test_bad_tune_options_exit_2(
    args: list[str], field: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(["tune", str(QUICKSTART), "--storage", f"sqlite:///{tmp_path}/s.db", *args])
    err = capsys.readouterr().err
    assert code == 2, err
    assert field in _one_error_line(err)


def test_a_missing_study_file_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["tune", str(tmp_path / "nope.toml"), "--storage", f"sqlite:///{tmp_path}/s.db"])
    assert code == 2
    assert "nope.toml" in _one_error_line(capsys.readouterr().err)


# ------------------------------------------------------------------------------------------
# quickstart end to end
# ------------------------------------------------------------------------------------------


def test_quickstart_tune_best_resume_reproduce_report(tmp_path: Path) -> None:
    storage = "sqlite:///x.db"  # relative: a fresh working directory
    db = tmp_path / "x.db"

    # tune: the summary
    proc = _palm_tune(
        "tune",
        str(QUICKSTART),
        "--storage",
        storage,
        "--trials",
        "8",
        "--no-progress",
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    head = re.search(r"^study\s+quickstart in sqlite:///x\.db: (\d+) trials$", out, re.M)
    assert head, out
    n = int(head[1])
    run = re.search(
        r"^this run\s+(\d+) trials: (\d+) simulated, (\d+) cached duplicates, (\d+) pruned for "
        r"memory, (\d+) invalid, (\d+) failed$",
        out,
        re.M,
    )
    assert run, out
    done, *kinds = map(int, run.groups())
    # 8 event simulations were asked for; the other trials are extra, not counted
    assert done == n == sum(kinds) and kinds[0] == 8
    m = re.search(r"^trials\s+(\d+) completed, (\d+) pruned, (\d+) failed$", out, re.M)
    assert m, out
    assert sum(map(int, m.groups())) == n
    # 8 event simulations were asked for; duplicate proposals, memory overflows and invalid
    # draws are extra trials, not simulated
    k = re.search(
        r"^configs\s+(\d+) distinct configurations simulated; not simulated: (\d+) over memory, "
        r"(\d+) invalid choices, (\d+) duplicate proposals$",
        out,
        re.M,
    )
    assert k, out
    simulated, overflow, invalid, dups = map(int, k.groups())
    assert simulated == 8 and n == simulated + overflow + invalid + dups
    assert simulated == int(m[1])
    assert re.search(r"^best\s+trial \d+: TP=\d+ PP=\d+ DP=\d+", out, re.M), out
    assert "samples/s" in out
    assert "Traceback" not in proc.stderr

    study = optuna.load_study(study_name="quickstart", storage=f"sqlite:///{db}")
    assert len(study.trials) == n
    c = search.counts(study)
    assert [c["complete"], c["pruned"], c["failed"]] == list(map(int, m.groups()))

    # best --json
    proc = _palm_tune("best", "--storage", storage, "--json", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    best = json.loads(proc.stdout)
    assert {"params", "values", "config", *RESULT_FIELDS} <= set(best)
    assert best["values"] == [study.best_value]
    assert best["params"] == study.best_trial.params
    assert best["throughput_samples_per_s"] == study.best_value
    assert best["fits_memory"] is True and best["engine"] == "event"
    assert best["memory_overflow_bytes"] == 0
    assert best["config"]["model"]["name"] == "t-18b"

    # tune again continues the same study
    proc = _palm_tune(
        "tune",
        str(QUICKSTART),
        "--storage",
        storage,
        "--trials",
        "2",
        "--no-progress",
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr
    again = re.search(r": (\d+) trials$", proc.stdout, re.M)
    this_run = re.search(r"^this run\s+(\d+) trials: .* (\d+) cached duplicates", proc.stdout, re.M)
    assert again and this_run, proc.stdout
    total = int(again[1])
    study = optuna.load_study(study_name="quickstart", storage=f"sqlite:///{db}")
    assert len(study.trials) == total
    # 2 more simulations (the sampler may re-propose earlier points, answered as duplicates)
    resumed = study.trials[n:]
    assert sum(1 for t in resumed if search.dedup.simulated(t)) == 2
    assert len(optuna.get_all_study_summaries(f"sqlite:///{db}")) == 1

    # the best trial as a configuration re-simulates identically
    tuning = search.create_study(QUICKSTART, storage=f"sqlite:///{db}")
    assert len(tuning.study.trials) == total  # loaded, not created
    config = search.best_config(tuning)
    assert isinstance(config, palm.SimConfig)
    result = palm.simulate(config)
    best_trial = search.best_trial(tuning.study)
    assert result.throughput_samples_per_s == best_trial.values[0]
    assert result.throughput_samples_per_s == tuning.study.best_value
    assert search.best_config(study) == config

    # a different study file under the same name fails loudly
    other = _study_file(
        tmp_path,
        "other",
        f"""
name = "quickstart"
base = "{WAFER}"
set = ["training.global_batch=32"]
trials = 2
seed = 0
""",
        "parallelism = true\nmicro_batch = [1, 2]",
    )
    proc = _palm_tune("tune", str(other), "--storage", storage, "--trials", "1", cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr
    line = _one_error_line(proc.stderr)
    assert "study file" in line and "quickstart" in line and "--study-name" in line
    with pytest.raises(ConfigError, match="study file"):
        search.create_study(other, storage=f"sqlite:///{db}")
    multi = _study_file(
        tmp_path,
        "multi",
        f"""
name = "quickstart"
base = "{WAFER}"
objectives = ["throughput", "memory"]
""",
    )
    with pytest.raises(ConfigError, match="study.objectives"):
        search.create_study(multi, storage=f"sqlite:///{db}")
    stored = optuna.load_study(study_name="quickstart", storage=f"sqlite:///{db}")
    assert len(stored.trials) == total

    # report
    proc = _palm_tune("report", "--storage", storage, "--out", "rep", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    for png in (tmp_path / "rep" / "history.png", tmp_path / "rep" / "best" / "gantt.png"):
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", png
        assert f"wrote {png.relative_to(tmp_path)}" in proc.stdout


def test_seeded_single_process_runs_are_reproducible(tmp_path: Path) -> None:
    path = _study_file(
        tmp_path,
        "seeded",
        f"""
base = "{WAFER}"
set = ["training.global_batch=16"]
sampler = "tpe"
trials = 4
seed = 7
""",
        'parallelism = true\nmicro_batch = [1, 2]\nrecompute = ["full", "selective"]',
    )
    runs = []
    for i in range(2):
        tuning = search.create_study(path, storage=f"sqlite:///{tmp_path}/s{i}.db")
        search.optimize(tuning)
        runs.append([(t.params, t.state, t.values) for t in tuning.study.trials])
    assert runs[0] == runs[1]


# ------------------------------------------------------------------------------------------
# multi-fidelity: analytical screening
# ------------------------------------------------------------------------------------------


def test_screening_enqueues_the_analytically_best_configurations_once(tmp_path: Path) -> None:
    dgx = REPO / "examples" / "t18b-dgx-a100.toml"  # t-18b on 256 A100s, a GPU cluster
    path = _study_file(
        tmp_path,
        "screened",
        f"""
base = "{dgx}"
set = ["training.global_batch=1024"]
sampler = "random"
trials = 3
seed = 0
screen = 24
screen_top = 3
""",
        'parallelism = { tp = [4, 8] }\nmicro_batch = [1, 2]\nrecompute = ["selective", "full"]',
    )
    tuning = search.create_study(path, storage=f"sqlite:///{tmp_path}/s.db")
    assert tuning.spec.screen == 24 and tuning.spec.screen_top == 3
    search.optimize(tuning)
    record = tuning.study.user_attrs["screening"]
    assert record["drawn"] <= 24 and record["fit"] <= record["drawn"] and record["wall_s"] > 0
    enqueued = record["enqueued"]
    assert len(enqueued) == 3
    first = tuning.study.trials[:3]
    assert [t.params for t in first] == enqueued  # simulated first, in the screened order
    # the ranking is the analytical engine's: recompute it for the three and a few others
    values = []
    for t in first:
        config = palm.parse_config(t.user_attrs["config"])
        values.append(palm.simulate(config, engine="analytical").throughput_samples_per_s)
    assert values == sorted(values, reverse=True)
    # a second run does not screen again (the record is the study's)
    search.optimize(tuning, n_trials=1)
    assert tuning.study.user_attrs["screening"] == record


def test_a_mesh_study_screens_one_configuration_per_trial_by_default() -> None:
    # on a mesh a screening is cheap only in a batch (palm.network.memo): at most one
    # analytical run per event trial of the budget, at most 100, none under 20 trials
    tuning_spec = search.study_file.load_study(QUICKSTART)
    assert tuning_spec.trials == 40 and tuning_spec.screen == 40


@pytest.mark.parametrize(
    ("base", "trials", "screen"),
    [
        ("wafer-t18b.toml", 300, 100),
        ("wafer-t18b.toml", 20, 20),
        ("wafer-t18b.toml", 19, 0),  # a small study: no screening
        ("t18b-dgx-a100.toml", 7, 200),
    ],
)
def test_the_default_screening_size(tmp_path: Path, base: str, trials: int, screen: int) -> None:
    study = f'base = "{REPO / "examples" / base}"\ntrials = {trials}\nsampler = "tpe"'
    path = _study_file(tmp_path, "sized", study)
    assert search.study_file.load_study(path).screen == screen


@pytest.mark.parametrize("base", ["wafer-t18b.toml", "t18b-dgx-a100.toml"])
def test_the_guided_sampler_is_the_default_and_prices_twenty_at_random(
    tmp_path: Path, base: str
) -> None:
    """One objective and no sampler named: the guided sampler, whose random start is 20
    configurations on a mesh and a GPU cluster alike; another sampler named on the command
    line gets its own screening default, unless the study file set one."""
    path = _study_file(tmp_path, "guided", f'base = "{REPO / "examples" / base}"\ntrials = 300')
    spec = search.study_file.load_study(path)
    assert (spec.sampler, spec.screen) == ("guided", 20)
    tpe = search.study_file.with_sampler(spec, "tpe", 0)
    assert tpe.screen == (100 if base.startswith("wafer") else 200)
    path.write_text(path.read_text().replace("trials = 300", "trials = 300\nscreen = 7"))
    spec = search.study_file.load_study(path)
    assert search.study_file.with_sampler(spec, "tpe", 0).screen == 7
    several = _study_file(
        tmp_path,
        "two",
        f'base = "{REPO / "examples" / base}"\nobjectives = ["throughput", "memory"]',
    )
    assert search.study_file.load_study(several).sampler == "tpe"


def test_a_run_stops_when_the_study_holds_every_configuration(tmp_path: Path) -> None:
    """A space of four configurations with a budget of ten new ones: the run stops once the
    study holds all four, each simulated once; the rest of the budget is not spent on
    duplicates (search.dedup.NewConfigBudget)."""
    path = _study_file(
        tmp_path,
        "four",
        f"""
name = "four"
base = "{WAFER}"
set = ["training.global_batch=32"]
sampler = "tpe"
trials = 10
seed = 0
""",
        'recompute = ["full", "selective"]\ntp_group = ["compact", "strided"]',
    )
    tuning = search.create_study(path, storage=f"sqlite:///{tmp_path}/four.db")
    search.optimize(tuning, progress=False)
    trials = tuning.study.trials
    new = [t for t in trials if "duplicate_of" not in t.user_attrs]
    assert len(new) == 4
    assert len({t.user_attrs["config_key"] for t in new}) == 4
    assert all(t.state == TrialState.COMPLETE for t in new)
    assert len(trials) - len(new) < 50  # stopped by exhaustion, not by the duplicate stall


def test_the_tuner_reads_the_trials_from_the_storage_about_twice_a_trial(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On SQLite a read of the trials is a query. Optuna reads them when it asks for a trial
    (enqueued trials) and once more for the samplers' per-trial copy; the duplicate look-up,
    the stop rules and TPE's constant liar read that copy (search.dedup.PerTrialView), where
    TPE alone read the storage for every parameter (6.3 reads a trial on the quickstart)."""
    path = _study_file(
        tmp_path,
        "reads",
        f"""
name = "reads"
base = "{WAFER}"
set = ["training.global_batch=32"]
sampler = "tpe"
trials = 14
seed = 0
""",
        'micro_batch = [1, 2, 4]\nrecompute = ["full", "selective"]\n'
        'layout = ["line", "s-shape"]\ntp_group = ["compact", "strided"]',
    )
    tuning = search.create_study(path, storage=f"sqlite:///{tmp_path}/reads.db")
    storage = type(tuning.study._storage)  # Optuna's _CachedStorage over RDBStorage
    reads = [0]
    real = storage.get_all_trials

    def counted(self: Any, *args: Any, **kwargs: Any) -> Any:
        reads[0] += 1
        return real(self, *args, **kwargs)

    monkeypatch.setattr(storage, "get_all_trials", counted)
    search.optimize(tuning)
    n = len(tuning.study.get_trials(deepcopy=False))
    assert n > 10  # past TPE's startup trials: its constant liar ran
    # 2 a trial, and the artifacts' check of other workers' best when a trial beats this
    # process's (search.artifacts); 6.3 a trial before
    assert reads[0] <= 3 * n, (reads[0], n)


def test_a_trials_result_attribute_holds_the_results_fields() -> None:
    """The objective reads the fields off the Result (``to_dict`` copies every stage)."""
    result = palm.simulate(palm.load_config(WAFER), engine="analytical")
    data = result.to_dict()
    stored = search.objective._result_attrs(result)
    assert stored == {k: data[k] for k in RESULT_FIELDS}
    assert json.loads(json.dumps(stored)) == stored


def test_a_sampler_blind_to_pruned_trials_is_steered_off_a_repeated_invalid_draw() -> None:
    """GP, NSGA-II and CMA-ES read completed trials only: an invalid draw (pruned) is never
    seen and, GP's acquisition being deterministic, proposed again for every trial.
    Unrepeating treats the repeat as a duplicate and moves a decision at random."""

    class Stuck(optuna.samplers.NSGAIISampler):  # reads COMPLETE trials only, as GP
        def infer_relative_search_space(self, study: Any, trial: Any) -> dict[str, Any]:
            return {}

        def sample_independent(self, study: Any, trial: Any, name: str, dist: Any) -> Any:
            return dist.choices[0]

    def objective(trial: optuna.Trial) -> float:
        if trial.suggest_categorical("x", [0, 1, 2, 3]) == 0:
            trial.set_constraint("invalid_choices", 2.0**50)
            raise optuna.TrialPruned("invalid choices")
        return 1.0

    study = optuna.create_study(sampler=Unrepeating(Stuck(seed=0), seed=0))
    study.optimize(objective, n_trials=12)
    xs = [t.params["x"] for t in study.trials]
    assert xs[:2] == [0, 0]  # the base's own proposal, twice
    assert xs.count(0) < 8, xs  # then steered off it
