"""What a person sees of a result in a REPL or a notebook: a one-line repr, an HTML table and
pandas DataFrames whose numbers are the result's own fields; and ``palm.simulate`` of a path."""

from __future__ import annotations

from pathlib import Path

import pandas
import pytest

import palm
from palm.errors import ConfigError

WAFER = Path(__file__).resolve().parents[2] / "examples" / "wafer-t18b.toml"


@pytest.fixture(scope="module")
def result() -> palm.Result:
    return palm.simulate(palm.load_config(WAFER), engine="analytical")


def test_simulate_takes_a_path_as_str_or_path_with_overrides(result: palm.Result) -> None:
    by_path = palm.simulate(WAFER, engine="analytical")
    by_str = palm.simulate(str(WAFER), engine="analytical")
    assert by_path.to_dict() | {"sim_wall_s": 0} == result.to_dict() | {"sim_wall_s": 0}
    assert by_str.iteration_time_s == result.iteration_time_s
    half = palm.simulate(WAFER, engine="analytical", overrides=["training.global_batch=32"])
    assert half.micro_batches < result.micro_batches
    with pytest.raises(ConfigError, match="config file"):
        palm.simulate(WAFER.with_name("missing.toml"))
    with pytest.raises(ConfigError, match="overrides"):
        palm.simulate(palm.load_config(WAFER), overrides=["training.global_batch=32"])
    with pytest.raises(ConfigError, match="SimConfig"):
        palm.simulate(42)  # type: ignore[arg-type]


def test_the_repr_is_one_short_line_of_the_results_numbers(result: palm.Result) -> None:
    text = repr(result)
    assert "\n" not in text and len(text) < 240, text
    assert text.startswith("Result(analytical: ")
    assert f"{result.throughput_samples_per_s:,.4g} sequences/s" in text
    assert f"iteration {result.iteration_time_s:.4g} s" in text
    assert f"MFU {result.mfu:.1%}" in text and f"{result.devices} devices" in text


def test_html_shows_the_summary_and_every_stage(result: palm.Result) -> None:
    page = result._repr_html_()
    assert page.count("<table>") == 2
    assert f"{result.throughput_samples_per_s:,.4g} sequences/s" in page
    assert page.count("<tr><td>") == len(result.stages)


def test_dataframes_hold_the_fields(result: palm.Result) -> None:
    summary = result.to_dataframe()
    assert isinstance(summary, pandas.DataFrame) and len(summary) == 1
    row = summary.iloc[0]
    assert row["iteration_time_s"] == result.iteration_time_s
    assert row["memory_weights_bytes"] == result.memory.weights_bytes
    assert "stages" not in summary.columns
    stages = result.to_dataframe("stages")
    assert list(stages["stage"]) == [s.stage for s in result.stages]
    assert stages["forward_s"].tolist() == [s.forward_s for s in result.stages]
    two = pandas.concat([summary, palm.simulate(WAFER, engine="analytical").to_dataframe()])
    assert len(two) == 2  # one row per result: results compare side by side
    with pytest.raises(ConfigError, match="table"):
        result.to_dataframe("nope")
