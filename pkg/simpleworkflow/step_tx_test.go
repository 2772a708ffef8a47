package simpleworkflow_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/simple-workflow/simple-workflow/pkg/simpleworkflow"
)

// ledgerRows counts the rows a run's transactional steps wrote, by step.
func (b *bundle) ledgerRows(t *testing.T, runID string) map[string]int {
	t.Helper()
	rows, err := b.client.Pool().Query(b.ctx, `select step, count(*) from public.tx_ledger where run_id = $1 group by step`, runID)
	if err != nil {
		t.Fatal(err)
	}
	got, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (struct {
		step string
		n    int
	}, error) {
		var v struct {
			step string
			n    int
		}
		err := r.Scan(&v.step, &v.n)
		return v, err
	})
	if err != nil {
		t.Fatal(err)
	}
	m := map[string]int{}
	for _, v := range got {
		m[v.step] = v.n
	}
	return m
}

func (b *bundle) createLedger(t *testing.T) {
	t.Helper()
	if _, err := b.client.Pool().Exec(b.ctx, `create table if not exists public.tx_ledger (run_id uuid not null, step text not null, attempt int not null)`); err != nil {
		t.Fatal(err)
	}
}

// A transactional step's writes and its journal entry commit together: a
// retried attempt replays it without running the body (one row), and a
// body that fails rolls its writes back, so its retry writes once too.
func TestStepTxWritesOnceAcrossRetries(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.createLedger(t)
	var runs counters
	handler := func(ctx context.Context, task *simpleworkflow.Task) (json.RawMessage, error) {
		n, err := simpleworkflow.StepTx(ctx, task, "debit", func(ctx context.Context, tx pgx.Tx) (int, error) {
			runs.inc("debit")
			_, err := tx.Exec(ctx, `insert into public.tx_ledger values ($1, 'debit', $2)`, task.ID, task.Attempt)
			return 42, err
		})
		if err != nil {
			return nil, err
		}
		_, err = simpleworkflow.StepTx(ctx, task, "credit", func(ctx context.Context, tx pgx.Tx) (string, error) {
			runs.inc("credit")
			if _, err := tx.Exec(ctx, `insert into public.tx_ledger values ($1, 'credit', $2)`, task.ID, task.Attempt); err != nil {
				return "", err
			}
			if task.Attempt == 1 {
				return "", errors.New("the credit body fails after its write")
			}
			return "ok", nil
		})
		if err != nil {
			return nil, err
		}
		if task.Attempt < 3 {
			return nil, errTest // after both steps: the next attempt replays them
		}
		return simpleworkflow.JSONResult(map[string]int{"n": n})
	}
	b.startPoller(t, simpleworkflow.PollerConfig{TypePrefixes: []string{"txstep."}},
		map[string]simpleworkflow.HandlerFunc{"txstep.a.v1": handler})
	res, err := b.client.Create(b.ctx, "txstep.a.v1", nil, &simpleworkflow.CreateOptions{
		RetryPolicy: &simpleworkflow.RetryPolicy{BaseDelay: time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	run := b.waitStatus(t, res.ID, simpleworkflow.StatusSucceeded, 30*time.Second)
	if run.Attempt != 3 || string(run.Result) != `{"n": 42}` {
		t.Fatalf("run at attempt %d result %s, want attempt 3 and n 42", run.Attempt, run.Result)
	}
	if runs.get("debit") != 1 || runs.get("credit") != 2 {
		t.Fatalf("bodies ran %v, want debit once and credit twice (its first body failed)", runs.n)
	}
	if got := b.ledgerRows(t, res.ID); got["debit"] != 1 || got["credit"] != 1 || len(got) != 2 {
		t.Fatalf("ledger rows %v, want one of each step", got)
	}
	steps, err := b.client.Steps(b.ctx, res.ID)
	if err != nil || len(steps) != 2 || steps[0].Name != "debit" || steps[1].Name != "credit" || steps[1].Attempt != 2 {
		t.Fatalf("journal %+v %v", steps, err)
	}
}

// heldStepTx is a run whose first attempt holds its transactional step's
// body (an uncommitted ledger write) until release is closed; lost gets
// what that attempt's step returned, bodies counts the body's runs.
type heldStepTx struct {
	id      string
	release chan struct{}
	lost    chan error
	bodies  *counters
}

// wantLeaseLost waits for the first attempt's step to return ErrLeaseLost.
func (h heldStepTx) wantLeaseLost(t *testing.T) {
	t.Helper()
	select {
	case err := <-h.lost:
		if !errors.Is(err, simpleworkflow.ErrLeaseLost) {
			t.Fatalf("the first attempt's step returned %v, want ErrLeaseLost", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the first attempt's step never returned")
	}
}

// startHeldStepTx starts a poller of prefix+".a.v1" whose handler writes
// the ledger in a transactional step, records a run (retried after 1 ms),
// and returns once its first attempt is inside the step's body.
func (b *bundle) startHeldStepTx(t *testing.T, prefix string) heldStepTx {
	t.Helper()
	b.createLedger(t)
	h := heldStepTx{release: make(chan struct{}), lost: make(chan error, 1), bodies: &counters{}}
	inBody := make(chan struct{})
	handler := func(ctx context.Context, task *simpleworkflow.Task) (json.RawMessage, error) {
		_, err := simpleworkflow.StepTx(ctx, task, "debit", func(ctx context.Context, tx pgx.Tx) (int, error) {
			h.bodies.inc("debit")
			if _, err := tx.Exec(ctx, `insert into public.tx_ledger values ($1, 'debit', $2)`, task.ID, task.Attempt); err != nil {
				return 0, err
			}
			if task.Attempt == 1 {
				close(inBody)
				<-h.release
			}
			return 1, nil
		})
		if task.Attempt == 1 {
			h.lost <- err
		}
		if err != nil {
			return nil, err
		}
		return simpleworkflow.JSONResult(map[string]bool{"done": true})
	}
	typ := prefix + ".a.v1"
	b.startPoller(t, simpleworkflow.PollerConfig{TypePrefixes: []string{prefix + "."}},
		map[string]simpleworkflow.HandlerFunc{typ: handler})
	res, err := b.client.Create(b.ctx, typ, nil, &simpleworkflow.CreateOptions{
		RetryPolicy: &simpleworkflow.RetryPolicy{BaseDelay: time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	h.id = res.ID
	select {
	case <-inBody:
	case <-time.After(30 * time.Second):
		t.Fatal("the body never ran")
	}
	return h
}

// A worker that lost its lease while a transactional step's body ran
// commits nothing: its write is rolled back with the refused journal
// entry, and the attempt that follows writes once.
func TestStepTxWithoutTheLeaseCommitsNothing(t *testing.T) {
	t.Parallel()
	b := setup(t)
	run := b.startHeldStepTx(t, "txlost")
	// The lease expires and is reaped while the body holds its uncommitted
	// write.
	b.expireLease(t, run.id)
	close(run.release)
	run.wantLeaseLost(t)
	b.waitStatus(t, run.id, simpleworkflow.StatusSucceeded, 30*time.Second)
	if got := b.ledgerRows(t, run.id); got["debit"] != 1 {
		t.Fatalf("ledger rows %v, want the second attempt's one write", got)
	}
	var attempt int
	if err := b.client.Pool().QueryRow(b.ctx, `select attempt from public.tx_ledger where run_id = $1`, run.id).Scan(&attempt); err != nil || attempt != 2 {
		t.Fatalf("the surviving write is from attempt %d (%v), want 2", attempt, err)
	}
	if run.bodies.get("debit") != 2 {
		t.Fatalf("the body ran %d times, want twice", run.bodies.get("debit"))
	}
}

// A transactional step whose attempt is cut off by the run's reclaim (the
// worker claimed the run again: the first attempt's context is cancelled)
// before it writes its journal entry says why: ErrLeaseLost, not only the
// context's error, and its writes are rolled back.
func TestStepTxCutOffByItsReclaimSaysLeaseLost(t *testing.T) {
	t.Parallel()
	b := setup(t)
	run := b.startHeldStepTx(t, "txcut")
	// Reaped, then claimed again by the same worker and finished by the
	// second attempt, while the first still holds its body.
	b.expireLease(t, run.id)
	b.waitStatus(t, run.id, simpleworkflow.StatusSucceeded, 30*time.Second)
	close(run.release)
	run.wantLeaseLost(t)
	if got := b.ledgerRows(t, run.id); got["debit"] != 1 {
		t.Fatalf("ledger rows %v, want the second attempt's one write", got)
	}
}

// A run that failed for good after a transactional step is retried with
// Client.Retry: the next attempt replays the step (no second write) and
// finishes; what cannot be retried is refused with the reason.
func TestClientRetryResumesAFailedRun(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.createLedger(t)
	var runs counters
	handler := func(ctx context.Context, task *simpleworkflow.Task) (json.RawMessage, error) {
		if _, err := simpleworkflow.StepTx(ctx, task, "debit", func(ctx context.Context, tx pgx.Tx) (int, error) {
			runs.inc("debit")
			_, err := tx.Exec(ctx, `insert into public.tx_ledger values ($1, 'debit', $2)`, task.ID, task.Attempt)
			return 1, err
		}); err != nil {
			return nil, err
		}
		if task.Attempt == 1 {
			return nil, simpleworkflow.Permanent(errors.New("the carrier refused"))
		}
		return simpleworkflow.JSONResult(map[string]bool{"shipped": true})
	}
	b.startPoller(t, simpleworkflow.PollerConfig{TypePrefixes: []string{"txretry."}},
		map[string]simpleworkflow.HandlerFunc{"txretry.a.v1": handler})
	res, err := b.client.Create(b.ctx, "txretry.a.v1", nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	b.waitStatus(t, res.ID, simpleworkflow.StatusFailed, 30*time.Second)
	if err := b.client.Retry(b.ctx, res.ID, &simpleworkflow.RetryRunOptions{By: "test"}); err != nil {
		t.Fatal(err)
	}
	run := b.waitStatus(t, res.ID, simpleworkflow.StatusSucceeded, 30*time.Second)
	if run.Attempt != 2 || runs.get("debit") != 1 {
		t.Fatalf("attempt %d, the body ran %d times; want attempt 2 and one body", run.Attempt, runs.get("debit"))
	}
	if got := b.ledgerRows(t, res.ID); got["debit"] != 1 {
		t.Fatalf("ledger rows %v, want one", got)
	}
	if err := b.client.Retry(b.ctx, res.ID, nil); !errors.Is(err, simpleworkflow.ErrInvalid) {
		t.Fatalf("retrying a succeeded run: %v, want ErrInvalid", err)
	}
}
