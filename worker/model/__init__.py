"""Plain models of the engine: plan and stories, run state, gates, repository config.

Imports nothing of the machinery: only pydantic, the standard library and worker.exceptions.
"""
