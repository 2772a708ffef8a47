package simpleworkflow

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"runtime/debug"
	"sync"
	"time"
)

// Task is the run a handler executes: one attempt of it.
type Task struct {
	// ID is the run's id.
	ID string
	// Type is the run's workflow type.
	Type string
	// Payload is the run's JSON object.
	Payload json.RawMessage
	// Attempt counts from 1.
	Attempt int
	// MaxAttempts is the run's attempt limit.
	MaxAttempts int
	// WorkerID is the worker running it.
	WorkerID string
	// DeadlineAt is when the run fails with "deadline exceeded" (nil for
	// none); the handler's context is then cancelled with
	// ErrDeadlineExceeded.
	DeadlineAt *time.Time
	// TraceParent is the W3C traceparent stored with the run by its
	// producer ("" for none). The handler's context already carries the
	// attempt's span, linked to it; this is the raw value, e.g. to hand on.
	TraceParent string

	replay *replay
	// logger is the attempt's logger, made on the first call of Logger
	// (most handlers never call it).
	loggerOnce sync.Once
	logger     *slog.Logger
	// decodeErr is set when the run's journal could not be decoded: the
	// handler is not called, and the run fails for good.
	decodeErr error
}

// Logger returns the attempt's logger: what the handler logs through it
// at or above PollerConfig.RunLogLevel is kept with the run, per attempt,
// and shown by the console and `kubectl workflow logs` after the worker is
// gone (the newest lines within the database owner's limits; the oldest
// are dropped and counted). What it logs while replaying its journal (the
// code before the last step an earlier attempt or wait recorded, run
// again) was kept the first time and is not kept again. Every record also
// goes to the worker's own logger, with the run's id, type and attempt.
func (t *Task) Logger() *slog.Logger {
	t.loggerOnce.Do(func() {
		if r := t.replay; r != nil && r.active != nil {
			t.logger = r.s.newRunLogger(&r.active.log, t.ID, t.Type, t.Attempt, r.replaying)
		} else {
			t.logger = slog.Default()
		}
	})
	return t.logger
}

// Decode unmarshals the payload into v.
func (t *Task) Decode(v any) error {
	if err := json.Unmarshal(t.Payload, v); err != nil {
		return fmt.Errorf("decode payload of %s run %s: %w", t.Type, t.ID, err)
	}
	return nil
}

// HandlerFunc executes one attempt of a run. ctx carries the attempt's span
// (see docs/traces.md): spans started from it are its children. ctx is
// cancelled when the run is
// cancelled, the lease is lost or the worker's shutdown grace period is over;
// context.Cause(ctx) says which (ErrRunCancelled, ErrLeaseLost,
// ErrShuttingDown, ErrDeadlineExceeded, or ErrParked after a durable wait
// parked the run). The handler returns the run's JSON result (nil for none)
// or an error; an error retries the run with backoff while attempts are left,
// unless it is wrapped with Permanent.
type HandlerFunc func(ctx context.Context, task *Task) (json.RawMessage, error)

// JSONResult marshals v as a handler result.
func JSONResult(v any) (json.RawMessage, error) {
	raw, err := json.Marshal(v)
	if err != nil {
		return nil, Permanent(fmt.Errorf("marshal result: %w", err))
	}
	return raw, nil
}

// callHandler runs h, turning a panic into an error.
func callHandler(ctx context.Context, h HandlerFunc, t *Task) (result json.RawMessage, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("handler panicked: %v\n%s", r, debug.Stack())
		}
	}()
	return h(ctx, t)
}
