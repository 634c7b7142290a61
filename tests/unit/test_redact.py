"""Secrets in text the worker writes or sends come out as [REDACTED]."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from worker.confine.redact import REDACTED, LineRedactor, Redactor, redact_file
from worker.report.run_folder import RunFolder

# Realistic shapes, fake values: right prefixes and lengths, random-looking bodies.
GHS = "ghs_" + "aB3dE5fG7hJ9kL1mN3pQ5rS7tU9vW1xY3z5A"
GHP = "ghp_" + "Zx9Yw8Vu7Ts6Rq5Po4Nm3Lk2Ji1Hg0FeDcBa9"
GITHUB_PAT = "github_pat_11ABCDEFG0123456789abc_" + "Xy7" * 20
ANTHROPIC = "sk-ant-api03-" + "Qw3rTy7uIo9pAs1dFg5hJk2lZx8cVb4nM6-_Qw3rTy7uIo9pAs1dFg5hJk2AA"
OPENAI = "sk-proj-" + "Ab12Cd34Ef56Gh78Ij90Kl12Mn34Op56Qr78St90Uv12Wx34"
OPENAI_LEGACY = "sk-" + "T3BlbkFJ" + "a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6"
AWS_ID = "AKIAIOSFODNN7EXAMPLE"
AWS_TEMP_ID = "ASIAY34FZKBOKMUTVV7A"
AWS_SECRET = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"
PEM = (
    "-----BEGIN RSA PRIVATE KEY-----\n"
    "MIIEowIBAAKCAQEA1c7+9z5Pad7OejecsQ0bu3aozN3tihPmljnnudb9G3HECdnH\n"
    "lWu2/a1gB9JW5TBQ+AVpum9Okx7KfqkfBKL9mcHgSL0yWMdjMfNOqNtrQqKlN4kE\n"
    "-----END RSA PRIVATE KEY-----"
)


@pytest.mark.parametrize(
    "secret",
    [GHS, GHP, "gho_" + GHS[4:], "ghu_" + GHS[4:], "ghr_" + GHS[4:], GITHUB_PAT],
)
def test_github_tokens_are_hidden(secret: str) -> None:
    text = f"token={secret} and more"
    assert Redactor().redact(text) == f"token={REDACTED} and more"


@pytest.mark.parametrize("secret", [ANTHROPIC, OPENAI, OPENAI_LEGACY, AWS_ID, AWS_TEMP_ID])
def test_model_and_cloud_keys_are_hidden(secret: str) -> None:
    text = f'export KEY="{secret}"\n'
    assert Redactor().redact(text) == f'export KEY="{REDACTED}"\n'


def test_token_inside_a_clone_url_is_hidden() -> None:
    url = f"fatal: could not read https://x-access-token:{GHS}@github.com/o/r.git/info/refs"
    redacted = Redactor().redact(url)
    assert GHS not in redacted
    assert "ghs_" not in redacted
    assert "@github.com/o/r.git/info/refs" in redacted


def test_password_in_any_url_is_hidden_but_user_kept() -> None:
    redacted = Redactor().redact("remote: https://deploy:hunter2hunter2@git.example.com/x")
    assert redacted == f"remote: https://deploy:{REDACTED}@git.example.com/x"


def test_aws_secret_key_keeps_its_label() -> None:
    text = f"[default]\naws_secret_access_key = {AWS_SECRET}\nregion = eu-west-1\n"
    redacted = Redactor().redact(text)
    assert redacted == f"[default]\naws_secret_access_key = {REDACTED}\nregion = eu-west-1\n"
    env_style = Redactor().redact(f"AWS_SECRET_ACCESS_KEY={AWS_SECRET}")
    assert env_style == f"AWS_SECRET_ACCESS_KEY={REDACTED}"


def test_bearer_keeps_the_scheme_word() -> None:
    text = "Authorization: Bearer eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0In0.sig-nature_x"
    assert Redactor().redact(text) == f"Authorization: Bearer {REDACTED}"


def test_whole_pem_block_is_hidden() -> None:
    text = f"key:\n{PEM}\nafter"
    assert Redactor().redact(text) == f"key:\n{REDACTED}\nafter"


def test_configured_exact_values_are_hidden() -> None:
    redactor = Redactor(["webhook-secret-value-123"])
    redactor.add_secret("my private passphrase")
    text = "secret webhook-secret-value-123 and my private passphrase."
    assert redactor.redact(text) == f"secret {REDACTED} and {REDACTED}."


def test_short_configured_values_are_hidden_as_whole_words_only() -> None:
    redactor = Redactor(["hunter2", "pw1", "ab", ""])
    text = "auth hunter2 ok; redis://:hunter2@host; hunter22 and xhunter2; pw1, pw12; ab cab"
    assert redactor.redact(text) == (
        f"auth {REDACTED} ok; redis://:{REDACTED}@host; hunter22 and xhunter2; {REDACTED}, "
        "pw12; ab cab"
    )
    assert redactor.secrets_in("password=hunter2") and not redactor.secrets_in("hunter22")


def test_a_urls_password_is_hidden_on_its_own_too() -> None:
    redactor = Redactor(["redis://:s3cr%40t-pw@redis.internal:6379/0"])
    assert (
        redactor.redact("NOAUTH: wrong password s3cr@t-pw") == f"NOAUTH: wrong password {REDACTED}"
    )
    assert "s3cr@t-pw" in redactor.values()


def test_regex_metacharacters_in_a_secret_are_literal() -> None:
    redactor = Redactor(["a.b*c+d?(e)"])
    assert redactor.redact("x a.b*c+d?(e) y aXbbbcd") == f"x {REDACTED} y aXbbbcd"


def test_text_without_secrets_is_unchanged() -> None:
    text = (
        "Ran 12 tests in 0.3s\nOK\nsk-learn is a library; ghs_short is not a token;\n"
        "AKIA is a prefix; https://github.com/o/r.git; Bearer tokens are used; "
        "ÄÖÜ unicode ✓\n"
    )
    assert Redactor().redact(text) == text


def test_large_text_is_redacted_everywhere() -> None:
    filler = "ordinary build output line number something\n" * 2000
    text = (filler + GHS + "\n") * 50
    redacted = Redactor(["configured-secret"]).redact(text)
    assert GHS not in redacted
    assert redacted.count(REDACTED) == 50


def test_line_redactor_hides_a_pem_block_spanning_lines() -> None:
    lines = LineRedactor(Redactor())
    out = "".join(lines.redact_line(line) for line in f"a\n{PEM}\nb {GHS}\n".splitlines(True))
    assert out == f"a\n{REDACTED}\nb {REDACTED}\n"
    assert "MIIE" not in out


# Lines of a test run's output with the shapes and the edges redact() cares about: tokens at a
# line's start and end, a label on one line and its value on the next, key blocks opened and
# closed on other lines, a configured value standing alone or inside a word.
LINE_PIECES = st.sampled_from(
    [
        "ok",
        " ",
        "x",
        "7",
        "\n",
        GHS,
        "ghs_short",
        ANTHROPIC,
        AWS_ID,
        "aws_secret_access_key =",
        AWS_SECRET,
        "Bearer",
        "https://u:",
        "pw@host",
        PEM,
        "-----BEGIN RSA PRIVATE KEY-----",
        "-----END RSA PRIVATE KEY-----",
        "-----BEGIN ",
        "conf-secret-9",
        "ab",
        "é",
    ]
)


@given(st.lists(st.lists(LINE_PIECES, max_size=6).map("".join), max_size=12))
def test_lines_redacted_at_once_come_out_as_one_by_one(lines: list[str]) -> None:
    text = "\n".join(lines)
    one_by_one = LineRedactor(Redactor(["conf-secret-9", "ab"]))
    at_once = LineRedactor(Redactor(["conf-secret-9", "ab"]))
    expected = "".join(one_by_one.redact_line(line) for line in text.splitlines(True))
    assert at_once.redact_lines(text) == expected
    # And the key block left open stays open for the lines that follow.
    assert at_once.redact_lines(f"next {GHS}\n") == one_by_one.redact_line(f"next {GHS}\n")


def test_lines_without_secrets_are_not_given_to_the_redactor_one_by_one() -> None:
    calls: list[str] = []

    class Watching(Redactor):
        def redact(self, text: str) -> str:
            calls.append(text)
            return super().redact(text)

    lines = LineRedactor(Watching())
    text = "plain line\n" * 1000 + f"token {GHS}\n" + "plain line\n" * 1000
    assert lines.redact_lines(text) == text.replace(GHS, REDACTED)
    assert calls == [f"token {GHS}\n"]


def test_a_file_over_twenty_mib_keeps_no_secret(tmp_path: Path) -> None:
    secret = "run-folder-secret-0f9a2c"
    folder = RunFolder(tmp_path / "run", Redactor([secret]))
    big = folder.path / "agent-output.log"
    filler = ("x" * 99 + "\n") * (21 * 1024 * 1024 // 100)
    pem = "-----BEGIN EC PRIVATE KEY-----\nMHcCAQEEIBLQ\n-----END EC PRIVATE KEY-----\n"
    big.write_text(filler + f"token {secret} here\n" + pem + filler + secret)
    assert big.stat().st_size > 20 * 1024 * 1024

    folder.sweep(full=True)

    text = big.read_text()
    assert secret not in text and "MHcCAQEEIBLQ" not in text
    assert f"token {REDACTED} here\n" in text
    assert text.endswith(REDACTED)


def test_redact_file_never_follows_a_link(tmp_path: Path) -> None:
    target = tmp_path / "outside.txt"
    target.write_text("secret-value-1234 stays as it is\n")
    link = tmp_path / "history.md"
    link.symlink_to(target)
    assert redact_file(link, Redactor(["secret-value-1234"])) is None
    assert target.read_text() == "secret-value-1234 stays as it is\n"


def test_a_file_with_nothing_to_hide_is_left_as_it_is(tmp_path: Path) -> None:
    log = tmp_path / "gate.log"
    log.write_text("collected 3 items\n" * 100_000 + "3 passed")
    before = log.stat()
    tail = redact_file(log, Redactor(["configured-secret"]))
    assert tail is not None and tail.endswith("3 passed") and len(tail) == 64 * 1024
    after = log.stat()
    assert (after.st_ino, after.st_mtime_ns) == (before.st_ino, before.st_mtime_ns)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["gate.log"]
