package engine

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// The schema is one hand-written file, sql/workflow.sql, that any release
// can run again; sql/migrations holds what a release must do to the tables
// of the release before it (NNNN_name.sql brings version NNNN-1 to NNNN),
// which runs before the file.
//
//go:embed sql/workflow.sql
var schemaSQL string

//go:embed sql/migrations
var migrationFiles embed.FS

// migrationLockKey is the advisory lock held while a database with no
// workflow schema yet gets one, so that several processes starting at once
// install it once. Once the schema exists, upgrades lock the table
// workflow.schema_version instead, which no login but the schema's owner
// may lock: any login may take an advisory lock.
const migrationLockKey int64 = 0x73776d6967726174 // "swmigrat"

// migrationLockWait bounds the wait for either lock; past it, Migrate fails
// naming the sessions that hold it.
const migrationLockWait = time.Minute

// ErrLegacySchema is returned by Migrate for a database whose workflow
// schema was built by the numbered migrations that came before the
// one-file schema: it must be created anew.
var ErrLegacySchema = errors.New("the workflow schema was built by pre-release migrations (workflow.schema_migration)")

// Schema returns the text of the schema file: the whole state machine,
// installable on an empty database and safe to run again on a current one.
func Schema() string { return schemaSQL }

// SchemaVersion is the version of the embedded schema file: the version
// its last migration brings a database to (1 before the first migration).
// The file names it too, in its workflow.begin_schema call; Migrate fails
// if the two differ.
func SchemaVersion() (int, error) {
	migrations, err := Migrations()
	if err != nil {
		return 0, err
	}
	if len(migrations) == 0 {
		return 1, nil
	}
	return migrations[len(migrations)-1].Version, nil
}

// Migration is what one release does to the tables of the release before
// it; the schema file runs after it.
type Migration struct {
	// Version is the schema version the migration brings a database to,
	// from Version-1.
	Version int
	// Name is the file name without the version and extension.
	Name string
	// SQL is the statement text.
	SQL string
}

// Migrations returns the embedded release-to-release migrations in version
// order. Each version from 2 to SchemaVersion has exactly one.
func Migrations() ([]Migration, error) {
	entries, err := fs.ReadDir(migrationFiles, "sql/migrations")
	if err != nil {
		return nil, fmt.Errorf("list migrations: %w", err)
	}
	var out []Migration
	for _, e := range entries {
		if !strings.HasSuffix(e.Name(), ".sql") {
			continue
		}
		base := strings.TrimSuffix(e.Name(), ".sql")
		num, name, ok := strings.Cut(base, "_")
		if !ok {
			return nil, fmt.Errorf("migration %q: name must be NNNN_description.sql", e.Name())
		}
		v, err := strconv.Atoi(num)
		if err != nil {
			return nil, fmt.Errorf("migration %q: version: %w", e.Name(), err)
		}
		text, err := migrationFiles.ReadFile("sql/migrations/" + e.Name())
		if err != nil {
			return nil, fmt.Errorf("read migration %q: %w", e.Name(), err)
		}
		out = append(out, Migration{Version: v, Name: name, SQL: string(text)})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Version < out[j].Version })
	for i, m := range out {
		if m.Version != i+2 {
			return nil, fmt.Errorf("migration %04d_%s: expected version %d (one migration per version from 2)", m.Version, m.Name, i+2)
		}
	}
	return out, nil
}

// InstalledSchemaVersion asks a database for its schema version
// (workflow.schema_version(), which any role may call); a database of a
// release before 16, which has no such function, is read from its version
// table.
func InstalledSchemaVersion(ctx context.Context, pool *pgxpool.Pool) (int, error) {
	var asks bool
	if err := pool.QueryRow(ctx, "select to_regprocedure('workflow.schema_version()') is not null").Scan(&asks); err != nil {
		return 0, fmt.Errorf("read the schema version: %w", err)
	}
	query := "select workflow.schema_version()"
	if !asks {
		query = "select coalesce(max(version), 0) from workflow.schema_version"
	}
	var v int
	if err := pool.QueryRow(ctx, query).Scan(&v); err != nil {
		return 0, fmt.Errorf("read the schema version: %w", err)
	}
	return v, nil
}

