"""Producer-side API: create, cancel, get and signal runs, list their events, journals and logs."""

from __future__ import annotations

import base64
import json
import re
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Any, Callable, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple, Union

import psycopg

from ._error_codes import ERRORS
from .errors import InvalidInputError, NotFoundError, PermissionDeniedError, RunFinishedError

#: The workflow type format, the same as the database constraint.
TYPE_PATTERN = re.compile(r"^[a-z0-9_]+(\.[a-z0-9_]+)*\.v[0-9]+$")
MAX_TYPE_LENGTH = 253
MAX_IDEMPOTENCY_KEY_LENGTH = 512
#: The most characters a concurrency key may have (workflow_run_concurrency_key_length).
MAX_CONCURRENCY_KEY_LENGTH = 255
#: The namespace of a worker that names none, and of the runs the schema's
#: owner records without one (Go: PollerConfig.Namespace's default).
DEFAULT_NAMESPACE = "default"
#: A namespace name, the database's rule (workflow.namespace_valid): a
#: Kubernetes namespace, i.e. a DNS label of at most 63 characters.
NAMESPACE_PATTERN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
MAX_NAMESPACE_LENGTH = 63
#: The Wait.kind of a run its type's flow limits hold back (Go: WaitKindLimit).
WAIT_KIND_LIMIT = "limit"
#: The most runs one create_many call records (workflow.create_runs).
MAX_CREATE_MANY = 10000
#: Step and signal names: 1 to 128 characters of letters, digits and . _ : -.
STEP_NAME_PATTERN = re.compile(r"[A-Za-z0-9._:-]{1,128}")
MAX_STEP_NAME_LENGTH = 128
#: The largest step output as JSON (a child's result is journaled in its
#: parent under the same limit, as large as a run's result).
MAX_STEP_OUTPUT_BYTES = 1048576
#: The largest signal payload, as JSON.
MAX_SIGNAL_PAYLOAD_BYTES = 262144
#: How deep a stored value (payload, result, step output, signal payload) may
#: nest objects and arrays; the database refuses deeper ones.
MAX_JSON_DEPTH = 64
#: The standard SQLSTATEs with which the server itself refuses a value
#: (invalid parameter, text or datetime, a limit reached, a check,
#: invalid or untranslatable characters, a value nested past the server's
#: stack), and the inbox's own codes said as InvalidInputError (class SW,
#: testdata/contract/errors.json): the caller's input (the Go SDK's
#: ErrInvalid).
_REFUSED_STATES = frozenset(
    {"22023", "22P02", "22007", "22008", "54000", "23514", "22021", "22P05", "54001"}
    | {code for code, error in ERRORS.items() if error is InvalidInputError}
)
#: The SQLSTATE with which the server refuses the login itself
#: (insufficient_privilege: a grant or row-level security). The inbox's
#: own refusals (a namespace the login is not bound to, a type not shared
#: with its namespace) are SW002, in ERRORS. Said as PermissionDeniedError.
_DENIED_STATE = "42501"


def _primary_message(e: psycopg.Error) -> str:
    """The database's own sentence for an error, without its context lines."""
    diag = getattr(e, "diag", None)
    return (diag.message_primary if diag is not None else None) or str(e)


#: A W3C traceparent as a run stores it (workflow_run_traceparent_format):
#: version 00, lowercase hex, neither the trace id nor the parent id all zeros.
TRACEPARENT_PATTERN = re.compile(r"00-([0-9a-f]{32})-([0-9a-f]{16})-[0-9a-f]{2}")
#: The run_at of a run parked on an open wait (workflow.far_future()).
FAR_FUTURE = datetime(9999, 1, 1, tzinfo=timezone.utc)

#: A duration: seconds (int or float) or a timedelta.
Duration = Union[int, float, timedelta]

# The checks below (types, step and signal names, traceparents, concurrency
# keys) repeat rules that the database enforces itself: the constraints of
# workflow_run and workflow.step_name_problem in internal/engine/sql/workflow.sql.
# The database is the authority; these only refuse a bad value before a
# round trip, with a sentence naming the rule, as the Go SDK's
# engine.Validate* do. A value they let through that the database refuses is
# still refused, as InvalidInputError. The contract cases of testdata/contract
# (types, names, traceparents) hold both to one answer: tests/test_contract.py
# runs each case through the SDK, and again with these checks switched off,
# so that the database alone judges it.


def namespace_problem(namespace: Any, what: str = "namespace") -> Optional[str]:
    """Why a namespace name would be refused (None when it is valid): the rule of workflow.namespace_valid."""
    if not isinstance(namespace, str):
        return f"{what} must be a string, got {type(namespace).__name__}"
    if len(namespace) > MAX_NAMESPACE_LENGTH or not NAMESPACE_PATTERN.fullmatch(namespace):
        return (
            f"{what} {namespace[:100]!r}: a namespace is a Kubernetes namespace name, at most "
            f"{MAX_NAMESPACE_LENGTH} lowercase letters, digits and '-', starting and ending with a "
            "letter or digit"
        )
    return None


