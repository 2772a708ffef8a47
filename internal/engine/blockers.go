package engine

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
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
	rows, err := e.pool.Query(ctx, `
select a.pid, coalesce(a.usename, ''), coalesce(a.application_name, ''), coalesce(a.state, ''), a.xact_start,
       min(l.relation::regclass::text)
from pg_catalog.pg_locks l
join pg_catalog.pg_stat_activity a on a.pid = l.pid
where l.granted and l.pid <> pg_backend_pid() and l.locktype = 'relation'
  and l.database = (select oid from pg_catalog.pg_database where datname = current_database())
  and (l.relation in ('workflow.workflow_event'::regclass, 'workflow.workflow_run'::regclass,
                      'workflow.schema_version'::regclass)
       or l.relation in (select i.inhrelid from pg_catalog.pg_inherits i
                         where i.inhparent = 'workflow.workflow_event'::regclass))
group by a.pid, a.usename, a.application_name, a.state, a.xact_start
order by a.xact_start nulls last, a.pid`)
	if err != nil {
		return nil, translate("list the sessions holding maintenance back", err)
	}
	holders, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (LockHolder, error) {
		var h LockHolder
		err := r.Scan(&h.PID, &h.User, &h.Application, &h.State, &h.TransactionStart, &h.Relation)
		return h, err
	})
	if err != nil {
		return nil, translate("list the sessions holding maintenance back", err)
	}
	return holders, nil
}
