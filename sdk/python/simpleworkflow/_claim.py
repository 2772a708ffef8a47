"""Claiming (Go: claim.go): runs claimed into the free handler slots, and what wakes the claim loop.

The claim loop (:func:`claim_loop`) takes up to the free slots' worth of runs in
one ``workflow.claim_runs`` call, at once when woken, otherwise every
``poll_interval``; each claimed run is decoded, given a slot and its handler
started. The claim loop is woken by the listening connection
(:func:`listen_loop`: a new run of a type this worker claims, and once more
``WAKE_FOLLOW_UP`` after it; a cancellation notification for a run this worker
holds is confirmed with the database before its handler is cancelled), by the
timers of parked runs (:func:`wake_at`), by the reaper and by freed slots. A
run this worker cannot decode fails alone, for good (:func:`fail_undecodable`).
"""

from __future__ import annotations

import json
import logging
import select
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any, Callable, List, Optional, Set, Tuple

import psycopg

from ._heartbeat import heartbeat
from ._outcomes import _FAIL_RUNS, _clean_text
from ._writes import _Conn
from ._error_codes import ERRORS
from .client import _DENIED_STATE, _primary_message
from .durable import REASON_LEASE_LOST, Task
from .errors import PermissionDeniedError

if TYPE_CHECKING:
    from .poller import Poller

log = logging.getLogger("simpleworkflow")

#: A parked run due within this many seconds gets a timer that wakes the claim
#: loop on time; later ones are found by the regular poll.
_WAKE_TIMER_HORIZON = 600.0

#: Seconds after a woken claim that claimed nothing before the claim loop claims again without being
#: woken (Go: wokenRetry): another woken claim of the same types may have been under way.
_WOKEN_RETRY = 0.02

#: The least seconds between two confirmations of cancellation notifications
#: (Go: confirmGap): however many arrive, confirming them costs at most one
#: heartbeat call in flight and ten a second.
_CONFIRM_GAP = 0.1


def _literal_prefix(prefix: str) -> str:
    return prefix[:-1] if prefix.endswith("%") else prefix


class _UndecodableError(Exception):
    """A claimed run's payload or journal that this worker cannot decode."""


def _decode(what: str, text: Optional[str]) -> Any:
    """Decode a claimed run's JSON column; raise _UndecodableError saying why it cannot be."""
    if text is None:
        return None
    try:
        return json.loads(text)
    except RecursionError as e:
        raise _UndecodableError(
            f"the run's {what} cannot be decoded: nested too deeply for this worker " f"(RecursionError)"
        ) from e
    except (ValueError, MemoryError) as e:
        raise _UndecodableError(f"the run's {what} cannot be decoded: {type(e).__name__}: {e}") from e


def wakes(namespace: str, prefixes: List[str], payload: str) -> bool:
    """Whether a workflow_run_created payload concerns a poller of namespace with these literal prefixes.

    The payload is "namespace/type" (the namespace whose workers run the
    type); one without a namespace (a NOTIFY sent by hand, or by a schema
    older than version 8) concerns the type in every namespace. Go:
    engine.SplitWakePayload.
    """
    ns, sep, typ = payload.partition("/")
    if not sep:
        ns, typ = "", payload
    if ns and ns != namespace:
        return False
    return not prefixes or any(typ.startswith(x) for x in prefixes)


def listen_loop(p: Poller, follow_up: Callable[[], float]) -> None:
    """LISTEN for new runs and cancellations until the poller stops, reconnecting when the connection is lost.

    A new run of a type this worker claims wakes the claim loop, and again
    follow_up() seconds later (WAKE_FOLLOW_UP, read at each notification). A
    cancellation notification is only a hint: any database login may send one
    (pg_notify), for any run id. So it cancels no handler by itself: the runs
    it names that this worker holds are confirmed (:func:`confirm_cancelled`),
    those of every notification that arrived meanwhile in one call, at most
    one call every _CONFIRM_GAP seconds; ids this worker does not hold are
    ignored.
    """
    prefixes = [_literal_prefix(x) for x in p.type_prefixes]
    confirm = _Conn(p._open)
    suspects: Set[str] = set()
    confirmed_at = float("-inf")
    try:
        while not p._stopping.is_set():
            try:
                conn = p._open()
                try:
                    conn.execute("listen workflow_run_created")
                    conn.execute("listen workflow_run_cancelled")
                    p._wake.set()  # catch up on anything missed while disconnected
                    follow_up_at = None
                    while not p._stopping.is_set():
                        timeout = 0.5
                        if follow_up_at is not None:
                            timeout = max(0.0, min(timeout, follow_up_at - time.monotonic()))
                        if suspects:
                            timeout = max(0.0, min(timeout, confirmed_at + _CONFIRM_GAP - time.monotonic()))
                        ready, _, _ = select.select([conn.fileno()], [], [], timeout)
                        if follow_up_at is not None and time.monotonic() >= follow_up_at:
                            # Runs committed right after the notifying transaction
                            # were not announced on their own (see WAKE_FOLLOW_UP).
                            follow_up_at = None
                            p._wake.set()
                        if ready:
                            conn.pgconn.consume_input()
                            while True:
                                n = conn.pgconn.notifies()
                                if n is None:
                                    break
                                channel, payload = n.relname.decode(), n.extra.decode(errors="replace")
                                if channel == "workflow_run_created":
                                    if wakes(p.namespace, prefixes, payload):
                                        p._wake.set()
                                        follow_up_at = time.monotonic() + follow_up()
                                elif channel == "workflow_run_cancelled":
                                    with p._lock:
                                        if payload in p._active:
                                            suspects.add(payload)
                        if suspects and time.monotonic() >= confirmed_at + _CONFIRM_GAP:
                            confirmed_at = time.monotonic()
                            confirm_cancelled(p, confirm, suspects)
                finally:
                    conn.close()
            except (psycopg.Error, OSError) as e:
                log.warning(json.dumps({"msg": "Listen connection lost; reconnecting", "error": str(e)}))
                time.sleep(0.5)
    finally:
        confirm.close()


