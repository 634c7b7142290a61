"""Where a run's progress goes: the Reporter protocol, the console, the PR body.

Imports worker.model only.
"""
