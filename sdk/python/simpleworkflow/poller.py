"""Worker-side API: IntentPoller claims runs by type prefix and runs handlers."""

from __future__ import annotations

import json
import logging
import os
import select
import signal
import socket
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timezone
from typing import Any, Callable, Dict, List, Optional

import psycopg

from .client import validate_type
from .durable import REASON_CANCELLED, REASON_DEADLINE, REASON_LEASE_LOST, REASON_SHUTDOWN, RunContext
from .errors import InvalidInputError, PermanentError

log = logging.getLogger("simpleworkflow")

Handler = Callable[[RunContext], Any]

#: Seconds after a workflow_run_created notification when the poller claims
#: once more: only one committing transaction per type notifies at a time, so
#: runs committed right after it were announced by its notification alone
#: (engine.WakeFollowUp in Go).
WAKE_FOLLOW_UP = 0.05

#: A parked run due within this many seconds gets a timer that wakes the claim
#: loop on time; later ones are found by the regular poll.
_WAKE_TIMER_HORIZON = 600.0


def _literal_prefix(prefix: str) -> str:
    return prefix[:-1] if prefix.endswith("%") else prefix


_CLEANED_NOTE = " [cleaned: NUL bytes removed, invalid UTF-8 replaced]"


def _clean_text(s: str) -> str:
    """Return s as Postgres text can hold it (no NUL, no lone surrogates), saying so when it changed."""
    cleaned = s.replace("\x00", "").encode("utf-8", "replace").decode("utf-8")
    return s if cleaned == s else cleaned + _CLEANED_NOTE


