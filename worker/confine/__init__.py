"""Where untrusted code runs: processes, the bubblewrap sandbox, egress, redaction.

Imports worker.model only.
"""
