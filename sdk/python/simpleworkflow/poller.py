"""Worker-side API: Poller claims runs by type prefix and runs handlers."""

from __future__ import annotations

import json
import logging
import os
import queue
import select
import signal
import socket
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any, Callable, Dict, Generic, List, Optional, Sequence, Set, Tuple, TypeVar

import psycopg

from . import __version__
from .client import _REFUSED_STATES, _primary_message, validate_type
from .durable import REASON_CANCELLED, REASON_DEADLINE, REASON_LEASE_LOST, REASON_SHUTDOWN, Task
from .errors import InvalidInputError, PermanentError, StoppedError
from .tracing import (
    OUTCOME_CANCELLED,
    OUTCOME_DEADLINE_EXCEEDED,
    OUTCOME_FAILED,
    OUTCOME_LEASE_LOST,
    OUTCOME_PARKED,
    OUTCOME_RELEASED,
    OUTCOME_RETRYING,
    OUTCOME_SUCCEEDED,
    OUTCOME_UNRECORDED,
    Tracing,
)

log = logging.getLogger("simpleworkflow")

Handler = Callable[[Task], Any]

# The defaults of a Poller, the Go SDK's (pkg/simpleworkflow/poller_config.go)
# and testdata/contract/defaults.json.

#: How long a claimed run stays leased without a heartbeat, in seconds.
DEFAULT_LEASE_SECONDS = 30.0
#: How many handlers run at once.
DEFAULT_CONCURRENCY = 10
#: The fallback poll when no notification arrives, in seconds.
DEFAULT_POLL_INTERVAL_SECONDS = 1.0
#: The most runs one claim call takes.
DEFAULT_CLAIM_BATCH_SIZE = 100
#: How long in-flight handlers may finish after stop, before their runs are handed back.
DEFAULT_SHUTDOWN_GRACE_SECONDS = 20.0
#: How often a poller returns runs whose lease expired to the queue (and fails overdue ones).
DEFAULT_REAP_INTERVAL_SECONDS = 5.0
#: The most claim batch size.
MAX_CLAIM_BATCH_SIZE = 1000

#: Seconds after a workflow_run_created notification when the poller claims
#: once more: only one committing transaction per type notifies at a time, so
#: runs committed right after it were announced by its notification alone
#: (engine.WakeFollowUp in Go).
WAKE_FOLLOW_UP = 0.05

#: A parked run due within this many seconds gets a timer that wakes the claim
#: loop on time; later ones are found by the regular poll.
_WAKE_TIMER_HORIZON = 600.0

#: The most steps, and outcomes, written in one call (as the Go SDK).
_MAX_WRITE_BATCH = 1000

_RECORD_STEPS = ("select idx, status, output, message from workflow.record_steps("
                 "%s, %s::uuid[], %s::bigint[], %s::text[], %s::int[], %s::jsonb[])")
_COMPLETE_RUNS = "select id::text, status, error from workflow.complete_runs(%s, %s::uuid[], %s::bigint[], %s::jsonb[])"
_FAIL_RUNS = "select id::text, status, run_at from workflow.fail_runs(%s, %s::uuid[], %s::bigint[], %s::text[], %s::boolean[])"
_RELEASE_RUNS = "select id::text from workflow.release_runs(%s, %s::uuid[], %s::bigint[])"


def _literal_prefix(prefix: str) -> str:
    return prefix[:-1] if prefix.endswith("%") else prefix


_CLEANED_NOTE = " [cleaned: NUL bytes removed, invalid UTF-8 replaced]"


def _clean_text(s: str) -> str:
    """Return s as Postgres text can hold it (no NUL, no lone surrogates), saying so when it changed."""
    cleaned = s.replace("\x00", "").encode("utf-8", "replace").decode("utf-8")
    return s if cleaned == s else cleaned + _CLEANED_NOTE


@dataclass(frozen=True)
class PollerConfig:
    """The settings a Poller runs with, defaults filled in (:meth:`Poller.config`; Go's PollerConfig).

    Durations are in seconds.
    """

    type_prefixes: Tuple[str, ...]
    lease_duration: float
    worker_id: str
    runtime: str
    concurrency: int
    heartbeat_interval: float
    poll_interval: float
    shutdown_grace_period: float
    reap_interval: float
    claim_batch_size: int


class _Refused(Exception):
    """The database refused a value of a write (a NUL escape, a value past a limit): a retry cannot help."""


def _is_refused(e: psycopg.Error) -> bool:
    return getattr(e, "sqlstate", None) in _REFUSED_STATES or isinstance(e, psycopg.DataError)


T = TypeVar("T")


class _Reply(Generic[T]):
    """The answer a handler thread waits for."""

    def __init__(self) -> None:
        self.done = threading.Event()
        self.value: Optional[T] = None
        self.error: Optional[BaseException] = None

    def set(self, value: T) -> None:
        self.value = value
        self.done.set()

    def fail(self, error: BaseException) -> None:
        self.error = error
        self.done.set()


@dataclass
class _StepRequest:
    run_id: str
    token: int
    name: str
    position: int
    raw: str
    reply: _Reply[Tuple[str, Any, Optional[str]]]


@dataclass
class _Outcome:
    """What a finished handler asks to record: complete, fail, release or drop (nothing to write)."""

    task: Task
    kind: str
    raw_result: Optional[str] = None
    error: Optional[BaseException] = None
    message: str = ""
    retryable: bool = True
    #: Why an attempt whose outcome is not written ended (parked, cancelled ...).
    reason: Optional[str] = None


