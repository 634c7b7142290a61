"""The App's Redis stores, each owning its keys: run records, checkpoints, run locks.

Imports worker.model and worker.exceptions, nothing else of the engine.
"""
