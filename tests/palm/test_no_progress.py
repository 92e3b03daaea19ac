"""The event engine always ends (palm/engines/event/engine.py, fair.py): the plan that made it
run forever ends, a stage that waits for an event nothing will fire is reported, and the
bound the clock's stall guard takes from a run (``_EVENTS_PER_OPERATION`` events per
operation of its programs) covers every event of every shipped example. (The network-level
guards, a filling and a clock that make no progress, are in test_fair_network.py, which runs
on the compiled build too.)"""

from __future__ import annotations

import itertools
import json

import pytest

import palm
from palm.api import plan_for
from palm.engines.event import engine
from palm.engines.event.engine import _EVENTS_PER_OPERATION, _Run, run_event
from palm.errors import NoProgressError
from tests.cli_run import REPO, WAFER, run

#: T-145B on the wafer, TP=16 PP=10 DP=2, strided TP groups, per-link NoC: at global batch 16
#: and 64 the fair network's filling went round forever (batch 4 and 8 ended)
HUNG = [
    "--set",
    'model.preset="t-145b"',
    "--set",
    "parallelism.tp=16",
    "--set",
    "parallelism.pp=10",
    "--set",
    "parallelism.dp=2",
    "--set",
    'placement.tp_group="strided"',
    "--set",
    'communication.noc_granularity="link"',
]


@pytest.mark.parametrize("pure", [False, True], ids=["as installed", "pure Python"])
@pytest.mark.parametrize("batch", [16, 64])
def test_the_plan_that_ran_forever_ends(
    batch: int, pure: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    # in a child process with a generous time limit (it takes about a second of CPU; a run
    # that does not end fails the test instead of hanging it)
    if pure:
        monkeypatch.setenv("PALM_PURE_PYTHON", "1")
    done = run(
        "simulate",
        str(WAFER),
        *HUNG,
        "--set",
        f"training.global_batch={batch}",
        "--json",
        "--no-wall-time",
        timeout_s=300.0,
    )
    assert done.code == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["iteration_time_s"] > 0
    assert result["engine"] == "event"


def test_a_stage_that_waits_forever_is_reported(monkeypatch: pytest.MonkeyPatch) -> None:
    # a stuck state built on purpose: the last stage's program loses its first backward pass,
    # so the stage before it never gets that micro-batch's gradient: the simulation runs out
    # of events with stages waiting, and the engine names them instead of returning a result
    config = palm.load_config(WAFER, overrides=["training.global_batch=8"])
    plan = plan_for(config, engine="event")
    real = engine.stage_program
    last = config.parallelism.pp - 1

    def missing_a_pass(**kwargs: object) -> list[tuple[str, int, int]]:
        program = real(**kwargs)  # type: ignore[arg-type]
        if kwargs["stage"] == last:
            program.remove(next(op for op in program if op[0] == "B"))
        return program

    monkeypatch.setattr(engine, "stage_program", missing_a_pass)
    stuck = r"stage\(s\) \[0, 1, .*, 19\] of 20 never finished.*stage 0 waits in B of chunk 0, "
    with pytest.raises(NoProgressError, match=stuck + "micro-batch 0"):
        run_event(plan, record=False)


def _pipelined_examples() -> list[str]:
    """The examples that run through a pipeline plan (a GEMM product or a serving run does not)."""
    names = []
    for path in sorted((REPO / "examples").glob("*.toml")):
        config = palm.load_config(path)
        if config.model.family != "gemm" and config.training.mode != "serve":
            names.append(path.name)
    return names


@pytest.mark.parametrize("example", _pipelined_examples())
def test_a_run_schedules_fewer_events_than_its_stall_bound(example: str) -> None:
    # the clock raises after more events at one instant (without a flow ending) than
    # _EVENTS_PER_OPERATION x the run's operations; a run's whole event count stays below it
    # (at most 7.8 events per operation on these, a BERT pipeline on Grayskull)
    for granularity, model in itertools.product(("group", "link"), ("fair", "exclusive")):
        config = palm.load_config(
            REPO / "examples" / example,
            overrides=[
                f'communication.noc_granularity="{granularity}"',
                f'communication.noc_model="{model}"',
            ],
        )
        plan = plan_for(config, engine="event")
        result, _ = run_event(plan, record=False)
        run = _Run(plan, granularity=granularity, noc_model=model, record=False)
        bound = _EVENTS_PER_OPERATION * run.operations()
        assert result.events_simulated is not None
        assert 0 < result.events_simulated <= bound, (granularity, model, result.events_simulated)