_COMPLETE, _FAIL, _RELEASE, _DROP = "complete", "fail", "release", "drop"


class _Conn:
    """One connection of a background writer, opened on first use and again after it broke."""

    def __init__(self, open_conn: Callable[[], psycopg.Connection[Any]]) -> None:
        self._open = open_conn
        self._conn: Optional[psycopg.Connection[Any]] = None

    def get(self) -> psycopg.Connection[Any]:
        if self._conn is None or self._conn.closed:
            self._conn = self._open()
        return self._conn

    def reset(self) -> None:
        if self._conn is not None:
            self._conn.close()
        self._conn = None

    close = reset


class _BatchQueue(Generic[T]):
    """A queue a background thread drains in batches: whatever accumulated while the previous batch was
    being written goes in the next one. After close, put raises StoppedError and the thread ends once
    the queue is empty."""

    def __init__(self, what: str) -> None:
        self._what = what
        self._queue: "queue.Queue[Optional[T]]" = queue.Queue()
        self._lock = threading.Lock()
        self._closed = False

    def put(self, item: T) -> None:
        with self._lock:
            if self._closed:
                raise StoppedError(f"{self._what}: {REASON_SHUTDOWN}", REASON_SHUTDOWN)
            self._queue.put(item)

    def close(self) -> None:
        with self._lock:
            if not self._closed:
                self._closed = True
                self._queue.put(None)

    def batches(self) -> Any:
        """Yield batches until closed and drained."""
        while True:
            first = self._queue.get()
            if first is None:
                return
            batch = [first]
            last = False
            while len(batch) < _MAX_WRITE_BATCH:
                try:
                    item = self._queue.get_nowait()
                except queue.Empty:
                    break
                if item is None:
                    last = True
                    break
                batch.append(item)
            yield batch
            if last:
                return


