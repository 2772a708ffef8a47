package simpleworkflow

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/simple-workflow/simple-workflow/internal/engine"
)

// StepTx is Step for a body that writes to the inbox's own database: fn
// runs inside a transaction on it, and the step's journal entry is written
// in that same transaction, so the body's writes and the record that the
// step ran commit together or not at all. A worker killed inside fn, or
// after the journal write but before the commit, leaves nothing behind (the
// next attempt runs fn again from scratch); one killed after the commit
// leaves both, and the next attempt returns the journaled output without
// calling fn. The writes happen exactly once.
//
// The journal write checks the lease (the fence) and share-locks the run
// until the commit: a worker that lost its lease commits nothing, and no
// claim, reap or cancel of the run can come between the check and the
// commit. This holds only for writes made through tx: a call to another
// service, or to another database, from inside fn is not undone when the
// transaction rolls back (use Step and an idempotency key for those).
//
// fn must not commit or roll back tx. An error from fn rolls the
// transaction back and is returned as is; a replay never calls fn. The
// transaction takes one connection of the Client's pool while fn runs.
// Names and outputs follow Step's rules.
func (t *Task) StepTx(ctx context.Context, name string, fn func(ctx context.Context, tx pgx.Tx) (json.RawMessage, error)) (out json.RawMessage, err error) {
	r, err := t.durable()
	if err != nil {
		return nil, err
	}
	ctx, span := r.startStepSpan(ctx, string(engine.StepKindStep), name)
	defer func() { endStepSpan(span, err) }()
	pos, e, found, err := r.reach(name, engine.StepKindStep)
	if err != nil {
		return nil, err
	}
	span.SetAttributes(AttrStepPos.Int(pos), AttrReplayed.Bool(found), AttrStepTx.Bool(true))
	if found {
		return e.Output, nil
	}
	tx, err := r.s.pool.Begin(ctx)
	if err != nil {
		return nil, fmt.Errorf("step %q: begin its transaction: %w", name, withCause(ctx, err))
	}
	// A no-op once committed; otherwise nothing of the body survives.
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	out, err = fn(ctx, tx)
	if err != nil {
		return nil, err
	}
	if out, err = checkStepOutput(name, out); err != nil {
		return nil, err
	}
	res, err := r.s.eng.RecordStepsIn(ctx, tx, r.s.cfg.WorkerID,
		[]engine.StepWrite{{LeaseRef: r.ref, Name: name, Position: pos, Output: out}})
	if err != nil {
		return nil, recordStepError(name, withCause(ctx, err))
	}
	if res[0].Status != engine.WriteRecorded {
		// Lease lost, a duplicate (the step's first output wins), or a
		// refusal: the body's writes must not stay. The attempt's context
		// may be cancelled by now (a lost lease is heard by the heartbeat
		// too): the rollback runs anyway, and the answer is the database's.
		if err := tx.Rollback(context.WithoutCancel(ctx)); err != nil {
			return nil, fmt.Errorf("step %q: roll back: %w", name, err)
		}
		return r.stepRecorded(name, pos, out, res[0])
	}
	if err := tx.Commit(ctx); err != nil {
		// Whether it committed is unknown only if the connection broke:
		// either way the writes and the journal entry went together, and
		// the next attempt runs the body again or replays it.
		return nil, fmt.Errorf("step %q: commit: %w", name, withCause(ctx, err))
	}
	return r.stepRecorded(name, pos, out, res[0])
}

// StepTx is Task.StepTx with a typed result: fn's value is stored as JSON
// and decoded on replay.
func StepTx[T any](ctx context.Context, t *Task, name string, fn func(ctx context.Context, tx pgx.Tx) (T, error)) (T, error) {
	raw, err := t.StepTx(ctx, name, func(ctx context.Context, tx pgx.Tx) (json.RawMessage, error) {
		v, err := fn(ctx, tx)
		if err != nil {
			return nil, err
		}
		return marshalStepOutput(name, v)
	})
	return decodeStepOutput[T](name, raw, err)
}
