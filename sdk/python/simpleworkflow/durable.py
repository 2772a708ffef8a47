"""Task: one attempt of a run as a handler sees it, with the durable verbs.

Durable execution keeps a journal per run in the database: each step's output,
each sleep, signal wait and child run, keyed by name at the position the
handler's code reached it. A later attempt (after a failure, a crash, or a
wake-up from a parked wait) replays the journal instead of redoing the work.
The replay rules are those of the Go SDK, so a run can move between Go and
Python workers mid-way.
"""

from __future__ import annotations

import json
import logging
import threading
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any, Callable, Dict, Iterator, List, Mapping, Optional, Tuple

import psycopg
from psycopg.pq import TransactionStatus

from .client import (
    _REFUSED_STATES,
    MAX_STEP_OUTPUT_BYTES,
    Duration,
    _primary_message,
    step_name_problem,
    to_millis,
    validate_type,
)
from .errors import (
    ChildFailed,
    InvalidInputError,
    NonDeterministicError,
    Parked,
    PermanentError,
    StoppedError,
)
from .tracing import (
    ATTR_CHILD_ID,
    ATTR_CHILD_TYPE,
    ATTR_PARKED,
    ATTR_REPLAYED,
    ATTR_SIGNAL,
    ATTR_STEP_POS,
    ATTR_STEP_TX,
    ATTR_WAKE_AT,
    NO_SPAN,
    Tracing,
    format_time,
)

if TYPE_CHECKING:
    from ._run_log import _RunLog

#: Writes a completed step and returns the database's answer for it
#: (status, output, message), as a row of workflow.record_steps: the poller's
#: step writer, which journals the steps of concurrent handlers together.
#: Called with (run id, lease token, name, position, output as JSON text).
StepRecorder = Callable[[str, int, str, int, str], Tuple[str, Any, Optional[str]]]

#: The most steps, sleeps, waits and children one run has (positions 0 to 999).
MAX_STEPS = 1000

#: Why a handler was asked to stop (Task.reason).
REASON_CANCELLED = "run cancelled"
REASON_LEASE_LOST = "lease lost"
REASON_SHUTDOWN = "worker shutting down"
REASON_DEADLINE = "deadline exceeded"
REASON_PARKED = "run parked"

KIND_STEP = "step"
KIND_SLEEP = "sleep"
KIND_SIGNAL = "signal"
KIND_CHILD = "child"


def nondeterminism_message(kind: str, name: str, position: int, got_kind: str, got_name: str) -> str:
    """What the journal expected at a position and what the code reached instead, in the words
    of workflow.nondeterminism_message."""
    got = f'"{got_name}"' if kind == got_kind else f'{got_kind} "{got_name}"'
    return f'non-deterministic: expected {kind} "{name}" at position {position}, got {got}'


@dataclass
class _Entry:
    """A journal entry as the replay knows it."""

    name: str
    position: int
    kind: str
    outcome: Optional[str] = None
    output: Any = None
    error: Optional[str] = None
    child_id: Optional[str] = None

    @property
    def done(self) -> bool:
        return self.outcome is not None


def _encode(name: str, value: Any) -> str:
    """A step's output as JSON within the limits, or a PermanentError."""
    try:
        raw = json.dumps(value, allow_nan=False, ensure_ascii=False)
    except (TypeError, ValueError, RecursionError) as e:
        raise PermanentError(f'step "{name}": invalid input: output is not JSON-serialisable: {e}') from None
    size = len(raw.encode("utf-8"))
    if size > MAX_STEP_OUTPUT_BYTES:
        raise PermanentError(
            f'step "{name}": invalid input: output is {size} bytes; '
            f"the limit is {MAX_STEP_OUTPUT_BYTES} (1 MiB)"
        )
    return raw