class Poller:
    """Claims runs whose type starts with one of ``type_prefixes`` and runs their handlers (Go's Poller).

    ``Poller(conninfo, type_prefixes=["billing."], lease_duration=30,
    worker_id="billing-worker-python-1")``; register handlers with
    :meth:`handle` (or the :meth:`handler` decorator), then call :meth:`run`.
    Each handler gets a :class:`Task`. :meth:`config` returns the settings in
    effect. The defaults are the Go SDK's: ``DEFAULT_LEASE_SECONDS`` (30),
    ``DEFAULT_CONCURRENCY`` (10), ``DEFAULT_POLL_INTERVAL_SECONDS`` (1),
    ``DEFAULT_CLAIM_BATCH_SIZE`` (100), ``DEFAULT_SHUTDOWN_GRACE_SECONDS`` (20),
    ``DEFAULT_REAP_INTERVAL_SECONDS`` (5); heartbeats every third of the lease.

    Every write is fenced by the lease token drawn at claim. The steps that
    concurrent handlers complete are journaled together, one
    ``workflow.record_steps`` call per batch (a handler's step returns once its
    row is answered), and their outcomes too, one ``workflow.complete_runs`` and
    one ``workflow.fail_runs`` call per batch, each run getting its own answer: a
    value the database refuses fails only its own run. A run that parks at a
    durable wait frees its slot at once; a timer (and the poll every
    ``poll_interval`` seconds, plus LISTEN for signals and finished children)
    claims it again when it is due. Past-deadline runs are failed by the
    reaper every ``reap_interval`` seconds (0 or less: no reaping), and a
    running one is cancelled at its next heartbeat.

    ``connect`` (optional) opens the poller's connections instead of
    ``conninfo``: each must be a new psycopg connection, which the poller owns
    and closes. ``tracer_provider`` makes the attempts' spans when
    OpenTelemetry is installed (see :mod:`simpleworkflow.tracing`); by
    default, the global provider.
    """

    def __init__(
        self,
        conninfo: str = "",
        type_prefixes: Optional[List[str]] = None,
        lease_duration: float = DEFAULT_LEASE_SECONDS,
        worker_id: Optional[str] = None,
        runtime: str = "python",
        concurrency: int = DEFAULT_CONCURRENCY,
        poll_interval: float = DEFAULT_POLL_INTERVAL_SECONDS,
        shutdown_grace_period: float = DEFAULT_SHUTDOWN_GRACE_SECONDS,
        reap_interval: float = DEFAULT_REAP_INTERVAL_SECONDS,
        *,
        claim_batch_size: int = DEFAULT_CLAIM_BATCH_SIZE,
        heartbeat_interval: Optional[float] = None,
        connect: Optional[Callable[[], psycopg.Connection[Any]]] = None,
        tracer_provider: Any = None,
    ) -> None:
        if not conninfo and connect is None:
            raise InvalidInputError("a connection string (or a connect function) is required")
        if lease_duration < 1:
            raise InvalidInputError(f"lease_duration must be at least 1 second, got {lease_duration}")
        if runtime not in ("go", "python"):
            raise InvalidInputError(f"runtime must be go or python, got {runtime!r}")
        if concurrency < 1:
            raise InvalidInputError(f"concurrency must be at least 1, got {concurrency}")
        if heartbeat_interval is None:
            heartbeat_interval = lease_duration / 3
        if not 0 < heartbeat_interval < lease_duration:
            raise InvalidInputError(f"heartbeat_interval must be positive and below the lease duration "
                                    f"{lease_duration}, got {heartbeat_interval}")
        if poll_interval < 0:
            raise InvalidInputError("poll_interval must not be negative")
        if shutdown_grace_period < 0:
            raise InvalidInputError("shutdown_grace_period must not be negative")
        if not 1 <= claim_batch_size <= MAX_CLAIM_BATCH_SIZE:
            raise InvalidInputError(f"claim_batch_size must be between 1 and {MAX_CLAIM_BATCH_SIZE}, "
                                    f"got {claim_batch_size}")
        if any(p in ("", "%") for p in (type_prefixes or [])):
            raise InvalidInputError("type prefixes must not be empty strings or '%' "
                                    "(leave the list empty to claim every type)")
        worker_id = worker_id or f"{socket.gethostname()}-{os.getpid()}"
        if len(worker_id) > 200:
            raise InvalidInputError("worker id must be at most 200 characters")
        self.conninfo = conninfo
        self.type_prefixes = list(type_prefixes or [])
        self.lease_duration = lease_duration
        self.worker_id = worker_id
        self.runtime = runtime
        self.concurrency = concurrency
        self.heartbeat_interval = heartbeat_interval
        self.poll_interval = poll_interval
        self.shutdown_grace_period = shutdown_grace_period
        self.reap_interval = reap_interval
        self.claim_batch_size = claim_batch_size
        self._connect_fn = connect
        self._tracing = Tracing(tracer_provider, __version__)
        self._handlers: Dict[str, Handler] = {}
        self._active: Dict[str, Task] = {}
        # Attempts whose run this worker claimed again after they lost the
        # lease: each keeps its slot until its outcome is written.
        self._older: Set[Task] = set()
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._stopping = threading.Event()
        self._closed = threading.Event()
        self._local = threading.local()
        self._conns: List[psycopg.Connection[Any]] = []
        self._timers: List[threading.Timer] = []
        self._steps: _BatchQueue[_StepRequest] = _BatchQueue("record step")
        self._outcomes: _BatchQueue[_Outcome] = _BatchQueue("record outcome")

    def config(self) -> PollerConfig:
        """The settings in effect, defaults filled in (Go: Poller.Config)."""
        return PollerConfig(
            type_prefixes=tuple(self.type_prefixes), lease_duration=float(self.lease_duration),
            worker_id=self.worker_id, runtime=self.runtime, concurrency=self.concurrency,
            heartbeat_interval=float(self.heartbeat_interval), poll_interval=float(self.poll_interval),
            shutdown_grace_period=float(self.shutdown_grace_period), reap_interval=float(self.reap_interval),
            claim_batch_size=self.claim_batch_size)

    # Registration -----------------------------------------------------------

    def handle(self, workflow_type: str, fn: Handler) -> None:
        """Register the handler of a workflow type. It returns a JSON-serialisable result."""
        validate_type(workflow_type)
        self._handlers[workflow_type] = fn

    def handler(self, workflow_type: str) -> Callable[[Handler], Handler]:
        """Decorator form of :meth:`handle`."""

        def register(fn: Handler) -> Handler:
            self.handle(workflow_type, fn)
            return fn

        return register

    # Running -----------------------------------------------------------------

    def stop(self) -> None:
        """Begin a graceful shutdown; :meth:`run` returns once it is done."""
        self._stopping.set()
        self._wake.set()

    def run(self, install_signal_handlers: bool = True) -> None:
        """Claim and execute runs until :meth:`stop` (or SIGTERM/SIGINT), then shut down gracefully."""
        if install_signal_handlers and threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGTERM, signal.SIGINT):
                signal.signal(sig, lambda *_: self.stop())
        log.info(json.dumps({"msg": "Worker started", "worker_id": self.worker_id, "runtime": self.runtime,
                             "type_prefixes": self.type_prefixes, "concurrency": self.concurrency,
                             "claim_batch_size": self.claim_batch_size}))
        background = [
            threading.Thread(target=self._listen_loop, name="sw-listen", daemon=True),
            threading.Thread(target=self._heartbeat_loop, name="sw-heartbeat", daemon=True),
        ]
        if self.reap_interval > 0:
            background.append(threading.Thread(target=self._reap_loop, name="sw-reap", daemon=True))
        writers = [
            threading.Thread(target=self._step_loop, name="sw-steps", daemon=True),
            threading.Thread(target=self._outcome_loop, name="sw-outcomes", daemon=True),
        ]
        for t in background + writers:
            t.start()
        pool = ThreadPoolExecutor(max_workers=self.concurrency, thread_name_prefix="sw-handler")
        conn = self._connect_until_ready()
        try:
            if conn is not None:
                self._claim_loop(conn, pool)
            self._shutdown(pool)
        finally:
            self._stopping.set()
            # Every outcome queued so far is written before the writers end;
            # handlers still running (they ignored cancellation) find them closed.
            self._outcomes.close()
            self._steps.close()
            for t in writers:
                t.join(max(self.lease_duration, 5.0) + 5.0)
            self._closed.set()
            for t in background:
                t.join(5.0)
            pool.shutdown(wait=False)
            if conn is not None:
                conn.close()
            with self._lock:
                for t in self._timers:
                    t.cancel()
                self._timers.clear()
                for c in self._conns:
                    c.close()
                self._conns.clear()
        log.info(json.dumps({"msg": "Worker stopped", "worker_id": self.worker_id}))

    def _open(self) -> psycopg.Connection[Any]:
        """A new autocommit connection."""
        if self._connect_fn is None:
            return psycopg.connect(self.conninfo, autocommit=True, connect_timeout=10)
        conn = self._connect_fn()
        if not conn.autocommit:
            conn.autocommit = True
        return conn

    def _connect_until_ready(self) -> Optional[psycopg.Connection[Any]]:
        """Connect, retrying with backoff while the database is unreachable; None once stopping."""
        backoff = 0.05
        while not self._stopping.is_set():
            try:
                return self._open()
            except psycopg.OperationalError as e:
                log.warning(json.dumps({"msg": "Database unreachable; retrying", "error": str(e),
                                        "backoff_seconds": backoff}))
                self._stopping.wait(backoff)
                backoff = min(backoff * 2, 5.0)
        return None

    def _claim_loop(self, conn: psycopg.Connection[Any], pool: ThreadPoolExecutor) -> None:
        lease_ms = int(self.lease_duration * 1000)
        while not self._stopping.is_set():
            with self._lock:
                free = self.concurrency - len(self._active) - len(self._older)
            if free <= 0:
                self._wake.wait(self.poll_interval)
                self._wake.clear()
                continue
            limit = min(free, self.claim_batch_size)
            try:
                # Payload and journal as text, decoded run by run below: a
                # value this worker cannot decode fails its own run only.
                rows = conn.execute(
                    "select id::text, type, payload::text, attempt, max_attempts, lease_token, deadline_at, "
                    "journal::text, traceparent "
                    "from workflow.claim_runs(%s, %s, %s, %s, %s, %s)",
                    # Only the types this worker has handlers for.
                    (self.worker_id, self.type_prefixes, self.runtime, limit, lease_ms,
                     sorted(self._handlers) or None),
                ).fetchall()
            except psycopg.OperationalError as e:
                log.error(json.dumps({"msg": "Claim failed; reconnecting", "error": str(e)}))
                conn.close()
                reconnected = self._connect_until_ready()
                if reconnected is None:
                    return
                conn = reconnected
                continue
            for run_id, wtype, payload_text, attempt, max_attempts, token, deadline_at, journal_text, traceparent in rows:
                try:
                    payload = _decode("payload", payload_text)
                    journal = _decode("journal", journal_text)
                    if isinstance(journal, str):
                        # The database's word that the journal is too large to load.
                        raise _UndecodableError(f"the run's journal cannot be loaded: {journal}")
                except _UndecodableError as e:
                    self._fail_undecodable(conn, run_id, wtype, attempt, token, str(e))
                    continue
                span = self._tracing.start_attempt(run_id, wtype, attempt, max_attempts, self.worker_id, token,
                                                   len(journal or []), traceparent)
                task = Task(run_id, wtype, payload, attempt, max_attempts, self.worker_id,
                            lease_token=token, deadline_at=deadline_at, traceparent=traceparent,
                            journal=journal, connect=self._conn, on_park=self._wake_at,
                            record_step=self._record_step, tracing=self._tracing, span=span)
                with self._lock:
                    older = self._active.get(run_id)
                    if older is not None:
                        # An attempt of this worker lost the lease (reaped
                        # while its handler still ran) and the run came back
                        # here: the older attempt is told, and the run's
                        # entry is the new attempt from now on.
                        older._cancel(REASON_LEASE_LOST)
                        self._older.add(older)
                    self._active[run_id] = task
                fields = {"worker_id": self.worker_id, "run_id": run_id, "type": wtype, "attempt": attempt}
                if journal:
                    log.info(json.dumps({"msg": "Run resumed", **fields, "journal": len(journal)}))
                else:
                    log.info(json.dumps({"msg": "Run started", **fields}))
                pool.submit(self._execute, task)
            if len(rows) == limit:
                continue
            self._wake.wait(self.poll_interval)
            self._wake.clear()

    def _fail_undecodable(self, conn: psycopg.Connection[Any], run_id: str, wtype: str, attempt: int,
                          token: int, why: str) -> None:
        """Fail a claimed run this worker cannot decode, alone and for good, saying why."""
        message = _clean_text(why)
        base = {"worker_id": self.worker_id, "run_id": run_id, "type": wtype, "attempt": attempt}
        try:
            conn.execute(_FAIL_RUNS, (self.worker_id, [run_id], [token], [message], [False])).fetchall()
        except psycopg.Error as e:
            # The lease runs out and the run is reclaimed; nothing else is held up.
            log.error(json.dumps({"msg": "Failing an undecodable run failed", "error": str(e), **base}))
            return
        log.info(json.dumps({"msg": "Run failed", "error": message, **base}))

    def _conn(self) -> psycopg.Connection[Any]:
        """The connection of the calling handler thread (parks, children)."""
        conn = getattr(self._local, "conn", None)
        if conn is None or conn.closed:
            conn = self._open()
            self._local.conn = conn
            with self._lock:
                self._conns.append(conn)
        return conn

    def _wake_at(self, at: Optional[datetime]) -> None:
        """Wake the claim loop when a run this worker parked is due, so that a sleep ends on time."""
        if at is None or self._stopping.is_set():
            return
        delay = (at - datetime.now(timezone.utc)).total_seconds() + 0.02
        if delay > _WAKE_TIMER_HORIZON:
            return
        timer = threading.Timer(max(delay, 0.0), self._wake.set)
        timer.daemon = True
        with self._lock:
            self._timers = [t for t in self._timers if t.is_alive()]
            self._timers.append(timer)
        timer.start()

    # Handlers ---------------------------------------------------------------------

    def _execute(self, task: Task) -> None:
        handler = self._handlers.get(task.type)
        result: Any = None
        raw: Optional[str] = None
        error: Optional[BaseException] = None
        try:
            if handler is None:
                raise RuntimeError(f"worker {self.worker_id} has no handler for workflow type {task.type}")
            with self._tracing.use(task._span):
                result = handler(task)
            try:
                raw = json.dumps(result)  # must be JSON
            except (TypeError, ValueError, RecursionError) as e:
                raise PermanentError(f"the handler's result cannot be stored as JSON: {type(e).__name__}: {e}") from e
        except BaseException as e:  # noqa: BLE001 - a handler's failure is the run's failure
            error = e
        outcome = self._outcome(task, raw, error)
        # Queued under the lock shutdown scans with: either shutdown handed the
        # run back already (it is no longer active, and its outcome has no
        # one to write it), or the outcome is queued before shutdown looks.
        with self._lock:
            task.done = True
            if task._handed_back:
                return
            try:
                self._outcomes.put(outcome)
                return
            except StoppedError:
                # The writers have ended: the lease runs out and the run is retried.
                self._forget(task)
        self._tracing.end_attempt(task._span, OUTCOME_UNRECORDED, outcome.error)
        self._wake.set()

    def _forget(self, task: Task) -> None:
        """Free the slot of an attempt whose outcome is written (or never will be); the lock is held.

        Only the attempt's own entry goes: a later attempt of the same run,
        claimed again by this worker, stays active.
        """
        if self._active.get(task.id) is task:
            del self._active[task.id]
        else:
            self._older.discard(task)

    def _outcome(self, task: Task, raw: Optional[str], error: Optional[BaseException]) -> _Outcome:
        """What to record for a finished attempt."""
        parked, failure = task._state()
        if parked:
            # The database already holds the parked run; there is nothing to write.
            return _Outcome(task, _DROP, reason="parked")
        if task.reason in (REASON_CANCELLED, REASON_LEASE_LOST, REASON_DEADLINE):
            return _Outcome(task, _DROP, reason=task.reason)
        if failure is not None:
            # Non-determinism fails the run for good, whatever the handler did.
            return _Outcome(task, _FAIL, error=failure, message=_message(failure), retryable=False)
        if task.reason == REASON_SHUTDOWN and error is not None:
            # A handler that still succeeded after the grace period is
            # completed, not handed back and run again.
            return _Outcome(task, _RELEASE, reason=task.reason)
        if error is None:
            return _Outcome(task, _COMPLETE, raw_result=raw)
        return _Outcome(task, _FAIL, error=error, message=_message(error),
                        retryable=not isinstance(error, PermanentError))

    # Batched writes ---------------------------------------------------------------

    def _with_retry(self, conn: _Conn, query: str, params: Sequence[Any]) -> List[Tuple[Any, ...]]:
        """Run one write, reconnecting through a database outage while the leases may still hold.

        Every write is fenced by the lease tokens, so a retry after a write
        that did land changes nothing. A value the database refuses raises
        _Refused at once.
        """
        deadline = time.monotonic() + max(self.lease_duration, 5.0)
        backoff = 0.1
        while True:
            try:
                return conn.get().execute(query, params).fetchall()
            except psycopg.OperationalError:
                conn.reset()
                if time.monotonic() + backoff > deadline:
                    raise
                time.sleep(backoff)
                backoff = min(backoff * 2, 2.0)
            except psycopg.Error as e:
                if _is_refused(e):
                    raise _Refused(_primary_message(e)) from None
                raise

    def _record_step(self, run_id: str, token: int, name: str, position: int,
                     raw: str) -> Tuple[str, Any, Optional[str]]:
        """Hand a completed step to the step writer and wait for its row's answer."""
        reply: _Reply[Tuple[str, Any, Optional[str]]] = _Reply()
        self._steps.put(_StepRequest(run_id, token, name, position, raw, reply))
        reply.done.wait()
        if reply.error is not None:
            raise reply.error
        assert reply.value is not None
        return reply.value

    def _step_loop(self) -> None:
        """Journal the steps of concurrent handlers, one workflow.record_steps call per batch."""
        conn = _Conn(self._open)
        try:
            for batch in self._steps.batches():
                try:
                    self._write_steps(conn, batch)
                except BaseException as e:  # noqa: BLE001 - no handler may wait for ever
                    for r in batch:
                        if not r.reply.done.is_set():
                            r.reply.fail(e)
        finally:
            conn.close()

    def _write_steps(self, conn: _Conn, batch: List[_StepRequest]) -> None:
        params = (self.worker_id, [r.run_id for r in batch], [r.token for r in batch], [r.name for r in batch],
                  [r.position for r in batch], [r.raw for r in batch])
        try:
            rows = self._with_retry(conn, _RECORD_STEPS, params)
        except _Refused as e:
            if len(batch) > 1:
                # A value the database cannot take (a NUL escape) refuses the
                # whole call: each step is written alone, so only its own
                # handler hears of it.
                for r in batch:
                    self._write_steps(conn, [r])
                return
            batch[0].reply.fail(PermanentError(f"invalid input: {e}"))
            return
        except BaseException as e:  # noqa: BLE001
            for r in batch:
                r.reply.fail(e)
            return
        for idx, status, output, message in rows:
            batch[idx - 1].reply.set((status, output, message))
        for r in batch:
            if not r.reply.done.is_set():
                r.reply.fail(RuntimeError(f'record step "{r.name}": the database gave no answer'))

    def _outcome_loop(self) -> None:
        """Record the outcomes of concurrent handlers in batches, then free their slots."""
        conn = _Conn(self._open)
        try:
            for batch in self._outcomes.batches():
                try:
                    self._flush(conn, batch)
                except Exception as e:  # noqa: BLE001 - the leases run out; the runs are retried
                    log.error(json.dumps({"msg": "Recording outcomes failed; the runs are retried after their "
                                                 "lease expires", "error": str(e), "runs": len(batch)}))
                    with self._lock:
                        for o in batch:
                            self._forget(o.task)
                    self._wake.set()
        finally:
            conn.close()

    def _flush(self, conn: _Conn, batch: List[_Outcome]) -> None:
        """Write a batch of outcomes, log each run's answer, end the attempts' spans and free the slots.

        The database's answers are matched to outcomes by run id, so a write
        holds one outcome per run. Two meet when an attempt that lost its lease
        and the attempt of the same run that followed it on this worker end
        together: the later one is written after, on its own.
        """
        seen: Set[str] = set()
        first: List[_Outcome] = []
        later: List[_Outcome] = []
        for o in batch:
            (later if o.task.id in seen else first).append(o)
            seen.add(o.task.id)
        self._flush_unique(conn, first)
        if later:
            self._flush(conn, later)

    def _flush_unique(self, conn: _Conn, batch: List[_Outcome]) -> None:
        """_flush for a batch with one outcome per run."""
        completions = [o for o in batch if o.kind == _COMPLETE]
        failures = [o for o in batch if o.kind == _FAIL]
        releases = [o for o in batch if o.kind == _RELEASE]
        # How each attempt ended, for its span; the default covers an outcome
        # whose write failed.
        ends: Dict[str, Tuple[str, Optional[BaseException], Optional[datetime]]] = {
            o.task.id: (OUTCOME_UNRECORDED, o.error, None) for o in batch}

        def base(o: _Outcome) -> Dict[str, Any]:
            return {"worker_id": self.worker_id, "run_id": o.task.id, "type": o.task.type, "attempt": o.task.attempt}

        for o in batch:
            if o.kind != _DROP:
                continue
            ends[o.task.id] = (_drop_outcome(o.reason), None, None)
            if o.reason == "parked":
                log.info(json.dumps({"msg": "Run parked", **base(o)}))
            else:
                log.info(json.dumps({"msg": "Run stopped", "reason": o.reason, **base(o)}))

        if completions:
            by_id = {o.task.id: o for o in completions}
            done, unstorable, err = self._write_completions(conn, completions)
            for o, message in unstorable:
                # A result Postgres cannot store (such as one holding \u0000)
                # fails its run for good, saying why, instead of leaving it
                # leased to be executed again.
                o.kind, o.message, o.retryable = _FAIL, message, False
                o.error = PermanentError(message)
                failures.append(o)
            if err is not None:
                log.error(json.dumps({"msg": "Recording results failed; the runs are retried after their lease "
                                             "expires", "error": str(err), "runs": len(completions)}))
            answered: Set[str] = set()
            for run_id, status, error in done:
                answered.add(run_id)
                o = by_id[run_id]
                if status == "failed":
                    # The database refused the result (too large, nested too
                    # deeply): the run failed alone, for good.
                    ends[run_id] = (OUTCOME_FAILED, PermanentError(error), None)
                    log.info(json.dumps({"msg": "Run failed", "error": error, **base(o)}))
                else:
                    ends[run_id] = (OUTCOME_SUCCEEDED, None, None)
                    log.info(json.dumps({"msg": "Run succeeded", **base(o)}))
            if err is None:
                for o in completions:
                    if o.kind == _COMPLETE and o.task.id not in answered:
                        ends[o.task.id] = (OUTCOME_LEASE_LOST, None, None)
                        log.warning(json.dumps({"msg": "Run result discarded: the lease was no longer held",
                                                **base(o)}))

        if failures:
            by_id = {o.task.id: o for o in failures}
            for o in failures:
                o.message = _clean_text(o.message)
            res, err = self._write_failures(conn, failures)
            if err is not None:
                log.error(json.dumps({"msg": "Recording failures failed; the runs are retried after their lease "
                                             "expires", "error": str(err), "runs": len(failures)}))
            else:
                for o in failures:  # written, but not for the runs whose lease had gone
                    ends[o.task.id] = (OUTCOME_LEASE_LOST, None, None)
            for run_id, status, run_at in res:
                o = by_id[run_id]
                if status == "pending":
                    ends[run_id] = (OUTCOME_RETRYING, o.error, run_at)
                    log.info(json.dumps({"msg": "Run failed; retrying", "error": o.message,
                                         "next_attempt_at": run_at.isoformat(), **base(o)}))
                else:
                    ends[run_id] = (OUTCOME_FAILED, o.error, None)
                    log.info(json.dumps({"msg": "Run failed", "error": o.message, **base(o)}))

        if releases:
            by_id = {o.task.id: o for o in releases}
            try:
                rows = self._with_retry(conn, _RELEASE_RUNS, (self.worker_id, [o.task.id for o in releases],
                                                              [o.task.lease_token for o in releases]))
            except Exception as e:  # noqa: BLE001
                log.error(json.dumps({"msg": "Handing runs back failed; they are retried after their lease "
                                             "expires", "error": str(e), "runs": len(releases)}))
                rows = []
            else:
                for o in releases:
                    ends[o.task.id] = (OUTCOME_LEASE_LOST, None, None)
            for (run_id,) in rows:
                ends[run_id] = (OUTCOME_RELEASED, None, None)
                log.info(json.dumps({"msg": "Run handed back", "reason": by_id[run_id].reason, **base(by_id[run_id])}))

        for o in batch:
            outcome, error, next_at = ends[o.task.id]
            self._tracing.end_attempt(o.task._span, outcome, error, next_at)
        # A slot is free once its outcome is written, so that the runs a
        # worker holds leased never exceed its concurrency.
        with self._lock:
            for o in batch:
                self._forget(o.task)
        self._wake.set()

    def _write_completions(
        self, conn: _Conn, completions: List[_Outcome]
    ) -> Tuple[List[Tuple[Any, ...]], List[Tuple[_Outcome, str]], Optional[BaseException]]:
        """complete_runs for a batch: (rows, [(outcome, why) unstorable], error)."""

        def call(batch: List[_Outcome]) -> List[Tuple[Any, ...]]:
            return self._with_retry(conn, _COMPLETE_RUNS, (
                self.worker_id, [o.task.id for o in batch], [o.task.lease_token for o in batch],
                [o.raw_result for o in batch]))

        try:
            return call(completions), [], None
        except _Refused as e:
            if len(completions) == 1:
                return [], [(completions[0], _clean_text(f"the handler's result could not be stored: {e}"))], None
        except Exception as e:  # noqa: BLE001
            return [], [], e
        # The batch is refused as invalid: row by row, so only the bad row is affected.
        done: List[Tuple[Any, ...]] = []
        unstorable: List[Tuple[_Outcome, str]] = []
        for o in completions:
            try:
                done += call([o])
            except _Refused as e:
                unstorable.append((o, _clean_text(f"the handler's result could not be stored: {e}")))
            except Exception as e:  # noqa: BLE001
                return done, unstorable, e
        return done, unstorable, None

    def _write_failures(self, conn: _Conn, failures: List[_Outcome]) -> Tuple[List[Tuple[Any, ...]], Optional[BaseException]]:
        """fail_runs for a batch, row by row when the database refuses the batch; a row still refused
        is recorded with a replacement message."""

        def call(batch: List[_Outcome]) -> List[Tuple[Any, ...]]:
            return self._with_retry(conn, _FAIL_RUNS, (
                self.worker_id, [o.task.id for o in batch], [o.task.lease_token for o in batch],
                [o.message for o in batch], [o.retryable for o in batch]))

        try:
            return call(failures), None
        except _Refused:
            pass
        except Exception as e:  # noqa: BLE001
            return [], e
        res: List[Tuple[Any, ...]] = []
        for o in failures:
            try:
                try:
                    res += call([o])
                except _Refused as e:
                    o.message = f"the handler's error could not be stored: {e}"
                    res += call([o])
            except Exception as e:  # noqa: BLE001
                return res, e
        return res, None

    # Background loops ---------------------------------------------------------------

    def _listen_loop(self) -> None:
        prefixes = [_literal_prefix(p) for p in self.type_prefixes]
        while not self._stopping.is_set():
            try:
                conn = self._open()
                try:
                    conn.execute("listen workflow_run_created")
                    conn.execute("listen workflow_run_cancelled")
                    self._wake.set()  # catch up on anything missed while disconnected
                    follow_up_at = None
                    while not self._stopping.is_set():
                        timeout = 0.5
                        if follow_up_at is not None:
                            timeout = max(0.0, min(timeout, follow_up_at - time.monotonic()))
                        ready, _, _ = select.select([conn.fileno()], [], [], timeout)
                        if follow_up_at is not None and time.monotonic() >= follow_up_at:
                            # Runs committed right after the notifying transaction
                            # were not announced on their own (see WAKE_FOLLOW_UP).
                            follow_up_at = None
                            self._wake.set()
                        if not ready:
                            continue
                        conn.pgconn.consume_input()
                        while True:
                            n = conn.pgconn.notifies()
                            if n is None:
                                break
                            channel, payload = n.relname.decode(), n.extra.decode()
                            if channel == "workflow_run_created":
                                if not prefixes or any(payload.startswith(p) for p in prefixes):
                                    self._wake.set()
                                    follow_up_at = time.monotonic() + WAKE_FOLLOW_UP
                            elif channel == "workflow_run_cancelled":
                                with self._lock:
                                    task = self._active.get(payload)
                                if task is not None:
                                    task._cancel(REASON_CANCELLED)
                finally:
                    conn.close()
            except (psycopg.Error, OSError) as e:
                log.warning(json.dumps({"msg": "Listen connection lost; reconnecting", "error": str(e)}))
                time.sleep(0.5)

    def _heartbeat_loop(self) -> None:
        lease_ms = int(self.lease_duration * 1000)
        conn: Optional[psycopg.Connection[Any]] = None
        while not self._closed.wait(self.heartbeat_interval):
            try:
                if conn is None or conn.closed:
                    conn = self._open()
                with self._lock:
                    refs = [(t.id, t.lease_token) for t in self._active.values()]
                sent = dict(refs)
                if refs:
                    rows = conn.execute(
                        "select id::text, status, owned, deadline_exceeded "
                        "from workflow.heartbeat_runs(%s, %s::uuid[], %s::bigint[], %s)",
                        (self.worker_id, [r[0] for r in refs], [r[1] for r in refs], lease_ms),
                    ).fetchall()
                    for run_id, status, owned, deadline_exceeded in rows:
                        if owned:
                            continue
                        with self._lock:
                            task = self._active.get(run_id)
                        # The attempt asked about, not a later one of the same
                        # run that this worker claimed since.
                        if task is None or task.lease_token != sent[run_id]:
                            continue
                        if status == "cancelled":
                            task._cancel(REASON_CANCELLED)
                        elif deadline_exceeded:
                            task._cancel(REASON_DEADLINE)
                        else:
                            task._cancel(REASON_LEASE_LOST)
            except psycopg.Error as e:
                log.error(json.dumps({"msg": "Heartbeat failed", "error": str(e)}))
                if conn is not None:
                    conn.close()
                conn = None
        if conn is not None:
            conn.close()

    def _reap_loop(self) -> None:
        """Every reap_interval: return runs whose lease expired to the queue, and fail runs past their deadline."""
        conn: Optional[psycopg.Connection[Any]] = None
        while not self._closed.wait(self.reap_interval):
            try:
                if conn is None or conn.closed:
                    conn = self._open()
                reaped = conn.execute("select id::text, status from workflow.reap_expired_leases(500)").fetchall()
                for run_id, status in reaped:
                    log.info(json.dumps({"msg": "Lease expired; run reclaimed", "run_id": run_id, "status": status}))
                if reaped:
                    self._wake.set()
                expired = conn.execute("select id::text from workflow.expire_deadlines(null, 500)").fetchall()
                if expired:
                    # One line a batch: a flood of overdue runs is not a flood of logs.
                    log.info(json.dumps({"msg": "Runs failed: deadline exceeded", "runs": len(expired),
                                         "run_ids": [r[0] for r in expired[:10]]}))
            except psycopg.Error as e:
                log.error(json.dumps({"msg": "Reaping failed", "error": str(e)}))
                if conn is not None:
                    conn.close()
                conn = None
        if conn is not None:
            conn.close()

    def _shutdown(self, pool: ThreadPoolExecutor) -> None:
        with self._lock:
            n = len(self._active)
        if n:
            log.info(json.dumps({"msg": "Stopping: waiting for in-flight runs", "runs": n,
                                 "grace_period": self.shutdown_grace_period}))
        deadline = time.monotonic() + self.shutdown_grace_period
        while time.monotonic() < deadline:
            with self._lock:
                if not self._active:
                    return
            time.sleep(0.05)
        with self._lock:
            pending = [t for t in self._active.values() if not t.done]
        for t in pending:
            t._cancel(REASON_SHUTDOWN)
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            with self._lock:
                if not self._active:
                    return
            time.sleep(0.05)
        # Handlers that ignore cancellation: hand their runs back anyway; the
        # lease guard refuses whatever they write later.
        with self._lock:
            stuck = [t for t in self._active.values() if not t.done]
            for t in stuck:
                t._handed_back = True
                self._active.pop(t.id, None)
        if not stuck:
            return
        released: List[str] = []
        error: Optional[BaseException] = None
        try:
            with self._open() as conn:
                released = [r[0] for r in conn.execute(_RELEASE_RUNS, (
                    self.worker_id, [t.id for t in stuck], [t.lease_token for t in stuck])).fetchall()]
        except psycopg.Error as e:
            error = e
            log.error(json.dumps({"msg": "Handing runs back failed; they are retried after their lease expires",
                                  "error": str(e)}))
        log.warning(json.dumps({"msg": "Handlers did not stop after cancellation; runs handed back",
                                "runs": len(stuck)}))
        for t in stuck:
            if t.id in released:
                self._tracing.end_attempt(t._span, OUTCOME_RELEASED)
            elif error is None:
                self._tracing.end_attempt(t._span, OUTCOME_LEASE_LOST)
            else:
                self._tracing.end_attempt(t._span, OUTCOME_UNRECORDED, error)


#: The name the poller had before it took the Go SDK's: the same class.
IntentPoller = Poller


def _message(error: BaseException) -> str:
    return str(error) or type(error).__name__


def _drop_outcome(reason: Optional[str]) -> str:
    """The span outcome of an attempt whose outcome is not written."""
    if reason == "parked":
        return OUTCOME_PARKED
    if reason == REASON_CANCELLED:
        return OUTCOME_CANCELLED
    if reason == REASON_DEADLINE:
        return OUTCOME_DEADLINE_EXCEEDED
    return OUTCOME_LEASE_LOST


class _UndecodableError(Exception):
    """A claimed run's payload or journal that this worker cannot decode."""


def _decode(what: str, text: Optional[str]) -> Any:
    """Decode a claimed run's JSON column; raise _UndecodableError saying why it cannot be."""
    if text is None:
        return None
    try:
        return json.loads(text)
    except RecursionError as e:
        raise _UndecodableError(f"the run's {what} cannot be decoded: nested too deeply for this worker "
                                f"(RecursionError)") from e
    except (ValueError, MemoryError) as e:
        raise _UndecodableError(f"the run's {what} cannot be decoded: {type(e).__name__}: {e}") from e
