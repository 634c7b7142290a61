"""The local command line: reqdrive run, plan, init, validate, runs and logs.

Imports the whole engine, never bot.
"""
