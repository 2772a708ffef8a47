package engine_test

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/simple-workflow/simple-workflow/internal/engine"
)

// A source name of 8,000 characters is refused when
// written, so no claim of its prefix can trip over its notification.
func TestOversizedSourceIsRefused(t *testing.T) {
	t.Parallel()
	b := setup(t)
	_, err := b.pool.Exec(b.ctx, `insert into workflow.workflow_run (type, source_namespace, source_name, source_uid)
        values ('poison.a.v1', 'ns', $1, 'uid')`, strings.Repeat("n", 8000))
	if brokenRule(err) != "workflow_run_source_bounded" {
		t.Fatalf("insert with an 8,000-character source name: %v", err)
	}
	_, err = b.eng.CreateRun(b.ctx, engine.CreateParams{Type: "poison.a.v1", Source: &engine.Source{Namespace: "ns", Name: strings.Repeat("n", 254), UID: "u"}})
	if !errors.Is(err, engine.ErrInvalid) || !strings.Contains(err.Error(), "name at most 253") {
		t.Fatalf("create with a 254-character source name: %v", err)
	}
	id := b.create(t, engine.CreateParams{Type: "poison.b.v1", Source: &engine.Source{Namespace: strings.Repeat("s", 63), Name: strings.Repeat("n", 253), UID: "u"}})
	if got := b.claimIn(t, strings.Repeat("s", 63), "w", []string{"poison."}, 10); len(got) != 1 || got[0].ID != id {
		t.Fatalf("claim next to bounded sources: %+v", got)
	}
}

// A pending row without an attempt left is refused, so it
// cannot make every claim of its neighbours fail.
func TestPendingRowWithoutAttemptsIsRefused(t *testing.T) {
	t.Parallel()
	b := setup(t)
	_, err := b.pool.Exec(b.ctx, `insert into workflow.workflow_run (type, attempt, max_attempts) values ('poison.c.v1', 3, 3)`)
	if err == nil || !strings.Contains(err.Error(), "workflow_run_pending_has_attempt_left") {
		t.Fatalf("insert of a pending run with no attempt left: %v", err)
	}
	b.create(t, engine.CreateParams{Type: "poison.c.v1"})
	if got := b.claim(t, "w", []string{"poison."}, 10); len(got) != 1 {
		t.Fatalf("claimed %d, want the one good run", len(got))
	}
}

