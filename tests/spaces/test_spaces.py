"""Tests of the search spaces (``spaces``, docs/tuning.md).

A space turns an Optuna trial into configuration tables: every draft it returns parses with
``palm.parse_config``, and a draw it refuses (``spaces.Infeasible``) really breaks a rule of
the plan (checked here independently from the parameters). One decision is one parameter with
one distribution in every trial (no ``pp|tp=8`` names), so TPE can learn across the space.
"""

from __future__ import annotations

import itertools
import math
import warnings
from collections import Counter
from pathlib import Path
from typing import Any

import optuna
import pytest

import palm
from palm.config import load_config
from palm.errors import ConfigError
from spaces import (
    Infeasible,
    SpaceContext,
    divisors,
    enumerate_space,
    factorizations,
    lehmer_to_permutation,
    permutation_to_lehmer,
    space_from_table,
)

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "examples"
WAFER = EXAMPLES / "wafer-t18b.toml"  # t-18b on 5x4 tiles of 4x4 cores (320 cores), gb 64
DGX = EXAMPLES / "t18b-dgx-a100.toml"  # t-18b on 256 A100s (TP=8 PP=1 DP=32), gb 1024
GRAYSKULL = EXAMPLES / "grayskull-resnet50.toml"  # ResNet-50 on 120 cores: conv / pool / linear

optuna.logging.set_verbosity(optuna.logging.WARNING)

#: every part of a space, on a mesh
FULL_MESH: dict[str, Any] = {
    "parallelism": True,
    "splits": ["linear_split"],
    "micro_batch": [1, 2, 4, 8],
    "schedule": ["gpipe", "1f1b", "interleaved-1f1b"],
    "interleave": [2, 4],
    "recompute": ["none", "selective", "full"],
    "zero": [0, 1, 2, 3],
    "sequence_parallel": [True, False],
    "tp_group": ["compact", "strided"],
    "layout": ["line", "s-shape", "explicit"],
    "inter_group": ["allreduce-broadcast", "reduce-adapters"],
    "adapters": True,
    "hardware": {
        "sram_per_core_mib": {"low": 1, "high": 8},
        "inter_tile_link_gbps": {"low": 64, "high": 1024, "log": True},
    },
}

#: the same on a GPU cluster (layout and inter-group parts are no-ops there)
FULL_GPU: dict[str, Any] = {
    **FULL_MESH,
    "hardware": {"inter_node_bandwidth_gbps": {"low": 10, "high": 100}},
}


def _context(path: Path, overrides: list[str] | None = None) -> SpaceContext:
    return SpaceContext.of(load_config(path, overrides=overrides or []))


def _value(params: dict[str, Any], name: str, default: int) -> int:
    """A degree from a trial's parameters (``log2_<name>`` or ``name``), else ``default``."""
    if f"log2_{name}" in params:
        return 1 << int(params[f"log2_{name}"])
    return int(params.get(name, default))


