"""The candidates a model-based sampler chooses from, and their features.

:func:`candidate_pool` lists the distinct configurations (drafts) of a study's space: every one
when the space is discrete and has at most ``limit`` draws (:func:`spaces.enumerate_space`),
else a seeded random sample of its draws. Each candidate keeps the Optuna parameters of the
draw that made it (what a trial must suggest to get it) and a row of numeric features that a
surrogate model reads (:class:`Encoder`).

Features are read off the configuration, not off the parameters, so that they mean the same
in every draw (``dp`` is a feature although no parameter draws it; a schedule that a draw at
PP = 1 does not draw is still a feature): each scalar field of the draft that varies over the
pool is one column, a positive number as its base-2 logarithm (degrees, sizes, bandwidths: a
doubling is one step wherever it happens) scaled to 0..1 over the pool, any other value
(schedules, layouts, booleans) one-hot with each column ``1/sqrt(2)`` (two different choices are
at distance 1). A list-valued field (an explicit stage binding) is described by the Lehmer
digits that drew it (parameters ``lehmer<i>``, nearby codes nearby placements), scaled to 0..1.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import optuna
from numpy.typing import NDArray
from optuna.distributions import (
    BaseDistribution,
    CategoricalDistribution,
    FloatDistribution,
    IntDistribution,
)

from search.study_file import StudySpec
from spaces import ContinuousSpace, Infeasible, enumerate_space
from spaces.parts import Draft

__all__ = [
    "Candidates",
    "Encoder",
    "candidate_pool",
    "neighbours",
    "params_key",
    "replay_draft",
]

#: draws enumerated before a space counts as too large to list (about 0.2 ms a draw)
POOL_LIMIT = 20_000
#: distinct configurations drawn at random from a space too large (or continuous) to list
POOL_SAMPLE = 4_000


def params_key(params: Mapping[str, Any]) -> str:
    """A hashable, order-free key of a draw's parameters."""
    return json.dumps(sorted(params.items()), default=str)


def _scalars(draft: Draft) -> Iterator[tuple[str, Any]]:
    for section, table in draft.items():
        if isinstance(table, dict):
            for name, value in table.items():
                if not isinstance(value, (list, dict, tuple)):
                    yield f"{section}.{name}", value


def _varying(drafts: Sequence[Draft]) -> list[str]:
    """The scalar fields (``section.name``) whose value is not the same in every draft."""
    if not drafts:
        return []
    first = drafts[0]
    names: set[str] = set()
    for draft in drafts[1:]:
        for section, table in draft.items():
            if table == first.get(section) or not isinstance(table, dict):
                continue
            base = first.get(section, {})
            names.update(
                f"{section}.{k}"
                for k, v in table.items()
                if not isinstance(v, (list, dict, tuple)) and base.get(k, v) != v or k not in base
            )
    return sorted(names)


def _positive_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0


@dataclass(frozen=True)
class _Column:
    """One feature group: a numeric field (``lo``..``hi`` after the transform) or the
    categories of a field, one column each."""

    name: str
    log: bool = False
    lo: float = 0.0
    hi: float = 1.0
    categories: tuple[str, ...] = ()

    @property
    def width(self) -> int:
        return len(self.categories) or 1


