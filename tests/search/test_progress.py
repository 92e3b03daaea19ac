"""The progress bar of a tuning run (search.progress): one bar over the study whose counts
are the study's own, for a fresh, a continued and a screened study, in one process and with
workers, and the same numbers in the closing summary."""

from __future__ import annotations

import io
import re
from pathlib import Path

import optuna
import pytest
from optuna.distributions import CategoricalDistribution
from optuna.trial import TrialState, create_trial

import search
from search.dedup import DUPLICATE_ATTR, INVALID_CONSTRAINT
from search.progress import KINDS, Progress, run_counts, study_counts
from search.storage import WORKER_ATTR
from tests.cli_run import WAFER, run

optuna.logging.set_verbosity(optuna.logging.WARNING)

_DIST = {"x": CategoricalDistribution(["a"])}
#: the bar's last line: "NAME: 100%|...| 7/7 trials [elapsed<left, rate] counts; best V"
_BAR = re.compile(
    r"(\d+)/(\d+) trials \[[^\]]*\], (\d+) simulated, (\d+) cached, (\d+) over memory, "
    r"(\d+) invalid, (\d+) failed(?:; best ([\d,.e+-]+))?"
)
_RUN = re.compile(
    r"^this run\s+(\d+) trials: (\d+) simulated, (\d+) cached duplicates, (\d+) pruned for "
    r"memory, (\d+) invalid, (\d+) failed$",
    re.M,
)


def _trial(worker: str, value: float = 1.0, **kw: object) -> optuna.trial.FrozenTrial:
    attrs = {WORKER_ATTR: worker, **kw.pop("user_attrs", {})}  # type: ignore[dict-item]
    return create_trial(value=value, params={"x": "a"}, distributions=_DIST, user_attrs=attrs, **kw)  # type: ignore[arg-type]


def test_the_bar_counts_the_runs_trials_by_kind_over_the_whole_study() -> None:
    study = optuna.create_study(direction="maximize")
    study.add_trial(_trial("h:9", 4.0))  # finished before the run
    stream = io.StringIO()
    bar = Progress(study, budget=5, ours=lambda: {"h:1"}, stream=stream)
    for value in (1.0, 3.0, 2.0):
        study.add_trial(_trial("h:1", value))
    study.add_trial(  # did not fit memory: COMPLETE and infeasible (samplers such as GP)
        _trial("h:1", 0.0, system_attrs={"constraints:memory_overflow_bytes": 5.0})
    )
    study.add_trial(_trial("h:1", 3.0, state=TrialState.PRUNED, user_attrs={DUPLICATE_ATTR: 2}))
    invalid = {f"constraints:{INVALID_CONSTRAINT}": 1.0}
    study.add_trial(_trial("h:1", 0.0, state=TrialState.PRUNED, system_attrs=invalid))
    study.add_trial(_trial("h:2", 7.0))  # another machine's trial: in the best, not the count
    bar.update(study)
    bar.close(study)
    line = stream.getvalue().strip().splitlines()[-1]
    m = _BAR.search(line)
    assert m, line
    # 1 before + 6 of this run; asked: 1 + budget 5 + 1 duplicate
    assert m.groups()[:7] == ("7", "7", "3", "1", "1", "1", "0"), line
    assert m[8] == "7", line  # the study's best, whoever ran it
    assert "<" in line and ("trial/s" in line or "s/trial" in line), line  # ETA and rate


def test_a_run_that_stops_before_its_budget_closes_at_what_it_did() -> None:
    study = optuna.create_study(direction="maximize")
    stream = io.StringIO()
    bar = Progress(study, budget=10, ours=lambda: {"h:1"}, stream=stream)
    study.add_trial(_trial("h:1"))
    bar.close(study)
    m = _BAR.search(stream.getvalue().strip().splitlines()[-1])
    assert m and (m[1], m[2]) == ("1", "1")


