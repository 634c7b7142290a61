"""Talking to GitHub: App auth, the one client, the reporter, annotations.

Imports worker.model and worker.report.
"""
