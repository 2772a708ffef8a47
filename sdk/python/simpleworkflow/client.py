"""Producer-side API: create, cancel, get and list the events of runs."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Callable, List, Mapping, Optional

import psycopg

from .errors import InvalidInputError, NotFoundError

#: The workflow type format, the same as the database constraint.
TYPE_PATTERN = re.compile(r"^[a-z0-9_]+(\.[a-z0-9_]+)*\.v[0-9]+$")
MAX_TYPE_LENGTH = 253
MAX_IDEMPOTENCY_KEY_LENGTH = 512


def validate_type(workflow_type: str) -> None:
    """Raise InvalidInputError unless workflow_type is a versioned type such as content.thumbnail.v1."""
    if len(workflow_type) > MAX_TYPE_LENGTH or not TYPE_PATTERN.match(workflow_type):
        raise InvalidInputError(
            f"type {workflow_type!r}: type must be dot-separated lowercase segments of letters, digits "
            "and underscores ending in a version such as .v1 (for example content.thumbnail.v1)"
        )


@dataclass(frozen=True)
class CreateResult:
    """Which run holds an intent; created is False when the idempotency key was already taken."""

    id: str
    created: bool


@dataclass(frozen=True)
class Run:
    """A recorded intent and its progress."""

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


@dataclass(frozen=True)
class Event:
    """One entry of a run's audit trail."""

    id: int
    run_id: str
    type: str
    data: Mapping[str, Any]
    created_at: datetime


_INSERT = """
insert into workflow.workflow_run (type, payload, priority, run_at, idempotency_key, max_attempts,
                                   retry_base_delay, retry_max_delay)
values (%(type)s, %(payload)s::jsonb, coalesce(%(priority)s::integer, 100),
        coalesce(%(run_at)s::timestamptz, now()), %(key)s, coalesce(%(max_attempts)s::integer, 3),
        %(base)s::interval, %(max)s::interval)
on conflict (idempotency_key) do nothing
returning id::text
"""

_GET = """
select id::text, type, payload, status, priority, run_at, idempotency_key, attempt, max_attempts,
       leased_by, lease_until, last_error, result, created_at, updated_at, finished_at
from workflow.workflow_run where id = %s
"""


class Client:
    """Records, inspects and cancels runs.

    ``conninfo`` is a libpq connection string or URL. Each call opens a short
    connection unless ``connect`` supplies them (for example from a pool).
    """

    def __init__(self, conninfo: str = "", connect: Optional[Callable[[], psycopg.Connection]] = None) -> None:
        if not conninfo and connect is None:
            raise InvalidInputError("a connection string (or a connect function) is required")
        self._conninfo = conninfo
        self._connect = connect or (lambda: psycopg.connect(conninfo, autocommit=True))

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
    ) -> CreateResult:
        """Record an intent. When this returns, the run is durable and will run eventually.

        With an idempotency key, a second call with the same key records nothing
        and returns the first run's id with ``created=False``. ``retry_base_delay``
        and ``retry_max_delay`` override the default backoff (attempt² minutes).
        """
        validate_type(workflow_type)
        if payload is None:
            payload = {}
        if not isinstance(payload, Mapping):
            raise InvalidInputError("payload must be a JSON object (a mapping)")
        if idempotency_key is not None and not 1 <= len(idempotency_key) <= MAX_IDEMPOTENCY_KEY_LENGTH:
            raise InvalidInputError(f"idempotency key must be 1 to {MAX_IDEMPOTENCY_KEY_LENGTH} characters")
        if max_attempts is not None and not 1 <= max_attempts <= 1000:
            raise InvalidInputError("max attempts must be between 1 and 1000")
        params = {
            "type": workflow_type,
            "payload": json.dumps(payload),
            "priority": priority,
            "run_at": run_at,
            "key": idempotency_key,
            "max_attempts": max_attempts,
            "base": retry_base_delay,
            "max": retry_max_delay,
        }
        with self._connect() as conn:
            row = conn.execute(_INSERT, params).fetchone()
            if row is not None:
                return CreateResult(id=row[0], created=True)
            row = conn.execute(
                "select id::text from workflow.workflow_run where idempotency_key = %s", (idempotency_key,)
            ).fetchone()
            if row is None:
                raise NotFoundError(f"run with idempotency key {idempotency_key!r} vanished")
            return CreateResult(id=row[0], created=False)

    def cancel(self, run_id: str) -> bool:
        """Cancel a pending or leased run; False when it had already finished."""
        with self._connect() as conn:
            row = conn.execute("select workflow.cancel_run(%s)", (run_id,)).fetchone()
            return bool(row and row[0])

    def get(self, run_id: str) -> Run:
        """Return a run, or raise NotFoundError."""
        with self._connect() as conn:
            row = conn.execute(_GET, (run_id,)).fetchone()
        if row is None:
            raise NotFoundError(f"run {run_id} not found")
        return Run(*row)

    def events(self, run_id: str) -> List[Event]:
        """Return a run's audit trail, oldest first."""
        with self._connect() as conn:
            rows = conn.execute(
                "select id, workflow_id::text, event_type, data, created_at from workflow.workflow_event "
                "where workflow_id = %s order by id",
                (run_id,),
            ).fetchall()
        return [Event(*r) for r in rows]
