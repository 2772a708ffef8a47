"""Step writing (Go: step_writer.go): the steps that concurrent handlers complete, journaled in batches.

A handler's :meth:`Task.step` hands its step to :func:`record_step` and waits;
the step writer thread (:func:`step_loop`) writes whatever accumulated in one
``workflow.record_steps`` call and answers each handler with its own row. A
batch the database refuses is written again step by step, so a bad value
fails only its own step.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Generic, List, Optional, Tuple, TypeVar

from ._writes import _Conn, _Refused, with_retry
from .errors import PermanentError

if TYPE_CHECKING:
    from .poller import Poller

_RECORD_STEPS = (
    "select idx, status, output, message from workflow.record_steps("
    "%s, %s::uuid[], %s::bigint[], %s::text[], %s::int[], %s::jsonb[])"
)

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


def record_step(
    p: Poller, run_id: str, token: int, name: str, position: int, raw: str
) -> Tuple[str, Any, Optional[str]]:
    """Hand a completed step to the step writer and wait for its row's answer."""
    reply: _Reply[Tuple[str, Any, Optional[str]]] = _Reply()
    p._steps.put(_StepRequest(run_id, token, name, position, raw, reply))
    reply.done.wait()
    if reply.error is not None:
        raise reply.error
    assert reply.value is not None
    return reply.value


def step_loop(p: Poller) -> None:
    """Journal the steps of concurrent handlers, one workflow.record_steps call per batch."""
    conn = _Conn(p._open)
    try:
        for batch in p._steps.batches():
            try:
                write_steps(p, conn, batch)
            except BaseException as e:  # noqa: BLE001 - no handler may wait for ever
                for r in batch:
                    if not r.reply.done.is_set():
                        r.reply.fail(e)
    finally:
        conn.close()


def write_steps(p: Poller, conn: _Conn, batch: List[_StepRequest]) -> None:
    """One record_steps call for a batch; each step's handler gets its own row's answer."""
    params = (
        p.worker_id,
        [r.run_id for r in batch],
        [r.token for r in batch],
        [r.name for r in batch],
        [r.position for r in batch],
        [r.raw for r in batch],
    )
    try:
        rows = with_retry(conn, _RECORD_STEPS, params, p.lease_duration)
    except _Refused as e:
        if len(batch) > 1:
            # A value the database cannot take (a NUL escape) refuses the
            # whole call: each step is written alone, so only its own
            # handler hears of it.
            for r in batch:
                write_steps(p, conn, [r])
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
