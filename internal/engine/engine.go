package engine

import (
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/simple-workflow/simple-workflow/internal/engine/queries"
)

// Engine calls the inbox's SQL functions and queries over a connection pool.
// It is safe for concurrent use.
type Engine struct {
	pool *pgxpool.Pool
	// q runs the typed queries of queries/*.sql on the pool.
	q *queries.Queries
}

// New returns an Engine using pool. The schema must have been migrated (see
// Migrate).
func New(pool *pgxpool.Pool) (*Engine, error) {
	return &Engine{pool: pool, q: queries.New(pool)}, nil
}
