package simpleworkflow

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/simple-workflow/simple-workflow/internal/engine"
)

// TracerName is the instrumentation scope of the spans a Poller starts.
const TracerName = "github.com/simple-workflow/simple-workflow/pkg/simpleworkflow"

// Attribute keys of the spans a Poller starts (see docs/traces.md).
const (
	AttrRunID       = attribute.Key("simpleworkflow.run.id")
	AttrRunType     = attribute.Key("simpleworkflow.run.type")
	AttrAttempt     = attribute.Key("simpleworkflow.run.attempt")
	AttrMaxAttempts = attribute.Key("simpleworkflow.run.max_attempts")
	AttrWorkerID    = attribute.Key("simpleworkflow.worker.id")
	AttrLeaseFence  = attribute.Key("simpleworkflow.lease.fence")
	AttrJournal     = attribute.Key("simpleworkflow.run.journal_entries")
	AttrOutcome     = attribute.Key("simpleworkflow.outcome")
	AttrRetry       = attribute.Key("simpleworkflow.retry")
	AttrNextAttempt = attribute.Key("simpleworkflow.next_attempt_at")
	AttrStepName    = attribute.Key("simpleworkflow.step.name")
	AttrStepKind    = attribute.Key("simpleworkflow.step.kind")
	AttrStepPos     = attribute.Key("simpleworkflow.step.position")
	AttrReplayed    = attribute.Key("simpleworkflow.step.replayed")
	AttrStepTx      = attribute.Key("simpleworkflow.step.transactional")
	AttrParked      = attribute.Key("simpleworkflow.step.parked")
	AttrWakeAt      = attribute.Key("simpleworkflow.step.wake_at")
	AttrSignal      = attribute.Key("simpleworkflow.signal.name")
	AttrChildID     = attribute.Key("simpleworkflow.child.id")
	AttrChildType   = attribute.Key("simpleworkflow.child.type")
)

// The outcomes an attempt span records (AttrOutcome).
const (
	OutcomeSucceeded        = "succeeded"
	OutcomeRetrying         = "retrying"
	OutcomeFailed           = "failed"
	OutcomeParked           = "parked"
	OutcomeReleased         = "released"
	OutcomeCancelled        = "cancelled"
	OutcomeLeaseLost        = "lease_lost"
	OutcomeDeadlineExceeded = "deadline_exceeded"
	OutcomeUnrecorded       = "unrecorded"
)

// traceParentOf returns the W3C traceparent of the span in ctx, or "" when
// ctx carries no valid span context. The propagator is always W3C Trace
// Context, whatever the process's global one, because that is what a run
// stores.
func traceParentOf(ctx context.Context) string {
	if !trace.SpanContextFromContext(ctx).IsValid() {
		return ""
	}
	carrier := propagation.MapCarrier{}
	propagation.TraceContext{}.Inject(ctx, carrier)
	return carrier.Get("traceparent")
}

// spanContextOf parses a stored traceparent; the zero SpanContext when
// there is none (or it does not parse).
func spanContextOf(traceParent string) trace.SpanContext {
	if traceParent == "" {
		return trace.SpanContext{}
	}
	ctx := propagation.TraceContext{}.Extract(context.Background(), propagation.MapCarrier{"traceparent": traceParent})
	return trace.SpanContextFromContext(ctx)
}

// startAttemptSpan starts the span of one attempt of a claimed run: a new
// trace (an attempt may come long after its producer, and retries are
// separate operations), kind consumer, linked to the producer's context
// stored with the run.
func (s *session) startAttemptSpan(ctx context.Context, c engine.ClaimedRun) (context.Context, trace.Span) {
	opts := []trace.SpanStartOption{trace.WithNewRoot(), trace.WithSpanKind(trace.SpanKindConsumer)}
	if sc := spanContextOf(c.TraceParent); sc.IsValid() {
		opts = append(opts, trace.WithLinks(trace.Link{SpanContext: sc}))
	}
	ctx, span := s.tracer.Start(ctx, "simpleworkflow.attempt "+c.Type, opts...)
	if span.IsRecording() { // nothing to build when tracing is off
		span.SetAttributes(
			attribute.String("messaging.system", "simpleworkflow"),
			attribute.String("messaging.operation.type", "process"),
			attribute.String("messaging.destination.name", c.Type),
			attribute.String("messaging.message.id", c.ID),
			AttrRunID.String(c.ID),
			AttrRunType.String(c.Type),
			AttrAttempt.Int(c.Attempt),
			AttrMaxAttempts.Int(c.MaxAttempts),
			AttrWorkerID.String(s.cfg.WorkerID),
			AttrLeaseFence.Int64(leaseFence(c.LeaseToken)),
			AttrJournal.Int(len(c.Journal)),
		)
	}
	return ctx, span
}