class IntentPoller:
    """Claims runs whose type starts with one of ``type_prefixes`` and runs their handlers.

    The names follow the inbox contract: ``IntentPoller(type_prefixes=["billing."],
    lease_duration=30, worker_id="billing-worker-python-1")``. Register handlers
    with :meth:`handle` (or the :meth:`handler` decorator), then call :meth:`run`.

    Every write is fenced by the lease token drawn at claim. A run that parks at
    a durable wait frees its slot at once; a timer (and the poll every
    ``poll_interval`` seconds, plus LISTEN for signals and finished children)
    claims it again when it is due. Past-deadline runs are failed by the reaper
    every ``reap_interval`` seconds, and a running one is cancelled at its next
    heartbeat.
    """

    def __init__(
        self,
        conninfo: str,
        type_prefixes: Optional[List[str]] = None,
        lease_duration: float = 30,
        worker_id: Optional[str] = None,
        runtime: str = "python",
        concurrency: int = 4,
        poll_interval: float = 1.0,
        shutdown_grace_period: float = 20.0,
        reap_interval: float = 5.0,
    ) -> None:
        if lease_duration < 1:
            raise InvalidInputError("lease_duration must be at least 1 second")
        if runtime not in ("go", "python"):
            raise InvalidInputError("runtime must be go or python")
        if concurrency < 1:
            raise InvalidInputError("concurrency must be at least 1")
        if any(p == "" for p in (type_prefixes or [])):
            raise InvalidInputError("type prefixes must not be empty strings")
        self.conninfo = conninfo
        self.type_prefixes = list(type_prefixes or [])
        self.lease_duration = lease_duration
        self.worker_id = worker_id or f"{socket.gethostname()}-{os.getpid()}"
        self.runtime = runtime
        self.concurrency = concurrency
        self.poll_interval = poll_interval
        self.shutdown_grace_period = shutdown_grace_period
        self.reap_interval = reap_interval
        self._handlers: Dict[str, Handler] = {}
        self._active: Dict[str, RunContext] = {}
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._stopping = threading.Event()
        self._closed = threading.Event()
        self._local = threading.local()
        self._conns: List[psycopg.Connection[Any]] = []
        self._timers: List[threading.Timer] = []

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
                             "type_prefixes": self.type_prefixes, "concurrency": self.concurrency}))
        background = [
            threading.Thread(target=self._listen_loop, name="sw-listen", daemon=True),
            threading.Thread(target=self._heartbeat_loop, name="sw-heartbeat", daemon=True),
        ]
        for t in background:
            t.start()
        pool = ThreadPoolExecutor(max_workers=self.concurrency, thread_name_prefix="sw-handler")
        conn = self._connect_until_ready()
        try:
            if conn is not None:
                self._claim_loop(conn, pool)
            self._shutdown(pool)
        finally:
            self._stopping.set()
            self._closed.set()
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

    def _connect_until_ready(self) -> Optional[psycopg.Connection[Any]]:
        """Connect, retrying with backoff while the database is unreachable; None once stopping."""
        backoff = 0.05
        while not self._stopping.is_set():
            try:
                return psycopg.connect(self.conninfo, autocommit=True, connect_timeout=10)
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
                free = self.concurrency - len(self._active)
            if free <= 0:
                self._wake.wait(self.poll_interval)
                self._wake.clear()
                continue
            try:
                # Payload and journal as text, decoded run by run below: a
                # value this worker cannot decode fails its own run only.
                rows = conn.execute(
                    "select id::text, type, payload::text, attempt, max_attempts, lease_token, deadline_at, "
                    "journal::text, traceparent "
                    "from workflow.claim_runs(%s, %s, %s, %s, %s, %s)",
                    # Only the types this worker has handlers for.
                    (self.worker_id, self.type_prefixes, self.runtime, free, lease_ms,
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
                ctx = RunContext(run_id, wtype, payload, attempt, max_attempts, self.worker_id,
                                 lease_token=token, deadline_at=deadline_at, traceparent=traceparent,
                                 journal=journal,
                                 connect=self._conn, on_park=self._wake_at)
                with self._lock:
                    self._active[run_id] = ctx
                fields = {"worker_id": self.worker_id, "run_id": run_id, "type": wtype, "attempt": attempt}
                if journal:
                    log.info(json.dumps({"msg": "Run resumed", **fields, "journal": len(journal)}))
                else:
                    log.info(json.dumps({"msg": "Run started", **fields}))
                pool.submit(self._execute, ctx)
            if len(rows) == free:
                continue
            self._wake.wait(self.poll_interval)
            self._wake.clear()

    def _fail_undecodable(self, conn: psycopg.Connection[Any], run_id: str, wtype: str, attempt: int,
                          token: int, why: str) -> None:
        """Fail a claimed run this worker cannot decode, alone and for good, saying why."""
        message = _clean_text(why)
        base = {"worker_id": self.worker_id, "run_id": run_id, "type": wtype, "attempt": attempt}
        try:
            conn.execute("select status from workflow.fail_runs(%s, %s::uuid[], %s::bigint[], %s, %s)",
                         (self.worker_id, [run_id], [token], [message], [False])).fetchall()
        except psycopg.Error as e:
            # The lease runs out and the run is reclaimed; nothing else is held up.
            log.error(json.dumps({"msg": "Failing an undecodable run failed", "error": str(e), **base}))
            return
        log.info(json.dumps({"msg": "Run failed", "error": message, **base}))

    def _conn(self) -> psycopg.Connection[Any]:
        conn = getattr(self._local, "conn", None)
        if conn is None or conn.closed:
            conn = psycopg.connect(self.conninfo, autocommit=True)
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

    def _execute(self, ctx: RunContext) -> None:
        handler = self._handlers.get(ctx.type)
        result: Any = None
        error: Optional[BaseException] = None
        try:
            if handler is None:
                raise RuntimeError(f"worker {self.worker_id} has no handler for workflow type {ctx.type}")
            result = handler(ctx)
            try:
                json.dumps(result)  # must be JSON
            except (TypeError, ValueError, RecursionError) as e:
                raise PermanentError(f"the handler's result cannot be stored as JSON: {type(e).__name__}: {e}") from e
        except BaseException as e:  # noqa: BLE001 - a handler's failure is the run's failure
            error = e
        with self._lock:
            ctx.done = True
        try:
            self._record_retrying(ctx, result, error)
        finally:
            with self._lock:
                self._active.pop(ctx.id, None)
            self._wake.set()

    def _record_retrying(self, ctx: RunContext, result: Any, error: Optional[BaseException]) -> None:
        """Record the outcome, reconnecting through a database outage while the lease may still hold.

        Every write is guarded by the lease token, so a retry after a write
        that did land changes nothing.
        """
        deadline = time.monotonic() + max(self.lease_duration, 5.0)
        backoff = 0.1
        while True:
            try:
                self._record(ctx, result, error)
                return
            except psycopg.OperationalError as e:
                conn = getattr(self._local, "conn", None)
                if conn is not None:
                    conn.close()
                if time.monotonic() + backoff > deadline:
                    log.error(json.dumps({"msg": "Recording the outcome failed; the run is retried after its lease "
                                                 "expires", "run_id": ctx.id, "error": str(e)}))
                    return
                time.sleep(backoff)
                backoff = min(backoff * 2, 2.0)

    def _record(self, ctx: RunContext, result: Any, error: Optional[BaseException]) -> None:
        conn = self._conn()
        base = {"worker_id": self.worker_id, "run_id": ctx.id, "type": ctx.type, "attempt": ctx.attempt}
        parked, failure = ctx._state()
        if parked:
            # The database already holds the parked run; there is nothing to write.
            log.info(json.dumps({"msg": "Run parked", **base}))
            return
        if ctx.reason in (REASON_CANCELLED, REASON_LEASE_LOST, REASON_DEADLINE):
            log.info(json.dumps({"msg": "Run stopped", "reason": ctx.reason, **base}))
            return
        if failure is not None:
            # Non-determinism fails the run for good, whatever the handler did.
            error = failure
        elif ctx.reason == REASON_SHUTDOWN and error is not None:
            # A handler that still succeeded after the grace period is
            # completed below, not handed back and run again.
            conn.execute("select workflow.release_runs(%s, %s::uuid[], %s::bigint[])",
                         (self.worker_id, [ctx.id], [ctx.lease_token]))
            log.info(json.dumps({"msg": "Run handed back", "reason": ctx.reason, **base}))
            return
        retryable = not isinstance(error, PermanentError)
        if error is None:
            try:
                rows = conn.execute(
                    "select id, status, error from workflow.complete_runs(%s, %s::uuid[], %s::bigint[], %s::jsonb[])",
                    (self.worker_id, [ctx.id], [ctx.lease_token], [json.dumps(result)])).fetchall()
            except (psycopg.DataError, psycopg.IntegrityError) as e:
                # A result Postgres cannot store (such as one holding \u0000)
                # fails this run for good, saying why, instead of leaving it
                # leased to be executed again.
                error, retryable = PermanentError(f"the handler's result could not be stored: {e}"), False
            else:
                if rows and rows[0][1] == "failed":
                    # The database refused the result (too large, nested too
                    # deeply): the run failed alone, for good.
                    log.info(json.dumps({"msg": "Run failed", "error": rows[0][2], **base}))
                elif rows:
                    log.info(json.dumps({"msg": "Run succeeded", **base}))
                else:
                    log.warning(json.dumps({"msg": "Run result discarded: the lease was no longer held", **base}))
                return
        message = _clean_text(str(error) or type(error).__name__)
        rows = conn.execute("select status, run_at from workflow.fail_runs(%s, %s::uuid[], %s::bigint[], %s, %s)",
                            (self.worker_id, [ctx.id], [ctx.lease_token], [message], [retryable])).fetchall()
        for status, run_at in rows:
            if status == "pending":
                log.info(json.dumps({"msg": "Run failed; retrying", "error": message,
                                     "next_attempt_at": run_at.isoformat(), **base}))
            else:
                log.info(json.dumps({"msg": "Run failed", "error": message, **base}))

    def _listen_loop(self) -> None:
        prefixes = [_literal_prefix(p) for p in self.type_prefixes]
        while not self._stopping.is_set():
            try:
                conn = psycopg.connect(self.conninfo, autocommit=True)
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
                                ctx = self._active.get(payload)
                            if ctx is not None:
                                ctx._cancel(REASON_CANCELLED)
                conn.close()
            except (psycopg.Error, OSError) as e:
                log.warning(json.dumps({"msg": "Listen connection lost; reconnecting", "error": str(e)}))
                time.sleep(0.5)

    def _heartbeat_loop(self) -> None:
        interval = self.lease_duration / 3
        lease_ms = int(self.lease_duration * 1000)
        last_reap = 0.0
        conn: Optional[psycopg.Connection[Any]] = None
        while not self._closed.wait(interval):
            try:
                if conn is None or conn.closed:
                    conn = psycopg.connect(self.conninfo, autocommit=True)
                with self._lock:
                    refs = [(c.id, c.lease_token) for c in self._active.values()]
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
                            ctx = self._active.get(run_id)
                        if ctx is None:
                            continue
                        if status == "cancelled":
                            ctx._cancel(REASON_CANCELLED)
                        elif deadline_exceeded:
                            ctx._cancel(REASON_DEADLINE)
                        else:
                            ctx._cancel(REASON_LEASE_LOST)
                if self.reap_interval > 0 and time.monotonic() - last_reap >= self.reap_interval:
                    last_reap = time.monotonic()
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
                log.error(json.dumps({"msg": "Heartbeat failed", "error": str(e)}))
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
            pending = [c for c in self._active.values() if not c.done]
        for c in pending:
            c._cancel(REASON_SHUTDOWN)
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            with self._lock:
                if not self._active:
                    return
            time.sleep(0.05)
        # Handlers that ignore cancellation: hand their runs back anyway; the
        # lease guard refuses whatever they write later.
        with self._lock:
            stuck = [c for c in self._active.values() if not c.done]
            for c in stuck:
                self._active.pop(c.id, None)
        if stuck:
            with psycopg.connect(self.conninfo, autocommit=True) as conn:
                conn.execute("select workflow.release_runs(%s, %s::uuid[], %s::bigint[])",
                             (self.worker_id, [c.id for c in stuck], [c.lease_token for c in stuck]))
            log.warning(json.dumps({"msg": "Handlers did not stop after cancellation; runs handed back",
                                    "runs": len(stuck)}))


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
