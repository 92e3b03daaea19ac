"""A study's plots for ``palm-tune report``: optimisation history per objective, Pareto front,
and parameter importance, every axis named with its unit (``study.metric_names``).

The history plot shows each completed trial that fits memory (a dot at its trial number) and
the best value so far (a step line over the trial numbers, in the objective's direction), as
optuna-dashboard's history does; trials over memory are not simulated and have no value.

The importance plot ranks parameters by PED-ANOVA (Watanabe et al. 2023, IJCAI; Optuna 5's
default evaluator, which also weighs conditional parameters) over the trials that fit memory
(those over memory are not simulated; they say which parameters cause an overflow, not what
makes a plan fast), shows the :data:`TOP` largest with their share, and sums the rest into one
bar, so that a space of many parameters stays readable.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Sequence
from functools import partial
from pathlib import Path
from typing import Any, TextIO

import optuna
from optuna.study import StudyDirection
from optuna.trial import FrozenTrial, TrialState

from search.metrics import GIB, display_names, is_overflow

__all__ = ["write_study_plots", "best_so_far", "TOP"]

#: parameters shown by name in the importance plot
TOP = 12


Target = tuple[str, str, Callable[[FrozenTrial], float]]


def _value(i: int, scale: float, trial: FrozenTrial) -> float:
    return float(trial.values[i]) * scale


def _targets(study: optuna.Study) -> list[Target]:
    """(file suffix, axis name, value of a trial) per objective; memory of studies made before
    palm-tune reported GiB is converted from bytes."""
    keys, names = display_names(study)
    out: list[Target] = []
    for i, (key, name) in enumerate(zip(keys, names, strict=True)):
        scale = 1 / GIB if key == "memory" and study.metric_names is None else 1.0
        out.append((key, name, partial(_value, i, scale)))
    return out


def best_so_far(values: Sequence[float], *, maximize: bool) -> list[float]:
    """The running best of ``values`` in trial order (max when ``maximize``, else min)."""
    out: list[float] = []
    for v in values:
        out.append(v if not out else (max if maximize else min)(out[-1], v))
    return out


def _history_figure(
    study: optuna.Study, name: str, value: Callable[[FrozenTrial], float], index: int
) -> Any:
    import matplotlib.pyplot as plt

    trials = [
        t
        for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
        if not is_overflow(t)
    ]
    if not trials:
        raise ValueError("no completed trial that fits memory")
    numbers = [t.number for t in trials]
    values = [value(t) for t in trials]
    maximize = study.directions[index] == StudyDirection.MAXIMIZE
    fig, ax = plt.subplots(figsize=(9, 5.5))
    ax.scatter(numbers, values, s=18, color="#1f77b4", label="trial (fits memory)", zorder=3)
    ax.step(
        numbers,
        best_so_far(values, maximize=maximize),
        where="post",
        color="#d62728",
        linewidth=1.6,
        label="best so far",
    )
    ax.set_xlabel("trial")
    ax.set_ylabel(name)
    over = sum(1 for t in study.get_trials(deepcopy=False) if is_overflow(t))
    ax.set_title(
        f"{study.study_name}: {name}, {len(trials)} trials that fit memory"
        + (f" ({over} over memory, not shown)" if over else ""),
        fontsize=10,
    )
    ax.grid(color="#e0e0e0", linewidth=0.6)
    ax.set_axisbelow(True)
    ax.legend(loc="lower right" if maximize else "upper right", fontsize=9)
    return fig


def _importance_figure(
    study: optuna.Study, name: str, value: Callable[[FrozenTrial], float], index: int
) -> Any:
    import matplotlib.pyplot as plt

    sign = 1.0 if study.directions[index] == StudyDirection.MINIMIZE else -1.0

    def lower_is_better(t: FrozenTrial) -> float:  # NaN: left out by Optuna's filter
        return math.nan if is_overflow(t) else sign * value(t)

    fits = sum(
        1
        for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
        if not is_overflow(t)
    )
    if fits < 2:
        raise ValueError(f"{fits} trial(s) fit memory; importance needs 2")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        evaluator = optuna.importance.PedAnovaImportanceEvaluator()
        found = optuna.importance.get_param_importances(
            study, evaluator=evaluator, target=lower_is_better
        )
    _summarise(caught)
    ranked = list(found.items())
    shown = [(k, v) for k, v in ranked[:TOP] if v >= 0.005]
    rest = ranked[len(shown) :]
    labels = [k for k, _ in shown] + ([f"the other {len(rest)} parameters"] if rest else [])
    shares = [v for _, v in shown] + ([sum(v for _, v in rest)] if rest else [])
    fig, ax = plt.subplots(figsize=(9, 0.45 * len(labels) + 1.6))
    bars = ax.barh(range(len(labels))[::-1], shares, color="#4c72b0")
    ax.set_yticks(range(len(labels))[::-1], labels)
    ax.bar_label(bars, labels=[f"{s:.0%}" for s in shares], padding=3)
    ax.set_xlim(0, max(shares, default=0) * 1.15 or 1)
    ax.set_xlabel(f"share of the importance for {name} (PED-ANOVA)")
    ax.set_title(
        f"Parameter importance for {name}\n(PED-ANOVA over the {fits} trials that fit memory)"
    )
    return fig


def _summarise(caught: list[warnings.WarningMessage]) -> None:
    """Optuna's importance warnings again, with one line for all parameters that have values
    seen in fewer than two trials (one line each would bury the report)."""
    sparse = [w for w in caught if "have less than 2 trials" in str(w.message)]
    for w in caught:
        text = str(w.message)
        if w in sparse or "importances of params to achieve low" in text:
            continue  # the target's sign is handled: lower is better
        warnings.warn(text, w.category, stacklevel=3)
    if sparse:
        warnings.warn(
            f"importance: {len(sparse)} parameters have values seen in fewer than 2 trials; "
            "their importance is rough",
            UserWarning,
            stacklevel=3,
        )


def write_study_plots(study: optuna.Study, out_dir: Path, *, log: TextIO) -> list[Path]:
    """Write history-*.png (or history.png), pareto.png and importance*.png of ``study`` into
    ``out_dir``; a plot Optuna cannot draw yet (too few trials) is skipped with a line in
    ``log``. Returns the paths written."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.figure import Figure

    written: list[Path] = []
    targets = _targets(study)
    single = len(targets) == 1

    def save(stem: str, make: Callable[[], Any]) -> None:
        try:
            made = make()
        except (ValueError, RuntimeError, ZeroDivisionError) as exc:
            log.write(f"skipped {stem}: {exc}\n")
            plt.close("all")
            return
        fig = made if isinstance(made, Figure) else plt.gcf()
        if not isinstance(made, Figure):
            fig.set_size_inches(9, 5.5)
        fig.tight_layout()
        path = out_dir / f"{stem}.png"
        fig.savefig(path, dpi=110)
        plt.close("all")
        written.append(path)

    for index, (key, name, value) in enumerate(targets):
        suffix = "" if single else f"-{key}"
        save(f"history{suffix}", partial(_history_figure, study, name, value, index))
        save(f"importance{suffix}", partial(_importance_figure, study, name, value, index))
    if not single:
        names: Sequence[str] = [n for _, n, _ in targets]
        save("pareto", lambda: _pareto(study, targets, names))
    return written


def _pareto(study: optuna.Study, targets: list[Target], names: Sequence[str]) -> Any:
    from optuna.visualization import matplotlib as ovm

    if all(t[0] != "memory" for t in targets) or study.metric_names is not None:
        return ovm.plot_pareto_front(study, target_names=list(names))
    return ovm.plot_pareto_front(  # a study made before: memory from bytes to GiB
        study, targets=lambda t: tuple(v(t) for _, _, v in targets), target_names=list(names)
    )
