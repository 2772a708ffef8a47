package engine

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// ErrMigrationLocked is returned by Migrate when another session held the
// migration lock for longer than the wait allows; the error names the
// sessions that held it.
var ErrMigrationLocked = errors.New("the migration lock is held by another session")

// takeInstallLock takes the advisory lock of a first install on conn,
// trying for up to migrationLockWait.
func takeInstallLock(ctx context.Context, conn *pgx.Conn) error {
	deadline := time.Now().Add(migrationLockWait)
	for {
		var got bool
		if err := conn.QueryRow(ctx, "select pg_try_advisory_lock($1)", migrationLockKey).Scan(&got); err != nil {
			return fmt.Errorf("migrate: take the install lock: %w", err)
		}
		if got {
			return nil
		}
		if time.Now().After(deadline) {
			holders, err := lockHolders(ctx, conn, `l.locktype = 'advisory'
				and l.classid = ($1 >> 32)::oid and l.objid = ($1 & 4294967295)::oid and l.objsubid = 1`, migrationLockKey)
			if err != nil {
				return err
			}
			return fmt.Errorf("migrate: %w for over %s (install lock): %s", ErrMigrationLocked, migrationLockWait, holders)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("migrate: wait for the install lock: %w", ctx.Err())
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// lockSchemaVersion locks workflow.schema_version in tx for the upgrade,
// waiting at most migrationLockWait, when the schema is installed (a first
// install holds the advisory lock instead). Only the schema's owner may
// take this lock (SHARE ROW EXCLUSIVE needs UPDATE, DELETE or TRUNCATE on
// the table), and a reader's ACCESS SHARE does not conflict with it.
func lockSchemaVersion(ctx context.Context, tx pgx.Tx, installed bool) error {
	if installed {
		if _, err := tx.Exec(ctx, fmt.Sprintf("set local lock_timeout = %d", migrationLockWait.Milliseconds())); err != nil {
			return fmt.Errorf("bound the wait for the migration lock: %w", err)
		}
		_, err := tx.Exec(ctx, "lock table workflow.schema_version in share row exclusive mode")
		if err != nil {
			var pgErr *pgconn.PgError
			if errors.As(err, &pgErr) && pgErr.Code == "55P03" {
				return fmt.Errorf("%w for over %s (workflow.schema_version)", ErrMigrationLocked, migrationLockWait)
			}
			return fmt.Errorf("lock workflow.schema_version: %w", err)
		}
	}
	// The upgrade's own statements (ALTER TABLE takes ACCESS EXCLUSIVE)
	// wait a short while for a table another session reads: while one
	// waits, every writer of that table queues behind it. Past it the
	// upgrade fails, naming the sessions (Migrate), and the next start
	// tries again.
	if _, err := tx.Exec(ctx, fmt.Sprintf("set local lock_timeout = %d", upgradeLockWait.Milliseconds())); err != nil {
		return fmt.Errorf("bound the upgrade's lock waits: %w", err)
	}
	return nil
}

// upgradeLockWait bounds each lock wait of an upgrade's statements.
const upgradeLockWait = 2 * time.Second

// lockHolders describes the sessions that hold a lock matching where (a
// condition on pg_locks l, with $1 the bigint arg): pid, user, application and
// state, for an operator to end them.
func lockHolders(ctx context.Context, conn *pgx.Conn, where string, arg int64) (string, error) {
	rows, err := conn.Query(ctx, `select format('pid %s user %s application %s (%s since %s)', a.pid, a.usename,
			coalesce(nullif(a.application_name, ''), '-'), a.state,
			coalesce(to_char(a.xact_start, 'YYYY-MM-DD HH24:MI:SS TZ'), '-'))
		from pg_catalog.pg_locks l join pg_catalog.pg_stat_activity a on a.pid = l.pid
		where l.granted and l.pid <> pg_backend_pid() and `+where+`
		order by a.pid`, arg)
	if err != nil {
		return "", fmt.Errorf("migrate: read who holds the lock: %w", err)
	}
	who, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return "", fmt.Errorf("migrate: read who holds the lock: %w", err)
	}
	if len(who) == 0 {
		return "released since", nil
	}
	return strings.Join(who, "; "), nil
}
