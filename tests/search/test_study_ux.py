"""A study a person can read: objective names with units, memory in GiB,
the best trial's trace and plots attached to that trial, progress over the whole study,
storage URLs optuna-dashboard takes as they are, and a Python API shaped like Optuna's."""

from __future__ import annotations

import json
from pathlib import Path

import optuna
import pytest
from optuna.artifacts import download_artifact, get_all_artifact_meta

import search
from palm.errors import ConfigError
from search.cli import main
from search.storage import artifact_dir, open_storage

REPO = Path(__file__).resolve().parents[2]
WAFER = REPO / "examples" / "wafer-t18b.toml"

pytestmark = pytest.mark.filterwarnings("ignore::optuna.exceptions.ExperimentalWarning")
optuna.logging.set_verbosity(optuna.logging.WARNING)


def _study(tmp_path: Path, objectives: str = '["throughput"]', trials: int = 4) -> Path:
    path = tmp_path / "ux.toml"
    path.write_text(
        f"""[study]
name = "ux"
base = "{WAFER}"
set = ["training.global_batch=16"]
objectives = {objectives}
sampler = "random"
trials = {trials}
seed = 0

[space]
tp_group = ["compact", "strided"]
recompute = ["full", "selective"]
micro_batch = [1, 2]
""",
        encoding="utf-8",
    )
    return path


def _artifacts(study: optuna.Study, trial: optuna.trial.FrozenTrial) -> list[str]:
    return sorted(m.filename for m in get_all_artifact_meta(trial, storage=study._storage))


