"""Where a run's progress goes: the Reporter protocol, the console, the PR body.

Imports worker.model and the gate results of worker.verdict.gates only.
"""
