"""As deployed: two requirements in two repositories of two installations at once, two workers;
each run stays in its own repository."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

from tests.integration.test_pipeline import SCRIPTED_AGENT, git, implement, prd
from tests.support.github_double import GitHubDouble
from tests.support.harness import sandbox_readonly, stack, wait_for
from tests.support.leaks import assert_no_secrets
from tests.support.scenes import agent_calls, shop

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

SHOP, TOOLS = "octo/shop", "tools-org/tools"


def gadget(n: int) -> dict[str, Any]:
    """A story attempt that writes gadget_<n>.py and its passing test."""
    return {
        "sleep": 1,  # both runs' agents are at work at the same time
        "write": {
            f"gadget_{n}.py": f"def value():\n    return {n}\n",
            f"tests/test_gadget_{n}.py": (
                f"import gadget_{n}\n\n\ndef test_gadget_{n}():\n"
                f"    assert gadget_{n}.value() == {n}\n"
            ),
        },
    }


def gadgets_plan() -> dict[str, Any]:
    plan = prd(2)
    for story in plan["userStories"]:
        story["title"] = story["title"].replace("Feature", "Gadget")
        story["acceptanceCriteria"] = [f"gadget_{story['priority']}.value() works"]
    return plan


def test_two_repositories_at_once_each_get_their_own_pr_comments_and_tokens(
    tmp_path: Path, double: GitHubDouble
) -> None:
    shop_scene = shop(
        tmp_path, double, SHOP,
        stories={"US-001": [{**implement(1), "sleep": 1}], "US-002": [implement(2)]},
    )  # fmt: skip
    tools_scene = shop(
        tmp_path, double, TOOLS, plan=gadgets_plan(), title="Gadgets", installation=2,
        stories={"US-001": [gadget(1)], "US-002": [gadget(2)]},
    )  # fmt: skip
    dispatch = tmp_path / "dispatch"
    env = {
        **shop_scene.env(),
        "REQDRIVE_AGENT_COMMAND": _dispatch(
            dispatch,
            shop_scene.agent_dir / "scenario.json",
            tools_scene.agent_dir / "scenario.json",
        ),
        "REQDRIVE_SANDBOX_READONLY": sandbox_readonly(
            shop_scene.agent_dir, tools_scene.agent_dir, dispatch
        ),
    }
    root = tmp_path / "stack"
    root.mkdir()
    scenes = {SHOP: shop_scene, TOOLS: tools_scene}
    with stack(double, None, root, env, workers=2) as running:
        for repo, scene in scenes.items():
            payload = double.labeled_payload(repo, scene.issue, "reqdrive", "alice")
            assert double.deliver(running.webhook_url, "issues", payload).status_code == 202

        def finished() -> bool:
            return all(
                any("✅ Done" in c["body"] for c in double.comments_on(repo, scene.issue))
                for repo, scene in scenes.items()
            )

        try:
            wait_for(finished, 120, "both runs finished")
        except AssertionError:
            raise AssertionError(running.logs()[-6000:]) from None
        calls = agent_calls(running)

    assert sorted(calls.values()) == [["plan 1", "US-001 1", "US-002 1"]] * 2
    for number in (1, 2):  # each worker took one of the runs
        assert (root / f"worker-{number}.log").read_text().count("worktree ready") == 1
    files = {SHOP: {"feature_1.py", "feature_2.py"}, TOOLS: {"gadget_1.py", "gadget_2.py"}}
    words = {SHOP: "Feature", TOOLS: "Gadget"}
    for repo, scene in scenes.items():
        other = TOOLS if repo == SHOP else SHOP
        [pull] = double.pulls_of(repo)
        branch = pull["head"]["ref"]
        changed = git(double.bare(repo), "diff", "--name-only", f"main..{branch}").splitlines()
        assert {p for p in changed if not p.startswith("tests/")} == files[repo]
        assert f"Closes #{scene.issue}" in pull["body"]
        assert words[other] not in pull["body"]
        [progress] = [
            c for c in double.comments_on(repo, scene.issue) if "reqdrive:progress" in c["body"]
        ]
        assert words[repo] in progress["body"] and words[other] not in progress["body"]
        head = git(double.bare(repo), "rev-parse", branch)
        checks = double.check_runs_of(repo)
        assert [r["conclusion"] for r in checks if r["head_sha"] == head] == ["success"]
        own = set(git(double.bare(repo), "rev-list", "--all").split())
        assert {r["head_sha"] for r in checks} <= own  # every check run on its own commits
    on_issues = {c["_issue"] for c in double.comments.values()}
    assert on_issues == {(SHOP, shop_scene.issue), (TOOLS, tools_scene.issue)}
    assert {u.repo for u in double.token_uses} == {SHOP, TOOLS}
    assert double.misused_tokens() == []
    assert_no_secrets(double, root)


def _dispatch(folder: Path, shop_scenario: Path, tools_scenario: Path) -> str:
    """One agent command for both repositories (the stack has one): the scripted agent with
    the tools' scenario in a tools run's worktree (its run id holds the issue's title,
    "gadgets"), else the shop's."""
    folder.mkdir()
    script = folder / "agent.sh"
    script.write_text(
        "#!/bin/sh\n"
        f'case "$PWD" in *-gadgets-*) s={tools_scenario} ;; *) s={shop_scenario} ;; esac\n'
        f'exec {sys.executable} {SCRIPTED_AGENT} --scenario "$s" "$@"\n'
    )
    script.chmod(0o755)
    return f"{script} --prompt {{prompt_file}} --run-dir {{run_dir}}"
