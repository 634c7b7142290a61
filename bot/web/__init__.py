"""The one webhook door: bodies, signature, events, triggers, commands, enqueue.

Imports bot.stores, bot.ops settings and worker.model; no git, no agents, no GitHub calls.
"""