def confirm_cancelled(p: Poller, conn: _Conn, suspects: Set[str]) -> None:
    """Ask the database about the runs named by cancellation notifications, and empty suspects.

    The runs this worker still holds get an immediate heartbeat: the same
    call, allowed to the worker's login, that extends every lease. Only its
    answer, that the run was cancelled or that this attempt no longer holds
    the lease, cancels a handler. When the call fails, the next regular
    heartbeat asks again.
    """
    with p._lock:
        held = [p._active.get(run_id) for run_id in suspects]
        refs = [(t.id, t.lease_token) for t in held if t is not None and not t.done]
    suspects.clear()
    try:
        heartbeat(p, conn, refs)
    except psycopg.Error as e:
        log.error(
            json.dumps(
                {
                    "msg": "Confirming a cancellation failed; the next heartbeat checks again",
                    "error": str(e),
                    "runs": len(refs),
                }
            )
        )
        conn.reset()


def connect_until_ready(p: Poller) -> Optional[psycopg.Connection[Any]]:
    """Connect, retrying with backoff while the database is unreachable; None once stopping."""
    backoff = 0.05
    while not p._stopping.is_set():
        try:
            return p._open()
        except psycopg.OperationalError as e:
            log.warning(
                json.dumps(
                    {"msg": "Database unreachable; retrying", "error": str(e), "backoff_seconds": backoff}
                )
            )
            p._stopping.wait(backoff)
            backoff = min(backoff * 2, 5.0)
    return None


def claim_loop(p: Poller, conn: psycopg.Connection[Any], pool: ThreadPoolExecutor) -> None:
    """Claim runs into the free slots until the poller stops: at once when woken, otherwise every
    poll_interval; each claimed run takes a slot and its handler is submitted to pool."""
    # Set when a notification (or a timer of the poller's) ended the wait:
    # that claim goes ahead only when no other woken claim of the same
    # types is under way (claim_runs' p_woken).
    woken = False
    while not p._stopping.is_set():
        with p._lock:
            free = p.concurrency - len(p._active) - len(p._older)
        if free <= 0:
            woken = p._wake.wait(p.poll_interval) or woken
            p._wake.clear()
            continue
        limit = min(free, p.claim_batch_size)
        try:
            # Payload and journal as text, decoded run by run below: a
            # value this worker cannot decode fails its own run only.
            was_woken = woken
            rows = conn.execute(CLAIM_RUNS, claim_params(p, limit, None, woken)).fetchall()
            woken = False
        except psycopg.OperationalError as e:
            log.error(json.dumps({"msg": "Claim failed; reconnecting", "error": str(e)}))
            conn.close()
            reconnected = connect_until_ready(p)
            if reconnected is None:
                return
            conn = reconnected
            continue
        except psycopg.Error as e:
            # SW002 (or a missing grant, 42501): the login does not work for
            # the namespace.
            if not _denies_the_login(e):
                raise
            raise PermissionDeniedError(
                f"worker {p.worker_id}, namespace {p.namespace}: {_primary_message(e)} (a worker's login needs "
                f"the workflow_worker role and a binding to its namespace, which the schema's owner makes with "
                f"workflow.grant_namespace(role, '{p.namespace}', 'worker'))"
            ) from None
        start_claimed(p, conn, rows, pool)
        if len(rows) == limit:
            continue
        if was_woken and not rows:
            # Another woken claim of these types may have been under way
            # (this one then claims nothing): unless a wake-up comes first,
            # claim once more, not woken, shortly after (Go: wokenRetry).
            woken = p._wake.wait(_WOKEN_RETRY)
        else:
            woken = p._wake.wait(p.poll_interval)
        p._wake.clear()


