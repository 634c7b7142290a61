"""Where untrusted code runs: processes, the bubblewrap sandbox, egress, redaction, file locks.

Imports worker.model only.
"""
