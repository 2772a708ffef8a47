package engine_test

import (
	"encoding/json"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/simple-workflow/simple-workflow/internal/engine"
)

// batchRow is one batch row of the audit trail.
type batchRow struct {
	ID       int64
	Workflow string
	Type     string
	Runs     []string
	Attempts []int32
}

// batchRows returns the audit trail's batch rows naming any of ids, in id
// order.
func (b *bundle) batchRows(t *testing.T, ids []string) []batchRow {
	t.Helper()
	rows, err := b.pool.Query(b.ctx, `select id, workflow_id::text, event_type, run_ids::text[], attempts
		from workflow.workflow_event where run_ids && $1::uuid[] order by id`, ids)
	if err != nil {
		t.Fatal(err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (batchRow, error) {
		var x batchRow
		err := r.Scan(&x.ID, &x.Workflow, &x.Type, &x.Runs, &x.Attempts)
		return x, err
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// trailOf is a run's trail as "type attempt worker" lines, oldest first,
// as run_events gives it.
func (b *bundle) trailOf(t *testing.T, id string) []string {
	t.Helper()
	evs, err := b.eng.ListEvents(b.ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range evs {
		var d struct {
			Attempt    *int    `json:"attempt"`
			Worker     *string `json:"worker_id"`
			LeaseUntil *string `json:"lease_until"`
		}
		if err := json.Unmarshal(e.Data, &d); err != nil {
			t.Fatal(err)
		}
		line := string(e.Type)
		if d.Attempt != nil {
			line += fmt.Sprintf(" %d", *d.Attempt)
		}
		if d.Worker != nil {
			line += " " + *d.Worker
		}
		if e.Type == engine.EventStarted && d.LeaseUntil == nil {
			line += " (no lease end)"
		}
		out = append(out, line)
	}
	return out
}

// A claim's 'started' and a completion's 'succeeded' are one row per
// statement and namespace, and every run's trail still reads as rows of its
// own, with its own attempt, in order: by run_events, by the run_event view,
// and to a reader of its namespace alone; a second namespace's runs in the
// same statements are kept apart.
func TestBatchAuditRowsReadAsRowsPerRun(t *testing.T) {
	t.Parallel()
	b := setupRoles(t)
	// The first run of team-a retries after a millisecond.
	mine := []string{b.create(t, engine.CreateParams{Type: "batch.job.v1", Namespace: "team-a",
		RetryPolicy: &engine.RetryPolicy{BaseDelay: time.Millisecond}})}
	var theirs []string
	for range 29 {
		mine = append(mine, b.teamRun(t, "team-a", "batch.job.v1"))
	}
	for range 20 {
		theirs = append(theirs, b.teamRun(t, "team-b", "batch.job.v1"))
	}
	// One run of team-a fails once first: its second attempt is in the
	// batch rows with attempt 2.
	retried := mine[0]
	first := b.claimIn(t, "team-a", "wa", []string{"batch."}, 1)
	if len(first) != 1 || first[0].ID != retried {
		t.Fatalf("first claim %+v, want %s", first, retried)
	}
	if _, err := b.eng.FailRuns(b.ctx, "wa", []engine.Failure{{LeaseRef: first[0].Ref(), Error: "once", Retryable: true}}); err != nil {
		t.Fatal(err)
	}
	b.advanceClock(t, time.Second)

	claimedA := b.claimIn(t, "team-a", "wa", []string{"batch."}, 100)
	claimedB := b.claimIn(t, "team-b", "wb", []string{"batch."}, 100)
	if len(claimedA) != 30 || len(claimedB) != 20 {
		t.Fatalf("claimed %d and %d, want 30 and 20", len(claimedA), len(claimedB))
	}
	b.completeAll(t, "wa", claimedA)
	b.completeAll(t, "wb", claimedB)

	// The first claim, of one run, wrote the run's own row; then one row
	// per claim and completion names all 30.
	var own int
	if err := b.pool.QueryRow(b.ctx, `select count(*) from workflow.workflow_event
		where workflow_id = $1 and event_type = 'started' and run_ids is null`, retried).Scan(&own); err != nil || own != 1 {
		t.Fatalf("the claim of one run wrote %d rows of its own (%v), want 1", own, err)
	}
	rows := b.batchRows(t, mine)
	if len(rows) != 2 || rows[0].Type != "started" || rows[1].Type != "succeeded" {
		t.Fatalf("team-a's batch rows %+v, want one started and one succeeded", rows)
	}
	for _, r := range rows {
		if len(r.Runs) != 30 || !slices.IsSorted(r.Runs) || r.Workflow != r.Runs[0] {
			t.Fatalf("batch row %d names %d runs (sorted %v) under %s, want the 30 runs under the smallest",
				r.ID, len(r.Runs), slices.IsSorted(r.Runs), r.Workflow)
		}
		for i, id := range r.Runs {
			if want := int32(map[bool]int{true: 2, false: 1}[id == retried]); r.Attempts[i] != want {
				t.Fatalf("batch row %d gives run %s attempt %d, want %d", r.ID, id, r.Attempts[i], want)
			}
		}
		if slices.ContainsFunc(r.Runs, func(id string) bool { return slices.Contains(theirs, id) }) {
			t.Fatalf("batch row %d mixes team-b's runs with team-a's", r.ID)
		}
	}

	want := []string{"created", "started 1 wa", "succeeded 1 wa"}
	for _, id := range append(append([]string{}, mine[1:]...), theirs...) {
		w := want
		if slices.Contains(theirs, id) {
			w = []string{"created", "started 1 wb", "succeeded 1 wb"}
		}
		if got := b.trailOf(t, id); !slices.Equal(got, w) {
			t.Fatalf("run %s's trail %v, want %v", id, got, w)
		}
	}
	if got, w := b.trailOf(t, retried), []string{"created", "started 1 wa", "retried 1 wa", "started 2 wa", "succeeded 2 wa"}; !slices.Equal(got, w) {
		t.Fatalf("the retried run's trail %v, want %v", got, w)
	}

	// The view gives the same rows as run_events, id for id.
	for _, id := range []string{retried, mine[7], theirs[3]} {
		evs, err := b.eng.ListEvents(b.ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		rows, err := b.pool.Query(b.ctx, `select id, event_type, data::text from workflow.run_event
			where workflow_id = $1 order by id`, id)
		if err != nil {
			t.Fatal(err)
		}
		view, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (string, error) {
			var n int64
			var typ, data string
			err := r.Scan(&n, &typ, &data)
			return fmt.Sprint(n, typ, data), err
		})
		if err != nil {
			t.Fatal(err)
		}
		var fn []string
		for _, e := range evs {
			fn = append(fn, fmt.Sprint(e.ID, string(e.Type), string(e.Data)))
		}
		if !slices.Equal(view, fn) {
			t.Fatalf("run %s: the view gives %v, run_events %v", id, view, fn)
		}
	}
	var started int64
	if err := b.pool.QueryRow(b.ctx, `select coalesce(sum(events), 0) from workflow.event_counts_after(0)
		where event_type = 'started'`).Scan(&started); err != nil || started != 51 {
		t.Fatalf("event_counts_after counts %d starts (%v), want 51", started, err)
	}

	// A reader of team-a sees team-a's trails alone, through the view and
	// the table; team-b's runs stay out of sight.
	r := b.tenantLogin(t, engine.RoleReader, "team-a")
	ids := r.visibleIDs(t, b, "select distinct workflow_id::text from workflow.run_event")
	slices.Sort(ids)
	wantIDs := slices.Clone(mine)
	slices.Sort(wantIDs)
	if !slices.Equal(ids, wantIDs) {
		t.Fatalf("team-a's reader reads the trails of %d runs, want team-a's 30", len(ids))
	}
	var leaked int
	if err := r.pool.QueryRow(b.ctx, `select count(*) from workflow.workflow_event e
		where e.run_ids && $1::uuid[] or e.workflow_id = any ($1::uuid[])`, theirs).Scan(&leaked); err != nil || leaked != 0 {
		t.Fatalf("team-a's reader reads %d of team-b's event rows (%v)", leaked, err)
	}
	if evs, err := r.eng.ListEvents(b.ctx, theirs[0]); err != nil || len(evs) != 0 {
		t.Fatalf("team-a's reader reads %d events of team-b's run (%v)", len(evs), err)
	}
	// ... and its own runs' trails whole, batch rows included.
	if evs, err := r.eng.ListEvents(b.ctx, mine[3]); err != nil || len(evs) != 3 {
		t.Fatalf("team-a's reader reads %d events of its own run (%v), want 3", len(evs), err)
	}
	var through int
	if err := r.pool.QueryRow(b.ctx, "select count(*) from workflow.run_trail($1)", theirs[1]).Scan(&through); err != nil || through != 0 {
		t.Fatalf("team-a's reader reads %d rows of team-b's trail through run_trail (%v)", through, err)
	}

	// Deleting runs takes them out of the batch rows: the two smallest,
	// then the rest; the other runs' trails stay whole, and a row with no
	// run left goes.
	sorted := slices.Clone(mine)
	slices.Sort(sorted)
	if _, err := b.pool.Exec(b.ctx, "delete from workflow.workflow_run where id = any ($1::uuid[])", sorted[:2]); err != nil {
		t.Fatal(err)
	}
	var whole int
	for _, r := range b.batchRows(t, sorted[2:]) {
		whole++
		// It stays where it was, under the smallest id it was written with
		// (still at most every id it names).
		if len(r.Runs) != 28 || len(r.Attempts) != 28 || r.Workflow != sorted[0] || !slices.IsSorted(r.Runs) {
			t.Fatalf("after deleting two runs a batch row is %+v, want 28 runs under %s", r, sorted[0])
		}
	}
	if whole != 2 {
		t.Fatalf("%d batch rows of 28 runs, want 2", whole)
	}
	if got := b.batchRows(t, sorted[:2]); len(got) != 0 {
		t.Fatalf("deleted runs are still named by %d batch rows", len(got))
	}
	if got := b.trailOf(t, sorted[5]); !slices.Equal(got, want) && !slices.Equal(got, []string{"created", "started 1 wa", "retried 1 wa", "started 2 wa", "succeeded 2 wa"}) {
		t.Fatalf("a kept run's trail after its neighbours were deleted: %v", got)
	}
	if _, err := b.pool.Exec(b.ctx, "delete from workflow.workflow_run where id = any ($1::uuid[])", sorted[2:]); err != nil {
		t.Fatal(err)
	}
	if got := b.batchRows(t, mine); len(got) != 0 {
		t.Fatalf("%d batch rows are left after all their runs were deleted", len(got))
	}
	for _, id := range theirs {
		if got := b.trailOf(t, id); !slices.Equal(got, []string{"created", "started 1 wb", "succeeded 1 wb"}) {
			t.Fatalf("bystander %s's trail after team-a's runs were deleted: %v", id, got)
		}
	}
}
