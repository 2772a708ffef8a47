package simpleworkflow

import (
	"encoding/json"
	"time"

	"github.com/simple-workflow/simple-workflow/internal/engine"
)

// Status is the state of a run.
type Status string

// The statuses of a run; Succeeded, Failed and Cancelled are final.
const (
	StatusPending   Status = "pending"
	StatusLeased    Status = "leased"
	StatusSucceeded Status = "succeeded"
	StatusFailed    Status = "failed"
	StatusCancelled Status = "cancelled"
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
}

func runFromEngine(r engine.Run) *Run {
	return &Run{
		ID: r.ID, Type: r.Type, Payload: r.Payload, Status: Status(r.Status), Priority: r.Priority,
		RunAt: r.RunAt, IdempotencyKey: r.IdempotencyKey, Attempt: r.Attempt, MaxAttempts: r.MaxAttempts,
		LeasedBy: r.LeasedBy, LeaseUntil: r.LeaseUntil, LastError: r.LastError, Result: r.Result,
		StartedAt: r.StartedAt, FinishedAt: r.FinishedAt, CreatedAt: r.CreatedAt, UpdatedAt: r.UpdatedAt,
	}
}

// EventType is the kind of an audit event.
type EventType string

// The audit event types.
const (
	EventCreated   EventType = "created"
	EventLeased    EventType = "leased"
	EventStarted   EventType = "started"
	EventHeartbeat EventType = "heartbeat"
	EventSucceeded EventType = "succeeded"
	EventFailed    EventType = "failed"
	EventRetried   EventType = "retried"
	EventCancelled EventType = "cancelled"
)

// Event is one entry of a run's audit trail.
type Event struct {
	ID        int64
	RunID     string
	Type      EventType
	Data      json.RawMessage
	CreatedAt time.Time
}
