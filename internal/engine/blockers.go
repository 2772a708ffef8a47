package engine

import (
	"context"
	"fmt"
	"time"
)

// LockHolder is a session of another login holding a lock on the audit
// trail, the run table or the schema's bookkeeping: what maintenance (the
// drop of history partitions, an upgrade) waits for.
type LockHolder struct {
	PID         int32
	User        string
	Application string
	// State and TransactionStart are empty when the server does not show
	// them to the schema's owner (another login's session, without
	// pg_read_all_stats).
	State            string
	TransactionStart *time.Time
	// Relation is the table the lock is on.
	Relation string
}

// String describes the holder for a log line or an error.
func (h LockHolder) String() string {
	s := fmt.Sprintf("pid %d user %s application %q on %s", h.PID, h.User, h.Application, h.Relation)
	if h.State != "" {
		s += ", " + h.State
	}
	if h.TransactionStart != nil {
		s += " since " + h.TransactionStart.UTC().Format(time.RFC3339)
	}
	return s
}

// MaintenanceBlockers lists the other sessions that hold a lock on the
// audit trail (workflow_event and its partitions), the run table or
// workflow.schema_version, the tables whose maintenance takes an
// exclusive lock: who to ask, or whose session to end, when a drop of
// history partitions keeps coming back busy.
func (e *Engine) MaintenanceBlockers(ctx context.Context) ([]LockHolder, error) {
	rows, err := e.q.MaintenanceBlockers(ctx)
	if err != nil {
		return nil, translate("list the sessions holding maintenance back", err)
	}
	holders := make([]LockHolder, len(rows))
	for i, row := range rows {
		holders[i] = LockHolder{PID: deref(row.Pid), User: row.Usename, Application: row.ApplicationName,
			State: row.State, TransactionStart: row.XactStart, Relation: row.Relation}
	}
	return holders, nil
}
