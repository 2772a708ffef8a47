package engine_test

import (
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/simple-workflow/simple-workflow/internal/engine"
)

// idAt is SQL for a fresh run id carrying the creation time $1 (as
// new_run_id would have drawn it then): the first 48 bits of
// workflow.run_id_at, the version, then random bits.
const idAt = `(substr(workflow.run_id_at($1)::text, 1, 14) || '7' || substr(gen_random_uuid()::text, 16))::uuid`

// insertAt records n runs of a type as if created at the given time, and
// returns their ids.
func (b *bundle) insertAt(t *testing.T, typ string, at time.Time, n int) []string {
	t.Helper()
	var ids []string
	for range n {
		var id string
		if err := b.pool.QueryRow(b.ctx, `insert into workflow.workflow_run (id, type) values (`+idAt+`, $2)
			returning id::text`, at, typ).Scan(&id); err != nil {
			t.Fatalf("insert a run created at %s: %v", at, err)
		}
		ids = append(ids, id)
	}
	return ids
}

// cancelAll finishes runs (cancelled: a trail of two events each).
func (b *bundle) cancelAll(t *testing.T, ids []string) {
	t.Helper()
	for _, id := range ids {
		if _, err := b.pool.Exec(b.ctx, "select workflow.cancel_run($1)", id); err != nil {
			t.Fatalf("cancel %s: %v", id, err)
		}
	}
}

// eventsIn counts the events of runs stored in one table of the audit
// trail (a partition, or the default partition).
func (b *bundle) eventsIn(t *testing.T, table string, ids []string) int {
	t.Helper()
	var n int
	if err := b.pool.QueryRow(b.ctx, fmt.Sprintf(`select count(*) from workflow.%s where workflow_id = any ($1::uuid[])`,
		pgx.Identifier{table}.Sanitize()), ids).Scan(&n); err != nil {
		t.Fatalf("count events in %s: %v", table, err)
	}
	return n
}

// partitionNames lists the audit trail's time partitions.
func (b *bundle) partitionNames(t *testing.T) []string {
	t.Helper()
	parts, err := b.eng.HistoryPartitions(b.ctx)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, p := range parts {
		names = append(names, p.Name)
	}
	return names
}

// partitionFor returns the name of the partition holding a run's trail.
func (b *bundle) partitionFor(t *testing.T, id string) string {
	t.Helper()
	var name string
	if err := b.pool.QueryRow(b.ctx, `select distinct tableoid::regclass::text from workflow.workflow_event
		where workflow_id = $1`, id).Scan(&name); err != nil {
		t.Fatalf("the partition of %s: %v", id, err)
	}
	return strings.TrimPrefix(name, "workflow.")
}

