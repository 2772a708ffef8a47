package engine_test

import (
	"encoding/json"
	"errors"
	"sort"
	"testing"
	"time"

	"github.com/simple-workflow/simple-workflow/internal/engine"
)

func claimedTypes(cs []engine.ClaimedRun) []string {
	out := make([]string, len(cs))
	for i, c := range cs {
		out[i] = c.Type
	}
	sort.Strings(out)
	return out
}

func equalStrings(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// Prefixes are literal: '_' and '%' inside them are not wildcards, and the
// seed's trailing '%' means the same as the bare prefix.
func TestClaimPrefixRoutingIsLiteral(t *testing.T) {
	t.Parallel()
	cases := []struct {
		prefixes []string
		want     []string
	}{
		{[]string{"billing."}, []string{"billing.invoice.v1", "billing.payment.v1"}},
		{[]string{"billing.%"}, []string{"billing.invoice.v1", "billing.payment.v1"}},
		{[]string{"a_b."}, []string{"a_b.x.v1"}},
		{[]string{"a_"}, []string{"a_b.x.v1"}},
		{[]string{"billing.in"}, []string{"billing.invoice.v1"}},
		{[]string{"notify.", "content."}, []string{"content.ocr.v1", "notify.email.v1"}},
		{[]string{"bi%l"}, nil},
		{[]string{"bil%"}, []string{"billing.invoice.v1", "billing.payment.v1"}},
		{[]string{"a%b."}, nil},
		{nil, []string{"a_b.x.v1", "axb.x.v1", "billing.invoice.v1", "billing.payment.v1", "content.ocr.v1", "notify.email.v1"}},
	}
	for _, tc := range cases {
		b := setup(t)
		for _, typ := range []string{"billing.invoice.v1", "billing.payment.v1", "a_b.x.v1", "axb.x.v1", "content.ocr.v1", "notify.email.v1"} {
			b.create(t, engine.CreateParams{Type: typ})
		}
		got := claimedTypes(b.claim(t, "w", tc.prefixes, 100))
		if len(got) == 0 {
			got = nil
		}
		if !equalStrings(got, tc.want) {
			t.Errorf("prefixes %q claimed %v, want %v", tc.prefixes, got, tc.want)
		}
	}
}

// The registry decides which runtime runs a type, and disabled types wait.
func TestClaimHonoursRegistry(t *testing.T) {
	t.Parallel()
	b := setup(t)
	for _, e := range []engine.RegistryEntry{
		{WorkflowName: "reg.go.v1", Runtime: "go", Enabled: true},
		{WorkflowName: "reg.py.v1", Runtime: "python", Enabled: true},
		{WorkflowName: "reg.off.v1", Runtime: "go", Enabled: false},
	} {
		if err := b.eng.UpsertRegistryEntry(b.ctx, e); err != nil {
			t.Fatal(err)
		}
	}
	for _, typ := range []string{"reg.go.v1", "reg.py.v1", "reg.off.v1", "reg.unregistered.v1"} {
		b.create(t, engine.CreateParams{Type: typ})
	}
	claim := func(runtime string) []string {
		cs, err := b.eng.ClaimRuns(b.ctx, engine.ClaimParams{WorkerID: runtime + "-w", TypePrefixes: []string{"reg."},
			Runtime: runtime, Limit: 10, LeaseDuration: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		return claimedTypes(cs)
	}
	if got := claim("python"); !equalStrings(got, []string{"reg.py.v1", "reg.unregistered.v1"}) {
		t.Fatalf("python worker claimed %v", got)
	}
	if got := claim("go"); !equalStrings(got, []string{"reg.go.v1"}) {
		t.Fatalf("go worker claimed %v", got)
	}
	// Enabling the disabled type releases its run.
	if err := b.eng.UpsertRegistryEntry(b.ctx, engine.RegistryEntry{WorkflowName: "reg.off.v1", Runtime: "go", Enabled: true}); err != nil {
		t.Fatal(err)
	}
	if got := claim("go"); !equalStrings(got, []string{"reg.off.v1"}) {
		t.Fatalf("after enabling, go worker claimed %v", got)
	}
}

func TestRegistryOwnership(t *testing.T) {
	t.Parallel()
	b := setup(t)
	e := engine.RegistryEntry{WorkflowName: "own.x.v1", Runtime: "go", Enabled: true, OwnerNamespace: "a", OwnerName: "r1"}
	if err := b.eng.UpsertRegistryEntry(b.ctx, e); err != nil {
		t.Fatal(err)
	}
	other := e
	other.OwnerName, other.Runtime = "r2", "python"
	if err := b.eng.UpsertRegistryEntry(b.ctx, other); !errors.Is(err, engine.ErrOwnedElsewhere) {
		t.Fatalf("a second owner of the same namespace took over a registry entry: %v", err)
	}
	if got, _ := b.eng.GetRegistryEntry(b.ctx, "a", "own.x.v1"); got.Runtime != "go" || got.OwnerName != "r1" {
		t.Fatalf("entry changed: %+v", got)
	}
	// The same name in another namespace is another type, with its own owner.
	elsewhere := e
	elsewhere.OwnerNamespace, elsewhere.Runtime = "b", "python"
	if err := b.eng.UpsertRegistryEntry(b.ctx, elsewhere); err != nil {
		t.Fatalf("namespace b could not register its own own.x.v1: %v", err)
	}
	if got, _ := b.eng.GetRegistryEntry(b.ctx, "b", "own.x.v1"); got.Runtime != "python" || got.OwnerNamespace != "b" {
		t.Fatalf("namespace b's entry: %+v", got)
	}
	if got, _ := b.eng.GetRegistryEntry(b.ctx, "a", "own.x.v1"); got.Runtime != "go" {
		t.Fatalf("namespace a's entry changed with b's: %+v", got)
	}
	if ok, _ := b.eng.DeleteRegistryEntry(b.ctx, "own.x.v1", "a", "r2"); ok {
		t.Fatal("a non-owner deleted the entry")
	}
	if ok, err := b.eng.DeleteRegistryEntry(b.ctx, "own.x.v1", "a", "r1"); !ok || err != nil {
		t.Fatalf("owner delete: %v %v", ok, err)
	}
}

func TestClaimOrderPriorityThenAgeAndRunAt(t *testing.T) {
	t.Parallel()
	b := setup(t)
	prio := func(n int) *int { return &n }
	future := time.Now().Add(time.Hour)
	late := b.create(t, engine.CreateParams{Type: "o.a.v1", Priority: prio(100)})
	urgent := b.create(t, engine.CreateParams{Type: "o.a.v1", Priority: prio(1)})
	later := b.create(t, engine.CreateParams{Type: "o.a.v1", Priority: prio(100)})
	b.create(t, engine.CreateParams{Type: "o.a.v1", Priority: prio(0), RunAt: &future})
	got := b.claim(t, "w", []string{"o."}, 10)
	if len(got) != 3 {
		t.Fatalf("claimed %d runs, want 3 (the future run must wait)", len(got))
	}
	if got[0].ID != urgent || got[1].ID != late || got[2].ID != later {
		t.Fatalf("claim order %s %s %s, want urgent, then oldest first", got[0].ID, got[1].ID, got[2].ID)
	}
	for _, c := range got {
		if c.Attempt != 1 {
			t.Fatalf("claimed attempt %d, want 1", c.Attempt)
		}
	}
}

func TestLeaseGuardsWritesOfLostLeases(t *testing.T) {
	t.Parallel()
	b := setup(t)
	id := b.create(t, engine.CreateParams{Type: "g.a.v1"})
	first := b.claim(t, "w1", nil, 1)[0]
	// Expire the lease and reap it; another worker claims attempt 2.
	b.advanceClock(t, time.Minute) // the 30 s lease expires
	reaped, err := b.eng.ReapExpiredLeases(b.ctx, 10)
	if err != nil || len(reaped) != 1 || reaped[0].Status != engine.StatusPending {
		t.Fatalf("reap: %+v %v", reaped, err)
	}
	second := b.claim(t, "w2", nil, 1)[0]
	if second.Attempt != 2 {
		t.Fatalf("second claim attempt %d, want 2", second.Attempt)
	}
	ref1 := first.Ref()
	hb, err := b.eng.HeartbeatRuns(b.ctx, "w1", []engine.LeaseRef{ref1}, time.Minute)
	if err != nil || len(hb) != 1 || hb[0].Owned {
		t.Fatalf("heartbeat of the lost lease: %+v %v, want not owned", hb, err)
	}
	if done, _ := b.eng.CompleteRuns(b.ctx, "w1", []engine.Completion{{LeaseRef: ref1}}); len(done) != 0 {
		t.Fatal("the old lease holder completed the run")
	}
	if res, _ := b.eng.FailRuns(b.ctx, "w1", []engine.Failure{{LeaseRef: ref1, Error: "x", Retryable: true}}); len(res) != 0 {
		t.Fatal("the old lease holder failed the run")
	}
	// Same worker id, old attempt: still refused.
	if done, _ := b.eng.CompleteRuns(b.ctx, "w2", []engine.Completion{{LeaseRef: ref1}}); len(done) != 0 {
		t.Fatal("a write for an old attempt was accepted")
	}
	ref2 := second.Ref()
	if done, err := b.eng.CompleteRuns(b.ctx, "w2", []engine.Completion{{LeaseRef: ref2, Result: json.RawMessage(`{"by":"w2"}`)}}); err != nil || len(done) != 1 {
		t.Fatalf("holder's complete: %v %v", done, err)
	}
	r := b.get(t, id)
	if r.Status != engine.StatusSucceeded || r.Attempt != 2 || r.LeasedBy != "w2" {
		t.Fatalf("final run %+v", r)
	}
	assertEvents(t, b.eventTypes(t, id),
		engine.EventCreated, engine.EventStarted, engine.EventRetried,
		engine.EventStarted, engine.EventSucceeded)
}

func TestHeartbeatReportsCancellation(t *testing.T) {
	t.Parallel()
	b := setup(t)
	id := b.create(t, engine.CreateParams{Type: "h.a.v1"})
	c := b.claim(t, "w", nil, 1)[0]
	ref := c.Ref()
	hb, err := b.eng.HeartbeatRuns(b.ctx, "w", []engine.LeaseRef{ref}, time.Minute)
	if err != nil || !hb[0].Owned || hb[0].Status != engine.StatusLeased {
		t.Fatalf("heartbeat: %+v %v", hb, err)
	}
	if r := b.get(t, id); r.LeaseUntil == nil || time.Until(*r.LeaseUntil) < 50*time.Second {
		t.Fatalf("lease not extended: %v", r.LeaseUntil)
	}
	if ok, _ := b.eng.CancelRun(b.ctx, id); !ok {
		t.Fatal("cancel of a leased run failed")
	}
	hb, err = b.eng.HeartbeatRuns(b.ctx, "w", []engine.LeaseRef{ref}, time.Minute)
	if err != nil || hb[0].Owned || hb[0].Status != engine.StatusCancelled {
		t.Fatalf("heartbeat after cancel: %+v %v, want cancelled and not owned", hb, err)
	}
	if done, _ := b.eng.CompleteRuns(b.ctx, "w", []engine.Completion{{LeaseRef: ref}}); len(done) != 0 {
		t.Fatal("a cancelled run was completed")
	}
	if r := b.get(t, id); r.Status != engine.StatusCancelled {
		t.Fatalf("status %s, want cancelled", r.Status)
	}
	assertEvents(t, b.eventTypes(t, id), engine.EventCreated, engine.EventStarted,
		engine.EventHeartbeat, engine.EventCancelled)
}

// Backoff stays within attempt² × base plus at most 10 %, and a run out of
// attempts fails for good.
func TestRetryBackoffAndExhaustion(t *testing.T) {
	t.Parallel()
	b := setup(t)
	base := 2 * time.Second
	id := b.create(t, engine.CreateParams{Type: "r.a.v1", MaxAttempts: 3, RetryPolicy: &engine.RetryPolicy{BaseDelay: base}})
	for attempt := 1; attempt <= 3; attempt++ {
		c := b.claim(t, "w", nil, 1)
		if len(c) != 1 || c[0].Attempt != attempt {
			t.Fatalf("attempt %d: claimed %+v", attempt, c)
		}
		before := b.clockNow(t)
		res, err := b.eng.FailRuns(b.ctx, "w", []engine.Failure{{LeaseRef: c[0].Ref(), Error: "boom", Retryable: true}})
		if err != nil || len(res) != 1 {
			t.Fatalf("fail: %+v %v", res, err)
		}
		if attempt < 3 {
			want := time.Duration(attempt*attempt) * base
			delay := res[0].RunAt.Sub(before)
			if res[0].Status != engine.StatusPending || delay < want-time.Second || delay > want+want/10+time.Second {
				t.Fatalf("attempt %d: status %s delay %s, want pending with %s..%s", attempt, res[0].Status, delay, want, want+want/10)
			}
			if got := b.claim(t, "w", nil, 1); len(got) != 0 {
				t.Fatal("a run was claimable during its backoff")
			}
			b.advanceClock(t, delay/2)
			if got := b.claim(t, "w", nil, 1); len(got) != 0 {
				t.Fatal("a run was claimable halfway through its backoff")
			}
			b.advanceClock(t, res[0].RunAt.Sub(b.clockNow(t))+time.Millisecond) // due
		} else if res[0].Status != engine.StatusFailed {
			t.Fatalf("last attempt: status %s, want failed", res[0].Status)
		}
	}
	r := b.get(t, id)
	if r.Status != engine.StatusFailed || r.LastError != "boom" || r.FinishedAt == nil {
		t.Fatalf("final run %+v", r)
	}
	assertEvents(t, b.eventTypes(t, id),
		engine.EventCreated, engine.EventStarted, engine.EventRetried,
		engine.EventStarted, engine.EventRetried,
		engine.EventStarted, engine.EventFailed)
}

// The default policy is attempt² minutes, with jitter in [0, 10 %], and a cap
// is honoured.
func TestRetryDelayFunction(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var lo, hi float64
	err := b.pool.QueryRow(b.ctx, `select min(extract(epoch from d)), max(extract(epoch from d)) from (
		select workflow.retry_delay(3, null, null, random()) d from generate_series(1, 2000)) s`).Scan(&lo, &hi)
	if err != nil {
		t.Fatal(err)
	}
	if lo < 540 || hi > 594 || hi-lo < 30 {
		t.Fatalf("default delay for attempt 3 in [%v, %v]s, want within [540, 594] and spread by jitter", lo, hi)
	}
	var capped float64
	if err := b.pool.QueryRow(b.ctx, `select extract(epoch from workflow.retry_delay(10, interval '1 second', interval '30 seconds', 0.5))`).Scan(&capped); err != nil || capped != 30 {
		t.Fatalf("capped delay %v (%v), want 30", capped, err)
	}
}

func TestPermanentFailureSkipsRetries(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.create(t, engine.CreateParams{Type: "p.a.v1", MaxAttempts: 5})
	c := b.claim(t, "w", nil, 1)[0]
	res, err := b.eng.FailRuns(b.ctx, "w", []engine.Failure{{LeaseRef: c.Ref(), Error: "bad payload"}})
	if err != nil || res[0].Status != engine.StatusFailed {
		t.Fatalf("permanent failure: %+v %v", res, err)
	}
}

func TestReapFailsRunsOutOfAttempts(t *testing.T) {
	t.Parallel()
	b := setup(t)
	id := b.create(t, engine.CreateParams{Type: "x.a.v1", MaxAttempts: 1})
	b.claim(t, "w", nil, 1)
	b.advanceClock(t, time.Minute) // the 30 s leases expire
	res, err := b.eng.ReapExpiredLeases(b.ctx, 10)
	if err != nil || len(res) != 1 || res[0].Status != engine.StatusFailed {
		t.Fatalf("reap: %+v %v", res, err)
	}
	evs, _ := b.eng.ListEvents(b.ctx, id)
	last := evs[len(evs)-1]
	var data map[string]any
	_ = json.Unmarshal(last.Data, &data)
	if last.Type != engine.EventFailed || data["reason"] != "lease_expired" || data["worker_id"] != "w" {
		t.Fatalf("last event %s %s", last.Type, last.Data)
	}
}

// Reaping from many processes at once reclaims each run exactly once.
func TestConcurrentReapersReclaimOnce(t *testing.T) {
	t.Parallel()
	b := setup(t)
	for range 200 {
		b.create(t, engine.CreateParams{Type: "cr.a.v1"})
	}
	b.claim(t, "w", nil, 200)
	b.advanceClock(t, time.Minute) // the 30 s leases expire
	counts := make(chan int, 8)
	for range 8 {
		go func() {
			n := 0
			for {
				res, err := b.eng.ReapExpiredLeases(b.ctx, 7)
				if err != nil {
					t.Error(err)
					break
				}
				if len(res) == 0 {
					break
				}
				n += len(res)
			}
			counts <- n
		}()
	}
	total := 0
	for range 8 {
		total += <-counts
	}
	var retried int
	if err := b.pool.QueryRow(b.ctx, "select count(*) from workflow.run_event where event_type = 'retried'").Scan(&retried); err != nil {
		t.Fatal(err)
	}
	if total != 200 || retried != 200 {
		t.Fatalf("reaped %d runs with %d retried events, want 200 and 200", total, retried)
	}
}

func TestReleaseDoesNotCountTheAttempt(t *testing.T) {
	t.Parallel()
	b := setup(t)
	id := b.create(t, engine.CreateParams{Type: "rel.a.v1"})
	c := b.claim(t, "w", nil, 1)[0]
	done, err := b.eng.ReleaseRuns(b.ctx, "w", []engine.LeaseRef{c.Ref()})
	if err != nil || len(done) != 1 {
		t.Fatalf("release: %v %v", done, err)
	}
	r := b.get(t, id)
	if r.Status != engine.StatusPending || r.Attempt != 0 || r.LeasedBy != "" {
		t.Fatalf("released run %+v", r)
	}
	again := b.claim(t, "w2", nil, 1)
	if len(again) != 1 || again[0].Attempt != 1 {
		t.Fatalf("reclaim after release: %+v, want attempt 1 at once", again)
	}
}

func TestDeleteFinishedRunsTakesEventsAlong(t *testing.T) {
	t.Parallel()
	b := setup(t)
	old := b.create(t, engine.CreateParams{Type: "ret.a.v1"})
	recent := b.create(t, engine.CreateParams{Type: "ret.a.v1"})
	pending := b.create(t, engine.CreateParams{Type: "ret.a.v1"})
	for _, id := range []string{old, recent} {
		if _, err := b.eng.CancelRun(b.ctx, id); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := b.pool.Exec(b.ctx, "update workflow.workflow_run set finished_at = now() - interval '10 days' where id = $1", old); err != nil {
		t.Fatal(err)
	}
	n, err := b.eng.DeleteFinishedRuns(b.ctx, 24*time.Hour, 100)
	if err != nil || n != 1 {
		t.Fatalf("deleted %d (%v), want 1", n, err)
	}
	var events int
	if err := b.pool.QueryRow(b.ctx, "select count(*) from workflow.run_event where workflow_id = $1", old).Scan(&events); err != nil || events != 0 {
		t.Fatalf("events of the deleted run: %d (%v)", events, err)
	}
	for _, id := range []string{recent, pending} {
		b.get(t, id)
	}
}

func TestInsertNotifiesListeners(t *testing.T) {
	t.Parallel()
	b := setup(t)
	got := make(chan engine.Notification, 10)
	connected := make(chan struct{}, 1)
	ctx, cancel := b.ctxWithCancel()
	defer cancel()
	go func() {
		_ = b.eng.Listen(ctx, engine.ListenConfig{
			Channels:  []string{engine.ChannelRunCreated, engine.ChannelRunCancelled},
			OnNotify:  func(n engine.Notification) { got <- n },
			OnConnect: func() { connected <- struct{}{} },
		})
	}()
	<-connected
	// A plain SQL insert, as any producer would write it.
	var id string
	if err := b.pool.QueryRow(b.ctx, `insert into workflow.workflow_run (type) values ('n.a.v1') returning id`).Scan(&id); err != nil {
		t.Fatal(err)
	}
	expect := func(channel, payload string) {
		t.Helper()
		select {
		case n := <-got:
			if n.Channel != channel || n.Payload != payload {
				t.Fatalf("notification %+v, want %s %s", n, channel, payload)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("no %s notification", channel)
		}
	}
	expect(engine.ChannelRunCreated, "default/n.a.v1")
	if _, err := b.eng.CancelRun(b.ctx, id); err != nil {
		t.Fatal(err)
	}
	expect(engine.ChannelRunCancelled, id)

	// Kill the listening connection: the listener reconnects by itself.
	if _, err := b.pool.Exec(b.ctx, `select pg_terminate_backend(pid) from pg_stat_activity
		where datname = current_database() and query ilike 'listen%' and pid <> pg_backend_pid()`); err != nil {
		t.Fatal(err)
	}
	select {
	case <-connected:
	case <-time.After(10 * time.Second):
		t.Fatal("listener did not reconnect")
	}
	if _, err := b.pool.Exec(b.ctx, `insert into workflow.workflow_run (type) values ('n.b.v1')`); err != nil {
		t.Fatal(err)
	}
	expect(engine.ChannelRunCreated, "default/n.b.v1")
}

// The metrics' count of events tells the leases that expired from the
// other retries and failures: a run reaped and retried, one reaped out of
// attempts; a plain failure's retry and a permanent failure are not.
func TestEventCountsTellExpiredLeases(t *testing.T) {
	t.Parallel()
	b := setup(t)
	since, err := b.eng.LatestEventID(b.ctx)
	if err != nil {
		t.Fatal(err)
	}
	b.create(t, engine.CreateParams{Type: "lx.a.v1", MaxAttempts: 3})
	b.create(t, engine.CreateParams{Type: "lx.b.v1", MaxAttempts: 1})
	b.claim(t, "w", []string{"lx."}, 2)
	b.advanceClock(t, time.Minute) // the 30 s leases expire
	if res, err := b.eng.ReapExpiredLeases(b.ctx, 10); err != nil || len(res) != 2 {
		t.Fatalf("reap: %+v %v", res, err)
	}
	b.create(t, engine.CreateParams{Type: "lx.c.v1", MaxAttempts: 3})
	b.create(t, engine.CreateParams{Type: "lx.d.v1", MaxAttempts: 1})
	for _, c := range b.claim(t, "w", []string{"lx.c.", "lx.d."}, 2) {
		if _, err := b.eng.FailRuns(b.ctx, "w", []engine.Failure{{LeaseRef: c.Ref(), Error: "boom", Retryable: true}}); err != nil {
			t.Fatal(err)
		}
	}
	counts, _, err := b.eng.CountEventsAfter(b.ctx, since)
	if err != nil {
		t.Fatal(err)
	}
	got := map[engine.EventType][2]int64{}
	for _, c := range counts {
		got[c.Type] = [2]int64{c.Count, c.LeaseExpiries}
	}
	if got[engine.EventRetried] != [2]int64{2, 1} || got[engine.EventFailed] != [2]int64{2, 1} {
		t.Fatalf("retried and failed (events, lease expiries): %v, %v; want [2 1] each",
			got[engine.EventRetried], got[engine.EventFailed])
	}
}
