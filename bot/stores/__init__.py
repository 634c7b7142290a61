"""The App's Redis stores, each owning its keys: runs, checkpoints, locks, deliveries, metrics.

Imports worker.model and worker.exceptions, nothing else of the engine.
"""