def _check_namespaces(namespace: Optional[str], type_namespace: Optional[str]) -> None:
    """InvalidInputError unless each of the namespaces a producer names (None: not named) is a namespace name."""
    for value, what in ((namespace, "namespace"), (type_namespace, "type namespace")):
        if value is not None:
            problem = namespace_problem(value, what)
            if problem is not None:
                raise InvalidInputError(problem)


def step_name_problem(name: Any) -> Optional[str]:
    """What is wrong with a step or signal name (the words of workflow.step_name_problem), or None."""
    if not isinstance(name, str) or not 1 <= len(name) <= MAX_STEP_NAME_LENGTH:
        n = len(name) if isinstance(name, str) else 0
        return f"step name must be 1 to {MAX_STEP_NAME_LENGTH} characters, got {n}"
    if not STEP_NAME_PATTERN.fullmatch(name):
        return (
            f"step name {json.dumps(name, ensure_ascii=False)} may contain only letters, digits and . _ : -"
        )
    return None


def to_millis(value: Duration, what: str) -> int:
    """A duration in whole milliseconds; InvalidInputError unless it is a number or a timedelta."""
    if isinstance(value, timedelta):
        seconds = value.total_seconds()
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        seconds = float(value)
    else:
        raise InvalidInputError(f"{what} must be seconds (a number) or a timedelta, got {value!r}")
    if seconds != seconds or seconds in (float("inf"), float("-inf")):
        raise InvalidInputError(f"{what} must be finite, got {value!r}")
    return int(round(seconds * 1000))


def validate_type(workflow_type: str) -> None:
    """Raise InvalidInputError unless workflow_type is a versioned type such as content.thumbnail.v1."""
    if len(workflow_type) > MAX_TYPE_LENGTH or not TYPE_PATTERN.fullmatch(workflow_type):
        raise InvalidInputError(
            f"type {workflow_type!r}: type must be dot-separated lowercase segments of letters, digits "
            "and underscores ending in a version such as .v1 (for example content.thumbnail.v1)"
        )


def traceparent_problem(traceparent: Any) -> Optional[str]:
    """Why a traceparent would be refused (None when it is None or valid)."""
    if traceparent is None:
        return None
    rule = (
        "traceparent must be a W3C traceparent: 00-<32 lowercase hex trace id>-"
        "<16 lowercase hex parent id>-<2 hex flags>, neither id all zeros"
    )
    if not isinstance(traceparent, str):
        return rule
    m = TRACEPARENT_PATTERN.fullmatch(traceparent)
    if m is None or m.group(1) == "0" * 32 or m.group(2) == "0" * 16:
        return rule
    return None


def concurrency_key_problem(key: Any) -> Optional[str]:
    """Why a concurrency key would be refused (None when it is None, empty or valid).

    The rule of the Go SDK (engine.ValidateConcurrencyKey): 1 to 255
    characters of UTF-8 text without NUL; empty means none.
    """
    if key is None:
        return None
    if not isinstance(key, str):
        return f"concurrency key must be a string, got {type(key).__name__}"
    if len(key) > MAX_CONCURRENCY_KEY_LENGTH:
        return (
            f"concurrency key is {len(key)} characters, at most {MAX_CONCURRENCY_KEY_LENGTH} " "are allowed"
        )
    if "\x00" in key:
        return "concurrency key must be UTF-8 text without NUL characters"
    try:
        key.encode("utf-8")
    except UnicodeEncodeError:
        return "concurrency key must be UTF-8 text without NUL characters"
    return None


def _create_params(
    workflow_type: Any,
    payload: Any,
    idempotency_key: Optional[str],
    priority: Optional[int],
    run_at: Optional[datetime],
    max_attempts: Optional[int],
    retry_base_delay: Optional[timedelta],
    retry_max_delay: Optional[timedelta],
    deadline: Optional[Duration],
    traceparent: Optional[str] = None,
    concurrency_key: Optional[str] = None,
) -> Dict[str, Any]:
    """The checked parameters of one run to create (InvalidInputError when one is bad)."""
    if not isinstance(workflow_type, str):
        raise InvalidInputError(f"type must be a string, got {workflow_type!r}")
    validate_type(workflow_type)
    if payload is None:
        payload = {}
    if not isinstance(payload, Mapping):
        raise InvalidInputError("payload must be a JSON object (a mapping)")
    try:
        raw = json.dumps(payload)
    except (TypeError, ValueError, RecursionError) as e:
        raise InvalidInputError(f"payload is not JSON: {e}") from None
    if idempotency_key is not None and not 1 <= len(idempotency_key) <= MAX_IDEMPOTENCY_KEY_LENGTH:
        raise InvalidInputError(f"idempotency key must be 1 to {MAX_IDEMPOTENCY_KEY_LENGTH} characters")
    if idempotency_key is not None and "\x00" in idempotency_key:
        raise InvalidInputError("idempotency key must not contain NUL characters")
    if max_attempts is not None and not 1 <= max_attempts <= 1000:
        raise InvalidInputError("max attempts must be between 1 and 1000")
    deadline_ms = None
    if deadline is not None:
        deadline_ms = to_millis(deadline, "deadline")
        if deadline_ms < 1:
            raise InvalidInputError(f"deadline must be at least 1ms, got {deadline!r}")
    if traceparent == "":
        traceparent = None  # no trace context, as in the Go client
    problem = traceparent_problem(traceparent)
    if problem is not None:
        raise InvalidInputError(problem)
    problem = concurrency_key_problem(concurrency_key)
    if problem is not None:
        raise InvalidInputError(problem)
    if concurrency_key == "":
        concurrency_key = None  # no key, as in the Go client
    return {
        "type": workflow_type,
        "payload": raw,
        "priority": priority,
        "run_at": run_at,
        "key": idempotency_key,
        "max_attempts": max_attempts,
        "base_ms": to_millis(retry_base_delay, "retry base delay") if retry_base_delay is not None else None,
        "max_ms": to_millis(retry_max_delay, "retry max delay") if retry_max_delay is not None else None,
        "deadline_ms": deadline_ms,
        "traceparent": traceparent,
        "concurrency_key": concurrency_key,
    }


