"""What an agent call cost: the runner's own report, else its tokens priced, else nothing known.

Budgets (`budgetUsd`, the installation's monthly budget) count what this says. Claude Code
reports its cost in its result line and that is used as is. A runner that reports tokens but
no cost is priced here, per million tokens, from the table below (list prices, USD); a model
the table does not know is priced at the table's highest rate, so a budget is never
under-counted. Input tokens include prompt-cache reads and writes, priced as input. A runner
that reports neither (codex, aider and the command runner today) counts $0: the run says so.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from worker.agents.base import AgentOutcome


@dataclass(frozen=True)
class Price:
    """USD per million tokens."""

    input_per_mtok: float
    output_per_mtok: float

    def of(self, input_tokens: int, output_tokens: int) -> float:
        return (input_tokens * self.input_per_mtok + output_tokens * self.output_per_mtok) / 1e6


# The first entry whose name is in the model's name (lowercased) prices it; order matters
# ("opus-4-5" before "opus"). docs/configuration.md repeats this table.
PRICES: tuple[tuple[str, Price], ...] = (
    ("opus-4-5", Price(5.0, 25.0)),
    ("opus", Price(15.0, 75.0)),
    ("sonnet", Price(3.0, 15.0)),
    ("haiku", Price(1.0, 5.0)),
    ("gpt-5", Price(1.25, 10.0)),
)
HIGHEST = max((price for _, price in PRICES), key=lambda p: p.output_per_mtok)


def price_for(model: str | None) -> Price:
    name = (model or "").lower()
    return next((price for key, price in PRICES if key in name), HIGHEST)


@dataclass(frozen=True)
class CallCost:
    """What one call counts towards the budgets, and how that was known."""

    usd: float
    note: str | None = None  # said in the run when the cost is not the runner's own report


def call_cost(outcome: AgentOutcome, model: str | None) -> CallCost:
    if outcome.cost_usd is not None:
        return CallCost(max(outcome.cost_usd, 0.0))
    if outcome.input_tokens is not None or outcome.output_tokens is not None:
        tokens_in, tokens_out = outcome.input_tokens or 0, outcome.output_tokens or 0
        usd = price_for(model).of(tokens_in, tokens_out)
        note = (
            f"the agent reported {tokens_in} input and {tokens_out} output tokens but no cost: "
            f"priced at ${usd:.4f} from reqdrive's price table"
        )
        return CallCost(usd, note)
    return CallCost(
        0.0, "the agent reported neither its cost nor its tokens: this call counts $0 to budgets"
    )


def with_cost(outcome: AgentOutcome, cost: CallCost) -> AgentOutcome:
    """The outcome carrying the cost the budgets count (the runner's own when it gave one)."""
    tokens = outcome.input_tokens is not None or outcome.output_tokens is not None
    return replace(outcome, cost_usd=cost.usd) if outcome.cost_usd is None and tokens else outcome
