package engine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/simple-workflow/simple-workflow/internal/engine/queries"
)

// StepKind is what a journal entry records.
type StepKind string

// The kinds of journal entries.
const (
	StepKindStep   StepKind = "step"
	StepKindSleep  StepKind = "sleep"
	StepKindSignal StepKind = "signal"
	StepKindChild  StepKind = "child"
)

// WaitKindLimit is the wait of a run its type's flow limits hold back
// (Run.Wait.Kind; never a journal entry's kind).
const WaitKindLimit StepKind = "limit"

// StepOutcome is how a journaled step ended; empty while a wait is open.
type StepOutcome string

// The outcomes of journal entries.
const (
	// OutcomeOK is a step that succeeded, a sleep that ended, a signal
	// received or a child that succeeded.
	OutcomeOK StepOutcome = "ok"
	// OutcomeError is a child that failed or was cancelled.
	OutcomeError StepOutcome = "error"
	// OutcomeTimeout is a wait whose timeout passed first.
	OutcomeTimeout StepOutcome = "timeout"
)

// Limits of the journal, enforced by the database functions.
const (
	// MaxStepNameLength is the longest step (and signal) name.
	MaxStepNameLength = 128
	// MaxStepOutputBytes is the largest step output (a child's or a DAG's
	// result copied into its parent's journal included), as JSON text: the
	// same as a run's result.
	MaxStepOutputBytes = 1 << 20
	// MaxSignalPayloadBytes is the largest signal payload, as JSON text.
	MaxSignalPayloadBytes = 256 << 10
	// MaxJSONDepth is how deep a stored JSON value may nest (objects and
	// arrays) wherever a client decodes it: payloads, results, step
	// outputs, signal payloads, definitions.
	MaxJSONDepth = 64
	// MaxSteps is the most journal entries a run can have.
	MaxSteps = 1000
)

// JournalEntry is one step a run reached, as loaded at claim.
type JournalEntry struct {
	Name     string          `json:"name"`
	Position int             `json:"position"`
	Kind     StepKind        `json:"kind"`
	Outcome  StepOutcome     `json:"outcome"`
	Output   json.RawMessage `json:"output"`
	Error    string          `json:"error"`
	ChildID  string          `json:"child_id"`
}

// Done reports whether the entry is resolved (a wait still open is not).
func (j JournalEntry) Done() bool { return j.Outcome != "" }

// Write outcomes of the journal functions.
const (
	WriteRecorded         = "recorded"
	WriteDuplicate        = "duplicate"
	WriteLeaseLost        = "lease_lost"
	WriteNondeterministic = "nondeterministic"
	WriteInvalid          = "invalid"
	WriteParked           = "parked"
	WriteResolved         = "resolved"
	WriteStarted          = "started"
)

// StepWrite is a completed step to journal.
type StepWrite struct {
	LeaseRef
	Name     string
	Position int
	Output   json.RawMessage
}

// StepWriteResult answers one StepWrite.
type StepWriteResult struct {
	// Status is WriteRecorded, WriteDuplicate (Output is then the stored
	// value), WriteLeaseLost, WriteNondeterministic or WriteInvalid.
	Status string
	// Output is the stored output of a duplicate.
	Output json.RawMessage
	// Message explains a non-determinism or an invalid write.
	Message string
}

// RecordSteps journals a batch of completed steps (see workflow.record_steps):
// the first writer of a step wins, a duplicate gets the stored output back, a
// writer without the lease writes nothing. Results are in request order; a
// bad request never fails its neighbours.
func (e *Engine) RecordSteps(ctx context.Context, workerID string, ws []StepWrite) ([]StepWriteResult, error) {
	return e.RecordStepsIn(ctx, e.pool, workerID, ws)
}

// RecordStepsIn is RecordSteps through db: inside a caller's transaction
// the journal entries commit or roll back with the caller's own writes, and
// the runs stay share-locked until then, so no claim, reap or cancel of them
// can come between the fence check and the commit.
func (e *Engine) RecordStepsIn(ctx context.Context, db Querier, workerID string, ws []StepWrite) ([]StepWriteResult, error) {
	if len(ws) == 0 {
		return nil, nil
	}
	ids := make([]string, len(ws))
	tokens := make([]int64, len(ws))
	names := make([]string, len(ws))
	positions := make([]int32, len(ws))
	outputs := make([][]byte, len(ws))
	for i, w := range ws {
		ids[i], tokens[i], names[i] = w.ID, w.Token, w.Name
		positions[i] = int32(min(max(w.Position, -1), MaxSteps))
		if len(w.Output) > 0 {
			outputs[i] = w.Output
		}
	}
	rows, err := queries.New(db).StepRecord(ctx, queries.StepRecordParams{
		WorkerID: workerID, Ids: ids, Tokens: tokens, Names: names, Positions: positions, Outputs: outputs,
	})
	if err != nil {
		return nil, translate("record steps", err)
	}
	out := make([]StepWriteResult, len(ws))
	seen := 0
	for _, row := range rows {
		idx := deref(row.Idx)
		if idx < 1 || int(idx) > len(ws) {
			return nil, fmt.Errorf("record steps: answer for request %d of %d", idx, len(ws))
		}
		out[idx-1] = StepWriteResult{Status: deref(row.Status), Output: row.Output, Message: deref(row.Message)}
		seen++
	}
	if seen != len(ws) {
		return nil, fmt.Errorf("record steps: %d answers for %d requests", seen, len(ws))
	}
	return out, nil
}