def _assert_genuine(exc: Infeasible, params: dict[str, Any], ctx: SpaceContext) -> None:
    """Recompute, from the parameters alone, that the refused draw breaks the rule it names."""
    par = ctx.base.parallelism
    n, gb = ctx.devices, ctx.global_batch
    tp, pp = _value(params, "tp", par.tp), _value(params, "pp", par.pp)
    ranks = n // (tp * pp) if n % (tp * pp) == 0 else 0
    cp = _value(params, "cp", 1)
    dp = ranks // cp if ranks and ranks % cp == 0 else 0
    if exc.field == "pp":
        assert n % (tp * pp) or gb % ranks or pp > ctx.blocks, (exc, params)
    elif exc.field == "cp":
        seq = ctx.base.model.seq_len
        assert ranks % cp or gb % (ranks // cp) or seq % (2 * cp), (exc, params)
    elif exc.field == "micro_batch":
        assert (gb // dp) % _value(params, "micro_batch", 1), (exc, params)
    elif exc.field == "interleave":
        m = gb // (dp * _value(params, "micro_batch", ctx.base.training.micro_batch))
        v = _value(params, "interleave", 1)
        assert ctx.blocks % (pp * v) or m % pp, (exc, params)
    elif exc.field == "layout":
        assert pp == 1 or (tp * dp) % 16, (exc, params)  # tiles of 4 x 4 cores
    elif exc.field in ("ep", "etp"):
        m_ = ctx.base.model
        ep, etp, stage = _value(params, "ep", 1), _value(params, "etp", 1), tp * cp * dp
        bad_ep = m_.experts % ep or stage % ep
        assert bad_ep or m_.moe_ffn_hidden % etp or (stage // ep) % etp, (exc, params)
    else:
        raise AssertionError(f"unexpected infeasible field {exc.field}")


def _sample_random(
    table: dict[str, Any], ctx: SpaceContext, n: int, seed: int = 0
) -> tuple[optuna.Study, list[dict[str, Any]]]:
    """``n`` drafts of random draws; every refused draw in between is checked to be really
    infeasible and told to the study as pruned."""
    space = space_from_table(table, ctx)
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=seed))
    drafts = []
    for _ in range(30 * n):
        if len(drafts) == n:
            break
        trial = study.ask()
        try:
            drafts.append(space.sample(trial, ctx))
        except Infeasible as exc:
            _assert_genuine(exc, trial.params, ctx)
            study.tell(trial, state=optuna.trial.TrialState.PRUNED)
            continue
        study.tell(trial, 0.0)
    assert len(drafts) == n, f"only {len(drafts)} feasible draws of {len(study.trials)}"
    return study, drafts


def _parse_all(drafts: list[dict[str, Any]]) -> list[palm.SimConfig]:
    configs, errors = [], []
    for i, draft in enumerate(drafts):
        try:
            configs.append(palm.parse_config(draft))
        except ConfigError as exc:
            errors.append(f"draft {i}: {exc}")
    assert not errors, f"{len(errors)} of {len(drafts)} drafts invalid, e.g. {errors[:3]}"
    return configs


def _param_kinds(study: optuna.Study) -> Counter[str]:
    return Counter(
        name.split("|")[0].removeprefix("log2_") for t in study.trials for name in t.params
    )


# ------------------------------------------------------------------------------------------
# combinatorics
# ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("n", [*range(1, 101), 320, 1024, 5040])
def test_divisors_are_exactly_the_divisors_in_increasing_order(n: int) -> None:
    assert divisors(n) == [d for d in range(1, n + 1) if n % d == 0]


@pytest.mark.parametrize(("n", "parts"), [(1, 1), (1, 3), (12, 1), (12, 2), (12, 3), (64, 4)])
def test_factorizations_are_all_ordered_factorizations(n: int, parts: int) -> None:
    got = factorizations(n, parts)
    brute = [f for f in itertools.product(divisors(n), repeat=parts) if math.prod(f) == n]
    assert len(got) == len(set(got)), "duplicates"
    assert sorted(got) == sorted(brute)
    assert all(len(f) == parts and math.prod(f) == n for f in got)


def test_factorization_count_matches_the_stars_and_bars_formula() -> None:
    # 12 = 2^2 * 3 in 3 ordered factors: C(2+2, 2) * C(1+2, 2) = 6 * 3
    assert len(factorizations(12, 3)) == 18
    # 320 = 2^6 * 5 in 4 ordered factors: C(6+3, 3) * C(1+3, 3) = 84 * 4
    assert len(factorizations(320, 4)) == 336


def test_lehmer_code_round_trips_for_every_permutation_of_five() -> None:
    seen = set()
    for perm in itertools.permutations(range(5)):
        code = permutation_to_lehmer(perm)
        assert all(0 <= d <= 4 - i for i, d in enumerate(code)), code
        assert lehmer_to_permutation(code) == list(perm)
        seen.add(tuple(code))
    assert len(seen) == math.factorial(5)  # a bijection onto the valid codes
    for code in itertools.product(*(range(5 - i) for i in range(5))):
        assert permutation_to_lehmer(lehmer_to_permutation(code)) == list(code)


def test_lehmer_code_rejects_digits_out_of_range() -> None:
    with pytest.raises(ValueError, match="Lehmer digit"):
        lehmer_to_permutation([0, 4, 0, 0, 0])  # digit 1 must be in 0..3
    with pytest.raises(ValueError, match="Lehmer digit"):
        lehmer_to_permutation([0, 0, 0, 0, 1])  # the last digit is always 0


def test_changing_one_lehmer_digit_by_one_swaps_exactly_two_elements() -> None:
    """Locality of the encoding: a step of +-1 in digit i trades the two elements next to each
    other among those still free at position i, so the permutations differ in exactly two
    positions (one of them i) by a transposition, whichever digit changes."""
    n = 5
    steps = 0
    for code in itertools.product(*(range(n - i) for i in range(n))):
        perm = lehmer_to_permutation(code)
        for i in range(n - 1):
            for delta in (-1, 1):
                d = code[i] + delta
                if not 0 <= d < n - i:
                    continue
                other = lehmer_to_permutation([*code[:i], d, *code[i + 1 :]])
                diff = [p for p in range(n) if perm[p] != other[p]]
                assert len(diff) == 2 and diff[0] == i, (code, i, delta, perm, other)
                a, b = diff
                assert perm[a] == other[b] and perm[b] == other[a]
                # adjacent in value among the elements at positions >= i
                lo, hi = sorted((perm[a], perm[b]))
                assert not any(lo < x < hi for x in perm[i:])
                steps += 1
    # every code, every digit, every step that stays in range: 120 * 2 (r - 1) / r per digit
    assert steps == sum(120 * 2 * (r - 1) // r for r in (5, 4, 3, 2)) == 652


# ------------------------------------------------------------------------------------------
# sampled drafts are valid configurations
# ------------------------------------------------------------------------------------------


def test_every_random_draft_on_the_wafer_is_a_valid_configuration() -> None:
    ctx = _context(WAFER)
    assert ctx.mesh and ctx.devices == 320
    study, drafts = _sample_random(FULL_MESH, ctx, 200)
    configs = _parse_all(drafts)
    for config in configs:
        par = config.parallelism
        assert par.tp * par.pp * par.dp == 320
        assert ctx.global_batch % (par.dp * config.training.micro_batch) == 0
        assert 48 % par.tp == 0  # t-18b has 48 heads
    kinds = _param_kinds(study)
    # the space really was explored: layouts including explicit ones, adapters, knobs
    layouts = Counter(c.placement.layout for c in configs)
    assert set(layouts) == {"line", "s-shape", "explicit"}, layouts
    assert kinds["lehmer0"] > 0 and kinds["adapters"] > 0 and kinds["zero"] >= 200
    assert {c.communication.inter_group for c in configs} == set(FULL_MESH["inter_group"])
    srams = [d["hardware"]["sram_per_core_mib"] for d in drafts]
    assert all(1 <= s <= 8 for s in srams) and len(set(srams)) > 100


def test_every_random_draft_on_a_gpu_cluster_is_a_valid_configuration() -> None:
    ctx = _context(DGX, ["training.global_batch=1024"])
    assert not ctx.mesh and ctx.devices == 256 and ctx.global_batch == 1024
    study, drafts = _sample_random(FULL_GPU, ctx, 200)
    configs = _parse_all(drafts)
    for config in configs:
        par = config.parallelism
        assert par.tp * par.pp * par.dp == 256
        assert 1024 % (par.dp * config.training.micro_batch) == 0
        if par.schedule == "interleaved-1f1b":
            assert par.interleave > 1 and 40 % (par.pp * par.interleave) == 0
        assert config.placement.layout != "explicit"
    kinds = _param_kinds(study)
    assert kinds["interleave"] > 0, "interleaved 1F1B never proposed on 256 GPUs"
    assert "layout" not in kinds and "lehmer0" not in kinds and "adapters" not in kinds


def test_every_random_draft_with_operator_splits_is_a_valid_configuration() -> None:
    ctx = _context(GRAYSKULL)
    table = {
        "parallelism": True,
        "splits": ["linear_split", "conv_split", "pool_split"],
        "micro_batch": [1, 2, 4, 8],
        "layout": ["line", "s-shape", "explicit"],
    }
    study, drafts = _sample_random(table, ctx, 100)
    configs = _parse_all(drafts)
    kinds = _param_kinds(study)
    assert kinds["conv_split"] > 0 and kinds["pool_split"] > 0 and kinds["linear_split"] > 0
    for config in configs:
        par = config.parallelism
        group = par.tp * par.dp
        for split in (par.linear_split, par.conv_split, par.pool_split):
            assert not split or math.prod(split) == group


def test_parallelism_restrictions_are_respected() -> None:
    ctx = _context(WAFER)
    table = {"parallelism": {"tp": [4, 8], "pp": [10, 20]}, "micro_batch": [1, 2]}
    _, drafts = _sample_random(table, ctx, 60)
    _parse_all(drafts)
    pairs = {(d["parallelism"]["tp"], d["parallelism"]["pp"]) for d in drafts}
    assert pairs <= {(4, 10), (4, 20), (8, 10), (8, 20)} and len(pairs) >= 3


def test_searched_categorical_parameters_have_distinct_choices() -> None:
    ctx = _context(WAFER)  # base micro_batch = 1
    study, _ = _sample_random({"parallelism": True}, ctx, 20)
    for t in study.trials:
        for name, dist in t.distributions.items():
            if isinstance(dist, optuna.distributions.CategoricalDistribution):
                assert len(set(dist.choices)) == len(dist.choices) >= 2, (name, dist)


# ------------------------------------------------------------------------------------------
# explicit stage-to-tile bindings
# ------------------------------------------------------------------------------------------


def test_explicit_layout_stage_tiles_cover_every_tile_exactly_once() -> None:
    ctx = _context(WAFER)
    table = {"parallelism": True, "micro_batch": [1, 2], "layout": ["line", "explicit"]}
    _, drafts = _sample_random(table, ctx, 150, seed=3)
    explicit = 0
    for draft in drafts:
        par = draft["parallelism"]
        if draft["placement"]["layout"] != "explicit":
            assert draft["placement"]["stage_tiles"] == []
            continue
        # explicit is only kept when a stage fills whole tiles and PP > 1
        assert par["pp"] > 1 and (par["tp"] * par["dp"]) % 16 == 0
        explicit += 1
        tiles = draft["placement"]["stage_tiles"]
        assert len(tiles) == par["pp"]
        flat = [t for stage in tiles for t in stage]
        assert sorted(flat) == list(range(20)), tiles  # 5 x 4 tiles, each exactly once
        assert {len(stage) * 16 for stage in tiles} == {par["tp"] * par["dp"]}
        palm.parse_config(draft)
    assert explicit >= 20


def test_explicit_only_layout_never_crashes_when_the_plan_cannot_be_bound() -> None:
    ctx = _context(WAFER)
    table = {"parallelism": True, "micro_batch": [1, 2], "layout": ["explicit"]}
    _, drafts = _sample_random(table, ctx, 50, seed=3)  # raises today
    _parse_all(drafts)
    for draft in drafts:
        if draft["placement"]["layout"] == "explicit":
            flat = sorted(t for stage in draft["placement"]["stage_tiles"] for t in stage)
            assert flat == list(range(20))


def test_explicit_layout_assigns_groups_by_the_lehmer_permutation() -> None:
    """With all Lehmer digits 0 the binding is the line order; each digit permutes groups."""
    ctx = _context(WAFER)
    space = space_from_table(
        {"parallelism": {"tp": [8], "pp": [20]}, "layout": ["line", "explicit"]}, ctx
    )
    identity = {f"lehmer{i}": 0 for i in range(19)}
    fixed = optuna.trial.FixedTrial({"layout": "explicit", **identity})
    draft = space.sample(fixed, ctx)  # type: ignore[arg-type]
    line_order = [r * 4 + c for c in range(4) for r in range(5)]
    assert draft["placement"]["stage_tiles"] == [[t] for t in line_order]
    swapped = optuna.trial.FixedTrial({"layout": "explicit", **identity, "lehmer18": 1})
    tiles = space.sample(swapped, ctx)["placement"]["stage_tiles"]  # type: ignore[arg-type]
    assert tiles[:18] == [[t] for t in line_order[:18]]
    assert tiles[18:] == [[line_order[19]], [line_order[18]]]


def test_lehmer_digits_keep_one_range_and_scale_to_shallower_pipelines() -> None:
    """Digit i is drawn in 0 .. T-1-i (T = 20 tiles) at every depth and scaled to the depth's
    range 0 .. PP-1-i by d (PP - i) // (T - i): 0 stays 0 (line order) and the largest digit
    maps to the largest (the reversed order)."""
    ctx = _context(WAFER)
    space = space_from_table(
        {"parallelism": {"tp": [8], "pp": [10]}, "layout": ["line", "explicit"]}, ctx
    )
    line_order = [r * 4 + c for c in range(4) for r in range(5)]
    groups = [line_order[2 * s : 2 * s + 2] for s in range(10)]  # dp = 4: 2 tiles a stage
    top = {f"lehmer{i}": 19 - i for i in range(9)}
    fixed = optuna.trial.FixedTrial({"layout": "explicit", **top})
    draft = space.sample(fixed, ctx)  # type: ignore[arg-type]
    assert draft["placement"]["stage_tiles"] == groups[::-1]
    assert [19 * 10 // 20, 18 * 9 // 19] == [9, 8]  # the scaling, by hand, for i = 0 and 1
    study = optuna.create_study()
    trial = study.ask()
    half_tile = {"parallelism": {"tp": [2], "pp": [40]}, "layout": ["explicit"]}
    with pytest.raises(Infeasible, match="whole tiles"):  # stages of 8 cores: half a tile
        space_from_table(half_tile, ctx).sample(trial, ctx)


def test_enumerating_a_space_visits_every_draw_once() -> None:
    ctx = _context(WAFER, ["training.global_batch=32"])
    table = {"parallelism": {"tp": [4, 8]}, "micro_batch": [1, 2], "recompute": ["full", "none"]}
    draws = list(enumerate_space(space_from_table(table, ctx), ctx))
    params = [tuple(sorted(d.params.items())) for d in draws]
    assert len(set(params)) == len(params)  # each draw once
    feasible = [d for d in draws if d.draft is not None]
    # by hand: tp 4 -> dp = 80 / pp; pp in 5..40 with dp | 32 -> pp 5 (dp 16), 10 (8),
    # 20 (4), 40 (2); tp 8 -> dp = 40 / pp: pp 5 (8), 10 (4), 20 (2), 40 (1). 8 plans, each with
    # micro-batch 1 or 2 (per-replica batch 32 / dp >= 2, divisible by 2) and 2 recompute modes
    assert len(feasible) == 8 * 2 * 2
    for d in feasible:
        palm.parse_config(d.draft)
    for d in draws:
        if d.infeasible is not None:
            _assert_genuine(d.infeasible, d.params, ctx)


# ------------------------------------------------------------------------------------------
# parameter names and distributions
# ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("path", "overrides", "table"),
    [
        (WAFER, [], FULL_MESH),
        (DGX, ["training.global_batch=1024"], FULL_GPU),
    ],
    ids=["wafer", "dgx-a100"],
)
def test_a_parameter_name_never_gets_two_distributions_under_tpe(
    path: Path, overrides: list[str], table: dict[str, Any]
) -> None:
    ctx = _context(path, overrides)
    space = space_from_table(table, ctx)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        sampler = optuna.samplers.TPESampler(
            seed=0, multivariate=True, group=True, n_startup_trials=10
        )
    study = optuna.create_study(direction="maximize", sampler=sampler)

    def objective(trial: optuna.Trial) -> float:
        try:
            draft = space.sample(trial, ctx)
        except Infeasible as exc:
            trial.set_constraint("invalid_choices", 1.0)
            raise optuna.TrialPruned(str(exc)) from None
        par = draft["parallelism"]
        return float(par["tp"] + par["pp"] + draft["training"]["micro_batch"])

    # Optuna raises ValueError when a name's distribution changes kind or choices
    study.optimize(objective, n_trials=100, catch=())
    assert len(study.get_trials(states=(optuna.trial.TrialState.COMPLETE,))) >= 20
    seen: dict[str, optuna.distributions.BaseDistribution] = {}
    for t in study.trials:
        for name, dist in t.distributions.items():
            assert seen.setdefault(name, dist) == dist, (name, seen[name], dist)
    # one decision, one parameter: no name records what an earlier draw was (the operator
    # splits, whose choices differ per group size, are the documented exception)
    kinds = {name.removeprefix("log2_") for name in seen}
    assert {"tp", "pp", "micro_batch", "schedule"} <= kinds, sorted(seen)
    assert all("|" not in name or name.startswith("linear_split|") for name in seen), sorted(seen)


# ------------------------------------------------------------------------------------------
# space tables
# ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("table", "field"),
    [
        ({"paralelism": True}, "space.paralelism"),
        ({"micro_batch": []}, "space.micro_batch"),
        ({"micro_batch": [0]}, "space.micro_batch"),
        ({"schedule": ["zigzag"]}, "space.schedule"),
        ({"zero": [4]}, "space.zero"),
        ({"layout": ["spiral"]}, "space.layout"),
        ({"parallelism": {"tp": [0]}}, "space.parallelism.tp"),
        ({"parallelism": {"dp": [2]}}, "space.parallelism.dp"),
        ({"adapters": 3}, "space.adapters"),
        ({"hardware": {"warp_gbps": {"low": 1, "high": 2}}}, "space.hardware.warp_gbps"),
        ({"hardware": {"sram_per_core_mib": {"low": 4, "high": 2}}}, "space.hardware"),
        ({"hardware": {"name": {"low": 1, "high": 2}}}, "space.hardware.name"),
    ],
)
def test_bad_space_tables_name_the_field(table: dict[str, Any], field: str) -> None:
    ctx = _context(WAFER)
    with pytest.raises(ConfigError) as info:
        space_from_table(table, ctx)
    assert field in str(info.value)


def test_context_parallel_and_attention_parts_propose_only_valid_plans() -> None:
    ctx = _context(DGX, ["training.global_batch=1024"])
    table = {
        "parallelism": True,
        "cp": [1, 2, 4, 8],
        "attention": ["flash", "unfused"],
        "micro_batch": [1, 2],
    }
    study, drafts = _sample_random(table, ctx, 120)
    configs = _parse_all(drafts)
    cps = Counter(c.parallelism.cp for c in configs)
    assert set(cps) == {1, 2, 4, 8}, cps  # t-18b: seq 2048, every cp divides it in 2 cp chunks
    for config in configs:
        par = config.parallelism
        assert par.tp * par.pp * par.dp * par.cp == 256
        assert 1024 % (par.dp * config.training.micro_batch) == 0
    assert {c.model.attention for c in configs} == {"flash", "unfused"}
    assert _param_kinds(study)["cp"] > 0
    # on a mesh, context parallelism is not offered
    mesh = _context(WAFER)
    _, mesh_drafts = _sample_random({"parallelism": True, "cp": [1, 2]}, mesh, 20)
    assert {c.parallelism.cp for c in _parse_all(mesh_drafts)} == {1}