// Migrate brings the database's workflow schema to the schema file's
// version in one transaction: an empty database gets the file; an older
// one gets each missing release's migration, then the file. The
// bookkeeping is the file's own (workflow.begin_schema and
// workflow.finish_schema: the versions recorded, the checks, the routines
// an earlier release had dropped), so psql does the same; Migrate adds the
// locks that let several processes start at once: a session advisory lock
// while no schema exists, the version table's lock once one does, each
// wait bounded. A database already at (or past) this version is left as
// it is, so an older binary starting during an upgrade changes nothing.
// It returns the versions it recorded.
func Migrate(ctx context.Context, pool *pgxpool.Pool) ([]int, error) {
	target, err := SchemaVersion()
	if err != nil {
		return nil, err
	}
	migrations, err := Migrations()
	if err != nil {
		return nil, err
	}
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return nil, fmt.Errorf("migrate: acquire connection: %w", err)
	}
	defer conn.Release()

	installed, err := schemaInstalled(ctx, conn.Conn())
	if err != nil {
		return nil, err
	}
	if !installed {
		if err := takeInstallLock(ctx, conn.Conn()); err != nil {
			return nil, err
		}
		defer func() {
			// A fresh context: the lock must be released even when ctx has ended.
			_, _ = conn.Exec(context.WithoutCancel(ctx), "select pg_advisory_unlock($1)", migrationLockKey)
		}()
		// Another process may have installed it while this one waited.
		if installed, err = schemaInstalled(ctx, conn.Conn()); err != nil {
			return nil, err
		}
	}

	var legacy bool
	if err := conn.QueryRow(ctx,
		"select to_regclass('workflow.schema_migration') is not null").Scan(&legacy); err != nil {
		return nil, fmt.Errorf("migrate: look for a legacy schema: %w", err)
	}
	if legacy {
		return nil, fmt.Errorf("migrate: %w: create a new database, or drop schema workflow cascade (its runs are lost)", ErrLegacySchema)
	}
	var current int
	var done []int
	err = pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
		if err := lockSchemaVersion(ctx, tx, installed); err != nil {
			return err
		}
		if installed {
			if err := tx.QueryRow(ctx, "select coalesce(max(version), 0) from workflow.schema_version").Scan(&current); err != nil {
				return fmt.Errorf("read the schema version: %w", err)
			}
		}
		if current >= target {
			return nil
		}
		if current > 0 {
			for _, m := range migrations[current-1:] {
				if _, err := tx.Exec(ctx, m.SQL); err != nil {
					return fmt.Errorf("apply migration %04d_%s: %w", m.Version, m.Name, err)
				}
				done = append(done, m.Version)
			}
		} else {
			done = append(done, target)
		}
		if _, err := tx.Exec(ctx, schemaSQL); err != nil {
			return fmt.Errorf("apply the schema file (version %d): %w", target, err)
		}
		var recorded int
		if err := tx.QueryRow(ctx, "select workflow.schema_version()").Scan(&recorded); err != nil {
			return fmt.Errorf("read the recorded version: %w", err)
		}
		if recorded != target {
			return fmt.Errorf("the schema file recorded version %d but its migrations reach version %d", recorded, target)
		}
		return nil
	})
	if errors.Is(err, ErrMigrationLocked) {
		holders, herr := lockHolders(ctx, conn.Conn(), `l.locktype = 'relation'
			and l.relation = 'workflow.schema_version'::regclass and $1::bigint is not null`, 0)
		if herr != nil {
			return nil, herr
		}
		return nil, fmt.Errorf("migrate: %w: %s", err, holders)
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "55P03" {
		holders, herr := lockHolders(ctx, conn.Conn(), `l.locktype = 'relation' and $1::bigint is not null
			and l.relation in (select c.oid from pg_catalog.pg_class c where c.relnamespace = 'workflow'::regnamespace)`, 0)
		if herr != nil {
			return nil, herr
		}
		return nil, fmt.Errorf("migrate: from version %d to %d: %w (sessions holding the schema's tables: %s)",
			current, target, err, holders)
	}
	if err != nil {
		return nil, fmt.Errorf("migrate: from version %d to %d: %w", current, target, err)
	}
	if current >= target {
		return nil, nil
	}
	return done, nil
}

// schemaInstalled reports whether the database has a workflow schema (its
// version table).
func schemaInstalled(ctx context.Context, conn *pgx.Conn) (bool, error) {
	var installed bool
	if err := conn.QueryRow(ctx, "select to_regclass('workflow.schema_version') is not null").Scan(&installed); err != nil {
		return false, fmt.Errorf("migrate: look for the schema: %w", err)
	}
	return installed, nil
}
