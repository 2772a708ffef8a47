package simpleworkflow

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/simple-workflow/simple-workflow/internal/engine"
)

// SignalOptions are the optional settings of a signal.
type SignalOptions struct {
	// IdempotencyKey makes sending the same signal again a no-op, so a
	// producer can retry safely. Up to 512 characters.
	IdempotencyKey string
}

// SignalResult says what became of a signal.
type SignalResult struct {
	// SignalID identifies the stored signal.
	SignalID int64
	// Duplicate is true when a signal with the same idempotency key had
	// been sent before; nothing new was stored.
	Duplicate bool
	// Delivered is true when the signal woke a run waiting for it; otherwise
	// it is kept until the run waits for a signal of that name.
	Delivered bool
}

// Signal sends signal name with payload (any JSON value; nil for none) to a
// run. Signals are buffered: one sent before the run waits for it is kept
// and handed to the first WaitForSignal of that name. Sending to an unknown
// run is an error wrapping ErrNotFound, to a finished one ErrRunFinished.
func (c *Client) Signal(ctx context.Context, runID, name string, payload any, opts *SignalOptions) (SignalResult, error) {
	return c.SignalIn(ctx, c.pool, runID, name, payload, opts)
}

// SignalIn is Signal within the caller's transaction (see CreateIn): the
// signal is sent, and its run woken, only if the transaction commits.
func (c *Client) SignalIn(ctx context.Context, db DB, runID, name string, payload any, opts *SignalOptions) (SignalResult, error) {
	if err := engine.ValidateStepName(name); err != nil {
		return SignalResult{}, fmt.Errorf("signal %s: %w", runID, err)
	}
	var raw json.RawMessage
	if payload != nil {
		var err error
		if raw, err = marshalPayload(payload); err != nil {
			return SignalResult{}, fmt.Errorf("signal %s to run %s: %w", name, runID, err)
		}
		if !json.Valid(raw) {
			return SignalResult{}, fmt.Errorf("signal %s to run %s: %w: payload is not valid JSON", name, runID, ErrInvalid)
		}
	}
	p := engine.SignalParams{RunID: runID, Name: name, Payload: raw}
	if opts != nil {
		p.IdempotencyKey = opts.IdempotencyKey
	}
	res, err := c.eng.SendSignalIn(ctx, db, p)
	if err != nil {
		return SignalResult{}, err
	}
	return SignalResult{SignalID: res.SignalID, Duplicate: res.Duplicate, Delivered: res.Delivered}, nil
}
