"""RQ entry points and the drive of one job: permission, lock, heartbeat, crash recovery.

May import the engine (worker.*), bot.github, bot.stores and bot.ops.settings. Intake queues
jobs by the names below (`bot.jobs.run_requirement`); they are the only functions a worker runs.
"""

from bot.jobs.entry_points import (
    address_feedback,
    cancel_run,
    close_run,
    drop_installation,
    fix_ci,
    hand_off,
    plan_requirement,
    reply_help,
    report_status,
    resume_run,
    retry_stories,
    run_requirement,
    scan_push,
)

__all__ = [
    "address_feedback",
    "cancel_run",
    "close_run",
    "drop_installation",
    "fix_ci",
    "hand_off",
    "plan_requirement",
    "reply_help",
    "report_status",
    "resume_run",
    "retry_stories",
    "run_requirement",
    "scan_push",
]