@dataclass(frozen=True)
class CreateResult:
    """Which run holds an intent; created is False when the idempotency key was already taken."""

    id: str
    created: bool


@dataclass(frozen=True)
class Wait:
    """What a parked run waits for: a sleep, a signal, a child run, or its type's flow limits."""

    #: sleep, signal, child, dag or limit (held back by its type's flow
    #: limits: a full concurrency key or a rate window used up).
    kind: str
    #: The journal entry the wait will fill in (None for limit and dag).
    step: Optional[str]
    #: The signal waited for (kind signal).
    signal: Optional[str]
    #: When the wait ends by itself; None for an open wait.
    until: Optional[datetime]


@dataclass(frozen=True)
class Run:
    """A recorded intent and its progress.

    ``deadline_at`` is when the run fails with "deadline exceeded", ``parent_id``
    and ``parent_step`` name the run (and its step) that started this one as a
    child, and ``wait`` says what a parked run waits for (None when not parked).
    """

    id: str
    type: str
    payload: Mapping[str, Any]
    status: str
    priority: int
    run_at: datetime
    idempotency_key: Optional[str]
    attempt: int
    max_attempts: int
    leased_by: Optional[str]
    lease_until: Optional[datetime]
    last_error: Optional[str]
    result: Any
    created_at: datetime
    updated_at: datetime
    finished_at: Optional[datetime]
    deadline_at: Optional[datetime] = None
    parent_id: Optional[str] = None
    parent_step: Optional[str] = None
    wait: Optional[Wait] = None
    #: The W3C traceparent stored with the run by its producer (None for none).
    traceparent: Optional[str] = None
    #: When the first attempt started (None before).
    started_at: Optional[datetime] = None
    #: The run's own backoff (None: the default, attempt² minutes).
    retry_base_delay: Optional[timedelta] = None
    retry_max_delay: Optional[timedelta] = None
    #: The Kubernetes WorkflowRun the run mirrors (None for runs recorded otherwise).
    source_namespace: Optional[str] = None
    source_name: Optional[str] = None
    source_uid: Optional[str] = None
    #: When the run was soft-deleted (None while it is kept).
    deleted_at: Optional[datetime] = None
    #: The key that groups the run for its type's per-key flow limits (None for none).
    concurrency_key: Optional[str] = None
    #: The namespace (tenant) the run belongs to: who owns and sees it.
    namespace: Optional[str] = None
    #: The namespace whose registry and workers run its type: its own
    #: namespace, unless another namespace shares the type with it.
    type_namespace: Optional[str] = None


@dataclass(frozen=True)
class RunPage:
    """One page of :meth:`Client.list`: runs oldest first, and the cursor of the next page.

    ``next_cursor`` is None on the last page; otherwise pass it as ``after``.
    It is opaque (the same text as the Go SDK's RunPage.NextCursor).
    """

    runs: List[Run]
    next_cursor: Optional[str]


@dataclass(frozen=True)
class JournalStep:
    """One entry of a run's journal: a step, sleep, signal wait or child run its code reached."""

    name: str
    position: int
    #: step, sleep, signal or child.
    kind: str
    #: ok, error or timeout; None while a wait is open.
    outcome: Optional[str]
    output: Any
    error: Optional[str]
    attempt: int
    child_id: Optional[str]
    wake_at: Optional[datetime]
    started_at: datetime
    finished_at: Optional[datetime]


@dataclass(frozen=True)
class SignalResult:
    """What became of a signal.

    ``duplicate`` is True when a signal with the same idempotency key had been
    sent before (nothing new was stored); ``delivered`` is True when it woke a
    run waiting for it (otherwise it is kept until the run waits for it).
    """

    signal_id: int
    duplicate: bool
    delivered: bool


@dataclass(frozen=True)
class Event:
    """One entry of a run's audit trail."""

    id: int
    run_id: str
    type: str
    data: Mapping[str, Any]
    created_at: datetime


@dataclass(frozen=True)
class LogLine:
    """A line a run's handler logged through Task.logger (Go: LogLine)."""

    #: The attempt that logged it, and its number within the attempt (from 1).
    attempt: int
    seq: int
    #: When it was logged, by the worker's clock.
    at: datetime
    #: debug, info, warn or error.
    level: str
    #: The record's message (at most 8 KiB: a longer one is cut and says so).
    message: str


