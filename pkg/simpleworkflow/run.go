package simpleworkflow

import (
	"encoding/json"
	"time"

	"github.com/simple-workflow/simple-workflow/internal/engine"
)

// Status is the state of a run: pending, leased, succeeded, failed or
// cancelled. The last three are final.
type Status = engine.Status

// The statuses of a run.
const (
	StatusPending   = engine.StatusPending
	StatusLeased    = engine.StatusLeased
	StatusSucceeded = engine.StatusSucceeded
	StatusFailed    = engine.StatusFailed
	StatusCancelled = engine.StatusCancelled
)

// Run is a recorded intent and its progress.
type Run struct {
	ID             string
	Type           string
	Payload        json.RawMessage
	Status         Status
	Priority       int
	RunAt          time.Time
	IdempotencyKey string
	Attempt        int
	MaxAttempts    int
	// LeasedBy is the worker holding (or, once finished, last holding) the run.
	LeasedBy   string
	LeaseUntil *time.Time
	LastError  string
	Result     json.RawMessage
	StartedAt  *time.Time
	FinishedAt *time.Time
	CreatedAt  time.Time
	UpdatedAt  time.Time
	// DeadlineAt is when the run fails with "deadline exceeded".
	DeadlineAt *time.Time
	// ParentID is the run that started this one as a child.
	ParentID string
	// Wait says what a parked run waits for; nil when it is not parked.
	Wait *Wait
	// TraceParent is the W3C traceparent stored with the run ("" for none).
	TraceParent string
}

// Wait is what a parked run waits for: a sleep, a signal or a child run.
type Wait = engine.Wait

func runFromEngine(r engine.Run) *Run {
	return &Run{
		ID: r.ID, Type: r.Type, Payload: r.Payload, Status: r.Status, Priority: r.Priority,
		RunAt: r.RunAt, IdempotencyKey: r.IdempotencyKey, Attempt: r.Attempt, MaxAttempts: r.MaxAttempts,
		LeasedBy: r.LeasedBy, LeaseUntil: r.LeaseUntil, LastError: r.LastError, Result: r.Result,
		StartedAt: r.StartedAt, FinishedAt: r.FinishedAt, CreatedAt: r.CreatedAt, UpdatedAt: r.UpdatedAt,
		DeadlineAt: r.DeadlineAt, ParentID: r.ParentID, Wait: r.Wait, TraceParent: r.TraceParent,
	}
}

// EventType is the kind of an audit event.
type EventType = engine.EventType

// The audit event types.
const (
	EventCreated   = engine.EventCreated
	EventLeased    = engine.EventLeased
	EventStarted   = engine.EventStarted
	EventHeartbeat = engine.EventHeartbeat
	EventSucceeded = engine.EventSucceeded
	EventFailed    = engine.EventFailed
	EventRetried   = engine.EventRetried
	EventCancelled = engine.EventCancelled
	EventWaiting   = engine.EventWaiting
	EventWoken     = engine.EventWoken
	EventSignal    = engine.EventSignalReceived
)

// Event is one entry of a run's audit trail: its id, the run's id, its
// type, its JSON data and when it was written.
type Event = engine.Event
