package engine

import (
	"context"
	"errors"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// The typed queries run on a queries.DBTX. To send several of them in one
// round trip (a pgx.Batch), a caller calls each generated method twice:
// first on a batchQueuer, which queues the statement with the arguments
// the method binds, then, after the batch is sent, on a batchReader, which
// hands the method the next result to read. The method's own code binds
// and scans; nothing is written twice.

// errQueued is a batchQueuer's answer: the statement waits in the batch.
var errQueued = errors.New("queued in a batch")

// batchQueuer queues each statement in b instead of running it.
type batchQueuer struct{ b *pgx.Batch }

// Exec queues sql; it reports errQueued.
func (q batchQueuer) Exec(_ context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	q.b.Queue(sql, args...)
	return pgconn.CommandTag{}, errQueued
}

// Query queues sql; it reports errQueued.
func (q batchQueuer) Query(_ context.Context, sql string, args ...any) (pgx.Rows, error) {
	q.b.Queue(sql, args...)
	return nil, errQueued
}

// QueryRow queues sql; its row reports errQueued.
func (q batchQueuer) QueryRow(_ context.Context, sql string, args ...any) pgx.Row {
	q.b.Queue(sql, args...)
	return queuedRow{}
}

// queuedRow is the row of a queued statement.
type queuedRow struct{}

// Scan reports errQueued.
func (queuedRow) Scan(...any) error { return errQueued }

// batchReader answers each statement with the next result of a sent batch,
// in the order the statements were queued; the statement and its arguments
// are not sent again.
type batchReader struct{ res pgx.BatchResults }

// Exec reads the next result as a command.
func (r batchReader) Exec(context.Context, string, ...any) (pgconn.CommandTag, error) {
	return r.res.Exec()
}

// Query reads the next result's rows.
func (r batchReader) Query(context.Context, string, ...any) (pgx.Rows, error) {
	return r.res.Query()
}

// QueryRow reads the next result's row.
func (r batchReader) QueryRow(context.Context, string, ...any) pgx.Row {
	return r.res.QueryRow()
}

// queued is nil when err is errQueued (the answer of a batchQueuer), else
// err.
func queued(err error) error {
	if errors.Is(err, errQueued) {
		return nil
	}
	return err
}
