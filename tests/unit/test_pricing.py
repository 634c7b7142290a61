"""What an agent call counts towards the budgets: its own cost, its tokens priced, or $0 said."""

from __future__ import annotations

import pytest

from worker.agents.base import AgentOutcome
from worker.agents.pricing import HIGHEST, PRICES, call_cost, price_for, with_cost


def outcome(**fields: object) -> AgentOutcome:
    return AgentOutcome(exit_code=0, timed_out=False, duration_s=1.0, **fields)  # type: ignore[arg-type]


def test_the_runners_own_cost_is_used_as_is() -> None:
    given = outcome(cost_usd=0.42, input_tokens=10**9, output_tokens=10**9)
    assert call_cost(given, "claude-sonnet-4-5") == call_cost(given, None)
    assert call_cost(given, None).usd == 0.42 and call_cost(given, None).note is None
    assert with_cost(given, call_cost(given, None)) is given


@pytest.mark.parametrize(
    ("model", "usd"),
    [
        ("claude-sonnet-4-5-20250929", 3.0 + 15.0),
        ("claude-opus-4-5", 5.0 + 25.0),
        ("opus", 15.0 + 75.0),
        ("claude-haiku-4-5", 1.0 + 5.0),
        ("gpt-5-codex", 1.25 + 10.0),
        (None, HIGHEST.input_per_mtok + HIGHEST.output_per_mtok),  # unknown: never under
        ("some-local-model", 15.0 + 75.0),
    ],
)
def test_tokens_without_a_cost_are_priced_per_million_from_the_table(
    model: str | None, usd: float
) -> None:
    given = outcome(input_tokens=1_000_000, output_tokens=1_000_000)
    cost = call_cost(given, model)
    assert cost.usd == pytest.approx(usd)
    assert cost.note is not None and "priced at" in cost.note
    assert with_cost(given, cost).cost_usd == pytest.approx(usd)


def test_nothing_reported_counts_zero_and_says_so() -> None:
    cost = call_cost(outcome(), "sonnet")
    assert cost.usd == 0.0
    assert cost.note == (
        "the agent reported neither its cost nor its tokens: this call counts $0 to budgets"
    )
    assert with_cost(outcome(), cost).cost_usd is None  # the record still says "not reported"


def test_the_table_prices_the_most_specific_name_first() -> None:
    names = [name for name, _ in PRICES]
    assert names.index("opus-4-5") < names.index("opus")
    assert price_for("CLAUDE-OPUS-4-5") == price_for("opus-4-5")