// The manager prepares the span in progress and the ones after it; a new
// run's trail goes to its span's partition, a run whose id a producer chose
// to the default partition, and preparing again makes nothing.
func TestHistoryPartitionsArePreparedAhead(t *testing.T) {
	t.Parallel()
	b := setup(t)
	if _, err := b.pool.Exec(b.ctx, "update workflow.workflow_settings set history_partition = '1 hour'"); err != nil {
		t.Fatal(err)
	}
	n, err := b.eng.PrepareHistoryPartitions(b.ctx, 2)
	if err != nil || n != 3 {
		t.Fatalf("prepare made %d partitions (%v), want 3: this hour and two ahead", n, err)
	}
	if n, err := b.eng.PrepareHistoryPartitions(b.ctx, 2); err != nil || n != 0 {
		t.Fatalf("preparing again made %d (%v), want 0", n, err)
	}
	parts, err := b.eng.HistoryPartitions(b.ctx)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	if len(parts) != 3 || parts[0].From.After(now) || !parts[0].To.After(now) ||
		parts[0].To.Sub(parts[0].From) != time.Hour || !parts[1].From.Equal(parts[0].To) || !parts[2].From.Equal(parts[1].To) {
		t.Fatalf("partitions %+v: want three consecutive hours from the one in progress", parts)
	}
	id := b.create(t, engine.CreateParams{Type: "hist.new.v1"})
	if got := b.partitionFor(t, id); got != parts[0].Name {
		t.Fatalf("a new run's trail is in %s, want %s", got, parts[0].Name)
	}
	var own string
	if err := b.pool.QueryRow(b.ctx, `insert into workflow.workflow_run (id, type)
		values ('ffffffff-ffff-4fff-bfff-ffffffffffff', 'hist.own.v1') returning id::text`).Scan(&own); err != nil {
		t.Fatal(err)
	}
	if got := b.partitionFor(t, own); got != "workflow_event_default" {
		t.Fatalf("the trail of a run whose id its producer chose is in %s, want the default partition", got)
	}
	// A span whose runs already wrote into the default partition is left
	// there: its partition cannot be made.
	past := now.Add(-5 * time.Hour).Truncate(time.Hour)
	b.insertAt(t, "hist.past.v1", past.Add(time.Minute), 1)
	var made bool
	if err := b.pool.QueryRow(b.ctx, "select workflow.create_history_partition($1, $2)",
		past, past.Add(time.Hour)).Scan(&made); err != nil || made {
		t.Fatalf("a partition over trails in the default partition: made=%v err=%v, want false", made, err)
	}
	if err := b.pool.QueryRow(b.ctx, "select workflow.create_history_partition($1, $2)",
		parts[0].From.Add(time.Minute), parts[0].To).Scan(&made); err != nil || made {
		t.Fatalf("an overlapping partition: made=%v err=%v, want false", made, err)
	}
	for _, bad := range []string{
		"select workflow.create_history_partition(now(), now())",
		"select workflow.create_history_partition(now(), 'infinity')",
		"select workflow.prepare_history_partitions(-1)",
		"select workflow.prepare_history_partitions(101)",
		"select workflow.drop_history_partitions('-1 day')",
		"update workflow.workflow_settings set history_partition = '10 seconds'",
	} {
		if _, err := b.pool.Exec(b.ctx, bad); err == nil {
			t.Errorf("%s: accepted", bad)
		}
	}
}