// "%" is refused like "", prefixes stay literal whatever
// standard_conforming_strings says, and worker ids and leases are bounded.
func TestClaimBoundsAndLiteralPrefixes(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.create(t, engine.CreateParams{Type: "a_b.x.v1"})
	b.create(t, engine.CreateParams{Type: "axb.x.v1"})
	for _, bad := range []engine.ClaimParams{
		{WorkerID: "w", TypePrefixes: []string{"%"}, Limit: 1, LeaseDuration: time.Minute},
		{WorkerID: "w", TypePrefixes: []string{""}, Limit: 1, LeaseDuration: time.Minute},
		{WorkerID: strings.Repeat("w", 254), Limit: 1, LeaseDuration: time.Minute},
		{WorkerID: "w", Limit: 1, LeaseDuration: 25 * time.Hour},
	} {
		if _, err := b.eng.ClaimRuns(b.ctx, bad); !errors.Is(err, engine.ErrInvalid) {
			t.Errorf("claim %+v: %v, want ErrInvalid", bad, err)
		}
	}
	conn, err := b.pool.Acquire(b.ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	if _, err := conn.Exec(b.ctx, "set standard_conforming_strings = off"); err != nil {
		t.Fatal(err)
	}
	var types []string
	rows, err := conn.Query(b.ctx, `select type from workflow.claim_runs('w', array['a_'], 'go', 10, 60000)`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var typ string
		if err := rows.Scan(&typ); err != nil {
			t.Fatal(err)
		}
		types = append(types, typ)
	}
	if rows.Err() != nil || len(types) != 1 || types[0] != "a_b.x.v1" {
		t.Fatalf("prefix a_ with standard_conforming_strings off claimed %v (%v)", types, rows.Err())
	}
	if _, err := conn.Exec(b.ctx, "reset standard_conforming_strings"); err != nil {
		t.Fatal(err)
	}
}

// A soft-deleted pending run ends (cancelled, with an
// event saying why) and retention removes it, freeing its idempotency key.
func TestSoftDeleteEndsTheRun(t *testing.T) {
	t.Parallel()
	b := setup(t)
	id := b.create(t, engine.CreateParams{Type: "soft.a.v1", IdempotencyKey: "soft-1"})
	if _, err := b.pool.Exec(b.ctx, "update workflow.workflow_run set deleted_at = now() where id = $1", id); err != nil {
		t.Fatal(err)
	}
	r := b.get(t, id)
	if r.Status != engine.StatusCancelled || r.FinishedAt == nil || r.DeletedAt == nil {
		t.Fatalf("soft-deleted run %s finished %v deleted %v", r.Status, r.FinishedAt, r.DeletedAt)
	}
	evs, err := b.eng.ListEvents(b.ctx, id)
	if err != nil || evs[len(evs)-1].Type != engine.EventCancelled || !strings.Contains(string(evs[len(evs)-1].Data), `"deleted"`) {
		t.Fatalf("events %+v %v", evs, err)
	}
	// A leased run's worker learns at its next heartbeat.
	leased := b.create(t, engine.CreateParams{Type: "soft.b.v1"})
	c := b.claimOne(t, "w", "soft.b.")
	if _, err := b.pool.Exec(b.ctx, "update workflow.workflow_run set deleted_at = now() where id = $1", leased); err != nil {
		t.Fatal(err)
	}
	if hb, err := b.eng.HeartbeatRuns(b.ctx, "w", []engine.LeaseRef{c.Ref()}, time.Minute); err != nil || hb[0].Owned || hb[0].Status != engine.StatusCancelled {
		t.Fatalf("heartbeat of a soft-deleted run: %+v %v", hb, err)
	}
	b.advanceClock(t, time.Hour) // everything finished is an hour old
	if n, err := b.eng.DeleteFinishedRuns(b.ctx, 30*time.Minute, 10); err != nil || n != 2 {
		t.Fatalf("retention deleted %d (%v), want 2", n, err)
	}
	again := b.create(t, engine.CreateParams{Type: "soft.a.v1", IdempotencyKey: "soft-1"})
	if again == id {
		t.Fatal("the idempotency key still pointed at the removed run")
	}
}

// Soft-deleting a parent cancels its unfinished children, and a soft-deleted
// child still reports its end to its parent.
func TestSoftDeleteReachesChildrenAndParents(t *testing.T) {
	t.Parallel()
	b := setup(t)
	parent := b.create(t, engine.CreateParams{Type: "softp.a.v1"})
	c := b.claimOne(t, "w", "softp.")
	kid1, err := b.eng.StartChild(b.ctx, engine.ChildParams{LeaseRef: c.Ref(), WorkerID: "w", Step: "k1", Position: 0, Type: "softk.a.v1"})
	if err != nil {
		t.Fatal(err)
	}
	kid2, err := b.eng.StartChild(b.ctx, engine.ChildParams{LeaseRef: c.Ref(), WorkerID: "w", Step: "k2", Position: 1, Type: "softk.a.v1"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.pool.Exec(b.ctx, "update workflow.workflow_run set deleted_at = now() where id = $1", kid1.ChildID); err != nil {
		t.Fatal(err)
	}
	steps, err := b.eng.ListSteps(b.ctx, parent)
	if err != nil || steps[0].Outcome != engine.OutcomeError || steps[0].Error != "child run cancelled" {
		t.Fatalf("parent's entry for a soft-deleted child: %+v %v", steps, err)
	}
	if _, err := b.pool.Exec(b.ctx, "update workflow.workflow_run set deleted_at = now() where id = $1", parent); err != nil {
		t.Fatal(err)
	}
	if r := b.get(t, kid2.ChildID); r.Status != engine.StatusCancelled {
		t.Fatalf("child of a soft-deleted parent: %s", r.Status)
	}
}

// A retry delay that would overflow
// an interval is capped, so it cannot fail a batch of outcomes.
func TestRetryDelayCannotOverflow(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var years float64
	if err := b.pool.QueryRow(b.ctx, `select extract(epoch from workflow.retry_delay(1000, interval '100000 years', null, 0.9)) / 31536000`).Scan(&years); err != nil {
		t.Fatalf("huge delay: %v", err)
	}
	if years > 100.01 || years < 99 {
		t.Fatalf("delay of %.2f years, want the 100-year cap", years)
	}
	var id string
	if err := b.pool.QueryRow(b.ctx, `insert into workflow.workflow_run (type, attempt, max_attempts, retry_base_delay)
        values ('huge.a.v1', 499, 1000, interval '1000000 years') returning id`).Scan(&id); err != nil {
		t.Fatal(err)
	}
	ok := b.create(t, engine.CreateParams{Type: "huge.b.v1"})
	var refs []engine.Failure
	for _, c := range b.claim(t, "w", []string{"huge."}, 10) {
		refs = append(refs, engine.Failure{LeaseRef: c.Ref(), Error: "again", Retryable: true})
	}
	res, err := b.eng.FailRuns(b.ctx, "w", refs)
	if err != nil || len(res) != 2 {
		t.Fatalf("batch with a huge delay: %+v %v", res, err)
	}
	if r := b.get(t, id); r.Status != engine.StatusPending || r.RunAt.Before(time.Now().Add(50*365*24*time.Hour)) {
		t.Fatalf("huge-delay run %s at %s", r.Status, r.RunAt)
	}
	if r := b.get(t, ok); r.Status != engine.StatusPending {
		t.Fatalf("neighbour %s", r.Status)
	}
}

// A long run's trail keeps the first
// heartbeat of an attempt and every tenth, each saying how many there were.
func TestHeartbeatEventsAreSampled(t *testing.T) {
	t.Parallel()
	b := setup(t)
	id := b.create(t, engine.CreateParams{Type: "hb.a.v1"})
	c := b.claimOne(t, "w", "hb.")
	for range 25 {
		if hb, err := b.eng.HeartbeatRuns(b.ctx, "w", []engine.LeaseRef{c.Ref()}, time.Minute); err != nil || !hb[0].Owned {
			t.Fatalf("heartbeat: %+v %v", hb, err)
		}
	}
	var counts []int
	if err := b.pool.QueryRow(b.ctx, `select coalesce(array_agg((data->>'heartbeats')::int order by id), '{}')
        from workflow.workflow_event where workflow_id = $1 and event_type = 'heartbeat'`, id).Scan(&counts); err != nil {
		t.Fatal(err)
	}
	if len(counts) != 3 || counts[0] != 1 || counts[1] != 10 || counts[2] != 20 {
		t.Fatalf("heartbeat events %v, want [1 10 20]", counts)
	}
}

// A plain-SQL producer cannot take
// the key the operator derives for another namespace's WorkflowRun.
func TestReservedKeysNeedAMatchingSource(t *testing.T) {
	t.Parallel()
	b := setup(t)
	for _, key := range []string{"k8s:media:thumb-1", "k8s-uid:0f9c2a7e-1111-4222-8333-444455556666"} {
		_, err := b.pool.Exec(b.ctx, `insert into workflow.workflow_run (type, payload, idempotency_key)
            values ('content.thumbnail.v1', '{}', $1) on conflict (idempotency_key) do nothing`, key)
		if brokenRule(err) != "workflow_run_reserved_key" {
			t.Fatalf("plain insert of reserved key %s: %v", key, err)
		}
	}
	// Another namespace's source does not match either.
	_, err := b.eng.CreateRun(b.ctx, engine.CreateParams{Type: "content.thumbnail.v1", IdempotencyKey: "k8s:media:thumb-1",
		Source: &engine.Source{Namespace: "intruder", Name: "x", UID: "u1"}})
	if !errors.Is(err, engine.ErrInvalid) || !strings.Contains(err.Error(), "reserved") {
		t.Fatalf("reserved key with another namespace's source: %v", err)
	}
	// The operator's own forms are accepted.
	b.create(t, engine.CreateParams{Type: "content.thumbnail.v1", IdempotencyKey: "k8s:media:thumb-1",
		Source: &engine.Source{Namespace: "media", Name: "thumb", UID: "u2"}})
	b.create(t, engine.CreateParams{Type: "content.thumbnail.v1", IdempotencyKey: "k8s-uid:u3",
		Source: &engine.Source{Namespace: "media", Name: "other", UID: "u3"}})
	// Ordinary keys stay free for everyone.
	b.create(t, engine.CreateParams{Type: "content.thumbnail.v1", IdempotencyKey: "content:c_123:thumbnail:300x300"})
}

// A status changed by plain SQL outside the functions
// leaves an audit event saying so; the functions' own transitions leave
// exactly their own events (the trail tests elsewhere check those).
func TestPlainSQLStatusChangesAreAudited(t *testing.T) {
	t.Parallel()
	b := setup(t)
	id := b.create(t, engine.CreateParams{Type: "audit.a.v1"})
	if _, err := b.pool.Exec(b.ctx, `update workflow.workflow_run set status = 'failed', finished_at = now(),
        last_error = 'given up by hand' where id = $1`, id); err != nil {
		t.Fatal(err)
	}
	evs, err := b.eng.ListEvents(b.ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	last := evs[len(evs)-1]
	if len(evs) != 2 || last.Type != engine.EventFailed || !strings.Contains(string(last.Data), `"plain_sql"`) ||
		!strings.Contains(string(last.Data), `"previous_status": "pending"`) {
		t.Fatalf("events after a plain-SQL status change: %+v", evs)
	}
	// A run moved by the functions gets no extra event.
	other := b.create(t, engine.CreateParams{Type: "audit.b.v1"})
	c := b.claimOne(t, "w", "audit.b.")
	if _, err := b.eng.CompleteRuns(b.ctx, "w", []engine.Completion{{LeaseRef: c.Ref()}}); err != nil {
		t.Fatal(err)
	}
	assertEvents(t, b.eventTypes(t, other), engine.EventCreated, engine.EventStarted, engine.EventSucceeded)
}

// A payload over the limit (1 MiB by default,
// workflow_settings.max_payload_bytes) is refused with a clear error, from
// any producer; a result over 1 MiB fails its run alone.
func TestPayloadAndResultSizeLimits(t *testing.T) {
	t.Parallel()
	b := setup(t)
	big := json.RawMessage(`{"x":"` + strings.Repeat("a", 1<<20) + `"}`)
	_, err := b.eng.CreateRun(b.ctx, engine.CreateParams{Type: "size.a.v1", Payload: big})
	if !errors.Is(err, engine.ErrInvalid) || !strings.Contains(err.Error(), "the limit is 1048576") {
		t.Fatalf("create with a 1 MiB payload: %v", err)
	}
	if _, err := b.pool.Exec(b.ctx, `insert into workflow.workflow_run (type, payload) values ('size.a.v1', $1)`, string(big)); err == nil {
		t.Fatal("a plain insert of a 1 MiB payload was accepted")
	}
	// The limit is the owner's setting.
	if _, err := b.pool.Exec(b.ctx, "update workflow.workflow_settings set max_payload_bytes = 1024"); err != nil {
		t.Fatal(err)
	}
	if _, err := b.pool.Exec(b.ctx, `insert into workflow.workflow_run (type, payload) values ('size.a.v1', $1)`, `{"x":"`+strings.Repeat("a", 2000)+`"}`); err == nil || !strings.Contains(err.Error(), "the limit is 1024") {
		t.Fatalf("insert over a lowered limit: %v", err)
	}
	if _, err := b.pool.Exec(b.ctx, "update workflow.workflow_settings set max_payload_bytes = default"); err != nil {
		t.Fatal(err)
	}
	b.create(t, engine.CreateParams{Type: "size.b.v1"})
	c := b.claimOne(t, "w", "size.b.")
	done, err := b.eng.CompleteRuns(b.ctx, "w", []engine.Completion{{LeaseRef: c.Ref(), Result: big}})
	if err != nil || len(done) != 1 || done[0].Status != engine.StatusFailed || !strings.Contains(done[0].Error, "the limit is 1048576") {
		t.Fatalf("complete with a 1 MiB result: %+v, %v", done, err)
	}
}
