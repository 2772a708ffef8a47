package simpleworkflow

import (
	"context"
	"fmt"

	"github.com/simple-workflow/simple-workflow/internal/engine"
)

// MaxCreateMany is the most runs one CreateMany call records.
const MaxCreateMany = 10000

// NewRun is one run of a CreateMany batch: what Create takes as arguments.
type NewRun struct {
	// Type is the workflow type, such as billing.invoice.v1.
	Type string
	// Payload must marshal to a JSON object (a json.RawMessage or []byte is
	// used as is); nil means {}.
	Payload any
	// Options are the run's optional settings; nil takes the defaults.
	Options *CreateOptions
}

// CreateMany records a batch of runs (at most MaxCreateMany) in one round
// trip and returns one result per run, in order. Idempotency keys work per
// run as in Create: a key already taken, or used by an earlier run of the
// same batch, records nothing for that run and returns the run that holds
// it, with Created false. The batch is checked before anything is written: a
// bad run fails the whole call with an error (wrapping ErrInvalid) that names
// it, counting from 1. When CreateMany returns without error, every run is
// durable.
func (c *Client) CreateMany(ctx context.Context, runs []NewRun) ([]CreateResult, error) {
	return c.CreateManyIn(ctx, c.pool, runs)
}

// CreateManyIn is CreateMany within the caller's transaction (see CreateIn):
// the runs commit or roll back with the caller's own writes.
func (c *Client) CreateManyIn(ctx context.Context, db DB, runs []NewRun) ([]CreateResult, error) {
	ps := make([]engine.CreateParams, len(runs))
	callerTrace := traceParentOf(ctx) // once for the batch
	for i, r := range runs {
		raw, err := marshalPayload(r.Payload)
		if err != nil {
			return nil, fmt.Errorf("create runs: row %d (%s): %w", i+1, r.Type, err)
		}
		ps[i] = createParams(callerTrace, r.Type, raw, r.Options)
	}
	res, err := c.eng.CreateRunsIn(ctx, db, ps)
	if err != nil {
		return nil, err
	}
	out := make([]CreateResult, len(res))
	for i, r := range res {
		out[i] = CreateResult{ID: r.ID, Created: r.Created}
	}
	return out, nil
}
