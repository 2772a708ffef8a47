"""Completing (Go: outcome_write.go): the outcomes of finished handlers, written in batches.

A finished attempt asks for one of four kinds of outcome (:class:`_Outcome`):
its result written (:func:`succeed`, one ``workflow.complete_runs`` call a
batch), its error written (:func:`fail`, one ``workflow.fail_runs`` call: the
run is retried or fails for good), its run handed back (:func:`release`, one
``workflow.release_runs`` call), or nothing to write (:func:`drop`: the run
parked, was cancelled, lost its lease or passed its deadline, and the
database already says so). The outcome writer thread (:func:`outcome_loop`)
writes whatever accumulated in one batch, each run getting its own answer,
ends the attempts' spans and frees their slots; what the batch's handlers
logged is sent first (``_run_log.send_logs``).
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any, Dict, List, Optional, Set, Tuple

from ._run_log import send_logs
from ._writes import _Conn, _Refused, in_retry, with_retry
from .durable import REASON_CANCELLED, REASON_DEADLINE, Task
from .errors import PermanentError
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
)

if TYPE_CHECKING:
    from .poller import Poller

log = logging.getLogger("simpleworkflow")

_COMPLETE_RUNS = (
    "select id::text, status, error from workflow.complete_runs(%s, %s::uuid[], %s::bigint[], %s::jsonb[])"
)
_FAIL_RUNS = "select id::text, status, run_at from workflow.fail_runs(%s, %s::uuid[], %s::bigint[], %s::text[], %s::boolean[])"
_RELEASE_RUNS = "select id::text from workflow.release_runs(%s, %s::uuid[], %s::bigint[])"

_CLEANED_NOTE = " [cleaned: NUL bytes removed, invalid UTF-8 replaced]"


def _clean_text(s: str) -> str:
    """Return s as Postgres text can hold it (no NUL, no lone surrogates), saying so when it changed."""
    cleaned = s.replace("\x00", "").encode("utf-8", "replace").decode("utf-8")
    return s if cleaned == s else cleaned + _CLEANED_NOTE


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

#: How each attempt of a batch ended, for its span: (outcome, error, next attempt at), by run id.
_Ends = Dict[str, Tuple[str, Optional[BaseException], Optional[datetime]]]


def _drop_outcome(reason: Optional[str]) -> str:
    """The span outcome of an attempt whose outcome is not written."""
    if reason == "parked":
        return OUTCOME_PARKED
    if reason == REASON_CANCELLED:
        return OUTCOME_CANCELLED
    if reason == REASON_DEADLINE:
        return OUTCOME_DEADLINE_EXCEEDED
    return OUTCOME_LEASE_LOST


def _fields(p: Poller, o: _Outcome) -> Dict[str, Any]:
    """The log fields that say which attempt an outcome is of."""
    return {"worker_id": p.worker_id, "run_id": o.task.id, "type": o.task.type, "attempt": o.task.attempt}


def outcome_loop(p: Poller) -> None:
    """Record the outcomes of concurrent handlers in batches, then free their slots."""
    conn = _Conn(p._open)
    try:
        for batch in p._outcomes.batches():
            try:
                flush(p, conn, batch)
            except Exception as e:  # noqa: BLE001 - the leases run out; the runs are retried
                log.error(
                    json.dumps(
                        {
                            "msg": "Recording outcomes failed; the runs are retried after their "
                            "lease expires",
                            "error": str(e),
                            "runs": len(batch),
                        }
                    )
                )
                p._free_slots([o.task for o in batch])
    finally:
        conn.close()


def flush(p: Poller, conn: _Conn, batch: List[_Outcome]) -> None:
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
    _flush_unique(p, conn, first)
    if later:
        flush(p, conn, later)


def _flush_unique(p: Poller, conn: _Conn, batch: List[_Outcome]) -> None:
    """flush for a batch with one outcome per run: one write per kind of outcome."""
    # What the handlers logged goes before the outcome that ends their attempts.
    send_logs(p, conn, [o.task for o in batch])
    completions = [o for o in batch if o.kind == _COMPLETE]
    failures = [o for o in batch if o.kind == _FAIL]
    releases = [o for o in batch if o.kind == _RELEASE]
    # How each attempt ended, for its span; the default covers an outcome
    # whose write failed.
    ends: _Ends = {o.task.id: (OUTCOME_UNRECORDED, o.error, None) for o in batch}

    drop(p, [o for o in batch if o.kind == _DROP], ends)
    if completions:
        # Results the database cannot store fail their runs instead.
        failures += succeed(p, conn, completions, ends)
    if failures:
        fail(p, conn, failures, ends)
    if releases:
        release(p, conn, releases, ends)

    for o in batch:
        outcome, error, next_at = ends[o.task.id]
        p._tracing.end_attempt(o.task._span, outcome, error, next_at)
    # A slot is free once its outcome is written, so that the runs a
    # worker holds leased never exceed its concurrency.
    p._free_slots([o.task for o in batch])


def drop(p: Poller, drops: List[_Outcome], ends: _Ends) -> None:
    """Report the attempts with nothing to write (parked, cancelled, lease lost, past their deadline),
    in ends and the log."""
    for o in drops:
        ends[o.task.id] = (_drop_outcome(o.reason), None, None)
        if o.reason == "parked":
            log.info(json.dumps({"msg": "Run parked", **_fields(p, o)}))
        else:
            log.info(json.dumps({"msg": "Run stopped", "reason": o.reason, **_fields(p, o)}))


def succeed(p: Poller, conn: _Conn, completions: List[_Outcome], ends: _Ends) -> List[_Outcome]:
    """Record successful attempts and report each, in ends and the log.

    It returns the outcomes whose result the database could not store, turned
    into failures for good that say why.
    """
    by_id = {o.task.id: o for o in completions}
    done, handed, unstorable, err = write_completions_handing_off(p, conn, completions)
    failures: List[_Outcome] = []
    for o, message in unstorable:
        # A result Postgres cannot store (such as one holding \u0000)
        # fails its run for good, saying why, instead of leaving it
        # leased to be executed again.
        o.kind, o.message, o.retryable = _FAIL, message, False
        o.error = PermanentError(message)
        failures.append(o)
    if err is not None:
        log.error(
            json.dumps(
                {
                    "msg": "Recording results failed; the runs are retried after their lease " "expires",
                    "error": str(err),
                    "runs": len(completions),
                }
            )
        )
    answered: Set[str] = set()
    for run_id, status, error in done:
        answered.add(run_id)
        o = by_id[run_id]
        if status == "failed":
            # The database refused the result (too large, nested too
            # deeply): the run failed alone, for good.
            ends[run_id] = (OUTCOME_FAILED, PermanentError(error), None)
            log.info(json.dumps({"msg": "Run failed", "error": error, **_fields(p, o)}))
        else:
            ends[run_id] = (OUTCOME_SUCCEEDED, None, None)
            log.info(json.dumps({"msg": "Run succeeded", **_fields(p, o)}))
    if err is None:
        for o in completions:
            if o.kind == _COMPLETE and o.task.id not in answered:
                ends[o.task.id] = (OUTCOME_LEASE_LOST, None, None)
                log.warning(
                    json.dumps({"msg": "Run result discarded: the lease was no longer held", **_fields(p, o)})
                )
    if handed:
        start_handed(p, conn, handed)
    return failures


def start_handed(p: Poller, conn: _Conn, rows: List[Tuple[Any, ...]]) -> None:
    """Start the runs a completion handed to this worker (they take the slots its batch frees); those
    that come back once shutdown has begun are handed back at once (pending, the attempt not counted)."""
    from ._claim import start_claimed  # (_claim imports this module)

    pool = p._pool
    if pool is None:
        return
    refused = start_claimed(p, conn.get(), rows, pool, handed=True)
    if refused:
        try:
            with_retry(
                conn,
                _RELEASE_RUNS,
                (p.worker_id, [t.id for t in refused], [t.lease_token for t in refused]),
                p.lease_duration,
            )
        except Exception as e:  # noqa: BLE001
            log.error(
                json.dumps(
                    {
                        "msg": "Handing runs back failed; they are retried after their lease " "expires",
                        "error": str(e),
                        "runs": len(refused),
                    }
                )
            )
        for t in refused:
            p._tracing.end_attempt(t._span, OUTCOME_RELEASED)


def fail(p: Poller, conn: _Conn, failures: List[_Outcome], ends: _Ends) -> None:
    """Record failed attempts (retried, or failed for good) and report each, in ends and the log."""
    by_id = {o.task.id: o for o in failures}
    for o in failures:
        o.message = _clean_text(o.message)
    res, err = write_failures(p, conn, failures)
    if err is not None:
        log.error(
            json.dumps(
                {
                    "msg": "Recording failures failed; the runs are retried after their lease " "expires",
                    "error": str(err),
                    "runs": len(failures),
                }
            )
        )
    else:
        for o in failures:  # written, but not for the runs whose lease had gone
            ends[o.task.id] = (OUTCOME_LEASE_LOST, None, None)
    for run_id, status, run_at in res:
        o = by_id[run_id]
        if status == "pending":
            ends[run_id] = (OUTCOME_RETRYING, o.error, run_at)
            log.info(
                json.dumps(
                    {
                        "msg": "Run failed; retrying",
                        "error": o.message,
                        "next_attempt_at": run_at.isoformat(),
                        **_fields(p, o),
                    }
                )
            )
        else:
            ends[run_id] = (OUTCOME_FAILED, o.error, None)
            log.info(json.dumps({"msg": "Run failed", "error": o.message, **_fields(p, o)}))


def release(p: Poller, conn: _Conn, releases: List[_Outcome], ends: _Ends) -> None:
    """Hand back the runs of attempts stopped by the shutdown (pending at once, the attempt not counted)
    and report each, in ends and the log."""
    by_id = {o.task.id: o for o in releases}
    try:
        rows = with_retry(
            conn,
            _RELEASE_RUNS,
            (p.worker_id, [o.task.id for o in releases], [o.task.lease_token for o in releases]),
            p.lease_duration,
        )
    except Exception as e:  # noqa: BLE001
        log.error(
            json.dumps(
                {
                    "msg": "Handing runs back failed; they are retried after their lease " "expires",
                    "error": str(e),
                    "runs": len(releases),
                }
            )
        )
        rows = []
    else:
        for o in releases:
            ends[o.task.id] = (OUTCOME_LEASE_LOST, None, None)
    for (run_id,) in rows:
        ends[run_id] = (OUTCOME_RELEASED, None, None)
        log.info(
            json.dumps(
                {"msg": "Run handed back", "reason": by_id[run_id].reason, **_fields(p, by_id[run_id])}
            )
        )


def _complete_params(p: Poller, batch: List[_Outcome]) -> Tuple[Any, ...]:
    """The arguments of _COMPLETE_RUNS for a batch of completions."""
    return (
        p.worker_id,
        [o.task.id for o in batch],
        [o.task.lease_token for o in batch],
        [o.raw_result for o in batch],
    )


def write_completions_handing_off(
    p: Poller, conn: _Conn, completions: List[_Outcome]
) -> Tuple[List[Tuple[Any, ...]], List[Tuple[Any, ...]], List[Tuple[_Outcome, str]], Optional[BaseException]]:
    """write_completions, and when the batch holds runs with a parent and the poller still claims, a
    hand-off in the same transaction (Go: engine.CompleteRunsHandOff): claim_runs with p_after leases
    the runs those completions made runnable (a DAG's next steps, a parent woken), at most one per such
    completion. Returns (rows, handed rows, [(outcome, why) unstorable], error); a batch the database
    refuses is written as write_completions writes it, without a hand-off."""
    from ._claim import CLAIM_RUNS, claim_params  # (_claim imports this module)

    limit = min(sum(1 for o in completions if o.task._has_parent), p.claim_batch_size)
    with p._lock:
        claiming = p._claiming
    if limit == 0 or not claiming:
        done, unstorable, err = write_completions(p, conn, completions)
        return done, [], unstorable, err
    ids = [o.task.id for o in completions]

    def write(c: Any) -> Tuple[List[Tuple[Any, ...]], List[Tuple[Any, ...]]]:
        with c.transaction():
            done = c.execute(_COMPLETE_RUNS, _complete_params(p, completions)).fetchall()
            handed = c.execute(CLAIM_RUNS, claim_params(p, limit, ids, False)).fetchall()
        return done, handed

    try:
        done, handed = in_retry(conn, write, p.lease_duration)
        return done, handed, [], None
    except _Refused:
        pass
    except Exception as e:  # noqa: BLE001
        return [], [], [], e
    done, unstorable, err = write_completions(p, conn, completions)
    return done, [], unstorable, err


def write_completions(
    p: Poller, conn: _Conn, completions: List[_Outcome]
) -> Tuple[List[Tuple[Any, ...]], List[Tuple[_Outcome, str]], Optional[BaseException]]:
    """complete_runs for a batch: (rows, [(outcome, why) unstorable], error)."""

    def call(batch: List[_Outcome]) -> List[Tuple[Any, ...]]:
        return with_retry(conn, _COMPLETE_RUNS, _complete_params(p, batch), p.lease_duration)

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


def write_failures(
    p: Poller, conn: _Conn, failures: List[_Outcome]
) -> Tuple[List[Tuple[Any, ...]], Optional[BaseException]]:
    """fail_runs for a batch, row by row when the database refuses the batch; a row still refused
    is recorded with a replacement message."""

    def call(batch: List[_Outcome]) -> List[Tuple[Any, ...]]:
        return with_retry(
            conn,
            _FAIL_RUNS,
            (
                p.worker_id,
                [o.task.id for o in batch],
                [o.task.lease_token for o in batch],
                [o.message for o in batch],
                [o.retryable for o in batch],
            ),
            p.lease_duration,
        )

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
