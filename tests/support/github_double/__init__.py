"""GitHub stood in for end-to-end tests: a real HTTP server with App auth, git and deliveries."""

from tests.support.github_double.server import GitHubDouble, github_double

__all__ = ["GitHubDouble", "github_double"]
