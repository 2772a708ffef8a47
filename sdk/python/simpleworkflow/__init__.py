"""Python SDK of simple-workflow, the durable Postgres inbox for asynchronous work.

Producers use :class:`Client` to record intents (runs), look them up, list
and cancel them. Workers use :class:`Poller`: it claims runs by type prefix,
runs the handler registered for each run's type with a :class:`Task`,
heartbeats automatically, records results and errors (retried with backoff),
and on shutdown hands unfinished runs back. The names, defaults and verbs are
the Go SDK's (docs/sdk-parity.md).

Handlers execute durably with the verbs of :class:`Task`: ``step``
(recorded once, replayed on later attempts), ``step_tx`` (a step whose body
writes to the inbox's database in the transaction that journals it),
``sleep`` and ``sleep_until``
(the run parks and frees its worker slot), ``wait_for_signal`` (signals sent
with :meth:`Client.signal`), ``start_child`` and ``await_child``. What a
handler logs through ``Task.logger`` is kept with its run, per attempt, and
read with :meth:`Client.logs`.

Every read and write calls one of the inbox's SQL functions, so a Python
worker behaves exactly like a Go worker and leaves the same audit trail.
"""

# The package's version, the only place it is written (pyproject.toml reads
# it); the same as the release's appVersion in charts/simple-workflow.
__version__ = "0.1.0"

from .client import (
    DEFAULT_NAMESPACE,
    MAX_CONCURRENCY_KEY_LENGTH,
    MAX_CREATE_MANY,
    MAX_JSON_DEPTH,
    MAX_SIGNAL_PAYLOAD_BYTES,
    MAX_STEP_NAME_LENGTH,
    MAX_STEP_OUTPUT_BYTES,
    WAIT_KIND_LIMIT,
    AttemptLog,
    Client,
    CreateResult,
    Event,
    JournalStep,
    LogLine,
    Run,
    RunPage,
    SignalResult,
    Wait,
)
from .durable import MAX_STEPS, Task
from .errors import (
    ChildFailed,
    InvalidInputError,
    NonDeterministicError,
    NotFoundError,
    Parked,
    PermanentError,
    PermissionDeniedError,
    RunFinishedError,
    StoppedError,
)
from .poller import (
    DEFAULT_CLAIM_BATCH_SIZE,
    DEFAULT_CONCURRENCY,
    DEFAULT_LEASE_SECONDS,
    DEFAULT_LOG_FLUSH_INTERVAL_SECONDS,
    DEFAULT_POLL_INTERVAL_SECONDS,
    DEFAULT_REAP_INTERVAL_SECONDS,
    DEFAULT_SHUTDOWN_GRACE_SECONDS,
    Poller,
    PollerConfig,
)

__all__ = [
    "__version__",
    "MAX_CONCURRENCY_KEY_LENGTH",
    "MAX_CREATE_MANY",
    "MAX_STEPS",
    "MAX_STEP_NAME_LENGTH",
    "MAX_STEP_OUTPUT_BYTES",
    "MAX_SIGNAL_PAYLOAD_BYTES",
    "MAX_JSON_DEPTH",
    "DEFAULT_CLAIM_BATCH_SIZE",
    "DEFAULT_CONCURRENCY",
    "DEFAULT_LEASE_SECONDS",
    "DEFAULT_LOG_FLUSH_INTERVAL_SECONDS",
    "DEFAULT_NAMESPACE",
    "DEFAULT_POLL_INTERVAL_SECONDS",
    "DEFAULT_REAP_INTERVAL_SECONDS",
    "DEFAULT_SHUTDOWN_GRACE_SECONDS",
    "AttemptLog",
    "ChildFailed",
    "Client",
    "CreateResult",
    "Event",
    "InvalidInputError",
    "JournalStep",
    "LogLine",
    "NonDeterministicError",
    "NotFoundError",
    "Parked",
    "PermanentError",
    "PermissionDeniedError",
    "Poller",
    "PollerConfig",
    "Run",
    "RunPage",
    "RunFinishedError",
    "SignalResult",
    "StoppedError",
    "Task",
    "Wait",
    "WAIT_KIND_LIMIT",
]
