"""One run in order: the steps, the story loop, one story's attempt, verify and deliver.

Imports every engine package except local.
"""
