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
	rows, err := e.pool.Query(ctx, e.q[qEventListAfter], pgx.NamedArgs{"workflow_id": runID, "after_id": afterID})
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
	rows, err := e.pool.Query(ctx, e.q[qEventCountsAfter], pgx.NamedArgs{"after_id": afterID})
	if err != nil {
		return nil, afterID, translate("count events", err)
	}
	defer rows.Close()
	maxID := afterID
	var out []EventCount
	for rows.Next() {
		var c EventCount
		var t string
		var m int64
		if err := rows.Scan(&t, &c.Count, &c.LeaseExpiries, &m); err != nil {
			return nil, afterID, translate("count events", err)
		}
		c.Type = EventType(t)
		out = append(out, c)
		maxID = max(maxID, m)
	}
	if err := rows.Err(); err != nil {
		return nil, afterID, translate("count events", err)
	}
	return out, maxID, nil
}

// LatestEventID returns the id of the newest audit event, 0 when there is none.
func (e *Engine) LatestEventID(ctx context.Context) (int64, error) {
	var id int64
	if err := e.pool.QueryRow(ctx, e.q[qEventLatestID]).Scan(&id); err != nil {
		return 0, translate("latest event id", err)
	}
	return id, nil
}
