"""Coding-agent runners behind one protocol: claude, codex, aider and any command."""
