"""Credentials come fresh from a provider before every fetch and push, and stay secret."""

from __future__ import annotations

import base64
import io
import logging
import threading
from collections.abc import Iterator

import pytest

from tests.integration.test_pipeline import MakeProject, Project, implement, prd, story_commits
from tests.integration.test_pipeline import make_project as make_project
from tests.support.git_http import GitHttpServer
from worker.git.runner import GitCredentials
from worker.report.console import ConsoleReporter
from worker.run.checkpoint_file import FileCheckpointStore
from worker.run.pipeline import Pipeline


class RotatingTokens:
    """Hands out a new token on every call; the server then takes only the newest one."""

    def __init__(self, server: GitHttpServer) -> None:
        self.server = server
        self.issued: list[str] = []

    def __call__(self) -> GitCredentials:
        token = f"rotating-token-{len(self.issued) + 1}-c0ffee"
        self.issued.append(token)
        basic = base64.b64encode(f"x-access-token:{token}".encode()).decode()
        self.server.expected = f"Basic {basic}"
        return GitCredentials(token)


@pytest.fixture
def server(make_project: MakeProject) -> Iterator[tuple[Project, GitHttpServer]]:
    project = make_project()
    http = GitHttpServer(project.remote.parent, "not-issued-yet")
    thread = threading.Thread(target=http.serve_forever, daemon=True)
    thread.start()
    yield project, http
    http.shutdown()
    http.server_close()
    thread.join()


def test_every_push_uses_a_new_token_and_no_token_is_kept_anywhere(
    server: tuple[Project, GitHttpServer], caplog: pytest.LogCaptureFixture
) -> None:
    project, http = server
    caplog.set_level(logging.DEBUG)
    scenario = project.scenario(
        {"plan": [{"prd": prd(2)}], "stories": {"US-001": [implement(1)], "US-002": [implement(2)]}}
    )
    tokens = RotatingTokens(http)
    spec = project.spec(
        scenario,
        remote_url=f"{http.base_url}/{project.remote.name}",
        credentials=tokens,
    )
    work_dir = project.work_dir
    pipeline = Pipeline(
        spec,
        reporter=ConsoleReporter(io.StringIO()),
        checkpoints=FileCheckpointStore(work_dir / "runs"),
    )
    result = pipeline.run()

    assert result.ready
    # One token for the first fetch, one for each story's push; an old token would be refused.
    assert len(tokens.issued) == 3
    assert http.refused == []
    assert project.branch_log() == story_commits(1, 2)
    for token in tokens.issued:
        assert pipeline.redactor.redact(f"said {token}") != f"said {token}"
        assert token not in caplog.text
    secrets = [s.encode() for token in tokens.issued for s in GitCredentials(token).secrets()]
    for file in work_dir.rglob("*"):  # run folder, checkpoint, mirror and its .git/config
        if file.is_file() and not file.is_symlink():
            content = file.read_bytes()
            assert not any(secret in content for secret in secrets), file
