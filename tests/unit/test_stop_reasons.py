"""Budget stops say "budget reached", and a checkpoint saved before they did still loads."""

from __future__ import annotations

from worker.model.state import StopReason


def test_both_budget_stops_say_budget_reached_and_which_budget() -> None:
    assert str(StopReason.BUDGET_SPENT) == "budget reached (the run's budgetUsd)"
    assert str(StopReason.MONTHLY_BUDGET_SPENT) == (
        "budget reached (the installation's monthly budget)"
    )


def test_the_earlier_name_of_the_budget_stop_still_reads() -> None:
    assert StopReason("budgetUsd spent") is StopReason.BUDGET_SPENT
