"""The trials' cost of tuning, as every report format says it (report/tuning.tuning_cost_line)."""

from __future__ import annotations

import dataclasses

from dlprof.report.tuning import tuning_cost_line
from dlprof.results.trials import BASIS_IN_EPOCH, TrialsResult, TuningCost

COST = TuningCost(
    steps=100,
    seconds=2.0,
    own_seconds=100 / 60,
    num_workers=2,
    chosen_steps_per_s=80.0,
    own_steps_per_s=60.0,
    saved_s_per_1000=1000 / 60 - 1000 / 80,
    payback_steps=80.0,
)


def _trials(cost: TuningCost | None) -> TrialsResult:
    return TrialsResult(rounds=1, rounds_planned=1, basis=BASIS_IN_EPOCH, settings=(), cost=cost)


def test_what_tuning_cost_and_when_it_is_made_up():
    assert tuning_cost_line(_trials(COST)) == (
        "cost of tuning: the trials took 2.0 s (100 steps; 1.7 s at your own setting, 0.3 s more); num_workers=2 saves"
        " 4.2 s per 1,000 steps over your own setting (60.00 -> 80.00 steps/s, inside an epoch): made up after ~80"
        " steps"
    )


def test_a_choice_no_faster_than_your_own_setting_or_an_unknown_speed():
    slower = dataclasses.replace(COST, chosen_steps_per_s=50.0, saved_s_per_1000=-3.3, payback_steps=None)
    assert tuning_cost_line(_trials(slower)).endswith("; num_workers=2 is no faster than your own setting")
    unknown = dataclasses.replace(COST, own_seconds=None, own_steps_per_s=None, saved_s_per_1000=None)
    assert tuning_cost_line(_trials(unknown)) == (
        "cost of tuning: the trials took 2.0 s (100 steps); your own setting's speed is unknown, so what it saves is"
        " too"
    )
    assert tuning_cost_line(_trials(None)) is None
