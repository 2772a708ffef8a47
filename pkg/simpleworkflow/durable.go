package simpleworkflow

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/simple-workflow/simple-workflow/internal/engine"
)

// Limits of durable execution, enforced when a step is written.
const (
	// MaxStepNameLength is the longest step or signal name; names use
	// letters, digits and . _ : -.
	MaxStepNameLength = 128
	// MaxStepOutputBytes is the largest step output as JSON, 1 MiB (a
	// child's result included: it is journaled in its parent).
	MaxStepOutputBytes = 1 << 20
	// MaxSignalPayloadBytes is the largest signal payload as JSON, 256 KiB.
	MaxSignalPayloadBytes = 256 << 10
	// MaxJSONDepth is how deep a stored value (payload, result, step
	// output, signal payload) may nest objects and arrays.
	MaxJSONDepth = 64
	// MaxSteps is the most steps, sleeps, waits and children one run has.
	MaxSteps = 1000
)

// errNotDurable is returned by the durable methods of a Task that no Poller
// is running.
var errNotDurable = errors.New("durable steps need a Task handed out by a Poller")

func (t *Task) durable() (*replay, error) {
	if t.replay == nil {
		return nil, errNotDurable
	}
	return t.replay, nil
}

// Step runs fn once for the whole life of the run: its JSON result is
// recorded in the run's journal under name, and every later attempt gets the
// recorded result back without calling fn. Steps run one after another, in
// the same order on every attempt (a different step at a known position
// fails the run for good as non-deterministic). Code outside steps runs again
// on every attempt, so take the current time or random values inside a step.
//
// An error from fn is returned as is and nothing is recorded: returning it
// from the handler retries the attempt. Step names are 1 to 128 characters
// of letters, digits and . _ : -, unique within the run; the output is at
// most 1 MiB and nests at most 64 levels.
func (t *Task) Step(ctx context.Context, name string, fn func(ctx context.Context) (json.RawMessage, error)) (out json.RawMessage, err error) {
	r, err := t.durable()
	if err != nil {
		return nil, err
	}
	ctx, span := r.startStepSpan(ctx, string(engine.StepKindStep), name)
	defer func() { endStepSpan(span, err) }()
	pos, e, found, err := r.reach(name, engine.StepKindStep)
	if err != nil {
		return nil, err
	}
	span.SetAttributes(AttrStepPos.Int(pos), AttrReplayed.Bool(found))
	if found {
		return e.Output, nil
	}
	out, err = fn(ctx)
	if err != nil {
		return nil, err
	}
	if out, err = checkStepOutput(name, out); err != nil {
		return nil, err
	}
	res, err := r.s.steps.record(ctx, engine.StepWrite{LeaseRef: r.ref, Name: name, Position: pos, Output: out})
	if err != nil {
		return nil, recordStepError(name, err)
	}
	return r.stepRecorded(name, pos, out, res)
}

// checkStepOutput is a step's output as it is journaled (null when empty),
// or why it cannot be: not JSON, or over MaxStepOutputBytes.
func checkStepOutput(name string, out json.RawMessage) (json.RawMessage, error) {
	if len(out) == 0 {
		out = json.RawMessage("null")
	}
	if !json.Valid(out) {
		return nil, Permanent(fmt.Errorf("step %q: %w: output is not valid JSON", name, ErrInvalid))
	}
	if len(out) > MaxStepOutputBytes {
		return nil, Permanent(fmt.Errorf("step %q: %w: output is %d bytes; the limit is %d (1 MiB)",
			name, ErrInvalid, len(out), MaxStepOutputBytes))
	}
	return out, nil
}

// recordStepError wraps an error writing a step's journal entry.
func recordStepError(name string, err error) error {
	if errors.Is(err, ErrInvalid) { // the database cannot store this output: again would not help
		return Permanent(fmt.Errorf("record step %q: %w", name, err))
	}
	return fmt.Errorf("record step %q: %w", name, err)
}

