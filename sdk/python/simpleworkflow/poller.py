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
from typing import Any, Callable, Dict, List, Mapping, Optional

import psycopg

from .client import validate_type
from .errors import InvalidInputError, PermanentError

log = logging.getLogger("simpleworkflow")

#: Why a handler was asked to stop (RunContext.reason).
REASON_CANCELLED = "run cancelled"
REASON_LEASE_LOST = "lease lost"
REASON_SHUTDOWN = "worker shutting down"

Handler = Callable[["RunContext"], Any]


class RunContext:
    """One attempt of a run, as a handler sees it.

    ``cancelled`` is a threading.Event set when the run is cancelled, its lease
    is lost or the worker's shutdown grace period is over; ``reason`` says
    which. Long handlers check :meth:`is_cancelled` or sleep with :meth:`wait`.
    """

    def __init__(self, run_id: str, workflow_type: str, payload: Mapping[str, Any], attempt: int,
                 max_attempts: int, worker_id: str) -> None:
        self.id = run_id
        self.type = workflow_type
        self.payload = payload
        self.attempt = attempt
        self.max_attempts = max_attempts
        self.worker_id = worker_id
        self.cancelled = threading.Event()
        self.reason: Optional[str] = None
        self.done = False

    def is_cancelled(self) -> bool:
        """True once the handler should stop."""
        return self.cancelled.is_set()

    def wait(self, seconds: float) -> bool:
        """Sleep up to ``seconds``; return True early if the handler should stop."""
        return self.cancelled.wait(seconds)

    def _cancel(self, reason: str) -> None:
        if not self.cancelled.is_set():
            self.reason = reason
            self.cancelled.set()


def _literal_prefix(prefix: str) -> str:
    return prefix[:-1] if prefix.endswith("%") else prefix


