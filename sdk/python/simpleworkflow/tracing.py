"""OpenTelemetry spans of a Python worker, as the Go worker makes them (docs/traces.md).

The integration is optional: the package does not depend on OpenTelemetry.
When ``opentelemetry.trace`` (the ``opentelemetry-api`` distribution) imports,
each attempt of a run is a span named ``simpleworkflow.attempt <type>``, kind
consumer, starting a new trace linked to the traceparent its producer stored,
with the attribute keys of the Go SDK; each durable call is a child span
(``simpleworkflow.step <name>``, ``simpleworkflow.sleep <name>`` ...). Spans are
made by the tracer provider given to the Poller, else the global one, which
makes none until an OpenTelemetry SDK is installed. When the import fails,
nothing is traced and nothing is spent.
"""

from __future__ import annotations

import hashlib
import importlib
from contextlib import contextmanager
from datetime import datetime, timezone
from types import ModuleType
from typing import Any, Iterator, Optional, Tuple

from .errors import Parked

#: The instrumentation scope of the spans a Poller starts.
TRACER_NAME = "simpleworkflow"

# Attribute keys, the Go SDK's (pkg/simpleworkflow/tracing.go).
ATTR_RUN_ID = "simpleworkflow.run.id"
ATTR_RUN_TYPE = "simpleworkflow.run.type"
ATTR_ATTEMPT = "simpleworkflow.run.attempt"
ATTR_MAX_ATTEMPTS = "simpleworkflow.run.max_attempts"
ATTR_WORKER_ID = "simpleworkflow.worker.id"
ATTR_LEASE_FENCE = "simpleworkflow.lease.fence"
ATTR_JOURNAL = "simpleworkflow.run.journal_entries"
ATTR_OUTCOME = "simpleworkflow.outcome"
ATTR_RETRY = "simpleworkflow.retry"
ATTR_NEXT_ATTEMPT = "simpleworkflow.next_attempt_at"
ATTR_STEP_NAME = "simpleworkflow.step.name"
ATTR_STEP_KIND = "simpleworkflow.step.kind"
ATTR_STEP_POS = "simpleworkflow.step.position"
ATTR_REPLAYED = "simpleworkflow.step.replayed"
ATTR_STEP_TX = "simpleworkflow.step.transactional"
ATTR_PARKED = "simpleworkflow.step.parked"
ATTR_WAKE_AT = "simpleworkflow.step.wake_at"
ATTR_SIGNAL = "simpleworkflow.signal.name"
ATTR_CHILD_ID = "simpleworkflow.child.id"
ATTR_CHILD_TYPE = "simpleworkflow.child.type"

# How an attempt ended (ATTR_OUTCOME).
OUTCOME_SUCCEEDED = "succeeded"
OUTCOME_RETRYING = "retrying"
OUTCOME_FAILED = "failed"
OUTCOME_PARKED = "parked"
OUTCOME_RELEASED = "released"
OUTCOME_CANCELLED = "cancelled"
OUTCOME_LEASE_LOST = "lease_lost"
OUTCOME_DEADLINE_EXCEEDED = "deadline_exceeded"
OUTCOME_UNRECORDED = "unrecorded"


def _import(name: str) -> Optional[ModuleType]:
    try:
        return importlib.import_module(name)
    except ImportError:
        return None


def available() -> bool:
    """Whether opentelemetry.trace imports here."""
    return _import("opentelemetry.trace") is not None


def format_time(at: datetime) -> str:
    """An instant as Go's RFC 3339 with nanoseconds writes it (UTC, no trailing zeros)."""
    at = at.astimezone(timezone.utc)
    text = at.strftime("%Y-%m-%dT%H:%M:%S")
    if at.microsecond:
        text += ("." + f"{at.microsecond:06d}").rstrip("0")
    return text + "Z"


def _parse_traceparent(traceparent: Optional[str]) -> Optional[Tuple[int, int, int]]:
    """(trace id, span id, flags) of a stored traceparent; None for none or one that does not parse."""
    if not traceparent:
        return None
    parts = traceparent.split("-")
    if (
        len(parts) != 4
        or parts[0] != "00"
        or len(parts[1]) != 32
        or len(parts[2]) != 16
        or len(parts[3]) != 2
    ):
        return None
    try:
        trace_id, span_id, flags = int(parts[1], 16), int(parts[2], 16), int(parts[3], 16)
    except ValueError:
        return None
    if trace_id == 0 or span_id == 0:
        return None
    return trace_id, span_id, flags


def lease_fence(token: int) -> int:
    """What the run's row keeps of a lease token (workflow.lease_fence): the first 8 bytes of the
    SHA-256 of the token's 8 big-endian bytes, as a signed integer. A span carries it, never the
    token, which is the lease holder's alone."""
    digest = hashlib.sha256((token & 0xFFFFFFFFFFFFFFFF).to_bytes(8, "big")).digest()
    return int.from_bytes(digest[:8], "big", signed=True)


class _NoSpan:
    """What a durable call sets attributes on when nothing is traced."""

    def set(self, key: str, value: Any) -> None:
        pass


class _Span:
    """A step span: attributes set on it while the call runs."""

    def __init__(self, span: Any) -> None:
        self.span = span

    def set(self, key: str, value: Any) -> None:
        self.span.set_attribute(key, value)


