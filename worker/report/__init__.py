"""Where a run's progress goes: the Reporter protocol, the console, the PR body, the run folder.

Imports worker.model and worker.confine (everything written passes redaction).
"""
