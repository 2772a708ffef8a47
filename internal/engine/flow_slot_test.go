package engine_test

import (
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/simple-workflow/simple-workflow/internal/engine"
)

// The batch functions that end leases (complete_runs, fail_runs,
// release_runs) call the freed-slot trigger only for runs of types with a
// cap per key; a keyed run of another type ends without the call (it cost
// a completion of 500 such runs 1.40x the same runs without keys). The
// trigger still lets the capped key's parked run go, and a plain-SQL
// status change still calls it for every keyed run. Counted by the
// server's own count of function calls in the transaction.
func TestFreedSlotTriggerRunsOnlyForTypesWithACapPerKey(t *testing.T) {
	t.Parallel()
	b := setup(t)
	const capped, uncapped = "flow.slotnote.capped.v1", "flow.slotnote.free.v1"
	b.registerFlow(t, capped, engine.FlowLimits{MaxLeasedPerKey: i32(1)})
	b.registerFlow(t, uncapped, engine.FlowLimits{})

	// calls runs stmt in a transaction of its own with function calls
	// counted, and returns how many times the trigger function ran. (The
	// server's count is of calls not yet reported, which may include the
	// connection's earlier transactions: the difference is taken.)
	calls := func(stmt string, args ...any) int {
		t.Helper()
		const count = `select coalesce(sum(calls), 0) from pg_stat_xact_user_functions
			where schemaname = 'workflow' and funcname = 'on_flow_slot_freed'`
		var before, after int
		if err := pgx.BeginFunc(b.ctx, b.pool, func(tx pgx.Tx) error {
			if _, err := tx.Exec(b.ctx, `set local track_functions = 'all'`); err != nil {
				return err
			}
			if err := tx.QueryRow(b.ctx, count).Scan(&before); err != nil {
				return err
			}
			if _, err := tx.Exec(b.ctx, stmt, args...); err != nil {
				return err
			}
			return tx.QueryRow(b.ctx, count).Scan(&after)
		}); err != nil {
			t.Fatalf("%s: %v", stmt, err)
		}
		return after - before
	}

	ends := []struct {
		name, stmt string
		args       func(ids []string, tokens []int64) []any
	}{
		{"complete_runs", `select * from workflow.complete_runs('w', $1::uuid[], $2::bigint[], $3::jsonb[])`,
			func(ids []string, tokens []int64) []any {
				rs := make([]string, len(ids))
				for i := range rs {
					rs[i] = `{}`
				}
				return []any{ids, tokens, rs}
			}},
		{"fail_runs", `select * from workflow.fail_runs('w', $1::uuid[], $2::bigint[], $3::text[], $4::boolean[])`,
			func(ids []string, tokens []int64) []any {
				errs, retry := make([]string, len(ids)), make([]bool, len(ids))
				for i := range errs {
					errs[i] = "boom"
				}
				return []any{ids, tokens, errs, retry}
			}},
		{"release_runs", `select * from workflow.release_runs('w', $1::uuid[], $2::bigint[])`,
			func(ids []string, tokens []int64) []any { return []any{ids, tokens} }},
	}
	for i, e := range ends {
		key := fmt.Sprintf("k%d", i)
		cappedIDs := b.createKeyed(t, capped, key, 2) // one leased, one parked
		b.createKeyed(t, uncapped, key, 3)
		leased := b.claim(t, "w", []string{"flow.slotnote."}, 10)
		if len(leased) != 4 {
			t.Fatalf("%s: claimed %d runs, want 4 (one of the capped key, three of the other type)", e.name, len(leased))
		}
		parked := cappedIDs[1]
		if leased[0].ID == parked || leased[1].ID == parked || leased[2].ID == parked || leased[3].ID == parked {
			parked = cappedIDs[0]
		}
		if w := b.get(t, parked).Wait; w == nil || w.Kind != "limit" {
			t.Fatalf("%s: the capped key's second run is not parked: %+v", e.name, w)
		}
		ids, tokens := make([]string, len(leased)), make([]int64, len(leased))
		for j, r := range leased {
			ids[j], tokens[j] = r.ID, r.LeaseToken
		}
		if n := calls(e.stmt, e.args(ids, tokens)...); n != 1 {
			t.Errorf("%s ended 1 run of a capped type and 3 keyed runs of another: the trigger ran %d times, want 1", e.name, n)
		}
		if w := b.get(t, parked).Wait; w != nil {
			t.Errorf("%s: the freed slot did not let the parked run go: %+v", e.name, w)
		}
		// Leave nothing runnable for the next outcome's claim.
		if _, err := b.pool.Exec(b.ctx, `update workflow.workflow_run set status = 'cancelled'
			where type in ($1, $2) and status in ('pending', 'leased')`, capped, uncapped); err != nil {
			t.Fatal(err)
		}
	}

	// Plain SQL knows nothing of the caps: the trigger runs for each keyed
	// run that stops being leased.
	b.createKeyed(t, uncapped, "plain", 2)
	if got := b.claim(t, "w", []string{"flow.slotnote."}, 10); len(got) != 2 {
		t.Fatalf("claimed %d runs, want 2", len(got))
	}
	if n := calls(`update workflow.workflow_run set status = 'cancelled' where type = $1 and status = 'leased'`, uncapped); n != 2 {
		t.Errorf("a plain-SQL cancel of 2 leased keyed runs called the trigger %d times, want 2", n)
	}
}