// attemptEnd is how an attempt ended, for its span.
type attemptEnd struct {
	outcome string
	err     error
	next    *time.Time
}

// dropOutcome names the end of an attempt whose outcome is not written:
// parked, or stopped by its run's cancellation, deadline or lost lease.
func dropOutcome(reason error) string {
	switch {
	case errors.Is(reason, ErrParked):
		return OutcomeParked
	case errors.Is(reason, ErrRunCancelled):
		return OutcomeCancelled
	case errors.Is(reason, ErrDeadlineExceeded):
		return OutcomeDeadlineExceeded
	default:
		return OutcomeLeaseLost
	}
}

// endAttemptSpan records how the attempt ended and ends its span.
func endAttemptSpan(span trace.Span, outcome string, err error, nextAttempt *time.Time) {
	span.SetAttributes(AttrOutcome.String(outcome))
	switch outcome {
	case OutcomeRetrying, OutcomeFailed:
		span.SetAttributes(AttrRetry.Bool(outcome == OutcomeRetrying))
		if nextAttempt != nil {
			span.SetAttributes(AttrNextAttempt.String(nextAttempt.UTC().Format(time.RFC3339Nano)))
		}
		if err != nil {
			span.RecordError(err)
			span.SetStatus(codes.Error, err.Error())
		}
	case OutcomeSucceeded:
		span.SetStatus(codes.Ok, "")
	case OutcomeUnrecorded:
		if err != nil {
			span.RecordError(err)
		}
		span.SetStatus(codes.Error, "the outcome could not be recorded")
	}
	span.End()
}

// endReleased ends the spans of the attempts shutdown handed back without
// waiting for their handlers: released when the database took them back
// (the ids in released), otherwise lost (the lease had gone) or unrecorded
// (the release failed, err).
func endReleased(runs []*activeRun, released []string, err error) {
	back := make(map[string]bool, len(released))
	for _, id := range released {
		back[id] = true
	}
	for _, a := range runs {
		switch {
		case back[a.ref.ID]:
			endAttemptSpan(a.span, OutcomeReleased, nil, nil)
		case err == nil:
			endAttemptSpan(a.span, OutcomeLeaseLost, nil, nil)
		default:
			endAttemptSpan(a.span, OutcomeUnrecorded, err, nil)
		}
	}
}

// startStepSpan starts the span of a durable step or wait: a child of the
// span in ctx, or of the attempt's span when ctx carries none.
func (r *replay) startStepSpan(ctx context.Context, kind, name string, attrs ...attribute.KeyValue) (context.Context, trace.Span) {
	if !r.span.IsRecording() {
		// Tracing is off: a span that records nothing, at no cost.
		return ctx, trace.SpanFromContext(context.Background())
	}
	if !trace.SpanContextFromContext(ctx).IsValid() {
		ctx = trace.ContextWithSpan(ctx, r.span)
	}
	attrs = append(attrs, AttrStepName.String(name), AttrStepKind.String(kind), AttrRunID.String(r.ref.ID),
		AttrAttempt.Int(r.ref.Attempt))
	return r.s.tracer.Start(ctx, "simpleworkflow."+kind+" "+name,
		trace.WithSpanKind(trace.SpanKindInternal), trace.WithAttributes(attrs...))
}

// endStepSpan ends a step's span; an error other than parking marks it
// failed.
func endStepSpan(span trace.Span, err error) {
	switch {
	case errors.Is(err, ErrParked):
		span.SetAttributes(AttrParked.Bool(true))
	case err != nil:
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	}
	span.End()
}

// leaseFence is what the run's row keeps of a lease token
// (workflow.lease_fence: the first 8 bytes of the SHA-256 of the token's 8
// big-endian bytes), which a span may carry: the token itself is the lease
// holder's alone, and a span is read by whoever reads traces.
func leaseFence(token int64) int64 {
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], uint64(token))
	sum := sha256.Sum256(b[:])
	return int64(binary.BigEndian.Uint64(sum[:8]))
}
