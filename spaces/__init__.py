"""Search spaces: turn an Optuna trial into a simulator configuration (docs/tuning.md).

A :class:`Space` is a tuple of parts (:mod:`spaces.parts`) applied in order to a draft of the
study's base configuration; a draw whose choices contradict each other raises
:class:`Infeasible`. :func:`space_from_table`
builds one from a study file's ``[space]`` table; :func:`check_space` refuses one that cannot
give a valid trial. The rules a draw obeys are the simulator's (:mod:`palm.feasibility`).
"""

from palm.feasibility import divisors
from spaces._math import factorizations, lehmer_to_permutation, permutation_to_lehmer
from spaces.checks import check_sampler, check_space
from spaces.context import SpaceContext
from spaces.enumerate import ContinuousSpace, Draw, count_configurations, enumerate_space
from spaces.parts import (
    Choice,
    ContextParallel,
    HardwareKnob,
    Infeasible,
    InterGroup,
    Layout,
    MicroBatch,
    OpSplit,
    Parallelism,
    Schedule,
    SpacePart,
)
from spaces.space import SPACE_KEYS, Space, space_from_table

__all__ = [
    "SPACE_KEYS",
    "Choice",
    "HardwareKnob",
    "Infeasible",
    "ContinuousSpace",
    "Draw",
    "enumerate_space",
    "count_configurations",
    "InterGroup",
    "Layout",
    "MicroBatch",
    "ContextParallel",
    "OpSplit",
    "Parallelism",
    "Schedule",
    "Space",
    "SpaceContext",
    "SpacePart",
    "divisors",
    "factorizations",
    "lehmer_to_permutation",
    "permutation_to_lehmer",
    "space_from_table",
    "check_space",
    "check_sampler",
]
