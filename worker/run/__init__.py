"""One run in order: the step order, a story's attempt, delivery, the run folder.

Imports every engine package except local.
"""
