package engine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
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

// Rower runs one statement and returns its rows: satisfied by pgx.Tx,
// *pgx.Conn and *pgxpool.Pool.
type Rower interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
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
func (e *Engine) RecordStepsIn(ctx context.Context, db Rower, workerID string, ws []StepWrite) ([]StepWriteResult, error) {
	if len(ws) == 0 {
		return nil, nil
	}
	ids := make([]string, len(ws))
	tokens := make([]int64, len(ws))
	names := make([]string, len(ws))
	positions := make([]int32, len(ws))
	outputs := make([]*string, len(ws))
	for i, w := range ws {
		ids[i], tokens[i], names[i] = w.ID, w.Token, w.Name
		positions[i] = int32(min(max(w.Position, -1), MaxSteps))
		if len(w.Output) > 0 {
			s := string(w.Output)
			outputs[i] = &s
		}
	}
	rows, err := db.Query(ctx, e.q[qStepRecord], pgx.NamedArgs{
		"worker_id": workerID, "ids": ids, "tokens": tokens, "names": names,
		"positions": positions, "outputs": outputs,
	})
	if err != nil {
		return nil, translate("record steps", err)
	}
	out := make([]StepWriteResult, len(ws))
	seen := 0
	for rows.Next() {
		var (
			idx     int32
			r       StepWriteResult
			output  []byte
			message *string
		)
		if err := rows.Scan(&idx, &r.Status, &output, &message); err != nil {
			rows.Close()
			return nil, translate("record steps", err)
		}
		if idx < 1 || int(idx) > len(ws) {
			rows.Close()
			return nil, fmt.Errorf("record steps: answer for request %d of %d", idx, len(ws))
		}
		r.Output, r.Message = output, deref(message)
		out[idx-1] = r
		seen++
	}
	if err := rows.Err(); err != nil {
		return nil, translate("record steps", err)
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
	args := pgx.NamedArgs{
		"worker_id": p.WorkerID, "id": p.ID, "token": p.Token, "kind": string(p.Kind),
		"step": p.Step, "position": int32(min(max(p.Position, -1), MaxSteps)),
		"wake_at": p.WakeAt, "delay_ms": nil, "signal": nullIfEmpty(p.Signal),
	}
	if p.Delay != nil {
		args["delay_ms"] = max(p.Delay.Milliseconds(), 0)
	}
	var (
		r                     ParkResult
		outcome, errText, msg *string
		output                []byte
	)
	err := e.pool.QueryRow(ctx, e.q[qStepPark], args).Scan(&r.Status, &outcome, &output, &errText, &r.WakeAt, &msg)
	if err != nil {
		return ParkResult{}, translate("park run "+p.ID, err)
	}
	r.Outcome, r.Output, r.Error, r.Message = StepOutcome(deref(outcome)), output, deref(errText), deref(msg)
	return r, nil
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
	var payload *string
	if len(p.Payload) > 0 {
		s := string(p.Payload)
		payload = &s
	}
	args := pgx.NamedArgs{
		"worker_id": p.WorkerID, "id": p.ID, "token": p.Token, "step": p.Step,
		"position": int32(min(max(p.Position, -1), MaxSteps)), "type": p.Type, "payload": payload,
		"priority": p.Priority, "max_attempts": nil, "deadline_ms": millisOrNil(p.Deadline),
	}
	if p.MaxAttempts > 0 {
		args["max_attempts"] = p.MaxAttempts
	}
	var (
		r                     ChildResult
		childID               *string
		outcome, errText, msg *string
		output                []byte
	)
	err := e.pool.QueryRow(ctx, e.q[qStepStartChild], args).Scan(&r.Status, &childID, &outcome, &output, &errText, &msg)
	if err != nil {
		return ChildResult{}, translate("start child "+p.Step+" of run "+p.ID, err)
	}
	r.ChildID, r.Outcome, r.Output, r.Error, r.Message = deref(childID), StepOutcome(deref(outcome)), output, deref(errText), deref(msg)
	return r, nil
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
	rows, err := e.pool.Query(ctx, e.q[qStepList], pgx.NamedArgs{"run_id": runID})
	if err != nil {
		return nil, translate("list steps of run "+runID, err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (Step, error) {
		var (
			s                         Step
			kind                      string
			outcome, errText, childID *string
			output                    []byte
		)
		err := row.Scan(&s.Name, &s.Position, &kind, &outcome, &output, &errText, &s.Attempt, &childID,
			&s.WakeAt, &s.StartedAt, &s.FinishedAt)
		s.Kind, s.Outcome, s.Output, s.Error, s.ChildID = StepKind(kind), StepOutcome(deref(outcome)), output, deref(errText), deref(childID)
		return s, err
	})
	if err != nil {
		return nil, translate("list steps of run "+runID, err)
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
	var payload *string
	if len(p.Payload) > 0 {
		s := string(p.Payload)
		payload = &s
	}
	var r SignalResult
	err := db.QueryRow(ctx, e.q[qSignalSend], pgx.NamedArgs{
		"run_id": p.RunID, "name": p.Name, "payload": payload, "idempotency_key": nullIfEmpty(p.IdempotencyKey),
		"by": nullIfEmpty(eventLabel(p.By)),
	}).Scan(&r.SignalID, &r.Duplicate, &r.Delivered)
	if err != nil {
		return SignalResult{}, translate("send signal "+p.Name+" to run "+p.RunID, err)
	}
	return r, nil
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
	rows, err := e.pool.Query(ctx, e.q[qSignalList], pgx.NamedArgs{"run_id": runID})
	if err != nil {
		return nil, translate("list signals of run "+runID, err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (Signal, error) {
		var (
			s       Signal
			key, by *string
			payload []byte
		)
		err := row.Scan(&s.ID, &s.Name, &payload, &key, &s.CreatedAt, &s.ConsumedAt, &by)
		s.Payload, s.IdempotencyKey, s.ConsumedBy = payload, deref(key), deref(by)
		return s, err
	})
	if err != nil {
		return nil, translate("list signals of run "+runID, err)
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
	rows, err := e.pool.Query(ctx, e.q[qRunChildren], pgx.NamedArgs{"parent_id": parentID, "limit": limit})
	if err != nil {
		return nil, translate("list children of run "+parentID, err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (ChildRun, error) {
		var (
			c       ChildRun
			status  string
			lastErr *string
		)
		err := row.Scan(&c.ID, &c.Step, &c.Type, &status, &c.Attempt, &lastErr)
		c.Status, c.LastError = Status(status), deref(lastErr)
		return c, err
	})
	if err != nil {
		return nil, translate("list children of run "+parentID, err)
	}
	return out, nil
}