// ParkParams describes a wait reached by a handler.
type ParkParams struct {
	LeaseRef
	WorkerID string
	// Kind is StepKindSleep, StepKindSignal or StepKindChild.
	Kind     StepKind
	Step     string
	Position int
	// WakeAt ends a sleep (or times out a wait) at an instant; Delay does it
	// after a duration measured by the database clock. Neither: an open wait.
	WakeAt *time.Time
	Delay  *time.Duration
	// Signal is the signal name waited for (Kind StepKindSignal).
	Signal string
}

// ParkResult says whether the wait was resolved at once or the run parked.
type ParkResult struct {
	// Status is WriteResolved (Outcome, Output, Error hold the entry),
	// WriteParked, WriteLeaseLost, WriteNondeterministic or WriteInvalid.
	Status  string
	Outcome StepOutcome
	Output  json.RawMessage
	Error   string
	// WakeAt is when a parked sleep or timed wait ends.
	WakeAt  *time.Time
	Message string
}

// ParkRun reaches a wait (see workflow.park_run): resolved at once when it can
// be, otherwise the run is parked and its lease given up.
func (e *Engine) ParkRun(ctx context.Context, p ParkParams) (ParkResult, error) {
	arg := queries.StepParkParams{
		WorkerID: p.WorkerID, ID: p.ID, Token: p.Token, Kind: string(p.Kind), Step: p.Step,
		Position: int32(min(max(p.Position, -1), MaxSteps)), WakeAt: p.WakeAt, Signal: nullIfEmpty(p.Signal),
	}
	if p.Delay != nil {
		ms := max(p.Delay.Milliseconds(), 0)
		arg.DelayMs = &ms
	}
	row, err := e.q.StepPark(ctx, arg)
	if err != nil {
		return ParkResult{}, translate("park run "+p.ID, err)
	}
	return ParkResult{Status: deref(row.Status), Outcome: StepOutcome(deref(row.Outcome)), Output: row.Output,
		Error: deref(row.Error), WakeAt: row.WakeAt, Message: deref(row.Message)}, nil
}

// ChildParams describes a child run started by step Step of a held run.
type ChildParams struct {
	LeaseRef
	WorkerID string
	Step     string
	Position int
	Type     string
	Payload  json.RawMessage
	// Priority defaults to the parent's; MaxAttempts to 3.
	Priority    *int
	MaxAttempts int
	// Deadline bounds the child from now; it never ends after its parent's.
	Deadline time.Duration
}

// ChildResult answers StartChild.
type ChildResult struct {
	// Status is WriteStarted, WriteDuplicate, WriteLeaseLost,
	// WriteNondeterministic or WriteInvalid.
	Status  string
	ChildID string
	// Outcome is set when the child already finished.
	Outcome StepOutcome
	Output  json.RawMessage
	Error   string
	Message string
}

// StartChild starts the child run of a step once (see workflow.start_child).
func (e *Engine) StartChild(ctx context.Context, p ChildParams) (ChildResult, error) {
	if err := ValidateType(p.Type); err != nil {
		return ChildResult{}, fmt.Errorf("start child: %w", err)
	}
	var payload []byte
	if len(p.Payload) > 0 {
		payload = p.Payload
	}
	row, err := e.q.StepStartChild(ctx, queries.StepStartChildParams{
		WorkerID: p.WorkerID, ID: p.ID, Token: p.Token, Step: p.Step,
		Position: int32(min(max(p.Position, -1), MaxSteps)), Type: p.Type, Payload: payload,
		Priority: int32Ptr(p.Priority), MaxAttempts: int32OrNil(p.MaxAttempts), DeadlineMs: millisOrNil(p.Deadline),
	})
	if err != nil {
		return ChildResult{}, translate("start child "+p.Step+" of run "+p.ID, err)
	}
	return ChildResult{Status: deref(row.Status), ChildID: deref(row.ChildID), Outcome: StepOutcome(deref(row.Outcome)),
		Output: row.Output, Error: deref(row.Error), Message: deref(row.Message)}, nil
}

// Step is one row of a run's journal.
type Step struct {
	Name       string
	Position   int
	Kind       StepKind
	Outcome    StepOutcome
	Output     json.RawMessage
	Error      string
	Attempt    int
	ChildID    string
	WakeAt     *time.Time
	StartedAt  time.Time
	FinishedAt *time.Time
}

