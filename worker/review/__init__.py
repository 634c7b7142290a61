"""The blind review and the discrepancy report: agent B describes a change without the
requirement, agent C compares that description with the acceptance criteria.

Imports worker.model, confine, git, agents, report and plan (its prompt renderer).
"""
