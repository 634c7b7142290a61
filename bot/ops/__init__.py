"""Running the App: the reqdrive command, up, settings, logs, metrics, status, replay.

Imports every bot package.
"""