@dataclass(frozen=True)
class Encoder:
    """Turns drafts (and their parameters) into feature rows (see the module's docstring)."""

    columns: tuple[_Column, ...]
    digits: tuple[_Column, ...]  # Lehmer digits of explicit stage bindings

    @classmethod
    def fit(cls, drafts: Sequence[Draft], params: Sequence[Mapping[str, Any]]) -> Encoder:
        columns = []
        for name in _varying(drafts):
            section, field_ = name.split(".", 1)
            seen: list[Any] = [d.get(section, {}).get(field_) for d in drafts]
            if all(_positive_number(v) for v in seen):
                logs = [math.log2(v) for v in seen]
                columns.append(_Column(name, log=True, lo=min(logs), hi=max(logs)))
            elif all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in seen):
                numbers = [float(v) for v in seen]
                columns.append(_Column(name, lo=min(numbers), hi=max(numbers)))
            else:
                columns.append(_Column(name, categories=tuple(sorted({repr(v) for v in seen}))))
        digits = sorted({k for p in params for k in p if k.startswith("lehmer")})
        spans = {k: [float(p[k]) for p in params if k in p] for k in digits}
        return cls(
            tuple(columns),
            tuple(_Column(k, lo=min(spans[k]), hi=max(spans[k])) for k in digits),
        )

    @property
    def width(self) -> int:
        return max(1, sum(c.width for c in (*self.columns, *self.digits)))

    def row(self, draft: Draft, params: Mapping[str, Any]) -> NDArray[np.float64]:
        return np.asarray(self.rows([draft], [params])[0], dtype=float)

    def rows(
        self, drafts: Sequence[Draft], params: Sequence[Mapping[str, Any]]
    ) -> NDArray[np.float64]:
        """The feature rows of ``drafts`` (made by ``params``), column by column."""
        out = np.zeros((len(drafts), self.width))
        i = 0
        for col in self.columns:
            section, name = col.name.split(".", 1)
            values = [d.get(section, {}).get(name) for d in drafts]
            if col.categories:
                where = {c: k for k, c in enumerate(col.categories)}
                for r, v in enumerate(values):
                    k = where.get(repr(v))
                    if k is not None:
                        out[r, i + k] = 1.0 / math.sqrt(2.0)
            elif col.hi > col.lo:
                for r, v in enumerate(values):
                    if isinstance(v, (int, float)) and not isinstance(v, bool):
                        x = math.log2(v) if col.log and v > 0 else float(v)
                        out[r, i] = (x - col.lo) / (col.hi - col.lo)
            i += col.width
        for col in self.digits:
            if col.hi > col.lo:
                for r, p in enumerate(params):
                    if col.name in p:
                        out[r, i] = (float(p[col.name]) - col.lo) / (col.hi - col.lo)
            i += 1
        return out


@dataclass
class Candidates:
    """The pool: parameters, drafts and features of each distinct configuration;
    ``complete`` when it is the whole space (so its size is the space's)."""

    params: list[dict[str, Any]]
    drafts: list[Draft]
    encoder: Encoder
    features: NDArray[np.float64]
    complete: bool
    index: dict[str, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.index:
            self.index = {params_key(p): i for i, p in enumerate(self.params)}

    def __len__(self) -> int:
        return len(self.params)

    def add(self, params: dict[str, Any], draft: Draft) -> int:
        """Append a configuration met outside the pool (a trial's); returns its index."""
        self.extend([(params, draft)])
        return self.index[params_key(params)]

    def extend(self, items: Sequence[tuple[dict[str, Any], Draft]]) -> None:
        """Append the configurations of ``items`` that the pool does not hold."""
        new: list[tuple[dict[str, Any], Draft]] = []
        for params, draft in items:
            key = params_key(params)
            if key not in self.index:
                self.index[key] = len(self.params) + len(new)
                new.append((params, draft))
        if not new:
            return
        self.params.extend(p for p, _ in new)
        self.drafts.extend(d for _, d in new)
        rows = self.encoder.rows([d for _, d in new], [p for p, _ in new])
        self.features = np.vstack([self.features, rows])


def _distinct(
    draws: Iterable[tuple[dict[str, Any], Draft | None]],
) -> list[tuple[dict[str, Any], Draft]]:
    found: dict[str, tuple[dict[str, Any], Draft]] = {}
    for params, draft in draws:
        if draft is not None:
            found.setdefault(json.dumps(draft, sort_keys=True, default=str), (params, draft))
    return list(found.values())


def _enumerated(spec: StudySpec, limit: int) -> list[tuple[dict[str, Any], Draft]] | None:
    draws = []
    try:
        for i, d in enumerate(enumerate_space(spec.space, spec.context)):
            if i >= limit:
                return None
            draws.append((d.params, d.draft))
    except ContinuousSpace:
        return None
    return _distinct(draws)


def _sampled(spec: StudySpec, size: int, seed: int) -> list[tuple[dict[str, Any], Draft]]:
    """Up to ``size`` distinct drafts of seeded random draws (at most ``20 size`` tries)."""
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=seed))
    draws = []
    for _ in range(20 * size):
        trial = study.ask()
        try:
            draft: Draft | None = spec.space.sample(trial, spec.context)
        except Infeasible:
            draft = None
        study.tell(trial, state=optuna.trial.TrialState.PRUNED)
        draws.append((dict(trial.params), draft))
        if draft is not None and len(draws) % 64 == 0 and len(_distinct(draws)) >= size:
            break
    return _distinct(draws)[:size]