@dataclass(frozen=True)
class AttemptLog:
    """What is kept of one attempt's log (Go: AttemptLog)."""

    attempt: int
    #: The lines kept, and the octets of their messages.
    lines: int
    bytes: int
    #: The attempt's oldest lines that were not kept (past the database
    #: owner's limits, or the worker's buffer).
    dropped: int
    #: The number (seq) of the first line kept.
    first_seq: int


#: One run, or the one holding its idempotency key, in one call (workflow.create_run).
_CREATE = """
select id::text, created
from workflow.create_run(%(type)s, %(payload)s::jsonb, %(priority)s::integer, %(run_at)s::timestamptz, %(key)s::text,
                         %(max_attempts)s::integer, %(deadline_ms)s::bigint, null::timestamptz, %(base_ms)s::bigint,
                         %(max_ms)s::bigint, %(traceparent)s::text, null::text, null::text, null::text,
                         %(concurrency_key)s::text, %(namespace)s::text, %(type_namespace)s::text)
"""

_CREATE_MANY = """
select coalesce(array_agg(c.id::text order by c.ord), '{}'), coalesce(array_agg(c.created order by c.ord), '{}')
from workflow.create_runs(%s::text[], %s::text[], %s::integer[], %s::timestamptz[], %s::text[], %s::integer[],
                          %s::bigint[], %s::bigint[], %s::bigint[], %s::text[], %s::text[], %s::text, %s::text) c
"""

#: The keys a create_many run may have: create's arguments.
_RUN_KEYS = frozenset(
    {
        "type",
        "payload",
        "idempotency_key",
        "priority",
        "run_at",
        "max_attempts",
        "retry_base_delay",
        "retry_max_delay",
        "deadline",
        "traceparent",
        "concurrency_key",
    }
)

#: The columns of workflow.run_view a Run is made of, in the order _run_from_row reads them.
_RUN_COLUMNS = """
id::text, type, payload, status, priority, run_at, idempotency_key, attempt, max_attempts,
leased_by, lease_until, last_error, result, created_at, updated_at, finished_at,
deadline_at, parent_id::text, parent_step, wait_kind, wait_step, wait_signal, traceparent,
started_at, retry_base_ms, retry_max_ms, source_namespace, source_name, source_uid, deleted_at,
concurrency_key, namespace, type_namespace
"""

_GET = f"select {_RUN_COLUMNS} from workflow.get_run(%s::uuid)"

_LIST = (
    f"select {_RUN_COLUMNS} from workflow.list_runs(%s::text, %s::text[], %s::timestamptz, %s::uuid, "
    "%s::integer)"
)

_STEPS = """
select name, position, kind, outcome, output, error, attempt, child_id::text, wake_at, started_at, finished_at
from workflow.run_steps(%s::uuid)
"""

_EVENTS = "select id, workflow_id::text, event_type, data, created_at from workflow.run_events(%s::uuid, 0)"

_LOGS = (
    "select attempt, seq, logged_at, level, message "
    "from workflow.run_logs(%s::uuid, %s::integer, %s::bigint, %s::integer)"
)

_SCHEMA_VERSION = "select workflow.schema_version()"

_LOG_ATTEMPTS = "select attempt, lines, bytes, dropped, first_seq from workflow.run_log_attempts(%s::uuid)"

#: The lines Client.logs returns when no limit is given, and the most it returns.
DEFAULT_LOG_LIMIT = 1000
MAX_LOG_LIMIT = 10000

#: The page size of Client.list when none is given, and the largest one.
DEFAULT_LIST_LIMIT = 100
MAX_LIST_LIMIT = 1000

_RUN_ID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
_CURSOR_TIME = re.compile(
    r"(\d{4})-(\d{2})-(\d{2})T(\d{2}):(\d{2}):(\d{2})(?:\.(\d{1,9}))?(Z|[+-]\d{2}:\d{2})"
)


def _ms_delta(ms: Optional[int]) -> Optional[timedelta]:
    return timedelta(milliseconds=ms) if ms is not None else None


def _run_from_row(row: Sequence[Any]) -> "Run":
    """A Run from the columns of _RUN_COLUMNS."""
    (
        run_id,
        wtype,
        payload,
        status,
        priority,
        run_at,
        key,
        attempt,
        max_attempts,
        leased_by,
        lease_until,
        last_error,
        result,
        created_at,
        updated_at,
        finished_at,
        deadline_at,
        parent_id,
        parent_step,
        wait_kind,
        wait_step,
        wait_signal,
        traceparent,
        started_at,
        base_ms,
        max_ms,
        source_namespace,
        source_name,
        source_uid,
        deleted_at,
        concurrency_key,
        namespace,
        type_namespace,
    ) = row
    wait = None
    if wait_kind is not None:
        wait = Wait(
            kind=wait_kind, step=wait_step, signal=wait_signal, until=run_at if run_at < FAR_FUTURE else None
        )
    return Run(
        id=run_id,
        type=wtype,
        payload=payload,
        status=status,
        priority=priority,
        run_at=run_at,
        idempotency_key=key,
        attempt=attempt,
        max_attempts=max_attempts,
        leased_by=leased_by,
        lease_until=lease_until,
        last_error=last_error,
        result=result,
        created_at=created_at,
        updated_at=updated_at,
        finished_at=finished_at,
        deadline_at=deadline_at,
        parent_id=parent_id,
        parent_step=parent_step,
        wait=wait,
        traceparent=traceparent,
        started_at=started_at,
        retry_base_delay=_ms_delta(base_ms),
        retry_max_delay=_ms_delta(max_ms),
        source_namespace=source_namespace,
        source_name=source_name,
        source_uid=source_uid,
        deleted_at=deleted_at,
        concurrency_key=concurrency_key,
        namespace=namespace,
        type_namespace=type_namespace,
    )