def test_artifacts_land_on_the_best_trial_once_with_its_number(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/ux.db"
    tuning = search.create_study(_study(tmp_path), storage=url)
    search.optimize(tuning)
    search.optimize(search.create_study(_study(tmp_path), storage=url), n_trials=3)  # resumed
    study = tuning.study
    best = search.best_trial(tuning)
    n = best.number
    assert _artifacts(study, best) == [
        f"trial{n}-gantt.png",
        f"trial{n}-links.png",
        f"trial{n}-trace.json",
    ]
    assert get_all_artifact_meta(study) == []  # nothing on the study itself
    for t in study.trials:  # every trial that was the best so far has its own, once
        names = _artifacts(study, t)
        assert len(names) == len(set(names))
        assert all(name.startswith(f"trial{t.number}-") for name in names)
    # nothing was drawn while trials ran: each best-so-far trial left recipes only
    drawn = [p for p in artifact_dir(url).iterdir() if p.suffix != ".recipe"]
    assert drawn == []
    gantt = next(
        m for m in get_all_artifact_meta(best, storage=study._storage) if "gantt" in m.filename
    )
    store = search.ArtifactStore(artifact_dir(url))  # draws the files on first read
    download_artifact(
        artifact_store=store, artifact_id=gantt.artifact_id, file_path=str(tmp_path / "g.png")
    )
    assert (tmp_path / "g.png").read_bytes()[:4] == b"\x89PNG"
    drawn = [p for p in artifact_dir(url).iterdir() if p.suffix != ".recipe"]
    assert len(drawn) == 3  # the gantt chart and its two siblings, from one simulation


def test_a_studys_objective_names_show_in_best_json(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url = f"sqlite:///{tmp_path}/ux.db"
    tuning = search.create_study(_study(tmp_path, '["throughput", "memory"]', 3), storage=url)
    search.optimize(tuning)
    assert tuning.study.metric_names == ["throughput [samples/s]", "peak memory [GiB]"]
    capsys.readouterr()
    assert main(["best", "--storage", url, "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert list(data["objectives"]) == ["throughput [samples/s]", "peak memory [GiB]"]
    throughput, memory_gib = data["objectives"].values()
    assert throughput == data["throughput_samples_per_s"]
    assert memory_gib == pytest.approx(data["peak_memory_bytes"] / 2**30)  # GiB, not bytes
    assert 0.01 < memory_gib < 1000
    assert data["fits_memory"] is True and data["memory_overflow_bytes"] <= 0  # from `result`


def test_the_python_api_takes_what_create_study_returns_and_optunas_arguments(
    tmp_path: Path,
) -> None:
    url = f"sqlite:///{tmp_path}/ux.db"
    sampler = optuna.samplers.RandomSampler(seed=3)
    tuning = search.create_study(_study(tmp_path, trials=2), storage=url, sampler=sampler)
    assert tuning.study.sampler is sampler
    search.optimize(tuning)
    assert search.best_trial(tuning).number == search.best_trial(tuning.study).number
    assert search.counts(tuning) == search.counts(tuning.study)
    assert sum(search.counts(tuning).values()) == 2
    with pytest.raises(ConfigError, match="load_if_exists"):
        search.create_study(_study(tmp_path), storage=url, load_if_exists=False)
    again = search.create_study(_study(tmp_path), storage=url, load_if_exists=True)
    assert len(again.study.trials) == 2


def test_create_study_is_an_optuna_study_on_a_storage_object_and_leaves_logging_alone(
    tmp_path: Path,
) -> None:
    from optuna.storages import JournalStorage
    from optuna.storages.journal import JournalFileBackend

    from search.artifacts import LOCATION_ATTR

    storage = JournalStorage(JournalFileBackend(str(tmp_path / "j.journal")))
    level = optuna.logging.get_verbosity()
    optuna.logging.set_verbosity(optuna.logging.INFO)
    try:
        study = search.create_study(_study(tmp_path, trials=2), storage=storage)
        assert optuna.logging.get_verbosity() == optuna.logging.INFO  # the caller's choice
        assert isinstance(study, optuna.Study) and study.storage_url is None
        assert search.optimize(study) is None  # as optuna.Study.optimize
        # two worker processes open the same storage object (pickled to them)
        assert search.optimize(study, n_trials=2, workers=2) is None
    finally:
        optuna.logging.set_verbosity(level)
    assert study.last_run is not None and study.last_run.new == 2
    assert study.best_trial.number == search.best_trial(study).number
    frame = study.trials_dataframe()
    assert len(frame) == len(study.trials) >= 4
    plain = optuna.load_study(study_name="ux", storage=storage)  # Optuna alone reads it
    assert [t.number for t in plain.trials] == [t.number for t in study.trials]
    # the artifacts go next to the storage object's file, as for its URL
    assert study.artifacts.location == str(tmp_path / "j.journal.artifacts")
    assert LOCATION_ATTR not in study.user_attrs  # found from the file: nothing recorded
    assert study.study is study  # older callers wrote tuning.study


@pytest.mark.parametrize("name", ["palm-tune.journal", "study.log"])
def test_a_plain_journal_path_opens_in_palm_tune_and_optuna_dashboard(
    tmp_path: Path, name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    dashboard = pytest.importorskip("optuna_dashboard._storage_url", reason="no optuna-dashboard")
    monkeypatch.chdir(tmp_path)
    optuna.create_study(study_name="s", storage=open_storage(name))
    seen = dashboard.guess_storage_from_url(name)  # what `optuna-dashboard NAME` does
    assert [s.study_name for s in optuna.get_all_study_summaries(seen)] == ["s"]
    from search.commands import _JOURNAL_FOR_WORKERS

    assert "://" not in _JOURNAL_FOR_WORKERS  # --workers' default is such a path


def test_the_history_plot_draws_the_best_so_far() -> None:
    pytest.importorskip("matplotlib")
    from optuna.distributions import CategoricalDistribution
    from optuna.trial import create_trial

    from search.plots import _history_figure, best_so_far

    assert best_so_far([3.0, 1.0, 4.0, 2.0], maximize=True) == [3.0, 3.0, 4.0, 4.0]
    assert best_so_far([3.0, 1.0, 4.0], maximize=False) == [3.0, 1.0, 1.0]
    study = optuna.create_study(direction="maximize", study_name="h")
    dist = {"x": CategoricalDistribution(["a"])}
    for value in (2.0, 1.0, 5.0, 3.0):
        study.add_trial(create_trial(value=value, params={"x": "a"}, distributions=dist))
    over = {"constraints:memory_overflow_bytes": 9.0}  # over memory: not simulated, not drawn
    study.add_trial(
        create_trial(value=0.0, params={"x": "a"}, distributions=dist, system_attrs=over)
    )
    fig = _history_figure(study, "throughput [samples/s]", lambda t: t.values[0], 0)
    ax = fig.axes[0]
    (line,) = [x for x in ax.get_lines() if x.get_label() == "best so far"]
    assert list(line.get_ydata()) == [2.0, 2.0, 5.0, 5.0]
    assert list(ax.collections[0].get_offsets()[:, 1]) == [2.0, 1.0, 5.0, 3.0]
    assert "1 over memory" in ax.get_title()


@pytest.mark.parametrize("command", ["best", "report"])
def test_commands_without_a_study_file_do_not_mention_one(
    command: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit):
        main([command, "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "study file's name" not in text and "the only study there" in text
