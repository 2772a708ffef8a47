package engine_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/simple-workflow/simple-workflow/internal/engine"
)

// What a worker login passes to the hand-off (p_after) and to a woken
// claim (its prefixes and types, hashed into a bucket) reaches nothing of
// another namespace: team-b's worker naming team-a's ended step gets
// nothing, and asking for team-a is refused; oversized, two-dimensional,
// null-laden and unknown p_after values are refused or hand nothing off;
// hundreds of woken worker shapes, one with a 100 kB prefix, make at most
// 256 bucket rows, all team-b's, and team-a's woken claims go on claiming.
// Team-a's runs are unharmed throughout.
func TestHandOffAndWokenClaimsStayInTheirNamespace(t *testing.T) {
	t.Parallel()
	b := setupRoles(t)
	chain := []engine.DAGStepDefinition{step("a", "ten.a.v1"), step("b", "ten.b.v1", "a")}
	b.registerIn(t, "team-a", "ten.chain.v1", chain...)
	b.registerIn(t, "team-b", "ten.chain.v1", chain...)
	wa := b.tenantLogin(t, engine.RoleWorker, "team-a")
	wb := b.tenantLogin(t, engine.RoleWorker, "team-b")
	dagA := b.create(t, engine.CreateParams{Type: "ten.chain.v1", Namespace: "team-a"})
	b.create(t, engine.CreateParams{Type: "ten.chain.v1", Namespace: "team-b"})
	claimOf := func(l login, ns string, p engine.ClaimParams) ([]engine.ClaimedRun, error) {
		p.WorkerID, p.Namespace, p.Runtime, p.LeaseDuration = "w", ns, "go", 30*time.Second
		if p.TypePrefixes == nil {
			p.TypePrefixes = []string{"ten."}
		}
		if p.Limit == 0 {
			p.Limit = 10
		}
		return l.eng.ClaimRuns(b.ctx, p)
	}

	// team-a's worker ends step a without a hand-off: b waits in the queue.
	a, err := claimOf(wa, "team-a", engine.ClaimParams{TypePrefixes: []string{"ten.a."}})
	if err != nil || len(a) != 1 || a[0].ParentID != dagA {
		t.Fatalf("team-a's claim: %+v, %v", a, err)
	}
	if _, err := wa.eng.CompleteRuns(b.ctx, "w", []engine.Completion{{LeaseRef: a[0].Ref()}}); err != nil {
		t.Fatal(err)
	}

	// team-b's worker, with the same worker id, names team-a's ended step.
	if got, err := claimOf(wb, "team-b", engine.ClaimParams{After: []string{a[0].ID}}); err != nil || len(got) != 0 {
		t.Fatalf("team-b's hand-off from team-a's step: %+v, %v", got, err)
	}
	var pgErr *pgconn.PgError
	if _, err := claimOf(wb, "team-a", engine.ClaimParams{After: []string{a[0].ID}}); !errors.As(err, &pgErr) || pgErr.Code != "SW002" {
		t.Fatalf("team-b's hand-off in team-a: %v, want SW002", err)
	}
	const handOff = `select count(*) from workflow.claim_runs('w', '{ten.}', 'go', 10, 30000, null, 'team-b', %s)`
	var n int
	tooMany := fmt.Sprintf(handOff, `array(select gen_random_uuid() from generate_series(1, 10001))`)
	if err := wb.pool.QueryRow(b.ctx, tooMany).Scan(&n); !errors.As(err, &pgErr) || pgErr.Code != "SW001" {
		t.Fatalf("10,001 ended runs: %d, %v, want SW001", n, err)
	}
	for _, after := range []string{
		fmt.Sprintf(`array[array['%[1]s'::uuid, null], array[null, '%[1]s'::uuid]]`, a[0].ID),
		`array[null, null]::uuid[]`,
		`array(select gen_random_uuid() from generate_series(1, 10000))`,
	} {
		sql := fmt.Sprintf(handOff, after)
		if err := wb.pool.QueryRow(b.ctx, sql).Scan(&n); err != nil || n != 0 {
			t.Fatalf("%s: %d runs, %v", sql, n, err)
		}
	}

	// Woken claims of many worker shapes in team-b.
	for i := range 300 {
		p := engine.ClaimParams{Woken: true, Types: []string{fmt.Sprintf("ten.shape%d.v1", i)}}
		if i == 0 {
			p.TypePrefixes = []string{"ten." + strings.Repeat("x", 100_000)}
		}
		if _, err := claimOf(wb, "team-b", p); err != nil {
			t.Fatalf("woken claim of shape %d: %v", i, err)
		}
	}
	var rowsB, rowsA int
	if err := b.pool.QueryRow(b.ctx, `select count(*) filter (where namespace = 'team-b'),
		count(*) filter (where namespace <> 'team-b') from workflow.workflow_claimer`).Scan(&rowsB, &rowsA); err != nil {
		t.Fatal(err)
	}
	if rowsB < 1 || rowsB > 256 || rowsA != 0 {
		t.Fatalf("bucket rows: team-b %d (want 1 to 256), other namespaces %d (want 0)", rowsB, rowsA)
	}

	// team-a: its step b was never touched, and its woken claim takes it.
	if r := b.get(t, a[0].ID); r.Status != engine.StatusSucceeded {
		t.Fatalf("team-a's step a is %s", r.Status)
	}
	if got := b.stepRuns(t, dagA); got != "a=succeeded b=pending" {
		t.Fatalf("team-a's steps: %s", got)
	}
	got, err := claimOf(wa, "team-a", engine.ClaimParams{Woken: true})
	if err != nil || len(got) != 1 || got[0].Type != "ten.b.v1" || got[0].Attempt != 1 {
		t.Fatalf("team-a's woken claim: %+v, %v", got, err)
	}
}
