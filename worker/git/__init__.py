"""The one git runner, the repository cache, per-run worktrees and their scope.

Imports worker.model and worker.confine (redaction).
"""