// stepRecorded turns the database's answer to a step write into the step's
// result: the output (its own, or the one journaled first), or the error
// that ends the attempt (lease lost, non-determinism, an invalid write).
func (r *replay) stepRecorded(name string, pos int, out json.RawMessage, res engine.StepWriteResult) (json.RawMessage, error) {
	switch res.Status {
	case engine.WriteRecorded:
		r.remember(engine.JournalEntry{Name: name, Position: pos, Kind: engine.StepKindStep, Outcome: engine.OutcomeOK, Output: out})
		return out, nil
	case engine.WriteDuplicate:
		r.remember(engine.JournalEntry{Name: name, Position: pos, Kind: engine.StepKindStep, Outcome: engine.OutcomeOK, Output: res.Output})
		return res.Output, nil
	case engine.WriteLeaseLost:
		r.cancel(ErrLeaseLost)
		return nil, fmt.Errorf("record step %q: %w", name, ErrLeaseLost)
	case engine.WriteNondeterministic:
		return nil, r.fail(res.Message)
	default:
		return nil, Permanent(fmt.Errorf("record step %q: %w: %s", name, ErrInvalid, res.Message))
	}
}

// Step is Task.Step with a typed result: fn's value is stored as JSON and
// decoded on replay.
func Step[T any](ctx context.Context, t *Task, name string, fn func(ctx context.Context) (T, error)) (T, error) {
	raw, err := t.Step(ctx, name, func(ctx context.Context) (json.RawMessage, error) {
		v, err := fn(ctx)
		if err != nil {
			return nil, err
		}
		return marshalStepOutput(name, v)
	})
	return decodeStepOutput[T](name, raw, err)
}

// marshalStepOutput is a typed step's value as JSON.
func marshalStepOutput[T any](name string, v T) (json.RawMessage, error) {
	raw, err := json.Marshal(v)
	if err != nil {
		return nil, Permanent(fmt.Errorf("marshal output of step %q: %w", name, err))
	}
	return raw, nil
}

// decodeStepOutput is a typed step's result from its journaled JSON, or
// the step's error.
func decodeStepOutput[T any](name string, raw json.RawMessage, err error) (T, error) {
	var out T
	if err != nil {
		return out, err
	}
	if err := json.Unmarshal(raw, &out); err != nil {
		var zero T
		return zero, Permanent(fmt.Errorf("decode output of step %q: %w", name, err))
	}
	return out, nil
}

// Sleep waits durably for d, measured by the database clock. The run parks:
// Sleep returns ErrParked, the handler returns it (or anything: the outcome
// is ignored), the worker slot is freed and no attempt is used. When the
// time comes a worker claims the run again, the handler replays its journal,
// and this Sleep returns nil at once. name identifies the sleep in the
// journal like a step's.
func (t *Task) Sleep(ctx context.Context, name string, d time.Duration) error {
	_, err := t.wait(ctx, name, engine.StepKindSleep, "", nil, &d)
	return err
}

// SleepUntil is Sleep until an instant.
func (t *Task) SleepUntil(ctx context.Context, name string, at time.Time) error {
	_, err := t.wait(ctx, name, engine.StepKindSleep, "", &at, nil)
	return err
}

// WaitForSignal returns the oldest signal called name that the run received
// and no earlier wait took (signals sent before the wait are kept), with
// received true. With none, the run parks (ErrParked, as with Sleep) until
// one arrives or timeout passes; a timeout of zero waits for ever. After a
// timeout it returns received false and no error. The wait's journal entry
// is named after the signal (name, then name:2, name:3 … for later waits of
// the same signal in the run).
func (t *Task) WaitForSignal(ctx context.Context, name string, timeout time.Duration) (payload json.RawMessage, received bool, err error) {
	r, err := t.durable()
	if err != nil {
		return nil, false, err
	}
	if err := engine.ValidateStepName(name); err != nil {
		return nil, false, Permanent(fmt.Errorf("wait for signal: %w", err))
	}
	var delay *time.Duration
	if timeout > 0 {
		delay = &timeout
	}
	e, err := t.wait(ctx, r.signalStep(name), engine.StepKindSignal, name, nil, delay)
	if err != nil {
		return nil, false, err
	}
	if e.Outcome == engine.OutcomeTimeout {
		return nil, false, nil
	}
	return e.Output, true, nil
}