def _encode_cursor(created_at: datetime, run_id: str) -> str:
    """The position after a run in creation order, written as the Go SDK writes it.

    The text is base64 (URL alphabet, no padding) of the run's creation time
    (RFC 3339 in UTC, fraction without trailing zeros) and its id, joined by
    "|", so a cursor from one SDK continues the listing in the other. Callers
    treat it as opaque.
    """
    at = created_at.astimezone(timezone.utc)
    text = at.strftime("%Y-%m-%dT%H:%M:%S")
    if at.microsecond:
        text += ("." + f"{at.microsecond:06d}").rstrip("0")
    raw = (text + "Z|" + run_id).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def _decode_cursor(cursor: str) -> Tuple[datetime, str]:
    """Read what _encode_cursor (or the Go SDK) wrote; InvalidInputError for anything else."""
    bad = InvalidInputError("malformed cursor")
    if not isinstance(cursor, str) or not re.fullmatch(r"[A-Za-z0-9_-]*", cursor) or len(cursor) % 4 == 1:
        raise bad
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode()
    except (ValueError, UnicodeDecodeError):
        raise bad from None
    text, sep, run_id = raw.partition("|")
    m = _CURSOR_TIME.fullmatch(text)
    if not sep or m is None or not _RUN_ID.fullmatch(run_id):
        raise bad
    year, month, day, hour, minute, second, fraction, zone = m.groups()
    tz = timezone.utc
    if zone != "Z":
        sign = -1 if zone[0] == "-" else 1
        tz = timezone(sign * timedelta(hours=int(zone[1:3]), minutes=int(zone[4:6])))
    try:
        at = datetime(
            int(year),
            int(month),
            int(day),
            int(hour),
            int(minute),
            int(second),
            int((fraction or "0").ljust(9, "0")[:6]),
            tzinfo=tz,
        )
    except ValueError:
        raise bad from None
    return at, run_id


def _refused(e: psycopg.Error) -> bool:
    return getattr(e, "sqlstate", None) in _REFUSED_STATES


def _denied(e: psycopg.Error) -> bool:
    """Whether the database refused the login (SQLSTATE 42501): PermissionDeniedError."""
    return getattr(e, "sqlstate", None) == _DENIED_STATE


def _translate(e: psycopg.Error) -> None:
    """Raise the SDK's error for a database error it names (the inbox's own codes, by ERRORS; a value or
    a login the server refuses); else return."""
    error = ERRORS.get(getattr(e, "sqlstate", None) or "")
    if error is not None:
        raise error(_primary_message(e)) from None
    if _refused(e):
        raise InvalidInputError(_primary_message(e)) from None
    if _denied(e):
        raise PermissionDeniedError(_primary_message(e)) from None


