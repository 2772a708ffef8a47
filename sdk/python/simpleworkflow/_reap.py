"""Reaping (Go: reap.go): runs whose lease expired go back to the queue, runs past their deadline fail.

Every ``reap_interval`` seconds (0 or less: the poller does not reap), one
``workflow.reap_expired_leases`` and one ``workflow.expire_deadlines`` call.
"""

from __future__ import annotations

import json
import logging
from typing import TYPE_CHECKING

import psycopg

from ._writes import _Conn

if TYPE_CHECKING:
    from .poller import Poller

log = logging.getLogger("simpleworkflow")


def reap_loop(p: Poller) -> None:
    """Every reap_interval: return runs whose lease expired to the queue, and fail runs past their deadline."""
    conn = _Conn(p._open)
    while not p._closed.wait(p.reap_interval):
        try:
            reaped = (
                conn.get()
                .execute("select id::text, status from workflow.reap_expired_leases(500)")
                .fetchall()
            )
            for run_id, status in reaped:
                log.info(
                    json.dumps({"msg": "Lease expired; run reclaimed", "run_id": run_id, "status": status})
                )
            if reaped:
                p._wake.set()
            expired = (
                conn.get().execute("select id::text from workflow.expire_deadlines(null, 500)").fetchall()
            )
            if expired:
                # One line a batch: a flood of overdue runs is not a flood of logs.
                log.info(
                    json.dumps(
                        {
                            "msg": "Runs failed: deadline exceeded",
                            "runs": len(expired),
                            "run_ids": [r[0] for r in expired[:10]],
                        }
                    )
                )
        except psycopg.Error as e:
            log.error(json.dumps({"msg": "Reaping failed", "error": str(e)}))
            conn.reset()
    conn.close()
