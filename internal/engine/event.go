package engine

import (
	"context"
	"encoding/json"
	"time"

	"github.com/simple-workflow/simple-workflow/internal/engine/queries"
)

// EventType is the kind of a transition in the audit trail.
type EventType string

// The event types of the audit trail.
const (
	EventCreated   EventType = "created"
	EventLeased    EventType = "leased"
	EventStarted   EventType = "started"
	EventHeartbeat EventType = "heartbeat"
	EventSucceeded EventType = "succeeded"
	EventFailed    EventType = "failed"
	EventRetried   EventType = "retried"
	EventCancelled EventType = "cancelled"
	// EventWaiting: the run parked at a sleep, a signal wait or a child wait.
	EventWaiting EventType = "waiting"
	// EventWoken: a parked run's wait ended (timer, signal, child's end).
	EventWoken EventType = "woken"
	// EventSignalReceived: a signal was sent to the run.
	EventSignalReceived EventType = "signal_received"
)

// Event is one row of the audit trail.
type Event struct {
	ID        int64
	RunID     string
	Type      EventType
	Data      json.RawMessage
	CreatedAt time.Time
}

// ListEvents returns the audit trail of a run, oldest first.
func (e *Engine) ListEvents(ctx context.Context, runID string) ([]Event, error) {
	return e.ListEventsAfter(ctx, runID, 0)
}

// ListEventsAfter returns the events of a run whose id is above afterID,
// oldest first.
func (e *Engine) ListEventsAfter(ctx context.Context, runID string, afterID int64) ([]Event, error) {
	rows, err := e.q.EventListAfter(ctx, queries.EventListAfterParams{WorkflowID: runID, AfterID: afterID})
	if err != nil {
		return nil, translate("list events of run "+runID, err)
	}
	out := make([]Event, len(rows))
	for i, row := range rows {
		out[i] = Event{ID: deref(row.ID), RunID: deref(row.WorkflowID), Type: EventType(deref(row.EventType)),
			Data: row.Data, CreatedAt: deref(row.CreatedAt)}
	}
	return out, nil
}

// EventCount is how many transitions of one type happened.
type EventCount struct {
	Type  EventType
	Count int64
	// LeaseExpiries is how many of them ended a lease that expired (a
	// retried or failed event of the reaper, reason lease_expired).
	LeaseExpiries int64
}

// CountEventsAfter counts the events above afterID by type, and returns the
// highest event id seen (afterID when there are none).
func (e *Engine) CountEventsAfter(ctx context.Context, afterID int64) ([]EventCount, int64, error) {
	rows, err := e.q.EventCountsAfter(ctx, afterID)
	if err != nil {
		return nil, afterID, translate("count events", err)
	}
	maxID := afterID
	out := make([]EventCount, len(rows))
	for i, row := range rows {
		out[i] = EventCount{Type: EventType(deref(row.EventType)), Count: deref(row.Events),
			LeaseExpiries: deref(row.LeaseExpiries)}
		maxID = max(maxID, deref(row.LastID))
	}
	return out, maxID, nil
}

// LatestEventID returns the id of the newest audit event, 0 when there is none.
func (e *Engine) LatestEventID(ctx context.Context) (int64, error) {
	id, err := e.q.EventLatestID(ctx)
	if err != nil {
		return 0, translate("latest event id", err)
	}
	return deref(id), nil
}