// Retention deletes finished runs and leaves their trails to their
// partition, dropped whole once no run of its span is left; the trail of a
// run that outlives its span by a retention and a span moves to the
// default partition, whole, and its partition goes; another team's runs of
// a later span, still in the inbox, keep every event; a trail in the
// default partition leaves row by row with its run; an explicit DELETE
// takes a trail at once wherever it is.
func TestRetentionDropsHistoryPartitionsWhole(t *testing.T) {
	t.Parallel()
	b := setup(t)
	if _, err := b.pool.Exec(b.ctx, "update workflow.workflow_settings set history_partition = '1 hour'"); err != nil {
		t.Fatal(err)
	}
	hour := time.Now().Truncate(time.Hour)
	old, straggling, recent := hour.Add(-6*time.Hour), hour.Add(-4*time.Hour), hour.Add(-time.Hour)
	for _, from := range []time.Time{old, straggling, recent} {
		var made bool
		if err := b.pool.QueryRow(b.ctx, "select workflow.create_history_partition($1, $2)",
			from, from.Add(time.Hour)).Scan(&made); err != nil || !made {
			t.Fatalf("partition at %s: made=%v err=%v", from, made, err)
		}
	}
	names := b.partitionNames(t)
	if len(names) != 3 {
		t.Fatalf("partitions %v, want 3", names)
	}
	oldRuns := b.insertAt(t, "teama.old.v1", old.Add(time.Minute), 20)
	b.cancelAll(t, oldRuns)
	longRun := b.insertAt(t, "teama.long.v1", straggling.Add(time.Minute), 1)
	doneRuns := b.insertAt(t, "teama.done.v1", straggling.Add(2*time.Minute), 5)
	// One claim starts the long run and the runs done later: their
	// 'started' is one batch row, under the long run's id (the smallest).
	if got := b.claim(t, "teama-worker", []string{"teama."}, 10); len(got) != 6 {
		t.Fatalf("claimed %d of the straggling span's runs, want 6", len(got))
	}
	var batchOf int
	if err := b.pool.QueryRow(b.ctx, `select cardinality(run_ids) from workflow.workflow_event
		where workflow_id = $1 and run_ids is not null`, longRun[0]).Scan(&batchOf); err != nil || batchOf != 6 {
		t.Fatalf("the claim's batch row names %d runs (%v), want 6", batchOf, err)
	}
	b.cancelAll(t, doneRuns)
	bystanders := b.insertAt(t, "teamb.work.v1", recent.Add(time.Minute), 10) // still to run
	if got := b.claim(t, "teamb-worker", []string{"teamb."}, 5); len(got) != 5 {
		t.Fatalf("claimed %d of the bystanders, want 5", len(got))
	}
	var ownID string
	if err := b.pool.QueryRow(b.ctx, `insert into workflow.workflow_run (id, type)
		values (gen_random_uuid(), 'teama.own.v1') returning id::text`).Scan(&ownID); err != nil {
		t.Fatal(err)
	}
	b.cancelAll(t, []string{ownID})
	if got := b.eventsIn(t, names[0], oldRuns); got != 40 {
		t.Fatalf("%d events of the old runs in %s, want 40", got, names[0])
	}
	if got := b.eventsIn(t, "workflow_event_default", []string{ownID}); got != 2 {
		t.Fatalf("%d events of the run with its own id in the default partition, want 2", got)
	}
	longTrail := b.eventTypes(t, longRun[0])
	bystanderTrails := map[string][]engine.EventType{}
	for _, id := range bystanders {
		bystanderTrails[id] = b.eventTypes(t, id)
	}

	// A day later by the database's clock, retention (30 minutes) deletes
	// every finished run; the bystanders are still to run or running.
	b.advanceClock(t, 24*time.Hour)
	deleted, err := b.eng.DeleteFinishedRuns(b.ctx, 30*time.Minute, 1000)
	if err != nil || deleted != 26 {
		t.Fatalf("retention deleted %d runs (%v), want 26", deleted, err)
	}
	if got := b.eventsIn(t, names[0], oldRuns); got != 40 {
		t.Fatalf("retention deleted %d of the old runs' 40 events row by row, want none (their partition goes whole)", 40-got)
	}
	if evs, err := b.eng.ListEvents(b.ctx, oldRuns[0]); err != nil || len(evs) != 0 {
		t.Fatalf("a deleted run's trail is still read: %d events (%v)", len(evs), err)
	}
	if got := b.eventsIn(t, "workflow_event_default", []string{ownID}); got != 0 {
		t.Fatalf("%d events of the deleted run with its own id are left in the default partition", got)
	}

	// The old span has no run left: dropped. The straggling span ended a
	// retention and a span ago (4h > 30m + 1h): dropped, its long run's
	// trail moved. The recent span (its bystanders still there, ended an
	// hour ago) stays.
	dropped, _, err := b.eng.DropHistoryPartitions(b.ctx, 30*time.Minute, 10)
	if err != nil || dropped != 2 {
		t.Fatalf("dropped %d partitions (%v), want 2", dropped, err)
	}
	if got := b.partitionNames(t); len(got) != 1 || got[0] != names[2] {
		t.Fatalf("partitions left %v, want [%s]", got, names[2])
	}
	if got := b.eventTypes(t, longRun[0]); fmt.Sprint(got) != fmt.Sprint(longTrail) {
		t.Fatalf("the long run's trail after its partition went: %v, want %v", got, longTrail)
	}
	if got := b.partitionFor(t, longRun[0]); got != "workflow_event_default" {
		t.Fatalf("the long run's trail is in %s, want the default partition", got)
	}
	for id, want := range bystanderTrails {
		if got := b.eventTypes(t, id); fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("bystander %s's trail changed: %v, want %v", id, got, want)
		}
		if got := b.partitionFor(t, id); got != names[2] {
			t.Fatalf("bystander %s's trail is in %s, want %s", id, got, names[2])
		}
	}
	var left int
	if err := b.pool.QueryRow(b.ctx, "select count(*) from workflow.workflow_event where workflow_id = any ($1::uuid[])",
		append(append([]string{}, oldRuns...), doneRuns...)).Scan(&left); err != nil || left != 0 {
		t.Fatalf("%d events of deleted runs are left (%v)", left, err)
	}
	// Nothing left to drop; the long run, when it goes, takes its trail.
	if dropped, _, err := b.eng.DropHistoryPartitions(b.ctx, 30*time.Minute, 10); err != nil || dropped != 0 {
		t.Fatalf("dropped %d more (%v), want 0", dropped, err)
	}
	b.cancelAll(t, longRun)
	b.advanceClock(t, time.Hour)
	if _, err := b.eng.DeleteFinishedRuns(b.ctx, 30*time.Minute, 1000); err != nil {
		t.Fatal(err)
	}
	if got := b.eventsIn(t, "workflow_event_default", longRun); got != 0 {
		t.Fatalf("%d events of the long run are left after it was deleted", got)
	}
	// An explicit DELETE takes the trail at once, from a time partition too.
	if _, err := b.pool.Exec(b.ctx, "delete from workflow.workflow_run where id = $1", bystanders[9]); err != nil {
		t.Fatal(err)
	}
	if got := b.eventsIn(t, names[2], bystanders[9:]); got != 0 {
		t.Fatalf("%d events of an explicitly deleted run are left", got)
	}
}

