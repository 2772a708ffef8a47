package main

import (
	"context"
	"fmt"
	"io"

	"github.com/jackc/pgx/v5/pgxpool"
)

// walPosition returns the server's current WAL insert position in bytes: the
// difference of two positions is the WAL written in between (by the whole
// server, so measure while nothing else runs).
func walPosition(ctx context.Context, pool *pgxpool.Pool) (int64, error) {
	var lsn int64
	if err := pool.QueryRow(ctx, "select (pg_current_wal_lsn() - '0/0'::pg_lsn)::bigint").Scan(&lsn); err != nil {
		return 0, fmt.Errorf("read the WAL position: %w", err)
	}
	return lsn, nil
}

// statStatements reports whether pg_stat_statements can be used (the
// server preloads it); it creates the extension when it can. Statements
// inside functions are listed when the server sets
// pg_stat_statements.track = all.
func statStatements(ctx context.Context, pool *pgxpool.Pool) (bool, error) {
	var loaded bool
	if err := pool.QueryRow(ctx,
		"select 'pg_stat_statements' = any (string_to_array(current_setting('shared_preload_libraries'), ', '))").Scan(&loaded); err != nil {
		return false, fmt.Errorf("read shared_preload_libraries: %w", err)
	}
	if !loaded {
		return false, nil
	}
	if _, err := pool.Exec(ctx, "create extension if not exists pg_stat_statements"); err != nil {
		return false, fmt.Errorf("create pg_stat_statements: %w", err)
	}
	return true, nil
}

func resetStatements(ctx context.Context, pool *pgxpool.Pool) error {
	if _, err := pool.Exec(ctx, "select pg_stat_statements_reset()"); err != nil {
		return fmt.Errorf("reset pg_stat_statements: %w", err)
	}
	return nil
}

// printStatements writes the statements that took the most server time
// since the last reset, per run of the burn-down: calls, rows, milliseconds
// and WAL bytes (nested statements included: a function call and the
// statements inside it are both listed).
func printStatements(ctx context.Context, pool *pgxpool.Pool, w io.Writer, runs int) error {
	rows, err := pool.Query(ctx, `
		select calls, rows, total_exec_time, wal_bytes::bigint, shared_blks_hit + shared_blks_read + shared_blks_dirtied,
		       left(regexp_replace(query, '\s+', ' ', 'g'), 110)
		from pg_stat_statements
		where dbid = (select oid from pg_database where datname = current_database())
		order by total_exec_time desc limit 12`)
	if err != nil {
		return fmt.Errorf("read pg_stat_statements: %w", err)
	}
	defer rows.Close()
	fmt.Fprintf(w, "%8s %8s %9s %9s %8s  %s\n", "calls", "rows", "us/run", "WAL B/run", "blk/run", "statement")
	for rows.Next() {
		var calls, nrows, wal, blks int64
		var ms float64
		var q string
		if err := rows.Scan(&calls, &nrows, &ms, &wal, &blks, &q); err != nil {
			return fmt.Errorf("scan pg_stat_statements: %w", err)
		}
		n := float64(runs)
		fmt.Fprintf(w, "%8d %8d %9.1f %9.0f %8.1f  %s\n", calls, nrows, ms*1000/n, float64(wal)/n, float64(blks)/n, q)
	}
	return rows.Err()
}
