package engine_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/simple-workflow/simple-workflow/internal/engine"
)

// The batch functions that end leases (complete_runs, fail_runs,
// release_runs) let the runs they end free their keys' slots in one
// statement, without a call of the freed-slot trigger per run (a call per
// run cost a completion of 500 runs of a capped type 1.39x the same runs of
// a type without limits); the capped key's parked run still goes, and a
// plain-SQL status change still calls the trigger for every keyed run.
// Counted by the server's own count of function calls in the transaction.
func TestBatchFunctionsFreeTheirRunsSlotsWithoutTheTrigger(t *testing.T) {
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
		if !b.onLimit(t, parked) {
			t.Fatalf("%s: the capped key's second run is not parked", e.name)
		}
		ids, tokens := make([]string, len(leased)), make([]int64, len(leased))
		for j, r := range leased {
			ids[j], tokens[j] = r.ID, r.LeaseToken
		}
		if n := calls(e.stmt, e.args(ids, tokens)...); n != 0 {
			t.Errorf("%s ended 1 run of a capped type and 3 keyed runs of another: the trigger ran %d times, want 0", e.name, n)
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

// Another team registering a thousand capped types changes nothing for a
// bystander team: its capped key still lets its parked run go when its
// leased run completes (the batch reads the registry for its own types
// only).
func TestFreedSlotsOfABystanderBesideThousandsOfCappedTypes(t *testing.T) {
	t.Parallel()
	b := setup(t)
	if _, err := b.pool.Exec(b.ctx, `select workflow.put_registry('flow.crowd' || i || '.v1', 'go', true, '',
		'team-crowd', 'crowd', null, null, 1) from generate_series(1, 1001) i`); err != nil {
		t.Fatal(err)
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
	b.completeAll(t, "w", leased)
	b.wantLetGo(t, parked, "flow.bystander.", "the bystander's completion")
}

// A run that a batch's writes end in turn, from a trigger, frees its slot
// too: a parent failed by fail_runs cancels its leased child, whose key is
// capped at one, and the run parked on that key goes (the batch frees the
// slots of the runs it ended itself; the trigger serves the rest).
func TestSlotOfAChildCancelledByItsParentsFailureIsFreed(t *testing.T) {
	t.Parallel()
	b := setup(t)
	const kid = "flow.cascade.kid.v1"
	b.registerFlow(t, kid, engine.FlowLimits{MaxLeasedPerKey: i32(1)})
	b.create(t, engine.CreateParams{Type: "flow.cascade.parent.v1"})
	parent := b.claimOne(t, "w", "flow.cascade.parent.")
	child, err := b.eng.StartChild(b.ctx, engine.ChildParams{LeaseRef: parent.Ref(), WorkerID: "w", Step: "kid", Type: kid})
	if err != nil || child.Status != engine.WriteStarted {
		t.Fatalf("start child: %+v, %v", child, err)
	}
	if _, err := b.pool.Exec(b.ctx, `update workflow.workflow_run set concurrency_key = 'acme' where id = $1`, child.ChildID); err != nil {
		t.Fatal(err)
	}
	waiting := b.createKeyed(t, kid, "acme", 1)[0]
	leased := b.claim(t, "w", []string{"flow.cascade.kid."}, 10)
	if len(leased) != 1 || leased[0].ID != child.ChildID {
		t.Fatalf("claimed %v, want the child alone", leased)
	}
	if !b.onLimit(t, waiting) {
		t.Fatal("the key's second run is not parked")
	}
	if _, err := b.pool.Exec(b.ctx, `select * from workflow.fail_runs('w', array[$1]::uuid[], array[$2]::bigint[],
		array['given up'], array[false])`, parent.ID, parent.LeaseToken); err != nil {
		t.Fatal(err)
	}
	if st := b.get(t, child.ChildID).Status; st != engine.StatusCancelled {
		t.Fatalf("the child is %s, want cancelled with its parent", st)
	}
	b.wantLetGo(t, waiting, "flow.cascade.kid.", "the cancelled child's end")
}

// A batch that ends several runs of one key lets as many of its parked runs
// go, the oldest first, and no more: a key capped at two with two leased
// runs and three parked ones has two let go when both end together, by a
// completion, a failure to be retried or a release; one when the batch
// names one of them under a token it no longer holds.
func TestBatchFreesAsManySlotsAsItsRunsOfAKeyHeld(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ends := map[string]string{
		"complete": `select count(*) from workflow.complete_runs('w', $1::uuid[], $2::bigint[], array['{}', '{}']::jsonb[])`,
		"retry": `select count(*) from workflow.fail_runs('w', $1::uuid[], $2::bigint[], array['boom', 'boom'],
			array[true, true])`,
		"release": `select count(*) from workflow.release_runs('w', $1::uuid[], $2::bigint[])`,
		"one lease lost": `select count(*) from workflow.complete_runs('w', $1::uuid[],
			array[($2::bigint[])[1], ($2::bigint[])[2] + 1000000], array['{}', '{}']::jsonb[])`,
	}
	for name, stmt := range ends {
		want := 2
		if name == "one lease lost" {
			want = 1
		}
		prefix := "flow.slots." + strings.ReplaceAll(name, " ", "_") + "."
		typ := prefix + "v1"
		b.registerFlow(t, typ, engine.FlowLimits{MaxLeasedPerKey: i32(2)})
		var ids []string // one at a time, oldest first
		for range 5 {
			ids = append(ids, b.createKeyed(t, typ, "acme", 1)[0])
		}
		leased := b.claim(t, "w", []string{prefix}, 10)
		if len(leased) != 2 || !(leased[0].ID == ids[0] && leased[1].ID == ids[1] || leased[0].ID == ids[1] && leased[1].ID == ids[0]) {
			t.Fatalf("%s: claimed %v, want the key's two oldest runs %v", name, leased, ids[:2])
		}
		// A claim parks the runs of a full key it meets; the next one, the rest.
		if more := b.claim(t, "w", []string{prefix}, 10); len(more) != 0 {
			t.Fatalf("%s: claimed %v of a full key", name, more)
		}
		for i, id := range ids[2:] {
			if !b.onLimit(t, id) {
				t.Fatalf("%s: run %d of the key is not parked after two claims", name, i+3)
			}
		}
		var ended int
		if err := b.pool.QueryRow(b.ctx, stmt, []string{leased[0].ID, leased[1].ID},
			[]int64{leased[0].LeaseToken, leased[1].LeaseToken}).Scan(&ended); err != nil || ended != want {
			t.Fatalf("%s: ended %d runs, %v; want %d", name, ended, err, want)
		}
		for i, id := range ids[2:] {
			if parked := b.onLimit(t, id); parked != (i >= want) {
				t.Errorf("%s: run %d of the key: parked %v; want the %d oldest let go and the others parked",
					name, i+3, parked, want)
			}
		}
	}
}

// A batch's freed slots stay within its runs' type and key, whatever the
// keys hold: one team's completion of runs with hostile keys (the longest
// allowed, quotes, an array literal, SQL, emoji) lets go exactly its own
// parked run of each key, and another team's runs parked on the very same
// key strings stay parked, their leased runs untouched.
func TestBatchFreedSlotsStayWithTheirTypeBesideAnotherTeam(t *testing.T) {
	t.Parallel()
	b := setup(t)
	const mine, theirs = "flow.freed.mine.v1", "flow.freed.theirs.v1"
	b.registerFlow(t, mine, engine.FlowLimits{MaxLeasedPerKey: i32(1)})
	b.registerFlow(t, theirs, engine.FlowLimits{MaxLeasedPerKey: i32(1)})
	keys := []string{strings.Repeat("k", 255), `a"b`, `{x,y}`, `NULL`, `'); drop table workflow.workflow_run; --`, "ключ-😀"}
	parked := map[string][]string{} // type -> its parked run per key
	for _, typ := range []string{mine, theirs} {
		for _, k := range keys {
			ids := b.createKeyed(t, typ, k, 1)
			ids = append(ids, b.createKeyed(t, typ, k, 1)...) // one at a time: the second is the younger
			parked[typ] = append(parked[typ], ids[1])
		}
	}
	leasedMine := b.claim(t, "w", []string{"flow.freed.mine."}, 100)
	leasedTheirs := b.claim(t, "w", []string{"flow.freed.theirs."}, 100)
	if len(leasedMine) != len(keys) || len(leasedTheirs) != len(keys) {
		t.Fatalf("claimed %d and %d runs, want one per key of each type (%d)", len(leasedMine), len(leasedTheirs), len(keys))
	}
	for _, typ := range []string{mine, theirs} {
		for i, id := range parked[typ] {
			if !b.onLimit(t, id) {
				t.Fatalf("%s key %d: the second run is not parked", typ, i)
			}
		}
	}
	b.completeAll(t, "w", leasedMine)
	for i, id := range parked[mine] {
		if w := b.get(t, id).Wait; w != nil {
			t.Errorf("my key %d: the freed slot did not let my parked run go: %+v", i, w)
		}
	}
	for i, id := range parked[theirs] {
		if !b.onLimit(t, id) {
			t.Errorf("their key %d: their parked run was let go by my completions", i)
		}
	}
	for _, r := range leasedTheirs {
		if st := b.get(t, r.ID).Status; st != engine.StatusLeased {
			t.Errorf("their run %s is %s, want still leased", r.ID, st)
		}
	}
}

// onLimit reports whether a run is parked on its type's or key's limit.
func (b *bundle) onLimit(t *testing.T, id string) bool {
	t.Helper()
	w := b.get(t, id).Wait
	return w != nil && w.Kind == "limit"
}

// wantLetGo fails the test unless the run parked on its key's limit was let
// go by what (a run's end that freed a slot): no longer waiting, and the
// next claim of prefix takes it alone.
func (b *bundle) wantLetGo(t *testing.T, id, prefix, what string) {
	t.Helper()
	if w := b.get(t, id).Wait; w != nil {
		t.Fatalf("%s did not let the parked run go: %+v", what, w)
	}
	if got := b.claim(t, "w", []string{prefix}, 10); len(got) != 1 || got[0].ID != id {
		t.Fatalf("claimed %v after %s, want the run let go alone", got, what)
	}
}