// Dropping a partition waits at most its lock timeout for transitions in
// flight and leaves the partition for the next call; a run a producer
// recorded in a dropped span's range after the check keeps its trail.
func TestDroppingHistoryNeverHoldsUpTransitions(t *testing.T) {
	t.Parallel()
	b := setup(t)
	if _, err := b.pool.Exec(b.ctx, "update workflow.workflow_settings set history_partition = '1 hour'"); err != nil {
		t.Fatal(err)
	}
	old := time.Now().Truncate(time.Hour).Add(-3 * time.Hour)
	if _, err := b.pool.Exec(b.ctx, "select workflow.create_history_partition($1, $2)", old, old.Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	tx, err := b.pool.Begin(b.ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(b.ctx) }()
	if _, err := tx.Exec(b.ctx, "insert into workflow.workflow_run (type) values ('hist.inflight.v1')"); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	dropped, busy, err := b.eng.DropHistoryPartitions(b.ctx, 0, 10)
	if err != nil || dropped != 0 || !busy {
		t.Fatalf("dropped %d, busy %v (%v) while a transition held the trail, want 0 and busy", dropped, busy, err)
	}
	if took := time.Since(start); took > 2*time.Second {
		t.Fatalf("the drop waited %s for the transition in flight, want about its 200 ms lock timeout", took)
	}
	if err := tx.Commit(b.ctx); err != nil {
		t.Fatal(err)
	}
	// The span's range gets a run after all (a producer's own id): its
	// partition now has a run left and stays.
	late := b.insertAt(t, "hist.late.v1", old.Add(time.Minute), 1)
	if dropped, _, err := b.eng.DropHistoryPartitions(b.ctx, 24*time.Hour, 10); err != nil || dropped != 0 {
		t.Fatalf("dropped %d (%v) with a run of the span left, want 0", dropped, err)
	}
	if got := b.eventTypes(t, late[0]); len(got) != 1 || got[0] != engine.EventCreated {
		t.Fatalf("the late run's trail: %v", got)
	}
	if _, err := b.pool.Exec(b.ctx, "delete from workflow.workflow_run where id = $1", late[0]); err != nil {
		t.Fatal(err)
	}
	if dropped, _, err := b.eng.DropHistoryPartitions(b.ctx, 24*time.Hour, 10); err != nil || dropped != 1 {
		t.Fatalf("dropped %d (%v) once the span's runs were gone, want 1", dropped, err)
	}
}

// A database of version 3 upgrades with its audit trail in place: the
// table it had becomes the default partition (nothing copied), every trail
// reads as before, new events number on from the last, new runs' trails go
// to the prepared partitions, and retention takes the old trails with their
// runs.
func TestUpgradeKeepsTheAuditTrailInPlace(t *testing.T) {
	t.Parallel()
	b := setup(t)
	installRelease(t, b, 3, "2530dd25abb31301a6127eacaeebcb5a3684617b")
	var oldRuns []string
	for i := range 30 {
		var id string
		q := "insert into workflow.workflow_run (type) values ('legacy.work.v1') returning id::text"
		if i%10 == 0 { // a producer's own ids too
			q = "insert into workflow.workflow_run (id, type) values (gen_random_uuid(), 'legacy.work.v1') returning id::text"
		}
		if err := b.pool.QueryRow(b.ctx, q).Scan(&id); err != nil {
			t.Fatal(err)
		}
		oldRuns = append(oldRuns, id)
	}
	b.cancelAll(t, oldRuns[:20])
	trails := map[string][]engine.EventType{}
	for _, id := range oldRuns {
		trails[id] = b.eventTypes(t, id)
	}
	var lastID int64
	if err := b.pool.QueryRow(b.ctx, "select max(id) from workflow.workflow_event").Scan(&lastID); err != nil {
		t.Fatal(err)
	}

	// Version 4 first; later releases' migrations follow it.
	if applied, err := engine.Migrate(b.ctx, b.pool); err != nil || len(applied) == 0 || applied[0] != 4 {
		t.Fatalf("migrate: applied %v, %v; want version 4 first", applied, err)
	}
	for id, want := range trails {
		if got := b.eventTypes(t, id); fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("run %s's trail after the upgrade: %v, want %v", id, got, want)
		}
	}
	if got := b.eventsIn(t, "workflow_event_default", oldRuns); got != 50 {
		t.Fatalf("%d of the 50 old events are in the default partition", got)
	}
	// The span in progress already wrote into the default partition (the
	// old runs were created in it): its trails stay there, and the next
	// span gets the first partition.
	n, err := b.eng.PrepareHistoryPartitions(b.ctx, 1)
	parts, _ := b.eng.HistoryPartitions(b.ctx)
	if err != nil || n != 1 || len(parts) != 1 || parts[0].From.After(time.Now().Add(24*time.Hour)) {
		t.Fatalf("prepare made %d (%v): %+v, want the next day's partition only", n, err, parts)
	}
	id := b.create(t, engine.CreateParams{Type: "legacy.new.v1"})
	if got := b.partitionFor(t, id); got != "workflow_event_default" {
		t.Fatalf("a run of the span in progress has its trail in %s, want the default partition", got)
	}
	next := b.insertAt(t, "legacy.next.v1", parts[0].From.Add(time.Second), 1)
	if got := b.partitionFor(t, next[0]); got != parts[0].Name {
		t.Fatalf("a run of the next span has its trail in %s, want %s", got, parts[0].Name)
	}
	var newID int64
	if err := b.pool.QueryRow(b.ctx, "select min(id) from workflow.workflow_event where workflow_id = $1", id).Scan(&newID); err != nil {
		t.Fatal(err)
	}
	if newID <= lastID {
		t.Fatalf("the first event after the upgrade is numbered %d, the last before it was %d", newID, lastID)
	}
	b.advanceClock(t, 2*time.Hour)
	if n, err := b.eng.DeleteFinishedRuns(b.ctx, time.Hour, 1000); err != nil || n != 20 {
		t.Fatalf("retention deleted %d (%v), want the 20 finished old runs", n, err)
	}
	if got := b.eventsIn(t, "workflow_event_default", oldRuns); got != 10 {
		t.Fatalf("%d old events left, want the 10 of the old runs still pending", got)
	}
}

