package engine

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// queryRower is what DatabaseIdentity reads through: a pool, a connection
// or a transaction.
type queryRower interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// DatabaseIdentity names the database q reaches, the same through any URL
// that reaches it (another host name, a port of a pooler, another login):
// the cluster's system identifier, drawn at initdb, and the database's
// oid. A physical replica, or a cluster copied from a base backup, has the
// identity of the database it copies.
func DatabaseIdentity(ctx context.Context, q queryRower) (string, error) {
	var id string
	err := q.QueryRow(ctx, `select c.system_identifier::text || '/' || d.oid::text
		from pg_catalog.pg_control_system() c, pg_catalog.pg_database d
		where d.datname = pg_catalog.current_database()`).Scan(&id)
	if err != nil {
		return "", fmt.Errorf("read the database's identity: %w", err)
	}
	return id, nil
}

// DatabaseIdentity is the identity of the inbox's database (see the
// function DatabaseIdentity).
func (e *Engine) DatabaseIdentity(ctx context.Context) (string, error) {
	return DatabaseIdentity(ctx, e.pool)
}
