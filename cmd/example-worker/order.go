package main

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/simple-workflow/simple-workflow/pkg/simpleworkflow"
)

// orderInput is the payload of demo.order.v1.
type orderInput struct {
	OrderID               string  `json:"orderId"`
	Amount                float64 `json:"amount"`
	SleepSeconds          float64 `json:"sleepSeconds"`
	ApproveTimeoutSeconds float64 `json:"approveTimeoutSeconds"`
	// Counters makes each step body count its executions in
	// public.demo_step_counter, so tests can see that no step ran twice.
	Counters bool `json:"counters"`
	// HoldAfterChargeSeconds holds the lease (not durably) after the charge
	// step of the first attempt, so tests can kill the worker there.
	HoldAfterChargeSeconds float64 `json:"holdAfterChargeSeconds"`
}

// counterDDL creates the table that counts step executions for tests.
const counterDDL = `create table if not exists public.demo_step_counter (
    run_id uuid not null, step text not null, n integer not null, primary key (run_id, step))`

// order is demo.order.v1: reserve → charge → a durable sleep → wait for the
// "approve" signal (rejected on timeout) → ship. Each step's output lands in
// the journal, so a retried or resumed run skips what it already did, in any
// runtime.
type order struct {
	pool *pgxpool.Pool
}

func (o order) handle(ctx context.Context, t *simpleworkflow.Task) (json.RawMessage, error) {
	var in orderInput
	if err := t.Decode(&in); err != nil {
		return nil, simpleworkflow.Permanent(err)
	}
	if in.SleepSeconds < 0 || in.SleepSeconds > 7*24*3600 || in.ApproveTimeoutSeconds < 0 ||
		in.HoldAfterChargeSeconds < 0 || in.HoldAfterChargeSeconds > 3600 {
		return nil, simpleworkflow.Permanent(fmt.Errorf("order %s: sleepSeconds, approveTimeoutSeconds and holdAfterChargeSeconds must be non-negative and bounded", in.OrderID))
	}
	step := func(name string, out map[string]any) (map[string]any, error) {
		return simpleworkflow.Step(ctx, t, name, func(ctx context.Context) (map[string]any, error) {
			if in.Counters {
				if err := o.count(ctx, t.ID, name); err != nil {
					return nil, err
				}
			}
			out["by"] = "go"
			return out, nil
		})
	}
	t.Logger().Info("order received", "order", in.OrderID, "amount", in.Amount)
	reserve, err := step("reserve", map[string]any{"reserved": true, "orderId": in.OrderID})
	if err != nil {
		return nil, err
	}
	charge, err := step("charge", map[string]any{"charged": in.Amount})
	if err != nil {
		return nil, err
	}
	if in.HoldAfterChargeSeconds > 0 && t.Attempt == 1 {
		select {
		case <-ctx.Done():
			return nil, context.Cause(ctx)
		case <-time.After(time.Duration(in.HoldAfterChargeSeconds * float64(time.Second))):
		}
	}
	if in.SleepSeconds > 0 {
		if err := t.Sleep(ctx, "cool-off", time.Duration(in.SleepSeconds*float64(time.Second))); err != nil {
			return nil, err
		}
	}
	approval, ok, err := t.WaitForSignal(ctx, "approve", time.Duration(in.ApproveTimeoutSeconds*float64(time.Second)))
	if err != nil {
		return nil, err
	}
	if !ok {
		t.Logger().Warn("order not approved in time", "order", in.OrderID, "timeoutSeconds", in.ApproveTimeoutSeconds)
		return nil, simpleworkflow.Permanent(fmt.Errorf("order %s rejected: not approved within %gs", in.OrderID, in.ApproveTimeoutSeconds))
	}
	t.Logger().Info("order approved", "order", in.OrderID, "approval", string(approval))
	ship, err := step("ship", map[string]any{"shipped": true})
	if err != nil {
		return nil, err
	}
	return simpleworkflow.JSONResult(map[string]any{
		"orderId": in.OrderID, "reserve": reserve, "charge": charge, "approval": approval, "ship": ship,
	})
}

// count adds one to the execution counter of a step.
func (o order) count(ctx context.Context, runID, step string) error {
	_, err := o.pool.Exec(ctx, `insert into public.demo_step_counter (run_id, step, n) values ($1, $2, 1)
        on conflict (run_id, step) do update set n = demo_step_counter.n + 1`, runID, step)
	if err != nil {
		return fmt.Errorf("count step %s: %w", step, err)
	}
	return nil
}