// Only the schema's owner keeps history: no worker, producer or reader may
// prepare, drop or empty it, nor read another team's trail from a
// partition directly, and another team's runs are untouched by the
// attempts.
func TestOnlyTheOwnerKeepsHistory(t *testing.T) {
	t.Parallel()
	b := setupRoles(t)
	if _, err := b.eng.PrepareHistoryPartitions(b.ctx, 0); err != nil {
		t.Fatal(err)
	}
	bystander := b.create(t, engine.CreateParams{Type: "teamb.kept.v1"})
	b.cancelAll(t, []string{bystander})
	part := b.partitionFor(t, bystander)
	// Nor may a producer choose a run's id (and so the partition its trail
	// goes to, or a span's runs that keep a partition).
	producer := b.loginAs(t, "workflow_producer")
	producer.requireDenied(t, b.ctx, `insert into workflow.workflow_run (id, type) values ($1, 'teama.own.v1')`,
		"00000000-0000-7000-8000-000000000000")
	for _, role := range []string{"workflow_worker", "workflow_producer", "workflow_reader"} {
		l := b.loginAs(t, role)
		l.requireDenied(t, b.ctx, "select workflow.delete_finished_runs('0', 1000)")
		l.requireDenied(t, b.ctx, "select workflow.drop_history_partitions('0')")
		l.requireDenied(t, b.ctx, "select workflow.prepare_history_partitions(100)")
		l.requireDenied(t, b.ctx, "select workflow.create_history_partition(now() + interval '1 year', now() + interval '2 years')")
		l.requireDenied(t, b.ctx, "select * from workflow."+pgx.Identifier{part}.Sanitize())
		l.requireDenied(t, b.ctx, "select * from workflow.workflow_event_default")
	}
	if got := b.eventTypes(t, bystander); fmt.Sprint(got) != "[created cancelled]" {
		t.Fatalf("the bystander's trail: %v", got)
	}
}

