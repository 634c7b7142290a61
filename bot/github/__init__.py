"""Talking to GitHub: App auth, the one client, the reporter, annotations.

Imports worker.model, worker.report and bot.stores (run records, the write budget).
"""