// ListSteps returns a run's journal in position order.
func (e *Engine) ListSteps(ctx context.Context, runID string) ([]Step, error) {
	rows, err := e.q.StepList(ctx, runID)
	if err != nil {
		return nil, translate("list steps of run "+runID, err)
	}
	out := make([]Step, len(rows))
	for i, row := range rows {
		out[i] = Step{Name: deref(row.Name), Position: int(deref(row.Position)), Kind: StepKind(deref(row.Kind)),
			Outcome: StepOutcome(deref(row.Outcome)), Output: row.Output, Error: deref(row.Error),
			Attempt: int(deref(row.Attempt)), ChildID: deref(row.ChildID), WakeAt: row.WakeAt,
			StartedAt: deref(row.StartedAt), FinishedAt: row.FinishedAt}
	}
	return out, nil
}

// ErrRunFinished is wrapped when a signal is sent to a run that already
// finished.
var ErrRunFinished = errors.New("run already finished")

// SignalParams is a signal to send.
type SignalParams struct {
	RunID string
	Name  string
	// Payload is any JSON value (nil for none).
	Payload json.RawMessage
	// IdempotencyKey makes sending again a no-op.
	IdempotencyKey string
	// By says who sent it, in the run's signal_received event (cut to
	// MaxCancelledByBytes; empty for none).
	By string
}

// SignalResult answers SendSignal.
type SignalResult struct {
	SignalID int64
	// Duplicate is true when a signal with the same key was sent before.
	Duplicate bool
	// Delivered is true when the signal woke a run waiting for it.
	Delivered bool
}

// SendSignal sends a signal to a run (see workflow.send_signal). An unknown
// run is an error wrapping ErrNotFound, a finished one ErrRunFinished.
func (e *Engine) SendSignal(ctx context.Context, p SignalParams) (SignalResult, error) {
	return e.SendSignalIn(ctx, e.pool, p)
}

// SendSignalIn is SendSignal through db, for instance inside a caller's
// transaction: the signal and the wake-up of its run commit with it.
func (e *Engine) SendSignalIn(ctx context.Context, db Querier, p SignalParams) (SignalResult, error) {
	var payload []byte
	if len(p.Payload) > 0 {
		payload = p.Payload
	}
	row, err := queries.New(db).SignalSend(ctx, queries.SignalSendParams{
		RunID: p.RunID, Name: p.Name, Payload: payload, IdempotencyKey: nullIfEmpty(p.IdempotencyKey),
		By: nullIfEmpty(eventLabel(p.By)),
	})
	if err != nil {
		return SignalResult{}, translate("send signal "+p.Name+" to run "+p.RunID, err)
	}
	return SignalResult{SignalID: deref(row.SignalID), Duplicate: deref(row.Duplicate),
		Delivered: deref(row.Delivered)}, nil
}

// Signal is one signal sent to a run.
type Signal struct {
	ID             int64
	Name           string
	Payload        json.RawMessage
	IdempotencyKey string
	CreatedAt      time.Time
	ConsumedAt     *time.Time
	// ConsumedBy is the step whose wait took it.
	ConsumedBy string
}

// ListSignals returns the signals sent to a run, oldest first.
func (e *Engine) ListSignals(ctx context.Context, runID string) ([]Signal, error) {
	rows, err := e.q.SignalList(ctx, runID)
	if err != nil {
		return nil, translate("list signals of run "+runID, err)
	}
	out := make([]Signal, len(rows))
	for i, row := range rows {
		out[i] = Signal{ID: deref(row.ID), Name: deref(row.Name), Payload: row.Payload,
			IdempotencyKey: deref(row.IdempotencyKey), CreatedAt: deref(row.CreatedAt), ConsumedAt: row.ConsumedAt,
			ConsumedBy: deref(row.ConsumedBy)}
	}
	return out, nil
}

// ChildRun is a child of a run, as its parent's status shows it.
type ChildRun struct {
	ID        string
	Step      string
	Type      string
	Status    Status
	Attempt   int
	LastError string
}

// ListChildren returns up to limit child runs of a run, oldest first.
func (e *Engine) ListChildren(ctx context.Context, parentID string, limit int) ([]ChildRun, error) {
	rows, err := e.q.RunChildren(ctx, queries.RunChildrenParams{ParentID: parentID, MaxRows: clamp32(limit)})
	if err != nil {
		return nil, translate("list children of run "+parentID, err)
	}
	out := make([]ChildRun, len(rows))
	for i, row := range rows {
		out[i] = ChildRun{ID: deref(row.ID), Step: deref(row.ParentStep), Type: deref(row.Type),
			Status: Status(deref(row.Status)), Attempt: int(deref(row.Attempt)), LastError: deref(row.LastError)}
	}
	return out, nil
}