// Making the partition of the span in progress while producers record runs
// of it fails none of their inserts: the trail is locked against writes
// for the attach, so no statement routes a new trail to the default
// partition that the attach then narrows. (The producers here roll back,
// so that the default partition never holds a trail of the span and its
// partition can be made.)
func TestPreparingTheSpanInProgressFailsNoInsert(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx, cancel := b.ctxWithCancel()
	errs := make(chan error, 4)
	var started [4]atomic.Int64
	for i := range 4 {
		go func() {
			for ctx.Err() == nil {
				err := func() error {
					tx, err := b.pool.Begin(ctx)
					if err != nil {
						return err
					}
					defer func() { _ = tx.Rollback(b.ctx) }()
					_, err = tx.Exec(ctx, "insert into workflow.workflow_run (type) select 'hist.race.v1' from generate_series(1, 20)")
					return err
				}()
				if err != nil && ctx.Err() == nil {
					errs <- err
					return
				}
				started[i].Add(1)
			}
			errs <- nil
		}()
	}
	deadline := time.Now().Add(10 * time.Second)
	for started[0].Load() < 20 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	made, err := b.eng.PrepareHistoryPartitions(b.ctx, 0)
	// Every producer goes on inserting after the attach (a failed insert
	// ends its producer, which then stops counting).
	after := [4]int64{}
	for i := range started {
		after[i] = started[i].Load()
	}
	for i := range started {
		for started[i].Load() < after[i]+5 && time.Now().Before(deadline.Add(10*time.Second)) {
			time.Sleep(5 * time.Millisecond)
		}
	}
	cancel()
	for range 4 {
		if err := <-errs; err != nil {
			t.Fatalf("an insert failed while the span's partition was made: %v", err)
		}
	}
	if err != nil || made != 1 {
		t.Fatalf("prepare while producers write: made %d, %v; want the span in progress", made, err)
	}
	id := b.create(t, engine.CreateParams{Type: "hist.after.v1"})
	if got := b.partitionFor(t, id); got == "workflow_event_default" {
		t.Fatal("a run recorded after the span's partition was made has its trail in the default partition")
	}
}

