"""Running the App: up, settings, logs, metrics, status, replay and doctor.

Imports bot.exceptions, bot.stores and the engine; never bot.web or bot.jobs (bot/cli.py, the
`reqdrive` command, sits above them all).
"""
