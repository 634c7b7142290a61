"""Secret redaction for everything the worker writes or sends."""

# CONTRACT (implemented by the agents/processes helper):
#
# class Redactor:
#     def __init__(self, secrets: Iterable[str] = ()) -> None   # exact values to hide too
#     def add_secret(self, value: str) -> None                   # ignores values under 8 chars
#     def redact(self, text: str) -> str    # patterns + exact values -> "[REDACTED]"
#
# Patterns: ghs_/ghp_/gho_/ghu_/ghr_ tokens, github_pat_, Anthropic (sk-ant-...), OpenAI
# (sk-..., sk-proj-...), AWS access key ids (AKIA/ASIA...) and secret keys after
# aws_secret_access_key=, "Bearer <value>", PEM private key blocks (whole block).
# REDACTED = "[REDACTED]"
