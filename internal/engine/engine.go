package engine

import (
	"fmt"

	"github.com/jackc/pgx/v5/pgxpool"
)

// Engine calls the inbox's SQL functions and queries over a connection pool.
// It is safe for concurrent use.
type Engine struct {
	pool *pgxpool.Pool
	q    queries
}

// New returns an Engine using pool. The schema must have been migrated (see
// Migrate).
func New(pool *pgxpool.Pool) (*Engine, error) {
	q, err := loadQueries()
	if err != nil {
		return nil, fmt.Errorf("load queries: %w", err)
	}
	return &Engine{pool: pool, q: q}, nil
}
