package main

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/simple-workflow/simple-workflow/pkg/simpleworkflow"
)

// transferDDL creates the table demo.transfer.v1 writes to. It has no
// unique key on purpose: a transfer written twice would show as two rows.
const transferDDL = `create table if not exists public.demo_transfer (
    run_id uuid not null, transfer_id text not null, amount numeric not null,
    attempt integer not null, written_at timestamptz not null default clock_timestamp())`

// transferInput is the payload of demo.transfer.v1.
type transferInput struct {
	TransferID string  `json:"transferId"`
	Amount     float64 `json:"amount"`
	// HoldInBodySeconds holds the first attempt inside the transactional
	// step, after its write and before its journal entry, so tests can
	// kill the worker there.
	HoldInBodySeconds float64 `json:"holdInBodySeconds"`
	// HoldAfterStepSeconds holds the first attempt after the step
	// committed, before the run's outcome.
	HoldAfterStepSeconds float64 `json:"holdAfterStepSeconds"`
}

// transfer is demo.transfer.v1: one transactional step that records the
// transfer in public.demo_transfer and journals it in the same transaction
// (Task.StepTx), so the row is written exactly once whatever happens to the
// worker. Each execution of the body is also counted, outside the
// transaction, in public.demo_step_counter (step "transfer-body").
type transfer struct {
	pool *pgxpool.Pool
}

func (x transfer) handle(ctx context.Context, t *simpleworkflow.Task) (json.RawMessage, error) {
	var in transferInput
	if err := t.Decode(&in); err != nil {
		return nil, simpleworkflow.Permanent(err)
	}
	if in.TransferID == "" || in.HoldInBodySeconds < 0 || in.HoldInBodySeconds > 3600 ||
		in.HoldAfterStepSeconds < 0 || in.HoldAfterStepSeconds > 3600 {
		return nil, simpleworkflow.Permanent(fmt.Errorf("transfer: transferId is required and the holds must be within 0 to 3600 seconds"))
	}
	rec, err := simpleworkflow.StepTx(ctx, t, "transfer", func(ctx context.Context, tx pgx.Tx) (map[string]any, error) {
		if err := order(x).count(ctx, t.ID, "transfer-body"); err != nil {
			return nil, err
		}
		if _, err := tx.Exec(ctx, `insert into public.demo_transfer (run_id, transfer_id, amount, attempt)
            values ($1, $2, $3, $4)`, t.ID, in.TransferID, in.Amount, t.Attempt); err != nil {
			return nil, fmt.Errorf("record transfer %s: %w", in.TransferID, err)
		}
		if t.Attempt == 1 {
			if err := hold(ctx, in.HoldInBodySeconds); err != nil {
				return nil, err
			}
		}
		return map[string]any{"transferId": in.TransferID, "amount": in.Amount, "attempt": t.Attempt}, nil
	})
	if err != nil {
		return nil, err
	}
	if t.Attempt == 1 {
		if err := hold(ctx, in.HoldAfterStepSeconds); err != nil {
			return nil, err
		}
	}
	return simpleworkflow.JSONResult(map[string]any{"transfer": rec})
}

// hold waits seconds (not durably), or until ctx ends.
func hold(ctx context.Context, seconds float64) error {
	if seconds <= 0 {
		return nil
	}
	select {
	case <-ctx.Done():
		return context.Cause(ctx)
	case <-time.After(time.Duration(seconds * float64(time.Second))):
		return nil
	}
}
