"""The plan step: prompts (built-in or the repository's own) and the agent's prd.json.

Imports worker.model, git, confine and agents.
"""
