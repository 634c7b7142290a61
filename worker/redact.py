"""Secret redaction for everything the worker writes or sends."""

from __future__ import annotations

import re
import threading
from collections.abc import Iterable
from pathlib import Path

REDACTED = "[REDACTED]"
MIN_SECRET_LENGTH = 8

# Each alternative is a known credential shape. Every one starts with a plain literal character
# (word-boundary lookbehinds come after it, case-insensitive words are spelled in both cases)
# because then `re` skips ahead to candidate characters in C instead of trying every
# alternative at every position: about 15x faster on build logs. Where a label must stay
# readable ("Bearer ", "aws_secret_access_key = ", a URL's user name) an empty `cut_*` group
# marks where the hidden value starts.
_PATTERNS = (
    # GitHub: installation (ghs_), personal (ghp_), OAuth (gho_), user-to-server (ghu_),
    # refresh (ghr_) tokens, and fine-grained personal access tokens.
    r"g(?<![A-Za-z0-9_]g)h[psour]_[A-Za-z0-9]{36,}",
    r"g(?<![A-Za-z0-9_]g)ithub_pat_[A-Za-z0-9_]{22,}",
    # Anthropic (sk-ant-api03-...) and OpenAI (sk-..., sk-proj-..., sk-svcacct-...) keys.
    r"s(?<![A-Za-z0-9_-]s)k-[A-Za-z0-9_-]{20,}",
    # AWS access key ids (long-term AKIA, temporary ASIA).
    r"A(?<![A-Z0-9]A)(?:KIA|SIA)[A-Z0-9]{16}(?![A-Z0-9])",
    # AWS secret keys only where labelled: a bare 40-character base64 string is too common.
    r"a(?i:ws_secret_access_key)[\"']?\s*[:=]\s*[\"']?(?P<cut_aws>)[A-Za-z0-9/+=]{16,}",
    r"A(?i:ws_secret_access_key)[\"']?\s*[:=]\s*[\"']?(?P<cut_aws_upper>)[A-Za-z0-9/+=]{16,}",
    # HTTP bearer credentials; the scheme name is case-insensitive (RFC 9110).
    r"b(?i:earer)\s+(?P<cut_bearer>)[A-Za-z0-9._~+/=-]{8,}",
    r"B(?i:earer)\s+(?P<cut_bearer_upper>)[A-Za-z0-9._~+/=-]{8,}",
    # A password in a URL's userinfo (https://user:secret@host): git remotes carry tokens there.
    r"://[^/\s:@]+:(?P<cut_url>)[^/\s@]+(?=@)",
    # A whole PEM private key block, whatever its algorithm.
    r"-----BEGIN [A-Z0-9 ]*PRIVATE KEY-----.*?-----END [A-Z0-9 ]*PRIVATE KEY-----",
)
_CUT_GROUPS = ("cut_aws", "cut_aws_upper", "cut_bearer", "cut_bearer_upper", "cut_url")

PEM_BEGIN_RE = re.compile(r"-----BEGIN [A-Z0-9 ]*PRIVATE KEY-----")
PEM_END_RE = re.compile(r"-----END [A-Z0-9 ]*PRIVATE KEY-----")


def _replace(match: re.Match[str]) -> str:
    for group in _CUT_GROUPS:
        cut = match.start(group)
        if cut != -1:
            return match.group()[: cut - match.start()] + REDACTED
    return REDACTED


class Redactor:
    """Replaces credential-shaped text and configured secret values with [REDACTED]."""

    def __init__(self, secrets: Iterable[str] = ()) -> None:
        self._secrets: set[str] = set()
        self._lock = threading.Lock()
        self._pattern = self._compile()
        for secret in secrets:
            self.add_secret(secret)

    def add_secret(self, value: str) -> None:
        """Hide this exact value too; short values are ignored, they would mangle prose."""
        value = value.strip()
        if len(value) < MIN_SECRET_LENGTH:
            return
        with self._lock:
            if value in self._secrets:
                return
            self._secrets.add(value)
            # Readers keep using the old compiled pattern until this assignment lands.
            self._pattern = self._compile()

    def secrets_in(self, text: str) -> bool:
        """Whether text holds the exact value of a configured secret (shapes alone do not
        count: a repository's tests may hold token-shaped fixtures)."""
        return any(secret in text for secret in self._secrets)

    def redact(self, text: str) -> str:
        """Return text with every known secret shape and configured value replaced."""
        return self._pattern.sub(_replace, text)

    def _compile(self) -> re.Pattern[str]:
        # Longest values first so a secret containing another is hidden whole.
        exact = [re.escape(s) for s in sorted(self._secrets, key=len, reverse=True)]
        return re.compile("|".join([*exact, *_PATTERNS]), re.DOTALL)


class LineRedactor:
    """Redacts a stream one complete line at a time, hiding PEM blocks that span lines."""

    def __init__(self, redactor: Redactor) -> None:
        self._redactor = redactor
        self._in_pem = False

    def redact_line(self, line: str) -> str:
        """Redact one line (with its newline); a private key block spanning lines vanishes."""
        if self._in_pem:
            end = PEM_END_RE.search(line)
            if end is None:
                return ""
            self._in_pem = False
            return self._redactor.redact(line[end.end() :])
        redacted = self._redactor.redact(line)
        begin = PEM_BEGIN_RE.search(redacted)
        if begin is None:
            return redacted
        # A block opened on this line and not closed on it: hide from here to its END line,
        # whose remainder (with its newline) ends the placeholder.
        self._in_pem = True
        return redacted[: begin.start()] + REDACTED


def redact_file(path: Path, redactor: Redactor) -> str | None:
    """Redact a file another program wrote (an agent, a test run) in place; its new text,
    None if absent."""
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None
    redacted = redactor.redact(text)
    path.write_text(redacted, encoding="utf-8")
    return redacted
