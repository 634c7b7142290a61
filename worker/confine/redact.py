"""Secret redaction for everything the worker writes or sends."""

from __future__ import annotations

import os
import re
import stat
import threading
from collections import deque
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import BinaryIO
from urllib.parse import unquote, urlsplit

REDACTED = "[REDACTED]"
# Values this long are hidden wherever they occur. Shorter ones (a 6-character Redis password)
# are hidden where they stand as a whole word, not inside longer words: "hunter2" goes from
# "auth hunter2 ok" and "redis://:hunter2@", but "test" as a secret leaves "testing" alone.
# Below MIN_WORD_SECRET_LENGTH a value cannot be told from ordinary text at all; it is not
# hidden, and such a value is no secret anyway.
MIN_SECRET_LENGTH = 8
MIN_WORD_SECRET_LENGTH = 3

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
)
# Whole PEM private key blocks are found apart from these patterns (_without_key_blocks): as
# one more alternative, `BEGIN.*?END` tried from every BEGIN of a flood of them with no END
# scans to the end of the text each time, quadratic in the output.
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
        """Hide this exact value too (short ones as whole words only), and a URL's password
        on its own (REDIS_URL's password also shows up bare, e.g. in an AUTH error)."""
        value = value.strip()
        values = [value, *url_password(value)]
        with self._lock:
            new = {v for v in values if len(v) >= MIN_WORD_SECRET_LENGTH} - self._secrets
            if not new:
                return
            self._secrets |= new
            # Readers keep using the old compiled pattern until this assignment lands.
            self._pattern = self._compile()

    def values(self) -> tuple[str, ...]:
        """The configured secret values (for scanners that look for their encodings)."""
        return tuple(self._secrets)

    def secrets_in(self, text: str) -> bool:
        """Whether text holds the exact value of a configured secret (shapes alone do not
        count: a repository's tests may hold token-shaped fixtures); short values count as
        whole words only."""
        return any(
            secret in text if len(secret) >= MIN_SECRET_LENGTH else _word(secret).search(text)
            for secret in self._secrets
        )

    def redact(self, text: str) -> str:
        """Return text with every known secret shape and configured value replaced."""
        return self._pattern.sub(_replace, _without_key_blocks(text))

    def next_hidden(self, text: str, start: int = 0) -> int:
        """Where, from `start`, the first text begins that redact() may hide (a secret's
        shape, a configured value, a key block's BEGIN); -1 when there is none: what comes
        before it would come out of redact() as it went in."""
        found = self._pattern.search(text, start)
        end = len(text) if found is None else found.start()
        # Only up to the match: a BEGIN that runs into it is on the match's line anyway.
        begin = text.find("-----BEGIN ", start, end)
        if begin != -1:
            return begin
        return -1 if found is None else end

    def _compile(self) -> re.Pattern[str]:
        # Longest values first so a secret containing another is hidden whole.
        ordered = sorted(self._secrets, key=len, reverse=True)
        exact = [re.escape(s) if len(s) >= MIN_SECRET_LENGTH else _word(s).pattern for s in ordered]
        return re.compile("|".join([*exact, *_PATTERNS]), re.DOTALL)


def _without_key_blocks(text: str) -> str:
    """Each PEM private key block (BEGIN to the first END after it) replaced, in one pass: a
    BEGIN with no END after it ends the search, since no later BEGIN has one either."""
    if "-----BEGIN " not in text:
        return text
    parts, at = [], 0
    while (begin := PEM_BEGIN_RE.search(text, at)) is not None:
        end = PEM_END_RE.search(text, begin.end())
        if end is None:
            break
        parts += [text[at : begin.start()], REDACTED]
        at = end.end()
    return "".join([*parts, text[at:]])


def _word(secret: str) -> re.Pattern[str]:
    """A short secret standing alone: not inside a longer run of letters and digits."""
    return re.compile(rf"(?<![A-Za-z0-9]){re.escape(secret)}(?![A-Za-z0-9])")