class Task:
    """One attempt of a run, as a handler sees it (the Go SDK's Task).

    ``id``, ``type``, ``payload`` (the run's JSON object, decoded: Go's
    Task.Decode), ``attempt``, ``max_attempts``, ``worker_id``,
    ``lease_token`` (the fence of this attempt's writes), ``deadline_at``
    (when the run fails with "deadline exceeded"; None for none) and
    ``traceparent`` (the W3C traceparent its producer stored, e.g. to link or
    parent the handler's own spans; None for none) describe it.

    ``logger`` is the attempt's ``logging.Logger`` (Go: Task.Logger): what the
    handler logs through it at or above the poller's ``run_log_level`` is kept
    with the run, per attempt (:meth:`Client.logs`), and every record goes to
    the worker's own log too, with the run's id.

    ``cancelled`` is a threading.Event set when the run is cancelled, its lease
    is lost, its deadline passes, it parks, or the worker's shutdown grace
    period is over; ``reason`` says which. Long handlers check
    :meth:`is_cancelled` or sleep with :meth:`wait` (a plain, non-durable sleep).

    Durable verbs: :meth:`step`, :meth:`step_tx`, :meth:`sleep`, :meth:`sleep_until`,
    :meth:`wait_for_signal`, :meth:`start_child` and :meth:`await_child`. Call
    them one after another from the handler's thread, in the same order on
    every attempt; code between them runs again on every attempt, so take the
    current time, random values and side effects inside steps. Once the attempt
    is stopped (cancelled, lease lost, deadline passed, worker shutting down)
    they raise :class:`StoppedError`; once it parked, :class:`Parked`; once it
    failed by non-determinism, that :class:`NonDeterministicError` again.
    """

    def __init__(
        self,
        run_id: str,
        workflow_type: str,
        payload: Mapping[str, Any],
        attempt: int,
        max_attempts: int,
        worker_id: str,
        *,
        lease_token: Optional[int] = None,
        deadline_at: Optional[datetime] = None,
        traceparent: Optional[str] = None,
        journal: Optional[List[Mapping[str, Any]]] = None,
        connect: Optional[Callable[[], psycopg.Connection[Any]]] = None,
        on_park: Optional[Callable[[Optional[datetime]], None]] = None,
        record_step: Optional[StepRecorder] = None,
        tracing: Optional[Tracing] = None,
        span: Any = None,
    ) -> None:
        self.id = run_id
        self.type = workflow_type
        self.payload = payload
        self.attempt = attempt
        self.max_attempts = max_attempts
        self.worker_id = worker_id
        self.lease_token = lease_token
        self.deadline_at = deadline_at
        self.traceparent = traceparent
        self.cancelled = threading.Event()
        self.reason: Optional[str] = None
        self.done = False
        # Set by the poller when shutdown gave the run back without waiting
        # for the handler: the attempt's outcome has no one to write it.
        self._handed_back = False
        # Set by the poller for a run with a DAG run or durable parent: its
        # completion may hand the next run to this worker.
        self._has_parent = False
        # Durable state: the journal loaded at claim, the position reached,
        # and what the attempt decided about itself.
        self._connect = connect
        self._on_park = on_park
        self._record_step = record_step
        self._tracing = tracing
        #: The attempt's span (None when nothing is traced).
        self._span = span
        self._mu = threading.Lock()
        self._by_pos: Dict[int, _Entry] = {}
        self._by_name: Dict[str, _Entry] = {}
        self._next = 0
        self._signals: Dict[str, int] = {}
        self._busy = False
        self._parked = False
        self._failure: Optional[NonDeterministicError] = None
        # One past the last position of the journal loaded at claim (0 for
        # none): code before it runs again, and what it logs is not kept again.
        self._replay_until = 0
        for e in journal or []:
            entry = _Entry(
                name=e["name"],
                position=e["position"],
                kind=e["kind"],
                outcome=e.get("outcome"),
                output=e.get("output"),
                error=e.get("error"),
                child_id=e.get("child_id"),
            )
            self._by_pos[entry.position] = entry
            self._by_name[entry.name] = entry
            self._replay_until = max(self._replay_until, entry.position + 1)
        # The run log (set by the poller): the attempt's buffer, what makes
        # its logger (on first use of logger: most handlers never log), and
        # what sends the buffer before a wait parks the run.
        self._run_log: Optional[_RunLog] = None
        self._new_logger: Optional[Callable[[Task], logging.Logger]] = None
        self._send_logs: Optional[Callable[[Task], None]] = None
        self._logger: Optional[logging.Logger] = None

    @property
    def logger(self) -> logging.Logger:
        """The attempt's logger (Go: Task.Logger), a ``logging.Logger``.

        Its records at or above the poller's ``run_log_level`` (INFO by
        default) are kept with the run, per attempt: their message, and the
        traceback of ``exc_info``, as a line of at most 8 KiB at level debug,
        info, warn (WARNING) or error (ERROR, CRITICAL). They are sent every
        ``log_flush_interval`` seconds, before the attempt's outcome is
        written and before a wait parks the run; :meth:`Client.logs` reads
        them. The run keeps the newest lines within the database owner's
        limits (the oldest are dropped and counted, :meth:`Client.log_attempts`).
        What the handler logs while it replays its journal (the code before
        the last step that the journal loaded at claim holds, run again) was
        kept the first time and is not kept again. Every record the worker's
        logger (``simpleworkflow``) takes goes there too, as a line with the
        run's id, type and attempt. Outside a poller: the ``simpleworkflow``
        logger.
        """
        with self._mu:
            if self._logger is None:
                self._logger = (
                    self._new_logger(self)
                    if self._new_logger is not None
                    else logging.getLogger("simpleworkflow")
                )
            return self._logger

    # Cancellation ------------------------------------------------------------

    def is_cancelled(self) -> bool:
        """True once the handler should stop."""
        return self.cancelled.is_set()

    def wait(self, seconds: float) -> bool:
        """Sleep up to ``seconds`` (not durably); return True early if the handler should stop."""
        return self.cancelled.wait(seconds)

    def _cancel(self, reason: str) -> None:
        with self._mu:
            if self.cancelled.is_set():
                return
            self.reason = reason
            self.cancelled.set()

    # What the poller needs to know ----------------------------------------------

    @property
    def journal_length(self) -> int:
        """How many journal entries the attempt started with or learnt."""
        with self._mu:
            return len(self._by_pos)

    def _state(self) -> Tuple[bool, Optional[NonDeterministicError]]:
        with self._mu:
            return self._parked, self._failure

    def _replaying(self) -> bool:
        """Whether the handler is still before the last step its journal held at claim (Go: replay.replaying):
        code it runs again, not anew."""
        with self._mu:
            return self._next < self._replay_until

    # Durable verbs ------------------------------------------------------------

    def step(self, name: str, fn: Callable[[], Any]) -> Any:
        """Run ``fn()`` once for the whole life of the run and return its result.

        ``fn`` takes no arguments (close over what it needs) and returns a
        JSON-serialisable value, at most 1 MiB as JSON. The value is recorded
        in the run's journal under ``name``; every later attempt gets it back
        without calling ``fn``. The value returned is always the JSON-decoded
        one (tuples become lists, keys strings), the same on the first attempt
        as on a replay.

        An exception from ``fn`` propagates and nothing is recorded: the attempt
        fails and is retried as usual. Names are 1 to 128 characters of letters,
        digits and . _ : -, unique within the run; a bad name or output raises
        PermanentError. Reaching another step than the journal has at this
        position raises NonDeterministicError and the run fails for good.
        Steps run one after another: do not call durable verbs inside ``fn`` or
        from several threads.
        """
        with self._durable_call(), self._step_span(KIND_STEP, name) as span:
            pos, entry = self._reach(name, KIND_STEP)
            span.set(ATTR_STEP_POS, pos)
            span.set(ATTR_REPLAYED, entry is not None)
            if entry is not None:
                return entry.output
            raw = _encode(name, fn())
            if self._record_step is not None:
                # With the steps of the worker's other handlers, in one call.
                assert self.lease_token is not None
                status, output, message = self._record_step(self.id, self.lease_token, name, pos, raw)
            else:
                status, output, message = self._sql(
                    "select status, output, message from workflow.record_steps("
                    "%s, %s::uuid[], %s::bigint[], %s::text[], %s::int[], %s::jsonb[])",
                    (self.worker_id, [self.id], [self.lease_token], [name], [pos], [raw]),
                )
            return self._step_recorded(name, pos, raw, status, output, message)

    def step_tx(self, name: str, fn: Callable[[psycopg.Connection[Any]], Any]) -> Any:
        """Run ``fn(conn)`` once, in a transaction that also journals it, and return its result.

        :meth:`step` for a body that writes to the inbox's own database.
        ``conn`` is a psycopg connection with an open transaction on the
        database the worker claims its runs from; ``fn`` makes its writes
        through it and returns a JSON-serialisable value, as a step's
        function does. The step's journal entry is written in that same
        transaction, so the writes made through ``conn`` and the record that
        the step ran commit together or not at all. A worker killed inside
        ``fn``, or after the journal write but before the commit, leaves
        nothing behind (the next attempt calls ``fn`` again from scratch); one
        killed after the commit leaves both, and the next attempt returns the
        journaled value without calling ``fn``. The writes happen exactly once.

        The journal write checks the lease (the fence) and share-locks the run
        until the commit: an attempt that lost its lease commits nothing (the
        call raises :class:`StoppedError`), and no claim, reap or cancel of the
        run comes between the check and the commit. If the journal already has
        the step (written by this attempt's lease), its writes are rolled back
        and the journaled value is returned. This holds only for writes to the
        same database through ``conn``: a call to another service, or to
        another database, from inside ``fn`` is not undone when the
        transaction rolls back (use :meth:`step` and an idempotency key).

        ``fn`` must not commit or roll back the transaction (psycopg refuses
        ``conn.commit()`` and ``conn.rollback()`` inside it); it may nest
        ``conn.transaction()`` blocks (savepoints). An exception from ``fn``
        rolls the transaction back and propagates; a replay never calls ``fn``.
        The connection is the handler thread's own and stays in the
        transaction while ``fn`` runs. Names, outputs and the order of calls
        follow :meth:`step`'s rules.
        """
        with self._durable_call(), self._step_span(KIND_STEP, name) as span:
            pos, entry = self._reach(name, KIND_STEP)
            span.set(ATTR_STEP_POS, pos)
            span.set(ATTR_REPLAYED, entry is not None)
            span.set(ATTR_STEP_TX, True)
            if entry is not None:
                return entry.output
            assert self._connect is not None
            conn = self._connect()
            answer: Optional[Tuple[str, Any, Optional[str]]] = None
            raw = ""
            with conn.transaction() as tx:
                value = fn(conn)
                if conn.info.transaction_status not in (TransactionStatus.INTRANS, TransactionStatus.INERROR):
                    # Whatever it wrote was committed or rolled back on its own:
                    # the journal entry cannot go with it.
                    raise PermanentError(
                        f'step "{name}": the step\'s function ended its transaction; '
                        "it must not commit or roll back"
                    )
                raw = _encode(name, value)
                answer = self._record_in(conn, name, pos, raw)
                if answer[0] != "recorded":
                    # Lease lost, a duplicate (the step's first value wins) or
                    # a refusal: the body's writes must not stay.
                    raise psycopg.Rollback(tx)
            if answer is None:
                # fn raised psycopg.Rollback, which rolled back this transaction.
                raise PermanentError(
                    f'step "{name}": the step\'s function rolled back its transaction; '
                    "it must not commit or roll back"
                )
            return self._step_recorded(name, pos, raw, *answer)

    def sleep(self, name: str, seconds: Duration) -> None:
        """Wait durably for ``seconds`` (a number or a timedelta), measured by the database clock.

        The run parks: this raises :class:`Parked`, which the handler lets
        propagate; the worker slot is freed and no attempt is used. When the
        time comes a worker claims the run again, the handler replays its
        journal, and this call returns at once. ``name`` identifies the sleep
        in the journal like a step's.
        """
        with self._durable_call(), self._step_span(KIND_SLEEP, name) as span:
            delay_ms = self._millis(seconds, "sleep")
            self._wait(span, name, KIND_SLEEP, None, None, delay_ms)

    def sleep_until(self, name: str, when: datetime) -> None:
        """:meth:`sleep` until an instant (a naive datetime is taken as local time)."""
        with self._durable_call(), self._step_span(KIND_SLEEP, name) as span:
            if not isinstance(when, datetime):
                raise PermanentError(
                    f'sleep "{name}": invalid input: sleep_until needs a datetime, got {when!r}'
                )
            if when.tzinfo is None:
                when = when.astimezone()
            self._wait(span, name, KIND_SLEEP, None, when, None)

    def wait_for_signal(self, name: str, timeout: Optional[Duration] = None) -> Tuple[Any, bool]:
        """Return ``(payload, True)`` for the oldest signal ``name`` the run received and no earlier wait took.

        Signals sent before the wait are kept. With none, the run parks
        (:class:`Parked`, as with :meth:`sleep`) until one arrives or ``timeout``
        (seconds or a timedelta; None or 0 waits for ever) passes; after a
        timeout it returns ``(None, False)`` -- a timeout is not an error. The
        wait's journal entry is named after the signal: ``name`` for the first
        wait of that signal in the handler's execution, then ``name:2``,
        ``name:3`` ...
        """
        with self._durable_call():
            problem = step_name_problem(name)
            if problem is not None:
                raise PermanentError(f"wait for signal: invalid input: {problem}")
            delay_ms = None
            if timeout is not None:
                delay_ms = self._millis(timeout, "signal timeout")
                if delay_ms <= 0:
                    delay_ms = None
            step = self._signal_step(name)
            with self._step_span(KIND_SIGNAL, step) as span:
                span.set(ATTR_SIGNAL, name)
                entry = self._wait(span, step, KIND_SIGNAL, name, None, delay_ms)
            if entry.outcome == "timeout":
                return None, False
            return entry.output, True

    def start_child(
        self,
        name: str,
        workflow_type: str,
        payload: Optional[Mapping[str, Any]] = None,
        *,
        priority: Optional[int] = None,
        max_attempts: Optional[int] = None,
        deadline: Optional[Duration] = None,
    ) -> str:
        """Start a child run of ``workflow_type`` as step ``name`` of this run and return its id.

        The child is a run like any other (served by whichever worker claims
        its type) that starts once: replays find the same child. ``payload`` is
        a JSON object (default {}), ``priority`` defaults to the parent's,
        ``max_attempts`` to 3, and ``deadline`` (seconds or a timedelta) bounds
        the child from its start; a child never outlives its parent's deadline.
        Cancelling or failing the parent cancels its unfinished children.
        Await its end with :meth:`await_child`.
        """
        with self._durable_call(), self._step_span(KIND_CHILD, name) as span:
            span.set(ATTR_CHILD_TYPE, workflow_type)
            pos, entry = self._reach(name, KIND_CHILD)
            span.set(ATTR_STEP_POS, pos)
            span.set(ATTR_REPLAYED, entry is not None)
            if entry is not None:
                if entry.child_id is not None:
                    span.set(ATTR_CHILD_ID, entry.child_id)
                return entry.child_id  # type: ignore[return-value]
            try:
                validate_type(workflow_type)
            except InvalidInputError as e:
                raise PermanentError(f'start child "{name}": {e}') from None
            if payload is not None and not isinstance(payload, Mapping):
                raise PermanentError(
                    f'start child "{name}": invalid input: payload must be a JSON object (a mapping)'
                )
            try:
                raw = json.dumps(payload, allow_nan=False) if payload is not None else None
            except (TypeError, ValueError, RecursionError) as e:
                raise PermanentError(
                    f'start child "{name}": invalid input: payload is not JSON: {e}'
                ) from None
            if max_attempts is not None and not 1 <= max_attempts <= 1000:
                raise PermanentError(
                    f'start child "{name}": invalid input: max attempts must be between 1 and 1000'
                )
            deadline_ms = None
            if deadline is not None:
                deadline_ms = self._millis(deadline, "child deadline")
            try:
                row = self._sql(
                    "select status, child_id::text, outcome, output, error, message from workflow.start_child("
                    "%s, %s::uuid, %s::bigint, %s, %s::int, %s, %s::jsonb, %s::int, %s::int, %s::bigint)",
                    (
                        self.worker_id,
                        self.id,
                        self.lease_token,
                        name,
                        pos,
                        workflow_type,
                        raw,
                        priority,
                        max_attempts,
                        deadline_ms,
                    ),
                )
            except psycopg.Error as e:
                # A value the database refuses (a rule, SW001) would be refused again.
                if (
                    isinstance(e, psycopg.errors.IntegrityError)
                    or getattr(e, "sqlstate", None) in _REFUSED_STATES
                ):
                    raise PermanentError(
                        f'start child "{name}": invalid input: {_primary_message(e)}'
                    ) from None
                raise
            status, child_id, outcome, output, error, message = row
            if status in ("started", "duplicate"):
                span.set(ATTR_CHILD_ID, str(child_id))
                self._remember(
                    _Entry(
                        name=name,
                        position=pos,
                        kind=KIND_CHILD,
                        outcome=outcome,
                        output=output,
                        error=error,
                        child_id=child_id,
                    )
                )
                return str(child_id)
            if status == "lease_lost":
                self._cancel(REASON_LEASE_LOST)
                raise StoppedError(f'start child "{name}": {REASON_LEASE_LOST}', REASON_LEASE_LOST)
            if status == "nondeterministic":
                raise self._fail(message)
            raise PermanentError(f'start child "{name}": invalid input: {message}')

    def await_child(self, name: str) -> Any:
        """Return the result of the child run started at step ``name`` once it has ended.

        Raises :class:`ChildFailed` when the child failed or was cancelled.
        Until the child ends the run parks (:class:`Parked`, as with
        :meth:`sleep`); the child's end wakes it. Takes no position of its own:
        it reads the child's entry.
        """
        with self._durable_call(), self._step_span("await_child", name) as span:
            with self._mu:
                stopped = self._stopped_locked()
                entry = self._by_name.get(name)
            if stopped is not None:
                raise stopped
            if entry is None or entry.kind != KIND_CHILD:
                raise PermanentError(f'await child: invalid input: no child run was started at step "{name}"')
            span.set(ATTR_STEP_POS, entry.position)
            span.set(ATTR_REPLAYED, entry.done)
            if entry.child_id is not None:
                span.set(ATTR_CHILD_ID, entry.child_id)
            if not entry.done:
                entry = self._park(span, KIND_CHILD, name, entry.position, None, None, None)
            if entry.outcome == "ok":
                return entry.output
            raise ChildFailed(step=name, child_id=entry.child_id, message=entry.error)

    # Replay -------------------------------------------------------------------

    @contextmanager
    def _durable_call(self) -> Iterator[None]:
        if self._connect is None or self.lease_token is None:
            raise RuntimeError("durable calls need a Task handed out by a Poller")
        with self._mu:
            if self._busy:
                raise PermanentError(
                    "durable calls of a run must be made one after another: "
                    "not inside a step's function, not from several threads"
                )
            self._busy = True
        try:
            yield
        finally:
            with self._mu:
                self._busy = False

    def _millis(self, value: Duration, what: str) -> int:
        try:
            return to_millis(value, what)
        except InvalidInputError as e:
            raise PermanentError(f"invalid input: {e}") from None

    def _stopped_locked(self) -> Optional[BaseException]:
        """The exception for any durable call after the attempt failed, parked or was stopped."""
        if self._failure is not None:
            return self._failure
        if self._parked:
            return Parked("run parked")
        if self.cancelled.is_set() and self.reason is not None:
            return StoppedError(f"run stopped: {self.reason}", self.reason)
        return None

    def _reach(self, name: str, kind: str) -> Tuple[int, Optional[_Entry]]:
        """Take the next position for step ``name`` of ``kind``; return the journal's entry there, if any."""
        problem = step_name_problem(name)
        if problem is not None:
            raise PermanentError(f"invalid input: {problem}")
        with self._mu:
            stopped = self._stopped_locked()
            if stopped is not None:
                raise stopped
            pos = self._next
            if pos >= MAX_STEPS:
                raise PermanentError(f"invalid input: a run has at most {MAX_STEPS} steps")
            self._next += 1
            entry = self._by_pos.get(pos)
            if entry is not None:
                if entry.name != name or entry.kind != kind:
                    raise self._fail_locked(nondeterminism_message(entry.kind, entry.name, pos, kind, name))
                return pos, entry
            entry = self._by_name.get(name)
            if entry is not None:
                raise self._fail_locked(
                    f'non-deterministic: step "{name}" is recorded at position '
                    f"{entry.position}, reached again at position {pos}"
                )
            return pos, None

    def _fail(self, message: str) -> NonDeterministicError:
        with self._mu:
            return self._fail_locked(message)

    def _fail_locked(self, message: str) -> NonDeterministicError:
        if self._failure is None:
            self._failure = NonDeterministicError(message)
        return self._failure

    def _remember(self, entry: _Entry) -> None:
        with self._mu:
            self._by_pos[entry.position] = entry
            self._by_name[entry.name] = entry

    def _step_recorded(
        self, name: str, pos: int, raw: str, status: str, output: Any, message: Optional[str]
    ) -> Any:
        """The database's answer to a step's journal write as the step's result: its own value, the one
        journaled first, or the exception that ends the attempt (lease lost, non-determinism, a refusal)."""
        if status == "recorded":
            value = json.loads(raw)
            self._remember(_Entry(name=name, position=pos, kind=KIND_STEP, outcome="ok", output=value))
            return value
        if status == "duplicate":
            self._remember(_Entry(name=name, position=pos, kind=KIND_STEP, outcome="ok", output=output))
            return output
        if status == "lease_lost":
            self._cancel(REASON_LEASE_LOST)
            raise StoppedError(f'record step "{name}": {REASON_LEASE_LOST}', REASON_LEASE_LOST)
        if status == "nondeterministic":
            raise self._fail(message or "non-deterministic")
        raise PermanentError(f'record step "{name}": invalid input: {message}')

    def _record_in(
        self, conn: psycopg.Connection[Any], name: str, pos: int, raw: str
    ) -> Tuple[str, Any, Optional[str]]:
        """Journal a step in the transaction open on ``conn``: (status, output, message) of workflow.record_steps."""
        try:
            row = conn.execute(
                "select status, output, message from workflow.record_steps("
                "%s, %s::uuid[], %s::bigint[], %s::text[], %s::int[], %s::jsonb[])",
                (self.worker_id, [self.id], [self.lease_token], [name], [pos], [raw]),
            ).fetchone()
        except psycopg.Error as e:
            if getattr(e, "sqlstate", None) in _REFUSED_STATES:
                raise PermanentError(f'record step "{name}": invalid input: {_primary_message(e)}') from None
            raise
        if row is None:
            raise RuntimeError(f'record step "{name}": the database gave no answer')
        return row[0], row[1], row[2]

    def _signal_step(self, name: str) -> str:
        with self._mu:
            n = self._signals.get(name, 0) + 1
            self._signals[name] = n
        return name if n == 1 else f"{name}:{n}"

    def _sql(self, query: str, params: Tuple[Any, ...]) -> Tuple[Any, ...]:
        assert self._connect is not None
        try:
            row: Optional[Tuple[Any, ...]] = self._connect().execute(query, params).fetchone()
        except psycopg.Error as e:
            # A value the database cannot take (a NUL escape, a value nested
            # past its stack) would be refused again: the run fails for good.
            if getattr(e, "sqlstate", None) in _REFUSED_STATES:
                raise PermanentError(f"invalid input: {_primary_message(e)}") from None
            raise
        assert row is not None
        return row

    @contextmanager
    def _step_span(self, kind: str, name: str) -> Iterator[Any]:
        """The span of a durable call (a no-op when nothing is traced)."""
        if self._tracing is None or self._span is None:
            yield NO_SPAN
            return
        with self._tracing.step(self._span, kind, name, self.id, self.attempt) as span:
            yield span

    def _wait(
        self,
        span: Any,
        step: str,
        kind: str,
        signal: Optional[str],
        at: Optional[datetime],
        delay_ms: Optional[int],
    ) -> _Entry:
        """Reach a sleep or a signal wait: replayed when the journal has it done, else resolved or parked."""
        pos, entry = self._reach(step, kind)
        span.set(ATTR_STEP_POS, pos)
        span.set(ATTR_REPLAYED, entry is not None and entry.done)
        if entry is not None and entry.done:
            return entry
        return self._park(span, kind, step, pos, at, delay_ms, signal)

    def _park(
        self,
        span: Any,
        kind: str,
        step: str,
        pos: int,
        at: Optional[datetime],
        delay_ms: Optional[int],
        signal: Optional[str],
    ) -> _Entry:
        """Ask the database to resolve or park a wait."""
        if self._send_logs is not None:
            # A wait that parks ends the lease: what was logged goes first.
            self._send_logs(self)
        status, outcome, output, error, wake_at, message = self._sql(
            "select status, outcome, output, error, wake_at, message from workflow.park_run("
            "%s, %s::uuid, %s::bigint, %s, %s, %s::int, %s::timestamptz, %s::bigint, %s)",
            (self.worker_id, self.id, self.lease_token, kind, step, pos, at, delay_ms, signal),
        )
        if status == "resolved":
            with self._mu:
                old = self._by_name.get(step)
            entry = _Entry(
                name=step,
                position=pos,
                kind=kind,
                outcome=outcome,
                output=output,
                error=error,
                child_id=old.child_id if old is not None else None,
            )
            self._remember(entry)
            return entry
        if status == "parked":
            span.set(ATTR_PARKED, True)
            if wake_at is not None:
                span.set(ATTR_WAKE_AT, format_time(wake_at))
            with self._mu:
                self._parked = True
            self._cancel(REASON_PARKED)
            if self._on_park is not None:
                self._on_park(wake_at)
            raise Parked(f'{kind} "{step}": run parked')
        if status == "lease_lost":
            self._cancel(REASON_LEASE_LOST)
            raise StoppedError(f'{kind} "{step}": {REASON_LEASE_LOST}', REASON_LEASE_LOST)
        if status == "nondeterministic":
            raise self._fail(message)
        raise PermanentError(f'{kind} "{step}": invalid input: {message}')
