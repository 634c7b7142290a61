"""Exceptions raised by the bot package."""


class ReqdriveBotError(Exception):
    """Base class for every error the bot raises on purpose."""


class ConfigurationError(ReqdriveBotError):
    """The service configuration is missing or invalid; the message says what to set."""


class QueueUnavailable(ReqdriveBotError):
    """Redis did not answer, so a delivery cannot be recorded or queued."""
