"""Who reviews: the configured review agent, or the story's runner with its cheaper model."""

from __future__ import annotations

from collections.abc import Mapping

from worker.agents.base import AgentRunner, AgentSettings
from worker.agents.registry import RUNNERS, make_runner
from worker.confine.redact import Redactor
from worker.model.repo_config import RepoConfig
from worker.model.review import ReviewMode
from worker.plan.prompting import PromptRenderer
from worker.review.triangular import DEFAULT_TIMEOUT_S, PROMPTS_DIR, REVIEW_TEMPLATES, ReviewAgent


def review_agent(
    config: RepoConfig,
    story_agent: AgentSettings,
    story_runner: AgentRunner,
    *,
    redactor: Redactor,
    source_env: Mapping[str, str],
    overrides: Mapping[str, str],
) -> ReviewAgent | None:
    """The review's agent from `review` and `reviewAgent` (None for `review: off`): the runner
    `reviewAgent.runner` names, else the story's own; `reviewAgent.model`, else the runner's
    cheaper model (claude: haiku), else the runner's default; prompts overridable in the
    `prompts` folder like the others (describe.md.j2, compare.md.j2): `overrides`, the
    repository's own read from the base commit (plan/prompting.load_overrides)."""
    if config.review is ReviewMode.OFF:
        return None
    chosen = config.review_agent
    runner = story_runner
    if chosen.runner is not None and chosen.runner != story_agent.runner:
        settings = AgentSettings(runner=chosen.runner, command=story_agent.command)
        runner = make_runner(settings, redactor=redactor, source_env=source_env)
    runner_class = RUNNERS.get(runner.name)
    cheaper = getattr(runner_class, "review_model", None)
    own = {name: text for name, text in overrides.items() if name in REVIEW_TEMPLATES}
    return ReviewAgent(
        runner=runner,
        renderer=PromptRenderer(own, folder=config.prompts, builtin=PROMPTS_DIR),
        model=chosen.model or cheaper,
        timeout_s=chosen.timeout or story_agent.timeout_s or DEFAULT_TIMEOUT_S,
    )
