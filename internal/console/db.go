package console

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// DefaultRole is the database role the console reads as.
const DefaultRole = "workflow_reader"

// ErrRole is returned by OpenPool when the login user may not act as the
// console's role (the role is missing, or not granted to it).
var ErrRole = errors.New("the login user cannot act as role")

// OpenReadPool is OpenPool that, when the login user cannot act as role,
// warns and reads as the login user itself, still in read-only
// transactions: a console turned on with the defaults starts, and says why
// it reads with more rights than it should.
func OpenReadPool(ctx context.Context, url, role string, log *slog.Logger) (*pgxpool.Pool, error) {
	pool, err := OpenPool(ctx, url, role)
	if !errors.Is(err, ErrRole) {
		return pool, err
	}
	log.Warn("The console reads as the manager's database user (in read-only transactions), not as its role: create the roles (--create-database-roles) or grant the role to that user",
		"role", role, "error", err.Error())
	return OpenPool(ctx, url, "")
}

// OpenPool opens the console's connection pool: every transaction
// read-only, statements bounded by a timeout, and each connection switched
// to role (SET ROLE) unless role is empty, so the console can read but
// never write whatever the login user may do. The login user must be a
// member of role (grant workflow_reader to the manager's user, or let the
// manager create the roles with --create-database-roles as a superuser).
func OpenPool(ctx context.Context, url, role string) (*pgxpool.Pool, error) {
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, fmt.Errorf("console database: parse URL: %w", err)
	}
	cfg.MaxConns = 4
	cfg.ConnConfig.RuntimeParams["default_transaction_read_only"] = "on"
	cfg.ConnConfig.RuntimeParams["statement_timeout"] = "5000"
	cfg.ConnConfig.RuntimeParams["application_name"] = "simple-workflow-console"
	// Plans made for the values of each request: a filter on a rare status
	// may use an index a generic plan would not.
	cfg.ConnConfig.DefaultQueryExecMode = pgx.QueryExecModeExec
	if role != "" {
		cfg.AfterConnect = func(ctx context.Context, c *pgx.Conn) error {
			if _, err := c.Exec(ctx, "set role "+pgx.Identifier{role}.Sanitize()); err != nil {
				var pgErr *pgconn.PgError
				if errors.As(err, &pgErr) && (pgErr.Code == "42501" || pgErr.Code == "22023" || pgErr.Code == "42704") {
					return fmt.Errorf("console database: %w %s (grant %s to it, or create the roles): %v", ErrRole, role, role, err)
				}
				return fmt.Errorf("console database: set role %s: %w", role, err)
			}
			return nil
		}
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("console database: %w", err)
	}
	if err := pool.Ping(ctx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("console database: %w", err)
	}
	return pool, nil
}