NO_SPAN = _NoSpan()


class Tracing:
    """The spans of one Poller; every method does nothing when OpenTelemetry is absent."""

    def __init__(self, tracer_provider: Any = None, version: Optional[str] = None) -> None:
        self._trace = _import("opentelemetry.trace")
        self._tracer: Any = None
        if self._trace is None:
            return
        self._context = _import("opentelemetry.context")
        self._status = _import("opentelemetry.trace.status")
        self._tracer = self._trace.get_tracer(TRACER_NAME, version, tracer_provider=tracer_provider)

    @property
    def enabled(self) -> bool:
        return self._tracer is not None

    def start_attempt(
        self,
        run_id: str,
        workflow_type: str,
        attempt: int,
        max_attempts: int,
        worker_id: str,
        lease_token: int,
        journal_entries: int,
        traceparent: Optional[str],
    ) -> Any:
        """Start the span of one attempt: a new trace, kind consumer, linked to the producer's stored context."""
        if self._tracer is None:
            return None
        t = self._trace
        assert t is not None and self._context is not None
        links = []
        parsed = _parse_traceparent(traceparent)
        if parsed is not None:
            trace_id, span_id, flags = parsed
            sc = t.SpanContext(
                trace_id=trace_id, span_id=span_id, is_remote=True, trace_flags=t.TraceFlags(flags)
            )
            if sc.is_valid:
                links.append(t.Link(sc))
        attributes = {
            "messaging.system": "simpleworkflow",
            "messaging.operation.type": "process",
            "messaging.destination.name": workflow_type,
            "messaging.message.id": run_id,
            ATTR_RUN_ID: run_id,
            ATTR_RUN_TYPE: workflow_type,
            ATTR_ATTEMPT: attempt,
            ATTR_MAX_ATTEMPTS: max_attempts,
            ATTR_WORKER_ID: worker_id,
            ATTR_LEASE_FENCE: lease_fence(lease_token),
            ATTR_JOURNAL: journal_entries,
        }
        # An empty context: no parent, a new trace (an attempt may run long
        # after its producer's trace ended, and a run has many attempts).
        return self._tracer.start_span(
            "simpleworkflow.attempt " + workflow_type,
            context=self._context.Context(),
            kind=t.SpanKind.CONSUMER,
            links=links,
            attributes=attributes,
        )

    @contextmanager
    def use(self, span: Any) -> Iterator[None]:
        """Make span the current one in this thread (the handler's spans are its children)."""
        if span is None or self._trace is None:
            yield
            return
        with self._trace.use_span(
            span, end_on_exit=False, record_exception=False, set_status_on_exception=False
        ):
            yield

    def end_attempt(
        self,
        span: Any,
        outcome: str,
        error: Optional[BaseException] = None,
        next_attempt_at: Optional[datetime] = None,
    ) -> None:
        """Record how the attempt ended and end its span."""
        if span is None or self._status is None:
            return
        status = self._status
        span.set_attribute(ATTR_OUTCOME, outcome)
        if outcome in (OUTCOME_RETRYING, OUTCOME_FAILED):
            span.set_attribute(ATTR_RETRY, outcome == OUTCOME_RETRYING)
            if next_attempt_at is not None:
                span.set_attribute(ATTR_NEXT_ATTEMPT, format_time(next_attempt_at))
            if error is not None:
                span.record_exception(error)
                span.set_status(status.Status(status.StatusCode.ERROR, str(error) or type(error).__name__))
        elif outcome == OUTCOME_SUCCEEDED:
            span.set_status(status.Status(status.StatusCode.OK))
        elif outcome == OUTCOME_UNRECORDED:
            if error is not None:
                span.record_exception(error)
            span.set_status(status.Status(status.StatusCode.ERROR, "the outcome could not be recorded"))
        span.end()

    @contextmanager
    def step(self, attempt_span: Any, kind: str, name: str, run_id: str, attempt: int) -> Iterator[Any]:
        """The span of a durable call: a child of the current span (the attempt's, or one the handler
        started), current while the call runs. Parking marks it parked; another exception, failed."""
        if attempt_span is None or self._trace is None or not attempt_span.is_recording():
            yield NO_SPAN
            return
        t = self._trace
        parent = None
        if not t.get_current_span().get_span_context().is_valid:
            parent = t.set_span_in_context(attempt_span)
        span = self._tracer.start_span(
            f"simpleworkflow.{kind} {name}",
            context=parent,
            kind=t.SpanKind.INTERNAL,
            attributes={
                ATTR_STEP_NAME: name,
                ATTR_STEP_KIND: kind,
                ATTR_RUN_ID: run_id,
                ATTR_ATTEMPT: attempt,
            },
        )
        try:
            with t.use_span(span, end_on_exit=False, record_exception=False, set_status_on_exception=False):
                yield _Span(span)
        except BaseException as e:
            if isinstance(e, Parked):
                span.set_attribute(ATTR_PARKED, True)
            elif self._status is not None:
                span.record_exception(e)
                span.set_status(
                    self._status.Status(self._status.StatusCode.ERROR, str(e) or type(e).__name__)
                )
            raise
        finally:
            span.end()