def url_password(value: str) -> list[str]:
    """The password of a URL with userinfo (redis://:pw@host, https://u:pw@host), if any."""
    try:
        parts = urlsplit(value)
        password = parts.password if parts.scheme and parts.netloc else None
    except ValueError:
        return []
    return [unquote(password)] if password else []


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
            line = line[end.end() :]  # the rest may open another block
        redacted = self._redactor.redact(line)
        begin = PEM_BEGIN_RE.search(redacted)
        if begin is None:
            return redacted
        # A block opened on this line and not closed on it: hide from here to its END line,
        # whose remainder (with its newline) ends the placeholder.
        self._in_pem = True
        return redacted[: begin.start()] + REDACTED

    def redact_lines(self, text: str) -> str:
        """Redact whole lines (each with its newline but perhaps the last) as redact_line
        would one by one, in a fraction of the time: the lines before the first place
        redact() may hide anything are found in one scan of the pattern and kept as they are.

        The same result: a line holds a match of the pattern only where the text does at the
        same place (the pattern looks behind and ahead only for letters and digits, which a
        newline is not), and a line with no match and no BEGIN leaves a line redactor as it
        found it; a match across lines only makes its first line go through redact_line."""
        parts, at = [], 0
        while at < len(text):
            hit = at if self._in_pem else self._redactor.next_hidden(text, at)
            if hit == -1:
                parts.append(text[at:])
                break
            start = text.rfind("\n", at, hit) + 1 or at  # where the line holding it starts
            end = text.find("\n", hit) + 1 or len(text)
            parts += [text[at:start], self.redact_line(text[start:end])]
            at = end
        return "".join(parts)

    def skip_line(self, line: str) -> None:
        """Follow a line that will not be shown: only whether it leaves a key block open,
        found in one plain scan (a flood past the log's limit is not redacted line by line,
        yet the lines shown after it must still hide the rest of a key)."""
        at = 0
        while True:
            found = (PEM_END_RE if self._in_pem else PEM_BEGIN_RE).search(line, at)
            if found is None:
                return
            self._in_pem, at = not self._in_pem, found.end()


class Tail:
    """The last `limit` characters of a stream of pieces, kept without copying it whole."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._pieces: deque[str] = deque()
        self._chars = 0

    def add(self, piece: str) -> None:
        self._pieces.append(piece)
        self._chars += len(piece)
        while self._chars - len(self._pieces[0]) >= self.limit and len(self._pieces) > 1:
            self._chars -= len(self._pieces.popleft())

    def text(self) -> str:
        return "".join(self._pieces)[-self.limit :]


# Files are redacted in chunks of this size, split at line ends, so a file of any size keeps
# no secret and never sits whole in memory.
REDACT_CHUNK_BYTES = 1024 * 1024
# redact_file returns at most this much of the end of the redacted text.
RETURNED_CHARS = 64 * 1024


def redact_file(path: Path, redactor: Redactor) -> str | None:
    """Redact a file another program wrote (an agent, a test run) in place, whatever its size;
    the end of its new text (up to RETURNED_CHARS), None if absent or not a plain file.

    Never through a symbolic link: one planted by the agent would make the worker read and
    rewrite, as itself, a file the agent cannot reach.
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return None
    with os.fdopen(fd, "rb") as source:
        if not stat.S_ISREG(os.fstat(source.fileno()).st_mode):
            return None
        # Read once to see whether anything is to hide: most files hold nothing, and they
        # are neither copied nor written.
        tail = Tail(RETURNED_CHARS)
        for piece, clean in _redacted_pieces(source, LineRedactor(redactor)):
            if clean != piece:
                break
            tail.add(clean)  # (tail + clean)[-N:] copied N characters per piece
        else:
            return tail.text()
        source.seek(0)
        staged = path.with_name(f".{path.name}.{os.getpid()}.redacting")
        tail = Tail(RETURNED_CHARS)
        with staged.open("w", encoding="utf-8", errors="surrogateescape") as target:
            for _, clean in _redacted_pieces(source, LineRedactor(redactor)):
                target.write(clean)
                tail.add(clean)
    os.replace(staged, path)
    return tail.text()


def _redacted_pieces(source: BinaryIO, lines: LineRedactor) -> Iterator[tuple[str, str]]:
    """(original, redacted), a chunk's whole lines at a time; a line longer than a chunk is
    cut there."""
    pending = b""
    while chunk := source.read(REDACT_CHUNK_BYTES):
        complete, newline, pending = (pending + chunk).rpartition(b"\n")
        pieces = [complete + newline] if newline else []
        if len(pending) > REDACT_CHUNK_BYTES:
            pieces.append(pending)
            pending = b""
        for raw in pieces:
            # Decoded whole: a newline never ends a character, so this is each line's text.
            text = raw.decode("utf-8", errors="surrogateescape")
            yield text, lines.redact_lines(text)
    if pending:
        text = pending.decode("utf-8", errors="surrogateescape")
        yield text, lines.redact_lines(text)