// wait reaches a sleep or a signal wait: replayed when the journal has it
// done, otherwise resolved by the database at once or parked.
func (t *Task) wait(ctx context.Context, step string, kind engine.StepKind, signal string, at *time.Time, delay *time.Duration) (_ engine.JournalEntry, err error) {
	r, err := t.durable()
	if err != nil {
		return engine.JournalEntry{}, err
	}
	ctx, span := r.startStepSpan(ctx, string(kind), step)
	defer func() { endStepSpan(span, err) }()
	if signal != "" {
		span.SetAttributes(AttrSignal.String(signal))
	}
	pos, e, found, err := r.reach(step, kind)
	if err != nil {
		return engine.JournalEntry{}, err
	}
	span.SetAttributes(AttrStepPos.Int(pos), AttrReplayed.Bool(found && e.Done()))
	if found && e.Done() {
		return e, nil
	}
	return t.park(ctx, r, engine.ParkParams{
		LeaseRef: r.ref, WorkerID: t.WorkerID, Kind: kind, Step: step, Position: pos,
		WakeAt: at, Delay: delay, Signal: signal,
	})
}

// park asks the database to resolve or park a wait.
func (t *Task) park(ctx context.Context, r *replay, p engine.ParkParams) (engine.JournalEntry, error) {
	if r.active != nil {
		// A wait that parks ends the lease: what was logged goes first.
		r.s.logs.send(ctx, []*activeRun{r.active})
	}
	res, err := r.s.eng.ParkRun(ctx, p)
	if err != nil {
		return engine.JournalEntry{}, fmt.Errorf("%s %q: %w", p.Kind, p.Step, withCause(ctx, err))
	}
	switch res.Status {
	case engine.WriteResolved:
		e := engine.JournalEntry{Name: p.Step, Position: p.Position, Kind: p.Kind, Outcome: res.Outcome,
			Output: res.Output, Error: res.Error}
		if old, ok := r.lookup(p.Step); ok {
			e.ChildID = old.ChildID
		}
		r.remember(e)
		return e, nil
	case engine.WriteParked:
		if res.WakeAt != nil {
			trace.SpanFromContext(ctx).SetAttributes(AttrWakeAt.String(res.WakeAt.UTC().Format(time.RFC3339Nano)))
		}
		r.markParked(res.WakeAt)
		return engine.JournalEntry{}, ErrParked
	case engine.WriteLeaseLost:
		r.cancel(ErrLeaseLost)
		return engine.JournalEntry{}, fmt.Errorf("%s %q: %w", p.Kind, p.Step, ErrLeaseLost)
	case engine.WriteNondeterministic:
		return engine.JournalEntry{}, r.fail(res.Message)
	default:
		return engine.JournalEntry{}, Permanent(fmt.Errorf("%s %q: %w: %s", p.Kind, p.Step, ErrInvalid, res.Message))
	}
}

// ChildOptions are the settings of a child run.
type ChildOptions struct {
	// Payload must marshal to a JSON object. Defaults to {}.
	Payload any
	// Priority defaults to the parent's.
	Priority *int
	// MaxAttempts defaults to 3.
	MaxAttempts int
	// Deadline bounds the child from its start; a child never outlives its
	// parent's deadline.
	Deadline time.Duration
}