// Edge cases of keeping partitions: a partition made far ahead by hand does
// not stop the manager preparing the spans in between; a span with more
// than 10,000 runs left past a retention and a span is not dropped (moving
// them would hold the trail locked for long); dropping refuses to run
// under an older snapshot than its lock; spans are whole seconds; times
// outside the ids' 48 bits clamp.
func TestHistoryPartitionEdges(t *testing.T) {
	t.Parallel()
	b := setup(t)
	if _, err := b.pool.Exec(b.ctx, "update workflow.workflow_settings set history_partition = '1 hour'"); err != nil {
		t.Fatal(err)
	}
	hour := time.Now().Truncate(time.Hour)
	var made bool
	if err := b.pool.QueryRow(b.ctx, "select workflow.create_history_partition($1, $2)",
		hour.Add(24*365*time.Hour), hour.Add(24*365*time.Hour+time.Hour)).Scan(&made); err != nil || !made {
		t.Fatalf("a partition a year ahead: %v %v", made, err)
	}
	if n, err := b.eng.PrepareHistoryPartitions(b.ctx, 2); err != nil || n != 3 {
		t.Fatalf("prepare beside a partition a year ahead made %d (%v), want 3", n, err)
	}

	old := hour.Add(-5 * time.Hour)
	if err := b.pool.QueryRow(b.ctx, "select workflow.create_history_partition($1, $2)", old, old.Add(time.Hour)).
		Scan(&made); err != nil || !made {
		t.Fatalf("an old partition: %v %v", made, err)
	}
	if _, err := b.pool.Exec(b.ctx, `insert into workflow.workflow_run (id, type)
		select `+strings.ReplaceAll(idAt, "$1", "$1::timestamptz")+`, 'hist.many.v1' from generate_series(1, 10001)`,
		old.Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	if dropped, busy, err := b.eng.DropHistoryPartitions(b.ctx, time.Minute, 10); err != nil || dropped != 0 || busy {
		t.Fatalf("a span with 10,001 runs left: dropped %d, busy %v (%v), want it kept", dropped, busy, err)
	}
	if _, err := b.pool.Exec(b.ctx, `delete from workflow.workflow_run
		where id = (select id from workflow.workflow_run where type = 'hist.many.v1' order by id limit 1)`); err != nil {
		t.Fatal(err)
	}
	if dropped, _, err := b.eng.DropHistoryPartitions(b.ctx, time.Minute, 10); err != nil || dropped != 1 {
		t.Fatalf("a span with 10,000 runs left: dropped %d (%v), want it dropped, their trails moved", dropped, err)
	}
	var moved int
	if err := b.pool.QueryRow(b.ctx, `select count(*) from workflow.workflow_event_default e
		join workflow.workflow_run r on r.id = e.workflow_id where r.type = 'hist.many.v1'`).Scan(&moved); err != nil || moved != 10000 {
		t.Fatalf("%d trails moved to the default partition (%v), want 10000", moved, err)
	}

	tx, err := b.pool.BeginTx(b.ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead})
	if err != nil {
		t.Fatal(err)
	}
	_, err = tx.Exec(b.ctx, "select workflow.drop_history_partitions('0')")
	_ = tx.Rollback(b.ctx)
	if err == nil || !strings.Contains(err.Error(), "READ COMMITTED") {
		t.Fatalf("drop under REPEATABLE READ: %v, want a refusal", err)
	}
	if _, err := b.pool.Exec(b.ctx, "update workflow.workflow_settings set history_partition = '90.5 seconds'"); err == nil {
		t.Fatal("a span of 90.5 seconds was accepted")
	}
	var lo, hi string
	if err := b.pool.QueryRow(b.ctx, `select workflow.run_id_at('1960-01-01')::text,
		workflow.run_id_at('12000-01-01')::text`).Scan(&lo, &hi); err != nil {
		t.Fatal(err)
	}
	if lo != "00000000-0000-0000-0000-000000000000" || hi != "ffffffff-ffff-0000-0000-000000000000" {
		t.Fatalf("run_id_at clamps to %s and %s", lo, hi)
	}
	if err := b.pool.QueryRow(b.ctx, "select workflow.create_history_partition('12000-01-01', '12001-01-01')").
		Scan(&made); err != nil || made {
		t.Fatalf("a span past the ids' end: made=%v err=%v, want false", made, err)
	}
}

// Calls of create_history_partition at once, by hand beside the manager's
// prepare_history_partitions or by two managers, go one after the other:
// each locks the trail against writers and then attaches, and two that
// both held the first lock waited for each other's (a deadlock).
func TestHistoryPartitionsMadeAtOnceDoNotDeadlock(t *testing.T) {
	t.Parallel()
	b := setup(t)
	if _, err := b.pool.Exec(b.ctx, "update workflow.workflow_settings set history_partition = '1 hour'"); err != nil {
		t.Fatal(err)
	}
	hour := time.Now().Truncate(time.Hour)
	const callers, rounds = 6, 5
	for round := range rounds {
		var wg sync.WaitGroup
		errs := make(chan error, callers+1)
		for c := range callers {
			from := hour.Add(-time.Duration(10+round*callers+c) * time.Hour)
			wg.Go(func() {
				var made bool
				if err := b.pool.QueryRow(b.ctx, "select workflow.create_history_partition($1, $2)",
					from, from.Add(time.Hour)).Scan(&made); err != nil || !made {
					errs <- fmt.Errorf("partition at %s: made=%v err=%v", from, made, err)
				}
			})
		}
		wg.Go(func() {
			if _, err := b.eng.PrepareHistoryPartitions(b.ctx, 2); err != nil {
				errs <- fmt.Errorf("prepare beside them: %w", err)
			}
		})
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Error(err)
		}
		if t.Failed() {
			return
		}
	}
	// The callers' spans, whatever the prepares made around the hour in
	// progress (an hour may begin during the rounds).
	var made int
	if err := b.pool.QueryRow(b.ctx, `select count(*) from workflow.history_partitions() where to_time <= $1`,
		hour.Add(-9*time.Hour)).Scan(&made); err != nil || made != callers*rounds {
		t.Fatalf("%d partitions of the callers' spans (%v), want %d", made, err, callers*rounds)
	}
}