def _denies_the_login(e: psycopg.Error) -> bool:
    """Whether the database refused the login itself: the inbox's own SW002, or a missing grant (42501)."""
    state = getattr(e, "sqlstate", None) or ""
    return ERRORS.get(state) is PermissionDeniedError or state == _DENIED_STATE


#: The claim (Go: engine.ClaimRuns): the columns start_claimed reads, in its order.
CLAIM_RUNS = (
    "select id::text, type, payload::text, attempt, max_attempts, lease_token, deadline_at, "
    "journal::text, traceparent, parent_id::text "
    "from workflow.claim_runs(%s, %s, %s, %s, %s, %s, %s, %s::uuid[], %s)"
)


def claim_params(p: Poller, limit: int, after: Optional[List[str]], woken: bool) -> Tuple[Any, ...]:
    """The arguments of CLAIM_RUNS: only the types this worker has handlers for, of the namespace it
    serves; after names the runs a hand-off claims from (None: a claim from the queue)."""
    return (
        p.worker_id,
        p.type_prefixes,
        p.runtime,
        limit,
        int(p.lease_duration * 1000),
        sorted(p._handlers) or None,
        p.namespace,
        after,
        woken,
    )


def start_claimed(
    p: Poller,
    conn: psycopg.Connection[Any],
    rows: List[Tuple[Any, ...]],
    pool: ThreadPoolExecutor,
    handed: bool = False,
) -> List[Task]:
    """Give each claimed run a slot and submit its handler to pool; a run this worker cannot decode
    fails alone. For runs handed off by a completion (handed), only while the poller still claims:
    the others are returned, not started, for the caller to hand back."""
    refused: List[Task] = []
    for (
        run_id,
        wtype,
        payload_text,
        attempt,
        max_attempts,
        token,
        deadline_at,
        journal_text,
        traceparent,
        parent_id,
    ) in rows:
        try:
            payload = _decode("payload", payload_text)
            journal = _decode("journal", journal_text)
            if isinstance(journal, str):
                # The database's word that the journal is too large to load.
                raise _UndecodableError(f"the run's journal cannot be loaded: {journal}")
        except _UndecodableError as e:
            fail_undecodable(p, conn, run_id, wtype, attempt, token, str(e))
            continue
        span = p._tracing.start_attempt(
            run_id, wtype, attempt, max_attempts, p.worker_id, token, len(journal or []), traceparent
        )
        task = Task(
            run_id,
            wtype,
            payload,
            attempt,
            max_attempts,
            p.worker_id,
            lease_token=token,
            deadline_at=deadline_at,
            traceparent=traceparent,
            journal=journal,
            connect=p._conn,
            on_park=p._wake_at,
            record_step=p._record_step,
            tracing=p._tracing,
            span=span,
        )
        task._has_parent = parent_id is not None
        p._start_run_log(task)
        with p._lock:
            if handed and not p._claiming:
                refused.append(task)
                continue
            older = p._active.get(run_id)
            if older is not None:
                # An attempt of this worker lost the lease (reaped
                # while its handler still ran) and the run came back
                # here: the older attempt is told, and the run's
                # entry is the new attempt from now on.
                older._cancel(REASON_LEASE_LOST)
                p._older.add(older)
            p._active[run_id] = task
        fields = {"worker_id": p.worker_id, "run_id": run_id, "type": wtype, "attempt": attempt}
        if handed:
            log.info(json.dumps({"msg": "Run handed off", **fields, "parent_id": parent_id}))
        elif journal:
            log.info(json.dumps({"msg": "Run resumed", **fields, "journal": len(journal)}))
        else:
            log.info(json.dumps({"msg": "Run started", **fields}))
        pool.submit(p._execute, task)
    return refused


def fail_undecodable(
    p: Poller, conn: psycopg.Connection[Any], run_id: str, wtype: str, attempt: int, token: int, why: str
) -> None:
    """Fail a claimed run this worker cannot decode, alone and for good, saying why."""
    message = _clean_text(why)
    base = {"worker_id": p.worker_id, "run_id": run_id, "type": wtype, "attempt": attempt}
    try:
        conn.execute(_FAIL_RUNS, (p.worker_id, [run_id], [token], [message], [False])).fetchall()
    except psycopg.Error as e:
        # The lease runs out and the run is reclaimed; nothing else is held up.
        log.error(json.dumps({"msg": "Failing an undecodable run failed", "error": str(e), **base}))
        return
    log.info(json.dumps({"msg": "Run failed", "error": message, **base}))


def wake_at(p: Poller, at: Optional[datetime]) -> None:
    """Wake the claim loop when a run this worker parked is due, so that a sleep ends on time."""
    if at is None or p._stopping.is_set():
        return
    delay = (at - datetime.now(timezone.utc)).total_seconds() + 0.02
    if delay > _WAKE_TIMER_HORIZON:
        return
    timer = threading.Timer(max(delay, 0.0), p._wake.set)
    timer.daemon = True
    with p._lock:
        p._timers = [t for t in p._timers if t.is_alive()]
        p._timers.append(timer)
    timer.start()