class IntentPoller:
    """Claims runs whose type starts with one of ``type_prefixes`` and runs their handlers.

    The names follow the inbox contract: ``IntentPoller(type_prefixes=["billing."],
    lease_duration=30, worker_id="billing-worker-python-1")``. Register handlers
    with :meth:`handle` (or the :meth:`handler` decorator), then call :meth:`run`.
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
        self._conns: List[psycopg.Connection] = []

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
        conn = psycopg.connect(self.conninfo, autocommit=True)
        try:
            self._claim_loop(conn, pool)
            self._shutdown(pool)
        finally:
            self._stopping.set()
            self._closed.set()
            pool.shutdown(wait=False)
            conn.close()
            with self._lock:
                for c in self._conns:
                    c.close()
                self._conns.clear()
        log.info(json.dumps({"msg": "Worker stopped", "worker_id": self.worker_id}))

    def _claim_loop(self, conn: psycopg.Connection, pool: ThreadPoolExecutor) -> None:
        lease_ms = int(self.lease_duration * 1000)
        while not self._stopping.is_set():
            with self._lock:
                free = self.concurrency - len(self._active)
            if free <= 0:
                self._wake.wait(self.poll_interval)
                self._wake.clear()
                continue
            try:
                rows = conn.execute(
                    "select id::text, type, payload, attempt, max_attempts "
                    "from workflow.claim_runs(%s, %s, %s, %s, %s)",
                    (self.worker_id, self.type_prefixes, self.runtime, free, lease_ms),
                ).fetchall()
            except psycopg.OperationalError as e:
                log.error(json.dumps({"msg": "Claim failed; reconnecting", "error": str(e)}))
                time.sleep(self.poll_interval)
                conn = psycopg.connect(self.conninfo, autocommit=True)
                continue
            for run_id, wtype, payload, attempt, max_attempts in rows:
                ctx = RunContext(run_id, wtype, payload, attempt, max_attempts, self.worker_id)
                with self._lock:
                    self._active[run_id] = ctx
                log.info(json.dumps({"msg": "Run started", "worker_id": self.worker_id, "run_id": run_id,
                                     "type": wtype, "attempt": attempt}))
                pool.submit(self._execute, ctx)
            if len(rows) == free:
                continue
            self._wake.wait(self.poll_interval)
            self._wake.clear()

    def _conn(self) -> psycopg.Connection:
        conn = getattr(self._local, "conn", None)
        if conn is None or conn.closed:
            conn = psycopg.connect(self.conninfo, autocommit=True)
            self._local.conn = conn
            with self._lock:
                self._conns.append(conn)
        return conn

    def _execute(self, ctx: RunContext) -> None:
        handler = self._handlers.get(ctx.type)
        result: Any = None
        error: Optional[BaseException] = None
        try:
            if handler is None:
                raise RuntimeError(f"worker {self.worker_id} has no handler for workflow type {ctx.type}")
            result = handler(ctx)
            json.dumps(result)  # must be JSON
        except BaseException as e:  # noqa: BLE001 - a handler's failure is the run's failure
            error = e
        with self._lock:
            ctx.done = True
        try:
            self._record(ctx, result, error)
        finally:
            with self._lock:
                self._active.pop(ctx.id, None)
            self._wake.set()

    def _record(self, ctx: RunContext, result: Any, error: Optional[BaseException]) -> None:
        conn = self._conn()
        base = {"worker_id": self.worker_id, "run_id": ctx.id, "type": ctx.type, "attempt": ctx.attempt}
        if ctx.reason in (REASON_CANCELLED, REASON_LEASE_LOST):
            log.info(json.dumps({"msg": "Run stopped", "reason": ctx.reason, **base}))
            return
        if ctx.reason == REASON_SHUTDOWN:
            conn.execute("select workflow.release_runs(%s, %s::uuid[], %s::int[])",
                         (self.worker_id, [ctx.id], [ctx.attempt]))
            log.info(json.dumps({"msg": "Run handed back", "reason": ctx.reason, **base}))
            return
        if error is None:
            rows = conn.execute("select id from workflow.complete_runs(%s, %s::uuid[], %s::int[], %s::jsonb[])",
                                (self.worker_id, [ctx.id], [ctx.attempt], [json.dumps(result)])).fetchall()
            if rows:
                log.info(json.dumps({"msg": "Run succeeded", **base}))
            else:
                log.warning(json.dumps({"msg": "Run result discarded: the lease was no longer held", **base}))
            return
        message = str(error) or type(error).__name__
        retryable = not isinstance(error, PermanentError)
        rows = conn.execute("select status, run_at from workflow.fail_runs(%s, %s::uuid[], %s::int[], %s, %s)",
                            (self.worker_id, [ctx.id], [ctx.attempt], [message], [retryable])).fetchall()
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
                while not self._stopping.is_set():
                    ready, _, _ = select.select([conn.fileno()], [], [], 0.5)
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
        conn: Optional[psycopg.Connection] = None
        while not self._closed.wait(interval):
            try:
                if conn is None or conn.closed:
                    conn = psycopg.connect(self.conninfo, autocommit=True)
                with self._lock:
                    refs = [(c.id, c.attempt) for c in self._active.values()]
                if refs:
                    rows = conn.execute(
                        "select id::text, status, owned from workflow.heartbeat_runs(%s, %s::uuid[], %s::int[], %s)",
                        (self.worker_id, [r[0] for r in refs], [r[1] for r in refs], lease_ms),
                    ).fetchall()
                    for run_id, status, owned in rows:
                        if owned:
                            continue
                        with self._lock:
                            ctx = self._active.get(run_id)
                        if ctx is not None:
                            ctx._cancel(REASON_CANCELLED if status == "cancelled" else REASON_LEASE_LOST)
                if self.reap_interval > 0 and time.monotonic() - last_reap >= self.reap_interval:
                    last_reap = time.monotonic()
                    reaped = conn.execute("select id::text, status from workflow.reap_expired_leases(500)").fetchall()
                    for run_id, status in reaped:
                        log.info(json.dumps({"msg": "Lease expired; run reclaimed", "run_id": run_id, "status": status}))
                    if reaped:
                        self._wake.set()
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
                conn.execute("select workflow.release_runs(%s, %s::uuid[], %s::int[])",
                             (self.worker_id, [c.id for c in stuck], [c.attempt for c in stuck]))
            log.warning(json.dumps({"msg": "Handlers did not stop after cancellation; runs handed back",
                                    "runs": len(stuck)}))
