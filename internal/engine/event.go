package engine

import (
	"context"
	"encoding/json"
	"time"

	"github.com/jackc/pgx/v5"
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
	rows, err := e.pool.Query(ctx, e.q[qEventList], pgx.NamedArgs{"workflow_id": runID})
	if err != nil {
		return nil, translate("list events of run "+runID, err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (Event, error) {
		var ev Event
		var t string
		var data []byte
		err := row.Scan(&ev.ID, &ev.RunID, &t, &data, &ev.CreatedAt)
		ev.Type, ev.Data = EventType(t), data
		return ev, err
	})
	if err != nil {
		return nil, translate("list events of run "+runID, err)
	}
	return out, nil
}
