"""Errors raised by the SDK and understood by the poller."""


class InvalidInputError(ValueError):
    """Bad input: a malformed type, a payload that is not a JSON object, an out-of-range setting."""


class NotFoundError(LookupError):
    """The run does not exist."""


class PermanentError(Exception):
    """Raised by a handler to fail the run at once instead of retrying it."""
