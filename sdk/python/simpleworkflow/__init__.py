"""Python SDK of simple-workflow, the durable Postgres inbox for asynchronous work.

Producers use :class:`Client` to record intents (runs), look them up and cancel
them. Workers use :class:`IntentPoller`: it claims runs by type prefix, runs
the handler registered for each run's type with a :class:`RunContext`,
heartbeats automatically, records results and errors (retried with backoff),
and on shutdown hands unfinished runs back.

Every transition calls one of the inbox's SQL functions, so a Python worker
behaves exactly like a Go worker and leaves the same audit trail.
"""

from .client import Client, CreateResult, Event, Run
from .errors import InvalidInputError, NotFoundError, PermanentError
from .poller import IntentPoller, RunContext

__all__ = [
    "Client",
    "CreateResult",
    "Event",
    "IntentPoller",
    "InvalidInputError",
    "NotFoundError",
    "PermanentError",
    "Run",
    "RunContext",
]