class Client:
    """Records, inspects and cancels runs.

    ``conninfo`` is a libpq connection string or URL. Each call opens a short
    connection unless ``connect`` supplies them (for example from a pool).
    Every call is one call of a function of the inbox (``workflow.create_run``,
    ``workflow.get_run``, ``workflow.list_runs`` ...): the client reads no
    table and holds no query of its own, as the Go client.
    """

    def __init__(
        self, conninfo: str = "", connect: Optional[Callable[[], psycopg.Connection[Any]]] = None
    ) -> None:
        if not conninfo and connect is None:
            raise InvalidInputError("a connection string (or a connect function) is required")
        self._conninfo = conninfo
        self._connect = connect or (lambda: psycopg.connect(conninfo, autocommit=True))

    def close(self) -> None:
        """Close what the client owns.

        The client opens a connection per call (or takes one from ``connect``,
        which the caller keeps owning), so there is nothing to close: this is
        a no-op, there so that code written for the Go client's Close, or a
        ``with Client(...) as client:`` block, works the same.
        """

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def create(
        self,
        workflow_type: str,
        payload: Optional[Mapping[str, Any]] = None,
        *,
        idempotency_key: Optional[str] = None,
        priority: Optional[int] = None,
        run_at: Optional[datetime] = None,
        max_attempts: Optional[int] = None,
        retry_base_delay: Optional[timedelta] = None,
        retry_max_delay: Optional[timedelta] = None,
        deadline: Optional[Duration] = None,
        traceparent: Optional[str] = None,
        concurrency_key: Optional[str] = None,
        namespace: Optional[str] = None,
        type_namespace: Optional[str] = None,
        conn: Optional[psycopg.Connection[Any]] = None,
    ) -> CreateResult:
        """Record an intent. When this returns, the run is durable and will run eventually.

        With ``conn``, the run is written on that connection, inside whatever
        transaction it has open (the transactional outbox): it commits or rolls
        back with the caller's own writes, and workers see it only after the
        commit. Without it, the run is committed at once on a connection of the
        client's own.

        With an idempotency key, a second call with the same key records nothing
        and returns the first run's id with ``created=False`` (one call of
        ``workflow.create_run`` either way). ``retry_base_delay`` and
        ``retry_max_delay`` override the default backoff (attempt² minutes).
        ``deadline`` (seconds or a timedelta) fails the run with "deadline
        exceeded" that long after its creation, by the database clock (the
        database computes the instant), wherever it is: pending, parked or
        running. ``traceparent`` (a W3C traceparent, e.g. of the caller's
        current span) is stored with the run: the spans of its attempts link to
        it, and handlers see it as ``task.traceparent``.

        ``concurrency_key`` (Go: CreateOptions.ConcurrencyKey) groups the run
        for the flow limits of its type, set in the registry (a
        WorkflowRegistry's ``concurrency`` and ``rateLimit``): for example at
        most one run of a customer leased at once. 1 to 255 characters of
        text without NUL; None or "" sets none. A run its type's limits hold
        back stays pending, with ``wait.kind == "limit"``.

        ``namespace`` (a Kubernetes namespace name) is the namespace the run
        belongs to: its tenant, whose producers and readers see it. None
        records it in the login's one producer namespace (``"default"`` for
        the schema's owner). ``type_namespace`` asks for a type that another
        namespace's registry shares with the run's namespace, to run among
        that namespace's workers; None: the run's own namespace. A login not
        bound to ``namespace`` as a producer, or a type that
        ``type_namespace`` does not share, raises PermissionDeniedError; a
        malformed name, InvalidInputError.
        """
        _check_namespaces(namespace, type_namespace)
        params = _create_params(
            workflow_type,
            payload,
            idempotency_key,
            priority,
            run_at,
            max_attempts,
            retry_base_delay,
            retry_max_delay,
            deadline,
            traceparent,
            concurrency_key,
        )
        params["namespace"] = namespace
        params["type_namespace"] = type_namespace
        if conn is not None:
            return self._create(conn, params)
        with self._connect() as own:
            return self._create(own, params)

    @staticmethod
    def _create(conn: psycopg.Connection[Any], params: Mapping[str, Any]) -> CreateResult:
        try:
            row = conn.execute(_CREATE, params).fetchone()
        except psycopg.Error as e:
            _translate(e)
            raise
        if row is None:
            # The run holding the key was deleted between the insert and the look-up.
            raise NotFoundError(f"run with idempotency key {params['key']!r} vanished")
        return CreateResult(id=row[0], created=row[1])

    def create_many(
        self,
        runs: Sequence[Mapping[str, Any]],
        *,
        namespace: Optional[str] = None,
        type_namespace: Optional[str] = None,
        conn: Optional[psycopg.Connection[Any]] = None,
    ) -> List[CreateResult]:
        """Record a batch of runs (at most MAX_CREATE_MANY) in one round trip.

        Each run is a mapping with ``type`` and, optionally, the keyword
        arguments of :meth:`create` (``payload``, ``idempotency_key``,
        ``priority``, ``run_at``, ``max_attempts``, ``retry_base_delay``,
        ``retry_max_delay``, ``deadline``, ``traceparent``,
        ``concurrency_key``). Returns one CreateResult per run,
        in order. Idempotency keys work per run as in create: a key already
        taken, or used by an earlier run of the same batch, records nothing
        for that run and returns the run that holds it with ``created=False``.
        The batch is checked before anything is written; a bad run raises
        InvalidInputError naming it ("row 3: ...", counting from 1). With
        ``conn``, the runs are written in that connection's transaction, as
        in create.

        ``namespace`` and ``type_namespace`` are create's, for the whole
        batch (one ``workflow.create_runs`` call records into one
        namespace): the runs belong to ``namespace`` (None: the login's
        one producer namespace, ``"default"`` for the schema's owner) and
        run a type of ``type_namespace`` (None: their own namespace's).
        PermissionDeniedError when the login may not record there or a
        type is not shared, and nothing is recorded.
        """
        _check_namespaces(namespace, type_namespace)
        if len(runs) > MAX_CREATE_MANY:
            raise InvalidInputError(f"create_many: at most {MAX_CREATE_MANY} runs per call, got {len(runs)}")
        cols: List[List[Any]] = [[] for _ in range(11)]
        for i, run in enumerate(runs, start=1):
            if not isinstance(run, Mapping):
                raise InvalidInputError(
                    f"create_many: row {i}: a run is a mapping with a type, got {type(run).__name__}"
                )
            unknown = sorted(set(run) - _RUN_KEYS)
            if unknown:
                batch = [k for k in unknown if k in ("namespace", "type_namespace")]
                hint = (
                    f" ({', '.join(batch)}: an argument of create_many, for the whole batch)" if batch else ""
                )
                raise InvalidInputError(f"create_many: row {i}: unknown keys {unknown}{hint}")
            try:
                params = _create_params(
                    run.get("type"),
                    run.get("payload"),
                    run.get("idempotency_key"),
                    run.get("priority"),
                    run.get("run_at"),
                    run.get("max_attempts"),
                    run.get("retry_base_delay"),
                    run.get("retry_max_delay"),
                    run.get("deadline"),
                    run.get("traceparent"),
                    run.get("concurrency_key"),
                )
            except InvalidInputError as e:
                raise InvalidInputError(f"create_many: row {i}: {e}") from None
            for col, value in zip(
                cols,
                (
                    params["type"],
                    params["payload"],
                    params["priority"],
                    params["run_at"],
                    params["key"],
                    params["max_attempts"],
                    params["deadline_ms"],
                    params["base_ms"],
                    params["max_ms"],
                    params["traceparent"],
                    params["concurrency_key"],
                ),
            ):
                col.append(value)
        if not runs:
            return []
        args = [*cols, namespace, type_namespace]
        try:
            if conn is not None:
                row = conn.execute(_CREATE_MANY, args).fetchone()
            else:
                with self._connect() as own:
                    row = own.execute(_CREATE_MANY, args).fetchone()
        except psycopg.Error as e:
            _translate(e)
            raise
        assert row is not None
        return [CreateResult(id=i, created=c) for i, c in zip(row[0], row[1])]

    def cancel(self, run_id: str) -> bool:
        """Cancel a pending or leased run; False when it had already finished."""
        row = self._one("select workflow.cancel_run(%s::uuid)", (run_id,))
        return bool(row and row[0])

    def retry(self, run_id: str, attempts: Optional[int] = None, by: Optional[str] = None) -> None:
        """Give a failed or cancelled run another go from where it stopped (``workflow.retry_run``; Go: Client.Retry).

        The run is pending again with a fresh budget of attempts (``attempts``,
        1 to 1000, or as many as it was created with). A durable run keeps its
        journal, so its recorded steps are replayed, not redone; a DAG keeps
        the steps that succeeded and runs its failed, cancelled and unstarted
        steps. ``by`` is recorded in the run's 'retried' event. Raises
        NotFoundError for an unknown run and InvalidInputError with the reason
        for one that cannot be retried (not failed or cancelled, deleted, or a
        step or child of another run: retry that run instead).
        """
        if attempts is not None and not 1 <= attempts <= 1000:
            raise InvalidInputError(f"attempts must be between 1 and 1000, got {attempts}")
        row = self._one(
            "select status, message from workflow.retry_run(%s::uuid, %s::integer, %s::text)",
            (run_id, attempts, (by or "")[:256]),
        )
        if row is None or row[0] == "retried":
            return
        if row[0] == "not_found":
            raise NotFoundError(f"run {run_id} not found")
        raise InvalidInputError(f"retry run {run_id}: {row[1]}")

    def get(self, run_id: str) -> Run:
        """Return a run (``workflow.get_run``), or raise NotFoundError."""
        row = self._one(_GET, (run_id,))
        if row is None:
            raise NotFoundError(f"run {run_id} not found")
        return _run_from_row(row)

    def list(
        self,
        type_prefix: Optional[str] = None,
        statuses: Optional[Iterable[str]] = None,
        after: Optional[str] = None,
        limit: int = DEFAULT_LIST_LIMIT,
    ) -> RunPage:
        """Return runs oldest first, one page at a time (``workflow.list_runs``; Go: Client.List).

        ``type_prefix`` keeps runs whose type starts with it (taken literally;
        None or "" keeps every type), ``statuses`` those in one of the given
        statuses (None or empty keeps all). ``limit`` is the page size, 1 to
        1000. ``after`` is the ``next_cursor`` of the previous page (None for
        the first page); deleted runs are left out. A cursor not written by
        an SDK raises InvalidInputError.
        """
        if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_LIST_LIMIT:
            raise InvalidInputError(f"list runs: limit must be between 1 and {MAX_LIST_LIMIT}, got {limit!r}")
        if isinstance(statuses, str):
            statuses = [statuses]
        wanted = [s for s in (statuses or [])]
        if any(not isinstance(s, str) for s in wanted):
            raise InvalidInputError(f"list runs: statuses must be strings, got {wanted!r}")
        if type_prefix is not None and not isinstance(type_prefix, str):
            raise InvalidInputError(f"list runs: type prefix must be a string, got {type_prefix!r}")
        after_at: Optional[datetime] = None
        after_id: Optional[str] = None
        if after:
            try:
                after_at, after_id = _decode_cursor(after)
            except InvalidInputError as e:
                raise InvalidInputError(f"list runs: {e}") from None
        with self._connect() as conn:
            rows = self._rows(conn, _LIST, (type_prefix or None, wanted, after_at, after_id, limit + 1))
        runs = [_run_from_row(r) for r in rows]
        next_cursor = None
        if len(runs) > limit:
            runs = runs[:limit]
            last = runs[-1]
            next_cursor = _encode_cursor(last.created_at, last.id)
        return RunPage(runs=runs, next_cursor=next_cursor)

    def steps(self, run_id: str) -> List[JournalStep]:
        """Return a run's journal in the order its code reached the steps (``workflow.run_steps``)."""
        with self._connect() as conn:
            rows = self._rows(conn, _STEPS, (run_id,))
        return [JournalStep(*r) for r in rows]

    def signal(
        self,
        run_id: str,
        name: str,
        payload: Any = None,
        idempotency_key: Optional[str] = None,
        conn: Optional[psycopg.Connection[Any]] = None,
    ) -> SignalResult:
        """Send signal ``name`` with ``payload`` (any JSON value; None for none) to a run.

        Signals are buffered: one sent before the run waits for it is kept and
        handed to the first ``wait_for_signal`` of that name, oldest first. With an
        idempotency key, sending again is a no-op (``duplicate=True``). Raises
        NotFoundError for an unknown run, RunFinishedError for a finished one and
        InvalidInputError for a bad name, key or payload. With ``conn``, the
        signal is sent inside that connection's open transaction and reaches
        its run only if the transaction commits.
        """
        problem = step_name_problem(name)
        if problem is not None:
            raise InvalidInputError(
                f"signal {name!r} to run {run_id}: " + problem.replace("step name", "signal name")
            )
        if idempotency_key is not None and not 1 <= len(idempotency_key) <= MAX_IDEMPOTENCY_KEY_LENGTH:
            raise InvalidInputError(
                f"a signal's idempotency key must be 1 to {MAX_IDEMPOTENCY_KEY_LENGTH} characters"
            )
        raw = None
        if payload is not None:
            try:
                raw = json.dumps(payload, allow_nan=False)
            except (TypeError, ValueError, RecursionError) as e:
                raise InvalidInputError(f"signal {name} to run {run_id}: payload is not JSON: {e}") from None
        query = (
            "select signal_id, duplicate, delivered from workflow.send_signal(%s::uuid, %s, %s::jsonb, %s)"
        )
        try:
            if conn is not None:
                row = conn.execute(query, (run_id, name, raw, idempotency_key)).fetchone()
            else:
                with self._connect() as own:
                    row = own.execute(query, (run_id, name, raw, idempotency_key)).fetchone()
        except psycopg.Error as e:
            _translate(e)
            raise
        assert row is not None
        return SignalResult(signal_id=row[0], duplicate=row[1], delivered=row[2])

    def events(self, run_id: str) -> List[Event]:
        """Return a run's audit trail, oldest first (``workflow.run_events``)."""
        with self._connect() as conn:
            rows = self._rows(conn, _EVENTS, (run_id,))
        return [Event(*r) for r in rows]

    def logs(
        self, run_id: str, after_attempt: int = 0, after_seq: int = 0, limit: int = DEFAULT_LOG_LIMIT
    ) -> List[LogLine]:
        """Return up to ``limit`` lines (1 to 10,000) of a run's log after the line (``after_attempt``,
        ``after_seq``), in order (``workflow.run_logs``; Go: Client.Logs).

        (0, 0) reads from the first line; the last line returned is where to
        read on from. What handlers logged through ``task.logger``, per
        attempt, the newest lines within the database owner's limits. None
        when the run is missing or of a namespace the login does not read.
        """
        for value, what in ((after_attempt, "after_attempt"), (after_seq, "after_seq")):
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise InvalidInputError(f"run logs: {what} must be a whole number, 0 or more, got {value!r}")
        if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_LOG_LIMIT:
            raise InvalidInputError(f"run logs: limit must be between 1 and {MAX_LOG_LIMIT}, got {limit!r}")
        with self._connect() as conn:
            rows = self._rows(conn, _LOGS, (run_id, after_attempt, after_seq, limit))
        return [LogLine(*r) for r in rows]

    def log_attempts(self, run_id: str) -> List[AttemptLog]:
        """Return, per attempt of a run that logged, what its log keeps and how many lines it dropped,
        in attempt order (``workflow.run_log_attempts``; Go: Client.LogAttempts)."""
        with self._connect() as conn:
            rows = self._rows(conn, _LOG_ATTEMPTS, (run_id,))
        return [AttemptLog(*r) for r in rows]

    def schema_version(self) -> int:
        """Return the version of the inbox schema the database holds (``workflow.schema_version()``, which any
        of the three roles may call; Go: Client.SchemaVersion)."""
        row = self._one(_SCHEMA_VERSION, ())
        assert row is not None
        return int(row[0])

    def _one(self, query: str, params: Sequence[Any]) -> Optional[Tuple[Any, ...]]:
        with self._connect() as conn:
            rows = self._rows(conn, query, params)
        return rows[0] if rows else None

    @staticmethod
    def _rows(conn: psycopg.Connection[Any], query: str, params: Sequence[Any]) -> List[Tuple[Any, ...]]:
        """The rows of one function call; a value the database refuses (a malformed id) is InvalidInputError,
        a login it refuses PermissionDeniedError."""
        try:
            return conn.execute(query, params).fetchall()
        except psycopg.Error as e:
            _translate(e)
            raise
