"""Heartbeating (Go: heartbeat.go): the leases of the runs whose handlers run are extended together.

Every ``heartbeat_interval`` one ``workflow.heartbeat_runs`` call extends the
lease of every active attempt; an attempt whose run was cancelled, passed its
deadline or lost its lease is told so (its task is cancelled with the reason).
"""

from __future__ import annotations

import json
import logging
from typing import TYPE_CHECKING

import psycopg

from ._writes import _Conn
from .durable import REASON_CANCELLED, REASON_DEADLINE, REASON_LEASE_LOST

if TYPE_CHECKING:
    from .poller import Poller

log = logging.getLogger("simpleworkflow")


def heartbeat_loop(p: Poller) -> None:
    """Extend the leases of every active run until the poller closes, and cancel the handlers of runs
    that were cancelled, passed their deadline or whose lease was lost."""
    lease_ms = int(p.lease_duration * 1000)
    conn = _Conn(p._open)
    while not p._closed.wait(p.heartbeat_interval):
        try:
            with p._lock:
                refs = [(t.id, t.lease_token) for t in p._active.values()]
            sent = dict(refs)
            if refs:
                rows = conn.get().execute(
                    "select id::text, status, owned, deadline_exceeded "
                    "from workflow.heartbeat_runs(%s, %s::uuid[], %s::bigint[], %s)",
                    (p.worker_id, [r[0] for r in refs], [r[1] for r in refs], lease_ms),
                ).fetchall()
                for run_id, status, owned, deadline_exceeded in rows:
                    if owned:
                        continue
                    with p._lock:
                        task = p._active.get(run_id)
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
            conn.reset()
    conn.close()
