package engine_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/simple-workflow/simple-workflow/internal/engine"
)

// holdBucket locks the worker bucket of namespace ns and worker key
// (prefixes '|' sorted types) in a transaction of its own, as a woken
// claim under way does, making the row if it is missing; release ends it.
func (b *bundle) holdBucket(t *testing.T, ns, key string) (release func()) {
	t.Helper()
	if _, err := b.pool.Exec(b.ctx, `insert into workflow.workflow_claimer (namespace, bucket)
		values ($1, hashtext($2) & 255) on conflict do nothing`, ns, key); err != nil {
		t.Fatal(err)
	}
	tx, err := b.pool.Begin(b.ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(b.ctx, `select 1 from workflow.workflow_claimer
		where namespace = $1 and bucket = hashtext($2) & 255 for update`, ns, key); err != nil {
		t.Fatal(err)
	}
	return func() { _ = tx.Rollback(context.WithoutCancel(b.ctx)) }
}

// A claim woken by a notification claims nothing while another woken claim
// of the same namespace, prefixes and types holds their bucket; a claim
// that is not woken, one of other types, and one of the same types in
// another namespace go ahead; once the bucket is free, a woken claim claims
// again. The first woken claim of a bucket makes its row.
func TestOneWokenClaimerAtATime(t *testing.T) {
	t.Parallel()
	b := setup(t)
	for range 8 {
		b.create(t, engine.CreateParams{Type: "wk.job.v1"})
	}
	other := b.create(t, engine.CreateParams{Type: "wk.other.v1"})
	elsewhere := b.create(t, engine.CreateParams{Type: "wk.job.v1", Namespace: "team-x"})
	params := func(worker string, woken bool, types ...string) engine.ClaimParams {
		return engine.ClaimParams{WorkerID: worker, TypePrefixes: []string{"wk."}, Types: types, Runtime: "go",
			Limit: 2, LeaseDuration: 30 * time.Second, Woken: woken}
	}
	const key, otherKey = "wk.|wk.job.v1", "wk.|wk.other.v1"
	var distinct bool
	if err := b.pool.QueryRow(b.ctx, `select hashtext($1) & 255 <> hashtext($2) & 255`, key, otherKey).Scan(&distinct); err != nil || !distinct {
		t.Fatalf("the two workers' buckets are one (%v): the test needs other types", err)
	}

	if got, err := b.eng.ClaimRuns(b.ctx, params("w1", true, "wk.job.v1")); err != nil || len(got) != 2 {
		t.Fatalf("a woken claim took %d runs (%v), want 2", len(got), err)
	}
	var rows int
	if err := b.pool.QueryRow(b.ctx, `select count(*) from workflow.workflow_claimer
		where namespace = 'default' and bucket = hashtext($1) & 255`, key).Scan(&rows); err != nil || rows != 1 {
		t.Fatalf("the woken claim's bucket has %d rows (%v), want 1", rows, err)
	}

	release := b.holdBucket(t, "default", key)
	defer release()
	if got, err := b.eng.ClaimRuns(b.ctx, params("w2", true, "wk.job.v1")); err != nil || len(got) != 0 {
		t.Fatalf("a woken claim took %d runs (%v) beside another", len(got), err)
	}
	if got, err := b.eng.ClaimRuns(b.ctx, params("w2", false, "wk.job.v1")); err != nil || len(got) != 2 {
		t.Fatalf("a claim that was not woken took %d runs (%v), want 2", len(got), err)
	}
	if got, err := b.eng.ClaimRuns(b.ctx, params("w3", true, "wk.other.v1")); err != nil || len(got) != 1 || got[0].ID != other {
		t.Fatalf("a woken claim of other types took %+v (%v), want the other run", got, err)
	}
	px := params("wx", true, "wk.job.v1")
	px.Namespace = "team-x"
	if got, err := b.eng.ClaimRuns(b.ctx, px); err != nil || len(got) != 1 || got[0].ID != elsewhere {
		t.Fatalf("a woken claim of another namespace took %+v (%v), want its run", got, err)
	}
	release()
	if got, err := b.eng.ClaimRuns(b.ctx, params("w2", true, "wk.job.v1")); err != nil || len(got) != 2 {
		t.Fatalf("a woken claim after the other ended took %d runs (%v), want 2", len(got), err)
	}
}

// A woken claim that fills its limit may have left runs behind, so it
// notifies workflow_run_created (namespace and its first prefix) for the
// workers it may have made skip; a woken claim that takes less than its
// limit does not, nor does a full claim that was not woken (a burn-down's
// claims: their NOTIFYs would serialise their commits).
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

	for range 2 {
		b.create(t, engine.CreateParams{Type: "full.job.v1", Namespace: "team-f"})
	}
	for next(300*time.Millisecond) != "" { // the inserts' own
	}
	claim := func(limit int, woken bool) int {
		got, err := b.eng.ClaimRuns(b.ctx, engine.ClaimParams{WorkerID: "w1", TypePrefixes: []string{"full."},
			Runtime: "go", Limit: limit, LeaseDuration: 30 * time.Second, Namespace: "team-f", Woken: woken})
		if err != nil {
			t.Fatal(err)
		}
		return len(got)
	}
	if n := claim(2, false); n != 2 {
		t.Fatalf("claimed %d runs, want 2", n)
	}
	if p := next(500 * time.Millisecond); p != "" {
		t.Fatalf("a full claim that was not woken notified %q", p)
	}
	if n := claim(2, true); n != 2 {
		t.Fatalf("claimed %d runs, want 2", n)
	}
	if p := next(5 * time.Second); p != "team-f/full." {
		t.Fatalf("after a full woken claim: notification %q, want team-f/full.", p)
	}
	if n := claim(2, true); n != 1 {
		t.Fatalf("claimed %d runs, want the last one", n)
	}
	if p := next(500 * time.Millisecond); p != "" {
		t.Fatalf("a woken claim short of its limit notified %q", p)
	}
}

