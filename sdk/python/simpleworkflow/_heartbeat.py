"""Heartbeating (Go: heartbeat.go): the leases of the runs whose handlers run are extended together.

Every ``heartbeat_interval`` one ``workflow.heartbeat_runs`` call extends the
lease of every active attempt; an attempt whose run was cancelled, passed its
deadline or lost its lease is told so (its task is cancelled with the reason).
The same call, for the runs named by cancellation notifications, confirms
those before any handler is stopped (:func:`heartbeat`, from the listen loop
in ``_claim``).
"""

from __future__ import annotations

import json
import logging
from typing import TYPE_CHECKING, List, Optional, Tuple

import psycopg

from ._writes import _Conn
from .durable import REASON_CANCELLED, REASON_DEADLINE, REASON_LEASE_LOST, Task

if TYPE_CHECKING:
    from .poller import Poller

log = logging.getLogger("simpleworkflow")


def heartbeat(p: Poller, conn: _Conn, refs: List[Tuple[str, Optional[int]]]) -> None:
    """Extend the leases of refs (run id, lease token), and cancel the handlers of those whose run was
    cancelled, passed its deadline or whose lease was lost. Raises psycopg.Error when the call fails.

    An attempt that no longer holds its lease is asked about once more before its handler is told why:
    the answer's status is read as the call began, so a run cancelled while the call waited for its row
    (say, a confirmation in flight when the cancel committed) shows as still leased, not owned. The
    second answer reads the status after that change.
    """
    sent = dict(refs)

    def held(run_id: str) -> Optional[Task]:
        # The attempt asked about, not a later one of the same run that
        # this worker claimed since.
        with p._lock:
            task = p._active.get(run_id)
        return task if task is not None and task.lease_token == sent.get(run_id) else None

    again = False
    while refs:
        try:
            rows = (
                conn.get()
                .execute(
                    "select id::text, status, owned, deadline_exceeded "
                    "from workflow.heartbeat_runs(%s, %s::uuid[], %s::bigint[], %s)",
                    (p.worker_id, [r[0] for r in refs], [r[1] for r in refs], int(p.lease_duration * 1000)),
                )
                .fetchall()
            )
        except psycopg.Error:
            if again:
                # The first answer said these leases were lost.
                for run_id, _ in refs:
                    task = held(run_id)
                    if task is not None:
                        task._cancel(REASON_LEASE_LOST)
            raise
        lost: List[Tuple[str, Optional[int]]] = []
        for run_id, status, owned, deadline_exceeded in rows:
            if owned:
                continue
            task = held(run_id)
            if task is None:
                continue
            if status == "cancelled":
                task._cancel(REASON_CANCELLED)
            elif deadline_exceeded:
                task._cancel(REASON_DEADLINE)
            elif not again:
                lost.append((task.id, task.lease_token))
            else:
                task._cancel(REASON_LEASE_LOST)
        refs, again = lost, True


def heartbeat_loop(p: Poller) -> None:
    """Extend the leases of every active run until the poller closes, and cancel the handlers of runs
    that were cancelled, passed their deadline or whose lease was lost."""
    conn = _Conn(p._open)
    while not p._closed.wait(p.heartbeat_interval):
        try:
            with p._lock:
                refs = [(t.id, t.lease_token) for t in p._active.values()]
            heartbeat(p, conn, refs)
        except psycopg.Error as e:
            log.error(json.dumps({"msg": "Heartbeat failed", "error": str(e)}))
            conn.reset()
    conn.close()