// StartChild starts a child run of workflowType (any type, served by
// whichever worker claims it) as step name of this run and returns its id.
// The child starts once: replays find the same child. Cancelling or failing
// the parent cancels its unfinished children. Await its end with AwaitChild.
func (t *Task) StartChild(ctx context.Context, name, workflowType string, opts *ChildOptions) (childID string, err error) {
	r, err := t.durable()
	if err != nil {
		return "", err
	}
	ctx, span := r.startStepSpan(ctx, string(engine.StepKindChild), name, AttrChildType.String(workflowType))
	defer func() {
		if childID != "" {
			span.SetAttributes(AttrChildID.String(childID))
		}
		endStepSpan(span, err)
	}()
	pos, e, found, err := r.reach(name, engine.StepKindChild)
	if err != nil {
		return "", err
	}
	span.SetAttributes(AttrStepPos.Int(pos), AttrReplayed.Bool(found))
	if found {
		return e.ChildID, nil
	}
	p := engine.ChildParams{LeaseRef: r.ref, WorkerID: t.WorkerID, Step: name, Position: pos, Type: workflowType}
	if opts != nil {
		raw, err := marshalPayload(opts.Payload)
		if err != nil {
			return "", Permanent(fmt.Errorf("start child %q: %w", name, err))
		}
		p.Payload, p.Priority, p.MaxAttempts, p.Deadline = raw, opts.Priority, opts.MaxAttempts, opts.Deadline
	}
	res, err := r.s.eng.StartChild(ctx, p)
	if err != nil {
		if errors.Is(err, ErrInvalid) {
			return "", Permanent(fmt.Errorf("start child %q: %w", name, err))
		}
		return "", fmt.Errorf("start child %q: %w", name, withCause(ctx, err))
	}
	switch res.Status {
	case engine.WriteStarted, engine.WriteDuplicate:
		r.remember(engine.JournalEntry{Name: name, Position: pos, Kind: engine.StepKindChild, ChildID: res.ChildID,
			Outcome: res.Outcome, Output: res.Output, Error: res.Error})
		return res.ChildID, nil
	case engine.WriteLeaseLost:
		r.cancel(ErrLeaseLost)
		return "", fmt.Errorf("start child %q: %w", name, ErrLeaseLost)
	case engine.WriteNondeterministic:
		return "", r.fail(res.Message)
	default:
		return "", Permanent(fmt.Errorf("start child %q: %w: %s", name, ErrInvalid, res.Message))
	}
}

// AwaitChild returns the result of the child started at step name once it
// has ended: its JSON result when it succeeded, a *ChildFailedError when it
// failed or was cancelled. Until then the run parks (ErrParked, as with
// Sleep); the child's end wakes it.
func (t *Task) AwaitChild(ctx context.Context, name string) (_ json.RawMessage, err error) {
	r, err := t.durable()
	if err != nil {
		return nil, err
	}
	ctx, span := r.startStepSpan(ctx, "await_child", name)
	defer func() { endStepSpan(span, err) }()
	r.mu.Lock()
	stopped := r.stoppedLocked()
	r.mu.Unlock()
	if stopped != nil {
		return nil, stopped
	}
	e, ok := r.lookup(name)
	if !ok || e.Kind != engine.StepKindChild {
		return nil, Permanent(fmt.Errorf("await child: %w: no child run was started at step %q", ErrInvalid, name))
	}
	span.SetAttributes(AttrChildID.String(e.ChildID), AttrReplayed.Bool(e.Done()))
	if !e.Done() {
		e, err = t.park(ctx, r, engine.ParkParams{LeaseRef: r.ref, WorkerID: t.WorkerID, Kind: engine.StepKindChild,
			Step: name, Position: e.Position})
		if err != nil {
			return nil, err
		}
	}
	if e.Outcome == engine.OutcomeOK {
		return e.Output, nil
	}
	childID := e.ChildID
	if old, ok := r.lookup(name); ok && childID == "" {
		childID = old.ChildID
	}
	return nil, &ChildFailedError{Step: name, ChildID: childID, Message: e.Error}
}
