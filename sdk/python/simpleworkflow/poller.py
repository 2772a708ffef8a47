"""Worker-side API: Poller claims runs by type prefix and runs handlers.

:class:`Poller` owns the handler slots (the active attempts, and the older
ones still writing their outcome) and wires the parts, each in its own module
as in the Go SDK: claiming and what wakes it (``_claim``), heartbeating
(``_heartbeat``), reaping (``_reap``), step writing (``_step_writer``),
completing, one function per kind of outcome (``_outcomes``), and the
handlers' run logs (``_run_log``); what the writers share is in ``_writes``. Here are its settings and defaults, the
handlers' execution, and the shutdown.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import socket
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Callable, Dict, Iterable, List, Optional, Set, Tuple, Union

import psycopg

from . import __version__
from ._claim import claim_loop, connect_until_ready, listen_loop, wake_at
from ._heartbeat import heartbeat_loop
from ._outcomes import _COMPLETE, _DROP, _FAIL, _RELEASE, _RELEASE_RUNS, _Outcome, outcome_loop
from ._reap import reap_loop
from ._run_log import _RunLog, log_loop, new_run_logger, send_logs
from ._step_writer import _StepRequest, record_step, step_loop
from ._writes import _BatchQueue, _Conn
from .client import DEFAULT_NAMESPACE, namespace_problem, validate_type
from .durable import REASON_CANCELLED, REASON_DEADLINE, REASON_LEASE_LOST, REASON_SHUTDOWN, Task
from .errors import InvalidInputError, PermanentError, PermissionDeniedError, StoppedError
from .tracing import (
    OUTCOME_LEASE_LOST,
    OUTCOME_RELEASED,
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
#: How often what handlers logged through Task.logger is sent to the database, in seconds.
DEFAULT_LOG_FLUSH_INTERVAL_SECONDS = 1.0
#: The most claim batch size.
MAX_CLAIM_BATCH_SIZE = 1000

#: Seconds after a workflow_run_created notification when the poller claims
#: once more: only one committing transaction per type notifies at a time, so
#: runs committed right after it were announced by its notification alone
#: (engine.WakeFollowUp in Go).
WAKE_FOLLOW_UP = 0.05


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
    #: The namespace the poller serves (Go: PollerConfig.Namespace).
    namespace: str = DEFAULT_NAMESPACE
    #: The least level of Task.logger's records kept with the run (Go: PollerConfig.RunLogLevel).
    run_log_level: int = logging.INFO
    #: How often handlers' log lines are sent (Go: PollerConfig.LogFlushInterval).
    log_flush_interval: float = DEFAULT_LOG_FLUSH_INTERVAL_SECONDS


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

    ``namespace`` is the one namespace (tenant) the poller serves, a
    Kubernetes namespace name; None: ``"default"`` (Go: PollerConfig.Namespace).
    It claims only the runs whose type that namespace runs (their
    ``type_namespace``: the namespace's own runs, and those of namespaces it
    shares a type with). The database login must be bound to it as a worker
    (``workflow.grant_namespace(role, namespace, 'worker')``; the schema's
    owner works for every namespace): otherwise :meth:`run` stops and raises
    :class:`PermissionDeniedError` at the first claim.

    What a handler logs through ``task.logger`` at or above ``run_log_level``
    (a logging level, or its name; INFO by default) is kept with its run per
    attempt, sent every ``log_flush_interval`` seconds (1 by default), before
    each outcome and before a wait parks the run (Go: RunLogLevel and
    LogFlushInterval); see :attr:`Task.logger`.

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
        namespace: Optional[str] = None,
        run_log_level: Union[int, str] = logging.INFO,
        log_flush_interval: float = DEFAULT_LOG_FLUSH_INTERVAL_SECONDS,
    ) -> None:
        if not conninfo and connect is None:
            raise InvalidInputError("a connection string (or a connect function) is required")
        if namespace is None:
            namespace = DEFAULT_NAMESPACE
        problem = namespace_problem(namespace)
        if problem is not None:
            raise InvalidInputError(problem)
        if lease_duration < 1:
            raise InvalidInputError(f"lease_duration must be at least 1 second, got {lease_duration}")
        if runtime not in ("go", "python"):
            raise InvalidInputError(f"runtime must be go or python, got {runtime!r}")
        if concurrency < 1:
            raise InvalidInputError(f"concurrency must be at least 1, got {concurrency}")
        if heartbeat_interval is None:
            heartbeat_interval = lease_duration / 3
        if not 0 < heartbeat_interval < lease_duration:
            raise InvalidInputError(
                f"heartbeat_interval must be positive and below the lease duration "
                f"{lease_duration}, got {heartbeat_interval}"
            )
        if poll_interval < 0:
            raise InvalidInputError("poll_interval must not be negative")
        if shutdown_grace_period < 0:
            raise InvalidInputError("shutdown_grace_period must not be negative")
        if isinstance(run_log_level, str):
            level = logging.getLevelName(run_log_level.upper())
            if not isinstance(level, int):
                raise InvalidInputError(f"run_log_level must be a logging level, got {run_log_level!r}")
            run_log_level = level
        if isinstance(run_log_level, bool) or not isinstance(run_log_level, int):
            raise InvalidInputError(f"run_log_level must be a logging level, got {run_log_level!r}")
        if not log_flush_interval > 0:
            raise InvalidInputError(f"log_flush_interval must be positive, got {log_flush_interval}")
        if not 1 <= claim_batch_size <= MAX_CLAIM_BATCH_SIZE:
            raise InvalidInputError(
                f"claim_batch_size must be between 1 and {MAX_CLAIM_BATCH_SIZE}, " f"got {claim_batch_size}"
            )
        if any(p in ("", "%") for p in (type_prefixes or [])):
            raise InvalidInputError(
                "type prefixes must not be empty strings or '%' " "(leave the list empty to claim every type)"
            )
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
        self.namespace = namespace
        self.run_log_level = run_log_level
        self.log_flush_interval = log_flush_interval
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
        # One send of run logs at a time: an attempt's lines reach the
        # database in the order they were logged.
        self._log_send = threading.Lock()
        # The handlers' pool, and whether runs may still be started: the
        # outcome writer starts the runs a completion hands off only while
        # the claim loop runs (both read and cleared under _lock, so none
        # starts once shutdown has begun).
        self._pool: Optional[ThreadPoolExecutor] = None
        self._claiming = False

    def config(self) -> PollerConfig:
        """The settings in effect, defaults filled in (Go: Poller.Config)."""
        return PollerConfig(
            type_prefixes=tuple(self.type_prefixes),
            lease_duration=float(self.lease_duration),
            worker_id=self.worker_id,
            runtime=self.runtime,
            concurrency=self.concurrency,
            heartbeat_interval=float(self.heartbeat_interval),
            poll_interval=float(self.poll_interval),
            shutdown_grace_period=float(self.shutdown_grace_period),
            reap_interval=float(self.reap_interval),
            claim_batch_size=self.claim_batch_size,
            namespace=self.namespace,
            run_log_level=self.run_log_level,
            log_flush_interval=float(self.log_flush_interval),
        )

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
        """Claim and execute runs until :meth:`stop` (or SIGTERM/SIGINT), then shut down gracefully.

        Raises :class:`PermissionDeniedError`, after the same graceful
        shutdown, when the database refuses the login a claim in the
        poller's namespace (it is not bound to it as a worker).
        """
        if install_signal_handlers and threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGTERM, signal.SIGINT):
                signal.signal(sig, lambda *_: self.stop())
        log.info(
            json.dumps(
                {
                    "msg": "Worker started",
                    "worker_id": self.worker_id,
                    "namespace": self.namespace,
                    "runtime": self.runtime,
                    "type_prefixes": self.type_prefixes,
                    "concurrency": self.concurrency,
                    "claim_batch_size": self.claim_batch_size,
                }
            )
        )
        background = [
            # WAKE_FOLLOW_UP is read at each notification, from this module.
            threading.Thread(
                target=listen_loop, args=(self, lambda: WAKE_FOLLOW_UP), name="sw-listen", daemon=True
            ),
            threading.Thread(target=heartbeat_loop, args=(self,), name="sw-heartbeat", daemon=True),
            threading.Thread(target=log_loop, args=(self,), name="sw-logs", daemon=True),
        ]
        if self.reap_interval > 0:
            background.append(threading.Thread(target=reap_loop, args=(self,), name="sw-reap", daemon=True))
        writers = [
            threading.Thread(target=step_loop, args=(self,), name="sw-steps", daemon=True),
            threading.Thread(target=outcome_loop, args=(self,), name="sw-outcomes", daemon=True),
        ]
        for t in background + writers:
            t.start()
        pool = ThreadPoolExecutor(max_workers=self.concurrency, thread_name_prefix="sw-handler")
        conn = connect_until_ready(self)
        denied: Optional[PermissionDeniedError] = None
        try:
            if conn is not None:
                with self._lock:
                    self._pool, self._claiming = pool, True
                try:
                    claim_loop(self, conn, pool)
                except PermissionDeniedError as e:
                    # The login may not claim for this namespace: retrying
                    # cannot help. Stop as after stop(), then say why.
                    denied = e
                    log.error(
                        json.dumps(
                            {
                                "msg": "Claim refused; stopping",
                                "worker_id": self.worker_id,
                                "namespace": self.namespace,
                                "error": str(e),
                            }
                        )
                    )
                    self._stopping.set()
                finally:
                    with self._lock:
                        self._claiming = False
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
        if denied is not None:
            raise denied

    def _open(self) -> psycopg.Connection[Any]:
        """A new autocommit connection."""
        if self._connect_fn is None:
            return psycopg.connect(self.conninfo, autocommit=True, connect_timeout=10)
        conn = self._connect_fn()
        if not conn.autocommit:
            conn.autocommit = True
        return conn

    # What a claimed run's Task calls ---------------------------------------------

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
        """Wake the claim loop when a run this worker parked is due (see _claim.wake_at)."""
        wake_at(self, at)

    def _start_run_log(self, task: Task) -> None:
        """Give a claimed attempt its run log: the buffer, its logger's maker and the send before a park."""
        task._run_log = _RunLog()
        task._new_logger = self._new_run_logger
        task._send_logs = self._send_run_logs

    def _new_run_logger(self, task: Task) -> logging.Logger:
        """The attempt's Task.logger (see _run_log)."""
        assert task._run_log is not None
        return new_run_logger(self, task, task._run_log)

    def _send_run_logs(self, task: Task) -> None:
        """Send what the attempt logged, on the calling handler thread's connection (before a park)."""
        send_logs(self, _Conn(self._conn), [task])

    def _record_step(
        self, run_id: str, token: int, name: str, position: int, raw: str
    ) -> Tuple[str, Any, Optional[str]]:
        """Hand a completed step to the step writer and wait for its row's answer (see _step_writer)."""
        return record_step(self, run_id, token, name, position, raw)

    # Handlers ---------------------------------------------------------------------

    def _execute(self, task: Task) -> None:
        """Run the handler of a claimed run (in a slot of the pool) and queue the outcome to write."""
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
                raise PermanentError(
                    f"the handler's result cannot be stored as JSON: {type(e).__name__}: {e}"
                ) from e
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

    def _free_slots(self, tasks: Iterable[Task]) -> None:
        """Free the slots of attempts whose outcomes are written (or never will be), and wake the claim loop.

        A slot is free once its outcome is written, so that the runs a worker
        holds leased never exceed its concurrency.
        """
        with self._lock:
            for task in tasks:
                self._forget(task)
        self._wake.set()

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
        return _Outcome(
            task, _FAIL, error=error, message=_message(error), retryable=not isinstance(error, PermanentError)
        )

    # Shutdown ---------------------------------------------------------------------

    def _shutdown(self, pool: ThreadPoolExecutor) -> None:
        """Wait for in-flight handlers within the grace period, then cancel the rest and hand their runs back."""
        with self._lock:
            n = len(self._active)
        if n:
            log.info(
                json.dumps(
                    {
                        "msg": "Stopping: waiting for in-flight runs",
                        "runs": n,
                        "grace_period": self.shutdown_grace_period,
                    }
                )
            )
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
                released = [
                    r[0]
                    for r in conn.execute(
                        _RELEASE_RUNS, (self.worker_id, [t.id for t in stuck], [t.lease_token for t in stuck])
                    ).fetchall()
                ]
        except psycopg.Error as e:
            error = e
            log.error(
                json.dumps(
                    {
                        "msg": "Handing runs back failed; they are retried after their lease expires",
                        "error": str(e),
                    }
                )
            )
        log.warning(
            json.dumps(
                {"msg": "Handlers did not stop after cancellation; runs handed back", "runs": len(stuck)}
            )
        )
        for t in stuck:
            if t.id in released:
                self._tracing.end_attempt(t._span, OUTCOME_RELEASED)
            elif error is None:
                self._tracing.end_attempt(t._span, OUTCOME_LEASE_LOST)
            else:
                self._tracing.end_attempt(t._span, OUTCOME_UNRECORDED, error)


def _message(error: BaseException) -> str:
    return str(error) or type(error).__name__
