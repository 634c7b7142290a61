"""The one rule for control characters in text we show: C0, DEL and C1 are escaped or refused.

A terminal obeys C1 controls as well as C0 ones (U+009B is CSI, U+009D is OSC): a file name,
a test's message or an egress target an agent chose could otherwise retitle the terminal that
shows a log or `pr.md`, clear it, or write its clipboard (OSC 52). Tab and newline count too:
a log field, a table cell or a path is one line.
"""

from __future__ import annotations

import re

CONTROL_RE = re.compile(r"[\x00-\x1f\x7f-\x9f]")


def has_control(text: str) -> bool:
    """Whether `text` holds a control character (C0, DEL or C1)."""
    return CONTROL_RE.search(text) is not None


def escape_control(text: str) -> str:
    """`text` with each control character shown as `\\xNN`: still readable, no longer obeyed."""
    return CONTROL_RE.sub(lambda m: f"\\x{ord(m.group()):02x}", text)