def _study_file(tmp_path: Path, *, screen: int = 0, trials: int = 6) -> Path:
    path = tmp_path / "p.toml"
    path.write_text(
        f"""[study]
name = "p"
base = "{WAFER}"
set = ["training.global_batch=16"]
sampler = "tpe"
trials = {trials}
seed = 0
screen = {screen}
screen_top = 3

[space]
tp_group = ["compact", "strided"]
recompute = ["full", "selective"]
micro_batch = [1, 2, 4]
parallelism = true
""",
        encoding="utf-8",
    )
    return path


def _last_bar(err: str) -> tuple[int, ...]:
    lines = [m for m in (_BAR.search(x) for x in err.splitlines()) if m]
    assert lines, err
    return tuple(int(g) for g in lines[-1].groups()[:7])


def _kinds(study: optuna.Study) -> tuple[int, ...]:
    c = study_counts(study)
    return tuple(getattr(c, k) for k in KINDS)


@pytest.mark.parametrize("screen", [0, 8], ids=["fresh", "screened"])
def test_the_bar_equals_the_studys_counts_fresh_continued_and_screened(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], screen: int
) -> None:
    url = f"sqlite:///{tmp_path}/p.db"
    study = search.create_study(_study_file(tmp_path, screen=screen), storage=url)
    search.optimize(study, progress=True)
    n, total, *kinds = _last_bar(capsys.readouterr().err)
    assert n == total == len(study.trials)  # every trial, enqueued ones included
    assert tuple(kinds) == _kinds(study)
    assert study.last_run is not None and study.last_run.done == n
    if screen:
        assert study.user_attrs["screening"]["enqueued"]
        assert all(t.state != TrialState.WAITING for t in study.trials)
    # continued: the bar starts at the study's trials and adds this run's
    before = _kinds(study)
    again = search.create_study(_study_file(tmp_path, screen=screen), storage=url)
    search.optimize(again, n_trials=3, progress=True)
    n2, total2, *kinds2 = _last_bar(capsys.readouterr().err)
    assert n2 == total2 == len(again.trials) == n + again.last_run.done  # type: ignore[union-attr]
    assert tuple(kinds2) == tuple(a - b for a, b in zip(_kinds(again), before, strict=True))
    assert again.last_run is not None and again.last_run.simulated == 3


def test_two_workers_bar_and_summary_say_the_studys_counts(tmp_path: Path) -> None:
    study_file = _study_file(tmp_path, screen=8)
    r = run(
        "tune",
        str(study_file),
        "--storage",
        "p.journal",
        "--workers",
        "2",
        cwd=tmp_path,
        timeout_s=240,
    )
    assert r.code == 0, r.stderr
    n, total, *kinds = _last_bar(r.stderr)
    summary = _RUN.search(r.stdout)
    assert summary, r.stdout
    assert (n, *kinds) == tuple(int(g) for g in summary.groups())  # the same numbers
    from search.storage import open_storage

    study = optuna.load_study(study_name="p", storage=open_storage(str(tmp_path / "p.journal")))
    assert n == total == len(study.trials)
    assert tuple(kinds) == _kinds(study)
    assert run_counts(study, {t.user_attrs[WORKER_ATTR] for t in study.trials}, before=0).done == n


class _SizelessTerminal(io.StringIO):
    """A terminal that reports no size (a pty without one, as under ``script``): tqdm drew no
    bar at all on it (0 rows)."""

    def isatty(self) -> bool:
        return True


def test_a_terminal_without_a_size_still_shows_the_bar() -> None:
    study = optuna.create_study(direction="maximize")
    stream = _SizelessTerminal()
    bar = Progress(study, budget=1, ours=lambda: {"h:1"}, stream=stream)
    study.add_trial(_trial("h:1", 2.0))
    bar.close(study)
    text = stream.getvalue().replace("\r", "\n")
    assert _BAR.search(text) and " 1/1 trials" in text, text
