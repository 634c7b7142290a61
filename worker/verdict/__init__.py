"""What passed, decided by the worker: gates, judging, tamper checks, secret scan.

Imports worker.model, git and confine.
"""
