package engine_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/simple-workflow/simple-workflow/internal/engine"
)

// A claim woken by a notification claims nothing while another woken claim
// of the same namespace, prefixes and types is under way; a claim that is
// not woken, or of other types, goes ahead; once the first commits, a
// woken claim claims again.
func TestOneWokenClaimerAtATime(t *testing.T) {
	t.Parallel()
	b := setup(t)
	for range 6 {
		b.create(t, engine.CreateParams{Type: "wk.job.v1"})
	}
	other := b.create(t, engine.CreateParams{Type: "wk.other.v1"})
	params := func(worker string, woken bool, types ...string) engine.ClaimParams {
		return engine.ClaimParams{WorkerID: worker, TypePrefixes: []string{"wk."}, Types: types, Runtime: "go",
			Limit: 2, LeaseDuration: 30 * time.Second, Woken: woken}
	}

	// The first woken claim, its transaction left open.
	tx, err := b.pool.Begin(b.ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(b.ctx)) }()
	var held int
	if err := tx.QueryRow(b.ctx, `select count(*) from workflow.claim_runs('w1', '{wk.}', 'go', 2, 30000,
		'{wk.job.v1}', null, null, true)`).Scan(&held); err != nil || held != 2 {
		t.Fatalf("the first woken claim took %d runs (%v), want 2", held, err)
	}

	if got, err := b.eng.ClaimRuns(b.ctx, params("w2", true, "wk.job.v1")); err != nil || len(got) != 0 {
		t.Fatalf("a second woken claim took %d runs (%v) beside the first", len(got), err)
	}
	if got, err := b.eng.ClaimRuns(b.ctx, params("w2", false, "wk.job.v1")); err != nil || len(got) != 2 {
		t.Fatalf("a claim that was not woken took %d runs (%v), want 2", len(got), err)
	}
	if got, err := b.eng.ClaimRuns(b.ctx, params("w3", true, "wk.other.v1")); err != nil || len(got) != 1 || got[0].ID != other {
		t.Fatalf("a woken claim of other types took %+v (%v), want the other run", got, err)
	}
	if err := tx.Commit(b.ctx); err != nil {
		t.Fatal(err)
	}
	if got, err := b.eng.ClaimRuns(b.ctx, params("w2", true, "wk.job.v1")); err != nil || len(got) != 2 {
		t.Fatalf("a woken claim after the first committed took %d runs (%v), want 2", len(got), err)
	}
}

// A claim that fills its limit may have left runs behind, so it notifies
// workflow_run_created (namespace and its first prefix) for the workers it
// may have skipped; a claim that takes less than its limit does not.
func TestFullClaimWakesTheOthersAgain(t *testing.T) {
	t.Parallel()
	b := setup(t)
	conn, err := pgx.Connect(b.ctx, b.url)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = conn.Close(context.WithoutCancel(b.ctx)) }()
	if _, err := conn.Exec(b.ctx, "listen workflow_run_created"); err != nil {
		t.Fatal(err)
	}
	next := func(within time.Duration) string {
		ctx, cancel := context.WithTimeout(b.ctx, within)
		defer cancel()
		n, err := conn.WaitForNotification(ctx)
		if err != nil {
			return ""
		}
		return n.Payload
	}
	for range 3 {
		b.create(t, engine.CreateParams{Type: "full.job.v1", Namespace: "team-f"})
	}
	for next(300*time.Millisecond) != "" { // the inserts' own
	}

	if got := b.claimIn(t, "team-f", "w1", []string{"full."}, 2); len(got) != 2 {
		t.Fatalf("claimed %d runs, want 2", len(got))
	}
	if p := next(5 * time.Second); p != "team-f/full." {
		t.Fatalf("after a full claim: notification %q, want team-f/full.", p)
	}
	if got := b.claimIn(t, "team-f", "w1", []string{"full."}, 2); len(got) != 1 {
		t.Fatalf("claimed %d runs, want the last one", len(got))
	}
	if p := next(500 * time.Millisecond); p != "" {
		t.Fatalf("a claim short of its limit notified %q", p)
	}
}
