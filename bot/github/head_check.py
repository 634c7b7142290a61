"""A word after a run on its check run: one "reqdrive" check run per head commit, never two.

What reqdrive says about a head once a run ended on it (red CI handed back, green after a fix,
a person's push) goes on the run's own check run on that head, completed with its conclusion
and the word ahead of what the run said. Only a head with none of the run's check runs (a
person's commit) gets one, with the run's id as its external id, so the next word finds it.
"""

from __future__ import annotations

from bot.github.client import RepoClient
from bot.stores.runs import RunRecord

SEPARATOR = "\n\n---\n\n"
VERDICT_STANDS = "The run's own verdict, below, stands: what it did not pass still needs a person."


def conclude_on_head(
    client: RepoClient,
    record: RunRecord,
    sha: str,
    *,
    conclusion: str,
    title: str,
    summary: str,
    keep_verdict: bool = False,
) -> int:
    """The run's check run on `sha` completed with `conclusion`, `summary` first (created when
    the head has none); its id. `keep_verdict`: a word that is no verdict on the run's stories
    (CI went green) never turns the run's own conclusion into a better one: a story that
    needs review still does, and the check run keeps saying so."""
    found = client.find_check_run(sha, record.run_id)
    if keep_verdict and found is not None and found.conclusion not in (None, "success"):
        conclusion = found.conclusion
        summary += " " + VERDICT_STANDS
    if found is None:
        created = client.create_check_run(
            sha=sha,
            external_id=record.run_id,
            status="completed",
            conclusion=conclusion,
            output={"title": title, "summary": summary},
        )
        return int(created.id)
    earlier = found.output.summary if found.output is not None else None
    text = summary + (SEPARATOR + earlier if earlier else "")
    client.update_check_run(
        found.id,
        status="completed",
        conclusion=conclusion,
        output={"title": title, "summary": text},
    )
    return int(found.id)
