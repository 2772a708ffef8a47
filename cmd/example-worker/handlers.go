package main

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/simple-workflow/simple-workflow/pkg/simpleworkflow"
)

// registerDemoHandlers installs the demo.*.v1 handlers used by the docs, the
// demo and the tests.
func registerDemoHandlers(p *simpleworkflow.Poller, pool *pgxpool.Pool) error {
	for typ, h := range map[string]simpleworkflow.HandlerFunc{
		"demo.echo.v1":     echo,
		"demo.sleep.v1":    sleep,
		"demo.fail.v1":     failTimes,
		"demo.order.v1":    order{pool: pool}.handle,
		"demo.transfer.v1": transfer{pool: pool}.handle,
	} {
		if err := p.Handle(typ, h); err != nil {
			return err
		}
	}
	return nil
}

// echo returns its payload as its result.
func echo(_ context.Context, t *simpleworkflow.Task) (json.RawMessage, error) {
	return t.Payload, nil
}

// sleep waits payload.seconds seconds (heartbeats continue meanwhile) and
// stops as soon as its context is cancelled.
func sleep(ctx context.Context, t *simpleworkflow.Task) (json.RawMessage, error) {
	var in struct {
		Seconds float64 `json:"seconds"`
	}
	if err := t.Decode(&in); err != nil {
		return nil, simpleworkflow.Permanent(err)
	}
	if in.Seconds < 0 || in.Seconds > 24*3600 {
		return nil, simpleworkflow.Permanent(fmt.Errorf("seconds must be between 0 and 86400, got %v", in.Seconds))
	}
	t.Logger().Info("sleeping", "seconds", in.Seconds)
	timer := time.NewTimer(time.Duration(in.Seconds * float64(time.Second)))
	defer timer.Stop()
	select {
	case <-ctx.Done():
		t.Logger().Warn("sleep interrupted", "cause", context.Cause(ctx))
		return nil, fmt.Errorf("sleep interrupted: %w", context.Cause(ctx))
	case <-timer.C:
		return simpleworkflow.JSONResult(map[string]any{"sleptSeconds": in.Seconds})
	}
}

// failTimes fails its first payload.failTimes attempts, then succeeds.
func failTimes(_ context.Context, t *simpleworkflow.Task) (json.RawMessage, error) {
	var in struct {
		FailTimes int `json:"failTimes"`
	}
	if err := t.Decode(&in); err != nil {
		return nil, simpleworkflow.Permanent(err)
	}
	if t.Attempt <= in.FailTimes {
		t.Logger().Error("failing as planned", "attempt", t.Attempt, "failTimes", in.FailTimes)
		return nil, fmt.Errorf("planned failure %d of %d", t.Attempt, in.FailTimes)
	}
	t.Logger().Info("succeeding", "attempt", t.Attempt)
	return simpleworkflow.JSONResult(map[string]any{"attempts": t.Attempt})
}