def candidate_pool(
    spec: StudySpec, *, seed: int = 0, limit: int = POOL_LIMIT, sample: int = POOL_SAMPLE
) -> Candidates:
    """The pool of ``spec``'s space (see the module's docstring)."""
    listed = _enumerated(spec, limit)
    chosen = listed if listed is not None else _sampled(spec, sample, seed)
    params = [p for p, _ in chosen]
    drafts = [d for _, d in chosen]
    encoder = Encoder.fit(drafts, params)
    return Candidates(params, drafts, encoder, encoder.rows(drafts, params), listed is not None)


class _Fixed:
    """Duck-types the ``suggest_*`` methods of an Optuna trial: returns given parameters."""

    def __init__(self, params: Mapping[str, Any]) -> None:
        self.params = params

    def _get(self, name: str) -> Any:
        if name not in self.params:
            raise KeyError(name)
        return self.params[name]

    def suggest_categorical(self, name: str, choices: Sequence[Any]) -> Any:
        return self._get(name)

    def suggest_int(self, name: str, low: int, high: int, **kwargs: Any) -> int:
        return int(self._get(name))

    def suggest_float(self, name: str, low: float, high: float, **kwargs: Any) -> float:
        return float(self._get(name))


def replay_draft(spec: StudySpec, params: Mapping[str, Any]) -> Draft | None:
    """The draft that ``params`` make (None: a contradictory or incomplete draw)."""
    try:
        return spec.space.sample(_Fixed(params), spec.context)  # type: ignore[arg-type]
    except (Infeasible, KeyError):
        return None


def _moves(value: Any, dist: BaseDistribution) -> list[Any]:
    """The values next to ``value`` in ``dist``: every other choice of a categorical, the
    next integers, a float moved by a tenth of its range (a factor 1.25 on a log scale)."""
    if isinstance(dist, CategoricalDistribution):
        return [c for c in dist.choices if c != value]
    if isinstance(dist, IntDistribution):
        step = dist.step or 1
        return [v for v in (value - step, value + step) if dist.low <= v <= dist.high]
    if isinstance(dist, FloatDistribution):
        if dist.log:
            moved = [value / 1.25, value * 1.25]
        else:
            moved = [value - (dist.high - dist.low) / 10, value + (dist.high - dist.low) / 10]
        return [min(dist.high, max(dist.low, v)) for v in moved if v != value]
    return []


def neighbours(
    spec: StudySpec, params: Mapping[str, Any], distributions: Mapping[str, BaseDistribution]
) -> list[tuple[dict[str, Any], Draft]]:
    """The valid draws that differ from ``params`` in one parameter moved to a value next to
    it (:func:`_moves`): how a pool that samples a large or continuous space reaches the
    configurations near its best (a move that changes which parameters are drawn is left
    out)."""
    out = []
    for name in sorted(params):
        if name not in distributions:
            continue
        for value in _moves(params[name], distributions[name]):
            moved = {**params, name: value}
            draft = replay_draft(spec, moved)
            if draft is not None:
                out.append((moved, draft))
    return out
