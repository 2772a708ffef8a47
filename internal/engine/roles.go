package engine

import (
	"context"
	_ "embed"
	"fmt"

	"github.com/jackc/pgx/v5/pgxpool"
)

// Database roles created by CreateRoles (see roles.sql). They are NOLOGIN:
// grant them to the login users of workers, producers and consoles.
const (
	// RoleWorker may call the worker functions and read the registry.
	RoleWorker = "workflow_worker"
	// RoleProducer may record, cancel and soft-delete runs with plain SQL,
	// send signals, and read runs, events, journals and signals.
	RoleProducer = "workflow_producer"
	// RoleReader may read every table.
	RoleReader = "workflow_reader"
)

//go:embed sql/roles.sql
var rolesSQL string

// RolesSQL returns the script that creates the database roles (when they are
// missing) and grants each what it needs, for those who run it with psql.
func RolesSQL() string { return rolesSQL }

// CreateRoles runs RolesSQL: it creates the roles workflow_worker,
// workflow_producer and workflow_reader when they are missing and brings
// their grants in line with the current schema. It is idempotent; run it
// after Migrate, and again after every upgrade. The connection's user must
// own the schema (the user that ran Migrate), and needs CREATEROLE while a
// role is missing.
func CreateRoles(ctx context.Context, pool *pgxpool.Pool) error {
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return fmt.Errorf("create roles: acquire connection: %w", err)
	}
	defer conn.Release()
	if _, err := conn.Exec(ctx, rolesSQL); err != nil {
		// The script opens its own transaction: end it before the
		// connection goes back to the pool.
		_, _ = conn.Exec(context.WithoutCancel(ctx), "rollback")
		return fmt.Errorf("create roles: %w", err)
	}
	return nil
}
