"""Every draw of a discrete space, in order: for exhaustive baselines and for screening the
whole space with a cheap engine (``search.screen``).

A draw is replayed through :meth:`spaces.Space.sample` with a stand-in trial that takes the
prescribed choice at each decision point; an odometer over the decision points (whose number
and sizes depend on earlier choices, as in Optuna's brute-force sampler) visits every draw
exactly once.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from spaces.context import SpaceContext
from spaces.parts import Draft, Infeasible

if TYPE_CHECKING:
    from spaces.space import Space

__all__ = ["Draw", "enumerate_space", "ContinuousSpace", "count_configurations"]


class ContinuousSpace(ValueError):
    """The space has a continuous knob: it cannot be enumerated."""


@dataclass(frozen=True)
class Draw:
    """One draw: the Optuna parameters (as ``study.enqueue_trial`` takes them) and the draft,
    or the reason the choices contradict each other."""

    params: dict[str, Any]
    draft: Draft | None
    infeasible: Infeasible | None


class _Replay:
    """Duck-types the ``suggest_*`` methods of :class:`optuna.Trial` that spaces use."""

    def __init__(self, path: Sequence[int]) -> None:
        self.path, self.sizes, self.params = list(path), [], {}  # type: ignore[var-annotated]

    def _choose(self, name: str, options: list[Any]) -> Any:
        i = len(self.sizes)
        k = self.path[i] if i < len(self.path) else 0
        self.sizes.append(len(options))
        self.params[name] = options[k]
        return options[k]

    def suggest_categorical(self, name: str, choices: Sequence[Any]) -> Any:
        return self._choose(name, list(choices))

    def suggest_int(
        self, name: str, low: int, high: int, *, step: int = 1, log: bool = False
    ) -> int:
        return int(self._choose(name, list(range(low, high + 1, step))))

    def suggest_float(self, name: str, *args: Any, **kwargs: Any) -> float:
        raise ContinuousSpace(f"{name} is continuous: give the knob a grid (values = [...])")


def enumerate_space(space: Space, ctx: SpaceContext) -> Iterator[Draw]:
    """Every draw of ``space``, feasible or not, each once (its parameters differ from every
    other draw's; two draws can still be the same configuration, e.g. capped adapters)."""
    path: list[int] = []
    while True:
        trial = _Replay(path)
        try:
            draft: Draft | None = space.sample(trial, ctx)  # type: ignore[arg-type]
            bad = None
        except Infeasible as exc:
            draft, bad = None, exc
        yield Draw(dict(trial.params), draft, bad)
        full = [*path, *[0] * (len(trial.sizes) - len(path))][: len(trial.sizes)]
        j = len(full) - 1
        while j >= 0 and full[j] + 1 >= trial.sizes[j]:
            j -= 1
        if j < 0:
            return
        path = [*full[:j], full[j] + 1]


def count_configurations(space: Space, ctx: SpaceContext, *, limit: int) -> int | None:
    """How many distinct drafts ``space`` has (draws that give the same draft counted once;
    never fewer than its distinct configurations), or None when it has a continuous knob or
    more than ``limit`` draws."""
    keys = set()
    try:
        for i, draw in enumerate(enumerate_space(space, ctx)):
            if i >= limit:
                return None
            if draw.draft is not None:
                keys.add(json.dumps(draw.draft, sort_keys=True, default=str))
    except ContinuousSpace:
        return None
    return len(keys)