// Another team registering more capped types than the list holds (1,001)
// leaves the setting unset: every keyed run's end then calls the trigger,
// and a bystander team's capped key still lets its parked run go when its
// leased run completes. A type name cannot break the list: the registry
// refuses a name with a comma.
func TestFreedSlotsOfABystanderBesideThousandsOfCappedTypes(t *testing.T) {
	t.Parallel()
	b := setup(t)
	if _, err := b.pool.Exec(b.ctx, `select workflow.put_registry('flow.crowd' || i || '.v1', 'go', true, '',
		'team-crowd', 'crowd', null, null, 1) from generate_series(1, 1001) i`); err != nil {
		t.Fatal(err)
	}
	if _, err := b.pool.Exec(b.ctx, `select workflow.put_registry('flow.comma,x.v1', 'go', true, '',
		'team-crowd', 'crowd', null, null, 1)`); err == nil {
		t.Fatal("a type name with a comma was registered")
	}
	const bystander = "flow.bystander.v1"
	b.registerFlow(t, bystander, engine.FlowLimits{MaxLeasedPerKey: i32(1)})
	ids := b.createKeyed(t, bystander, "acme", 2)
	leased := b.claim(t, "w", []string{"flow.bystander."}, 10)
	if len(leased) != 1 {
		t.Fatalf("claimed %d runs of a key capped at 1, want 1", len(leased))
	}
	parked := ids[0]
	if leased[0].ID == parked {
		parked = ids[1]
	}
	var setting string
	if err := pgx.BeginFunc(b.ctx, b.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(b.ctx, `select workflow.note_capped_types()`); err != nil {
			return err
		}
		return tx.QueryRow(b.ctx, `select coalesce(current_setting('workflow.capped_types', true), '')`).Scan(&setting)
	}); err != nil {
		t.Fatal(err)
	}
	if setting != "" {
		t.Fatalf("with 1,002 capped types the setting holds %d characters, want it unset", len(setting))
	}
	b.completeAll(t, "w", leased)
	if w := b.get(t, parked).Wait; w != nil {
		t.Fatalf("the bystander's freed slot did not let its parked run go: %+v", w)
	}
	if got := b.claim(t, "w", []string{"flow.bystander."}, 10); len(got) != 1 || got[0].ID != parked {
		t.Fatalf("claimed %v, want the bystander's run let go", got)
	}
}