// A woken claim that finds nothing, even of limit 1, wakes no one again
// (its limit was not filled), and commits without waiting for the WAL
// (it wrote nothing but its bucket's lock).
func TestEmptyWokenClaimWakesNoOneAndWritesNothing(t *testing.T) {
	t.Parallel()
	b := setup(t)
	listener, err := pgx.Connect(b.ctx, b.url)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = listener.Close(context.WithoutCancel(b.ctx)) }()
	if _, err := listener.Exec(b.ctx, "listen workflow_run_created"); err != nil {
		t.Fatal(err)
	}
	conn, err := pgx.Connect(b.ctx, b.url)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = conn.Close(context.WithoutCancel(b.ctx)) }()
	for _, limit := range []int{1, 2} {
		tx, err := conn.Begin(b.ctx)
		if err != nil {
			t.Fatal(err)
		}
		var n int
		err = tx.QueryRow(b.ctx, `select count(*) from workflow.claim_runs('w1', '{empty.}', 'go', $1, 30000,
			null, 'team-e', null, true)`, limit).Scan(&n)
		if err != nil {
			t.Fatal(err)
		}
		var sync string
		if err := tx.QueryRow(b.ctx, "select current_setting('synchronous_commit')").Scan(&sync); err != nil {
			t.Fatal(err)
		}
		if err := tx.Commit(b.ctx); err != nil {
			t.Fatal(err)
		}
		if n != 0 || sync != "off" {
			t.Errorf("an empty woken claim of limit %d: claimed %d, synchronous_commit %q; want 0 and off", limit, n, sync)
		}
		// Notifications arrive in commit order: the marker, sent after the
		// claim committed, comes first unless the claim notified.
		marker := fmt.Sprintf("marker-%d", limit)
		if _, err := conn.Exec(b.ctx, "select pg_notify('workflow_run_created', $1)", marker); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(b.ctx, 10*time.Second)
		got, err := listener.WaitForNotification(ctx)
		cancel()
		if err != nil {
			t.Fatalf("waiting for the marker: %v", err)
		}
		if got.Payload != marker {
			t.Errorf("an empty woken claim of limit %d notified %q", limit, got.Payload)
		}
	}
}
