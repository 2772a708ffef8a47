package simpleworkflow

import (
	"encoding/json"
	"time"
)

// Status is the state of a run: pending, leased, succeeded, failed or
// cancelled. The last three are final. The values are the strings stored in
// the inbox's status column.
type Status string

// The statuses of a run.
const (
	// StatusPending: the run waits to be claimed, for its first attempt, a
	// retry, or the end of a durable wait (then Run.Wait says what for).
	StatusPending Status = "pending"
	// StatusLeased: a worker holds the run and is executing an attempt
	// (Run.LeasedBy, Run.LeaseUntil).
	StatusLeased Status = "leased"
	// StatusSucceeded: an attempt returned a result (Run.Result). Final.
	StatusSucceeded Status = "succeeded"
	// StatusFailed: the last attempt failed, the error was permanent, or the
	// deadline passed (Run.LastError). Final.
	StatusFailed Status = "failed"
	// StatusCancelled: a producer (or the deletion of its WorkflowRun)
	// cancelled the run. Final.
	StatusCancelled Status = "cancelled"
)

// Finished reports whether s is a final status: succeeded, failed or
// cancelled.
func (s Status) Finished() bool {
	return s == StatusSucceeded || s == StatusFailed || s == StatusCancelled
}

// Run is a recorded intent and its progress.
type Run struct {
	// ID is the run's id, a UUID.
	ID string
	// Type is the workflow type, such as billing.invoice.v1.
	Type string
	// Payload is the JSON object the run was created with.
	Payload json.RawMessage
	// Status is where the run stands.
	Status Status
	// Priority orders claims: lower runs first.
	Priority int
	// RunAt is when the run may next be claimed: its creation (or the
	// RunAt it was created with), a retry's backoff, or the end of a wait.
	RunAt time.Time
	// IdempotencyKey is the key the run was created with ("" for none).
	IdempotencyKey string
	// Attempt counts the attempts claimed so far (0 before the first).
	Attempt int
	// MaxAttempts bounds the attempts.
	MaxAttempts int
	// LeasedBy is the worker holding (or, once finished, last holding) the run.
	LeasedBy string
	// LeaseUntil is when the current lease expires unless heartbeated; nil
	// when the run is not leased.
	LeaseUntil *time.Time
	// LastError is the error of the latest failed attempt ("" for none).
	LastError string
	// Result is the JSON result of the successful attempt (nil for none).
	Result json.RawMessage
	// StartedAt is when the first attempt started; nil before.
	StartedAt *time.Time
	// FinishedAt is when the run reached a final status; nil before.
	FinishedAt *time.Time
	// CreatedAt is when the run was recorded.
	CreatedAt time.Time
	// UpdatedAt is the time of the run's latest change.
	UpdatedAt time.Time
	// DeadlineAt is when the run fails with "deadline exceeded".
	DeadlineAt *time.Time
	// ParentID is the run that started this one as a child.
	ParentID string
	// Wait says what a parked run waits for; nil when it is not parked.
	Wait *Wait
	// TraceParent is the W3C traceparent stored with the run ("" for none).
	TraceParent string
	// ConcurrencyKey groups the run for its type's per-key flow limits
	// ("" for none).
	ConcurrencyKey string
	// Namespace is the namespace the run belongs to.
	Namespace string
	// TypeNamespace is the namespace whose workers run its type (Namespace,
	// unless another namespace shares the type).
	TypeNamespace string
}

// Wait is what a parked run waits for: a sleep, a signal or a child run.
// The run is pending meanwhile, with RunAt at the time the wait ends (far in
// the future for a wait without a timeout).
type Wait struct {
	// Kind is StepKindSleep, StepKindSignal or StepKindChild.
	Kind StepKind
	// Step is the name of the journal entry the wait will fill in.
	Step string
	// Signal is the name of the signal waited for (Kind StepKindSignal).
	Signal string
	// Until is when the wait ends by itself (a sleep's end, a signal's
	// timeout); nil for a wait without one.
	Until *time.Time
}

// EventType is the kind of an audit event. The values are the strings
// stored in the audit trail.
type EventType string

// The audit event types. See docs/durable-execution.md for the data each
// one carries.
const (
	// EventCreated: the run was recorded. Its data names parent_id and
	// parent_step for a child, and deadline_at.
	EventCreated EventType = "created"
	// EventLeased: the run's status was set to leased by plain SQL,
	// outside the inbox's functions (a worker's claim writes EventStarted).
	EventLeased EventType = "leased"
	// EventStarted: a worker claimed the run and started an attempt; the data
	// names the worker, the attempt and the lease's end.
	EventStarted EventType = "started"
	// EventHeartbeat: a worker extended its lease (written sparingly, not
	// on every heartbeat).
	EventHeartbeat EventType = "heartbeat"
	// EventSucceeded: an attempt succeeded and the run is finished.
	EventSucceeded EventType = "succeeded"
	// EventFailed: the run failed for good; the data says why (the error,
	// or reason deadline_exceeded).
	EventFailed EventType = "failed"
	// EventRetried: the run is pending again: after a failed attempt with
	// attempts left, an expired lease (reason lease_expired), or a run
	// handed back by a worker shutting down.
	EventRetried EventType = "retried"
	// EventCancelled: the run was cancelled.
	EventCancelled EventType = "cancelled"
	// EventWaiting: the run parked at a sleep, a signal wait or a child
	// wait, giving up its lease without counting the attempt.
	EventWaiting EventType = "waiting"
	// EventWoken: a parked run's wait ended (timer, timeout, signal, child's
	// end).
	EventWoken EventType = "woken"
	// EventSignal: a signal was sent to the run (and stored: a duplicate
	// writes none).
	EventSignal EventType = "signal_received"
)

// Event is one entry of a run's audit trail.
type Event struct {
	// ID orders the events: it grows with every event written.
	ID int64
	// RunID is the run the event is about.
	RunID string
	// Type is what happened.
	Type EventType
	// Data is a JSON object with the details of the transition (worker,
	// attempt, error, reason ...); its keys depend on Type.
	Data json.RawMessage
	// CreatedAt is when the event was written.
	CreatedAt time.Time
}
