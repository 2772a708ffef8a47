"""Errors raised by the SDK and understood by the poller."""

from typing import Optional


class InvalidInputError(ValueError):
    """Bad input: a malformed type, a payload that is not a JSON object, an out-of-range setting."""


class NotFoundError(LookupError):
    """The run does not exist."""


class RunFinishedError(Exception):
    """The run already finished (a signal reaches only pending or running runs)."""


class PermissionDeniedError(Exception):
    """The database login may not do this (SQLSTATE SW002, forbidden; or 42501, insufficient_privilege).

    Namespaces are the inbox's tenants: the schema's owner binds each login to
    the namespaces it acts on, as producer, worker or reader
    (``workflow.grant_namespace``). A poller whose login does not work for
    the namespace it serves, a run recorded in a namespace the login does not
    produce for, or of a type another namespace does not share with it, are
    refused by the inbox with SW002; a call the login's roles do not grant,
    or a row that row-level security refuses, by Postgres with 42501. Both
    raise this error. The message is the database's.
    """


class PermanentError(Exception):
    """Raised by a handler to fail the run at once instead of retrying it."""


class NonDeterministicError(PermanentError):
    """The run's code reached, at a position of its journal, another step than the one recorded there.

    The run fails for good with this message, whatever the handler does
    afterwards (even if it catches the exception).
    """


class ChildFailed(Exception):
    """Raised by Task.await_child when the child run failed or was cancelled."""

    def __init__(self, step: str, child_id: Optional[str], message: Optional[str]) -> None:
        self.step = step
        self.child_id = child_id
        self.message = message or "child run failed"
        super().__init__(f"child run {child_id} (step {step}) failed: {self.message}")


class StoppedError(Exception):
    """A durable call found the attempt stopped: the run was cancelled, its lease lost, its
    deadline passed or the worker is shutting down (``reason`` says which).

    Whatever the handler does afterwards is discarded; when the worker is shutting
    down the run is handed back and runs again elsewhere.
    """

    def __init__(self, message: str, reason: str) -> None:
        self.reason = reason
        super().__init__(message)


class Parked(BaseException):
    """The run parked at a durable wait (a sleep, a signal, a child run) and gave up its lease.

    It derives from BaseException so that ``except Exception`` in a handler does
    not swallow it: let it propagate. The worker frees the slot and writes
    nothing; the run executes again, replaying its journal, when the wait ends.
    """
