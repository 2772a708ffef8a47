package engine_test

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/simple-workflow/simple-workflow/internal/engine"
)

func i32(v int32) *int32 { return &v }

// register gives a type flow limits in the registry.
func (b *bundle) registerFlow(t *testing.T, name string, flow engine.FlowLimits) {
	t.Helper()
	if err := b.eng.UpsertRegistryEntry(b.ctx, engine.RegistryEntry{
		WorkflowName: name, Runtime: engine.RuntimeGo, Enabled: true, Flow: flow,
	}); err != nil {
		t.Fatalf("register %s: %v", name, err)
	}
}

// createKeyed records n runs of a type with a concurrency key.
func (b *bundle) createKeyed(t *testing.T, typ, key string, n int) []string {
	t.Helper()
	ps := make([]engine.CreateParams, n)
	for i := range ps {
		ps[i] = engine.CreateParams{Type: typ, ConcurrencyKey: key}
	}
	res, err := b.eng.CreateRuns(b.ctx, ps)
	if err != nil {
		t.Fatalf("create %d runs of %s key %q: %v", n, typ, key, err)
	}
	ids := make([]string, n)
	for i, r := range res {
		ids[i] = r.ID
	}
	return ids
}

func (b *bundle) completeAll(t *testing.T, worker string, runs []engine.ClaimedRun) {
	t.Helper()
	cs := make([]engine.Completion, len(runs))
	for i, r := range runs {
		cs[i] = engine.Completion{LeaseRef: engine.LeaseRef{ID: r.ID, Token: r.LeaseToken, Attempt: r.Attempt}}
	}
	if _, err := b.eng.CompleteRuns(b.ctx, worker, cs); err != nil {
		t.Fatalf("complete: %v", err)
	}
}

// leasedByKey counts the leased runs of a type per concurrency key, in one
// snapshot.
func (b *bundle) leasedByKey(t *testing.T, typ string) map[string]int {
	t.Helper()
	rows, err := b.pool.Query(b.ctx, `select coalesce(concurrency_key, ''), count(*) from workflow.workflow_run
		where type = $1 and status = 'leased' group by 1`, typ)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	out := map[string]int{}
	for rows.Next() {
		var k string
		var n int
		if err := rows.Scan(&k, &n); err != nil {
			t.Fatal(err)
		}
		out[k] = n
	}
	return out
}

// maxLeasedFromAuditTrail walks the audit trail of a type's runs in the
// order its events were numbered and returns, per concurrency key, the most
// runs held at once ('started' takes a run, its end or hand-back returns
// it). A claim that counted a key's runs after another's release numbers its
// 'started' after that release's event, so the walk never shows more than
// were really leased: a count above the limit proves it was exceeded.
func (b *bundle) maxLeasedFromAuditTrail(t *testing.T, typ string) map[string]int {
	t.Helper()
	rows, err := b.pool.Query(b.ctx, `select coalesce(r.concurrency_key, ''), e.event_type
		from workflow.run_event e join workflow.workflow_run r on r.id = e.workflow_id
		where r.type = $1 and e.event_type in ('started', 'succeeded', 'failed', 'retried', 'released', 'cancelled')
		order by e.id`, typ)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	now, most := map[string]int{}, map[string]int{}
	for rows.Next() {
		var key, ev string
		if err := rows.Scan(&key, &ev); err != nil {
			t.Fatal(err)
		}
		if ev == "started" {
			now[key]++
			most[key] = max(most[key], now[key])
		} else {
			now[key]--
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return most
}

// Concurrent workers race for runs of three customers, at most two of each
// leased at once: no snapshot of the inbox and no worker's own view ever
// shows a third, every run succeeds on its first attempt, and a run held
// back writes nothing to the audit trail while it waits. Runs of another
// type, with no limit, go through beside them.
func TestFlowLimitPerKeyHoldsUnderConcurrentWorkers(t *testing.T) {
	t.Parallel()
	b := setup(t)
	const typ, perKey = "flow.perkey.v1", 2
	b.registerFlow(t, typ, engine.FlowLimits{MaxLeasedPerKey: i32(perKey)})
	keys := []string{"customer-a", "customer-b", "customer-c"}
	var ids []string
	for _, k := range keys {
		ids = append(ids, b.createKeyed(t, typ, k, 15)...)
	}
	bystanders := b.createKeyed(t, "flow.bystander.v1", "customer-a", 30)

	var (
		mu      sync.Mutex
		holding = map[string]int{}
		worst   = map[string]int{}
		done    atomic.Int64
		wg      sync.WaitGroup
	)
	stop := make(chan struct{})
	// A sampler: the inbox's own count, in one snapshot, all along.
	var sampled atomic.Int64
	samplerDone := make(chan struct{})
	go func() {
		defer close(samplerDone)
		for {
			select {
			case <-stop:
				return
			default:
			}
			for k, n := range b.leasedByKey(t, typ) {
				if n > perKey {
					t.Errorf("the inbox shows %d runs of %s leased at once (limit %d)", n, k, perKey)
				}
			}
			sampled.Add(1)
		}
	}()
	for w := range 6 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			worker := fmt.Sprintf("w%d", w)
			for done.Load() < int64(len(ids)) {
				runs, err := b.eng.ClaimRuns(b.ctx, engine.ClaimParams{
					WorkerID: worker, TypePrefixes: []string{"flow.perkey."}, Runtime: "go", Limit: 4,
					LeaseDuration: 30 * time.Second,
				})
				if err != nil {
					t.Errorf("claim: %v", err)
					return
				}
				if len(runs) == 0 {
					time.Sleep(2 * time.Millisecond)
					continue
				}
				// A worker's own view: between its claim's commit and its
				// completion's start it holds the run, a subset of the
				// lease; overlapping subsets above the limit would prove it
				// was exceeded.
				got := map[string]int{}
				for _, r := range runs {
					got[b.get(t, r.ID).ConcurrencyKey]++
				}
				mu.Lock()
				for k, n := range got {
					holding[k] += n
					if holding[k] > worst[k] {
						worst[k] = holding[k]
					}
				}
				mu.Unlock()
				time.Sleep(3 * time.Millisecond)
				mu.Lock()
				for k, n := range got {
					holding[k] -= n
				}
				mu.Unlock()
				b.completeAll(t, worker, runs)
				done.Add(int64(len(runs)))
			}
		}()
	}
	wg.Wait()
	close(stop)
	<-samplerDone
	for k, n := range worst {
		if n > perKey {
			t.Errorf("workers held %d runs of %s at once (limit %d)", n, k, perKey)
		}
	}
	if worst["customer-a"] < perKey {
		t.Errorf("never more than %d run of customer-a at once: the limit let fewer through than it allows", worst["customer-a"])
	}
	if sampled.Load() == 0 {
		t.Fatal("the sampler never looked")
	}
	for k, n := range b.maxLeasedFromAuditTrail(t, typ) {
		if n > perKey {
			t.Errorf("the audit trail shows %d runs of %s held at once (limit %d)", n, k, perKey)
		}
	}
	for _, id := range ids {
		r := b.get(t, id)
		if r.Status != engine.StatusSucceeded || r.Attempt != 1 {
			t.Errorf("run %s: %s on attempt %d, want succeeded on attempt 1", id, r.Status, r.Attempt)
		}
		if got := b.eventTypes(t, id); len(got) != 3 || got[0] != "created" || got[1] != "started" || got[2] != "succeeded" {
			t.Errorf("run %s: audit trail %v, want created, started, succeeded (waiting writes nothing)", id, got)
		}
	}
	// The bystander type has no limit: a claim takes all 30 at once.
	if got := b.claim(t, "bystander", []string{"flow.bystander."}, 100); len(got) != len(bystanders) {
		t.Errorf("claimed %d runs of the unlimited type, want %d", len(got), len(bystanders))
	}
}

// A type capped at three leased runs never has a fourth, whatever many
// workers claim at once; its queue depth counts only what may start.
func TestFlowLimitPerTypeCapsLeasedRuns(t *testing.T) {
	t.Parallel()
	b := setup(t)
	const typ = "flow.pertype.v1"
	b.registerFlow(t, typ, engine.FlowLimits{MaxLeased: i32(3)})
	ids := b.createKeyed(t, typ, "", 40)

	depth, err := b.eng.QueueDepths(b.ctx, []engine.PoolQuery{{TypePrefixes: []string{"flow.pertype."}, Runtime: "go"}})
	if err != nil {
		t.Fatal(err)
	}
	if depth[0].Runnable != 3 {
		t.Errorf("queue depth shows %d runnable runs, want 3 (the cap; the autoscaler must not scale for the rest)", depth[0].Runnable)
	}

	var done atomic.Int64
	var wg sync.WaitGroup
	for w := range 5 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			worker := fmt.Sprintf("w%d", w)
			for done.Load() < int64(len(ids)) {
				runs := b.claim(t, worker, []string{"flow.pertype."}, 10)
				if n := b.leasedByKey(t, typ)[""]; n > 3 {
					t.Errorf("%d runs leased at once, the cap is 3", n)
				}
				if len(runs) == 0 {
					time.Sleep(time.Millisecond)
					continue
				}
				if len(runs) > 3 {
					t.Errorf("one claim took %d runs, the cap is 3", len(runs))
				}
				time.Sleep(2 * time.Millisecond)
				b.completeAll(t, worker, runs)
				done.Add(int64(len(runs)))
			}
		}()
	}
	wg.Wait()
	for _, id := range ids {
		if r := b.get(t, id); r.Status != engine.StatusSucceeded || r.Attempt != 1 {
			t.Errorf("run %s: %s on attempt %d", id, r.Status, r.Attempt)
		}
	}
	if n := b.maxLeasedFromAuditTrail(t, typ)[""]; n != 3 {
		t.Errorf("the audit trail shows at most %d runs held at once, want exactly the cap of 3", n)
	}
}

// A type's rate: five starts per hour's window, counted by the database's
// clock, however often workers claim; the next window lets five more go.
func TestFlowRateLimitPerType(t *testing.T) {
	t.Parallel()
	b := setup(t)
	const typ = "flow.rate.v1"
	b.registerFlow(t, typ, engine.FlowLimits{RateLimit: i32(5), RatePeriod: time.Hour})
	b.createKeyed(t, typ, "", 12)
	// Start just inside a window, so that the test's claims do not straddle two.
	now := b.clockNow(t)
	b.advanceClock(t, now.Truncate(time.Hour).Add(time.Hour+time.Second).Sub(now))

	first := b.claim(t, "w", []string{"flow.rate."}, 100)
	if len(first) != 5 {
		t.Fatalf("first claim took %d runs, want 5", len(first))
	}
	b.completeAll(t, "w", first)
	if again := b.claim(t, "w", []string{"flow.rate."}, 100); len(again) != 0 {
		t.Fatalf("a claim in the same window took %d more runs", len(again))
	}
	b.advanceClock(t, time.Hour)
	if next := b.claim(t, "w", []string{"flow.rate."}, 100); len(next) != 5 {
		t.Fatalf("the next window let %d runs start, want 5", len(next))
	}
}

// A rate per key: each customer gets three starts per window; runs held
// back wait parked until the window ends, spend no attempt, and then go.
func TestFlowRateLimitPerKeyParksUntilTheWindowEnds(t *testing.T) {
	t.Parallel()
	b := setup(t)
	const typ = "flow.keyrate.v1"
	b.registerFlow(t, typ, engine.FlowLimits{RateLimit: i32(3), RatePeriod: time.Hour, RatePerKey: true})
	a := b.createKeyed(t, typ, "a", 5)
	b.createKeyed(t, typ, "b", 5)
	now := b.clockNow(t)
	b.advanceClock(t, now.Truncate(time.Hour).Add(time.Hour+time.Second).Sub(now))

	got := b.claim(t, "w", []string{"flow.keyrate."}, 100)
	if len(got) != 6 {
		t.Fatalf("claimed %d runs, want 3 of each key", len(got))
	}
	b.completeAll(t, "w", got)
	held := b.get(t, a[4])
	if held.Status != engine.StatusPending || held.Attempt != 0 || held.Wait == nil || held.Wait.Kind != "limit" {
		t.Fatalf("a run over its key's rate: %s attempt %d wait %+v; want pending, attempt 0, parked on limit", held.Status, held.Attempt, held.Wait)
	}
	if held.Wait.Until == nil || !held.Wait.Until.Equal(b.clockNow(t).Truncate(time.Hour).Add(time.Hour)) {
		t.Errorf("it waits until %v, want the window's end", held.Wait.Until)
	}
	if again := b.claim(t, "w", []string{"flow.keyrate."}, 100); len(again) != 0 {
		t.Fatalf("took %d runs in the same window", len(again))
	}
	b.advanceClock(t, time.Hour)
	if next := b.claim(t, "w", []string{"flow.keyrate."}, 100); len(next) != 4 {
		t.Fatalf("the next window let %d runs go, want the 2 left of each key", len(next))
	}
	if evs := b.eventTypes(t, a[4]); len(evs) != 2 || evs[1] != "started" {
		t.Errorf("audit trail %v: waiting on the rate must write nothing", evs)
	}
}

// The slot a finished run frees goes to the oldest run parked on its key
// at once, without waiting for maintenance; a parked run can be cancelled,
// and maintenance lets go a run whose key has room (the race the trigger
// cannot see).
func TestFlowParkedRunsGoWhenASlotFrees(t *testing.T) {
	t.Parallel()
	b := setup(t)
	const typ = "flow.slot.v1"
	b.registerFlow(t, typ, engine.FlowLimits{MaxLeasedPerKey: i32(1)})
	// One by one, so that "oldest" is well defined (a batch's runs share
	// their creation time).
	var ids []string
	for range 4 {
		ids = append(ids, b.create(t, engine.CreateParams{Type: typ, ConcurrencyKey: "k"}))
	}

	first := b.claim(t, "w", []string{"flow.slot."}, 10)
	if len(first) != 1 || first[0].ID != ids[0] {
		t.Fatalf("claimed %v, want only the oldest run", first)
	}
	for _, id := range ids[1:] {
		if w := b.get(t, id).Wait; w == nil || w.Kind != "limit" || w.Until != nil {
			t.Fatalf("run %s: wait %+v, want parked on limit with no timer", id, w)
		}
	}
	// Outside the claim index, still listed with the pending runs.
	for _, status := range []any{"pending", nil} {
		var listed int
		if err := b.pool.QueryRow(b.ctx, `select count(*) from workflow.list_runs_newest('flow.slot.', $1, null, null,
			null, null, null, null, 100) where wait_kind = 'limit'`, status).Scan(&listed); err != nil {
			t.Fatal(err)
		}
		if listed != 3 {
			t.Errorf("the console's list (status %v) shows %d runs held back, want 3", status, listed)
		}
	}
	if _, err := b.eng.CancelRun(b.ctx, ids[3]); err != nil {
		t.Fatal(err)
	}
	if r := b.get(t, ids[3]); r.Status != engine.StatusCancelled || r.Wait != nil {
		t.Fatalf("a cancelled parked run: %s, wait %+v", r.Status, r.Wait)
	}
	b.completeAll(t, "w", first)
	if r := b.get(t, ids[1]); r.Wait != nil {
		t.Fatalf("the freed slot did not let the oldest parked run go: wait %+v", r.Wait)
	}
	if r := b.get(t, ids[2]); r.Wait == nil {
		t.Fatal("one freed slot let two parked runs go")
	}
	second := b.claim(t, "w", []string{"flow.slot."}, 10)
	if len(second) != 1 || second[0].ID != ids[1] {
		t.Fatalf("claimed %v, want run %s", second, ids[1])
	}
	b.completeAll(t, "w", second)
	// The race the trigger cannot see, made by hand: a run parked while its
	// key has room. Maintenance lets it go.
	if _, err := b.pool.Exec(b.ctx, `update workflow.workflow_run set wait_kind = 'limit', run_at = workflow.far_future()
		where id = $1`, ids[2]); err != nil {
		t.Fatal(err)
	}
	if _, err := b.eng.ReapExpiredLeases(b.ctx, 100); err != nil {
		t.Fatal(err)
	}
	if r := b.get(t, ids[2]); r.Wait != nil {
		t.Fatalf("maintenance left a run parked on a key with room: %+v", r.Wait)
	}
}

// Ten thousand runs waiting on one customer are parked out of the claim's
// way: a claim still takes the other customers' runs, and the hot key
// keeps exactly its limit running.
func TestFlowHotKeyDoesNotBlockOtherKeys(t *testing.T) {
	t.Parallel()
	b := setup(t)
	const typ = "flow.hot.v1"
	b.registerFlow(t, typ, engine.FlowLimits{MaxLeasedPerKey: i32(1)})
	b.createKeyed(t, typ, "hot", 10000)
	var others []string
	for i := range 20 {
		others = append(others, b.createKeyed(t, typ, fmt.Sprintf("cold-%d", i), 1)...)
	}
	got := b.claim(t, "w", []string{"flow.hot."}, 100)
	if len(got) != 21 {
		t.Fatalf("claimed %d runs, want 1 of the hot key and the 20 others", len(got))
	}
	claimed := map[string]bool{}
	for _, r := range got {
		claimed[r.ID] = true
	}
	for _, id := range others {
		if !claimed[id] {
			t.Fatalf("run %s of another key was not claimed beside the hot key", id)
		}
	}
	var parked int
	if err := b.pool.QueryRow(b.ctx, `select count(*) from workflow.workflow_run
		where type = $1 and concurrency_key = 'hot' and wait_kind = 'limit'`, typ).Scan(&parked); err != nil {
		t.Fatal(err)
	}
	if parked != 9999 {
		t.Fatalf("%d runs of the hot key parked, want 9999", parked)
	}
	// New runs of other keys are claimed at once; the hot key's parked runs
	// are not read by the claim (the claim index leaves them out).
	more := b.createKeyed(t, typ, "cold-new", 1)
	next := b.claim(t, "w", []string{"flow.hot."}, 100)
	if len(next) != 1 || next[0].ID != more[0] {
		t.Fatalf("claimed %v, want only the new cold run", next)
	}
}

// Bad limits and keys are refused with a reason, and nothing is stored.
func TestFlowLimitsRefuseBadValues(t *testing.T) {
	t.Parallel()
	b := setup(t)
	for _, f := range []engine.FlowLimits{
		{MaxLeased: i32(0)},
		{MaxLeasedPerKey: i32(100001)},
		{RateLimit: i32(5)},
		{RateLimit: i32(5), RatePeriod: 25 * time.Hour},
		{RatePerKey: true},
	} {
		err := b.eng.UpsertRegistryEntry(b.ctx, engine.RegistryEntry{WorkflowName: "flow.bad.v1", Runtime: "go", Enabled: true, Flow: f})
		if !errors.Is(err, engine.ErrInvalid) {
			t.Errorf("limits %+v: got %v, want ErrInvalid", f, err)
		}
	}
	// The database refuses them too, whoever writes.
	if _, err := b.pool.Exec(b.ctx, `select workflow.put_registry('flow.bad.v1', 'go', true, '', null, null, null, -1)`); brokenRule(err) != "workflow_registry_flow_limits_valid" {
		t.Errorf("put_registry with max_leased -1: %v", err)
	}
	for _, key := range []string{strings.Repeat("k", 256), "nul\x00key", string([]byte{0xff, 0xfe})} {
		if _, err := b.eng.CreateRun(b.ctx, engine.CreateParams{Type: "flow.bad.v1", ConcurrencyKey: key}); !errors.Is(err, engine.ErrInvalid) {
			t.Errorf("concurrency key %q: got %v, want ErrInvalid", key[:min(len(key), 10)], err)
		}
	}
	if _, err := b.pool.Exec(b.ctx, `insert into workflow.workflow_run (type, concurrency_key) values ('flow.bad.v1', repeat('k', 256))`); brokenRule(err) != "workflow_run_concurrency_key_length" {
		t.Errorf("plain insert of a 256-character key: %v", err)
	}
	if _, err := b.pool.Exec(b.ctx, `select * from workflow.create_runs(array['flow.bad.v1'], array['{}'],
		p_concurrency_keys => array[''])`); err == nil || !strings.Contains(err.Error(), "concurrency key is 0 characters") {
		t.Errorf("create_runs with an empty key: %v", err)
	}
	var n int
	if err := b.pool.QueryRow(b.ctx, `select count(*) from workflow.workflow_run where type = 'flow.bad.v1'`).Scan(&n); err != nil || n != 0 {
		t.Errorf("%d runs stored (%v), want none", n, err)
	}
}

// New runs of a key already at its limit wait from the insert on: in one
// batch of several keys, each key lets in only what its limit leaves, in
// claim order, and the runs of another type and of a key with room are
// left alone; nothing is parked before a claim needs it.
func TestFlowInsertParksOnlyWhatTheKeyCannotStart(t *testing.T) {
	t.Parallel()
	b := setup(t)
	const typ, free = "flow.insert.v1", "flow.insertfree.v1"
	b.registerFlow(t, typ, engine.FlowLimits{MaxLeasedPerKey: i32(2)})
	first := b.createKeyed(t, typ, "a", 1)
	ps := []engine.CreateParams{
		{Type: typ, ConcurrencyKey: "a"}, {Type: typ, ConcurrencyKey: "b"}, {Type: typ, ConcurrencyKey: "a"},
		{Type: free, ConcurrencyKey: "a"}, {Type: typ, ConcurrencyKey: "a"}, {Type: typ, ConcurrencyKey: "b"},
		{Type: free, ConcurrencyKey: "a"}, {Type: free, ConcurrencyKey: "a"},
	}
	res, err := b.eng.CreateRuns(b.ctx, ps)
	if err != nil {
		t.Fatal(err)
	}
	parked := map[string]bool{}
	rows, err := b.pool.Query(b.ctx, `select id::text from workflow.workflow_run where wait_kind = 'limit'`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			t.Fatal(err)
		}
		parked[id] = true
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	// Key a had one run and room for two: one of the batch's three runs of
	// a starts (runs recorded together tie in claim order), the other two
	// wait; b's two runs and the free type's runs are untouched.
	var aParked int
	for i, r := range res {
		p := ps[i]
		switch {
		case p.Type == typ && p.ConcurrencyKey == "a":
			if parked[r.ID] {
				aParked++
			}
		case parked[r.ID]:
			t.Errorf("run %d (%s key %s) parked, want it left alone", i, p.Type, p.ConcurrencyKey)
		}
	}
	if aParked != 2 {
		t.Errorf("%d of the batch's 3 runs of key a parked, want 2", aParked)
	}
	if parked[first[0]] || len(parked) != 2 {
		t.Errorf("parked %d runs (the first run of a parked: %v), want exactly 2", len(parked), parked[first[0]])
	}
}

// A claim reads a type's leased runs and rate windows whole while they are
// few, and probes each candidate's key once there are thousands: with 2,100
// keys leased and counted in the window, both limits still hold key by key
// (a key at its cap starts nothing, a key at its rate starts nothing, a new
// key starts one), and the window counts every start.
func TestFlowLimitsHoldPastThousandsOfKeys(t *testing.T) {
	t.Parallel()
	b := setup(t)
	const typ = "flow.manykeys.v1"
	const keys = 2100
	b.registerFlow(t, typ, engine.FlowLimits{MaxLeasedPerKey: i32(1), RateLimit: i32(2), RatePeriod: time.Hour, RatePerKey: true})
	now := b.clockNow(t)
	b.advanceClock(t, now.Truncate(time.Hour).Add(time.Hour+time.Second).Sub(now))
	ps := make([]engine.CreateParams, keys)
	for i := range ps {
		ps[i] = engine.CreateParams{Type: typ, ConcurrencyKey: fmt.Sprintf("k-%d", i)}
	}
	if _, err := b.eng.CreateRuns(b.ctx, ps); err != nil {
		t.Fatal(err)
	}
	var leased []engine.ClaimedRun
	for len(leased) < keys {
		got := b.claim(t, "w", []string{typ}, 500)
		if len(got) == 0 {
			t.Fatalf("claims stopped at %d runs of %d distinct keys", len(leased), keys)
		}
		leased = append(leased, got...)
	}
	var windows int
	if err := b.pool.QueryRow(b.ctx, `select count(*) from workflow.workflow_flow_window where type = $1`, typ).Scan(&windows); err != nil {
		t.Fatal(err)
	}
	if windows != keys {
		t.Fatalf("%d window rows, want one per key (%d)", windows, keys)
	}

	// k-5 is at its cap (one leased); "fresh" is new.
	busy := b.createKeyed(t, typ, "k-5", 2)
	fresh := b.createKeyed(t, typ, "fresh", 2)
	got := b.claim(t, "w", []string{typ}, 500)
	if len(got) != 1 || (got[0].ID != fresh[0] && got[0].ID != fresh[1]) {
		t.Fatalf("claimed %d runs (%v), want one run of the new key alone", len(got), got)
	}
	if r := b.get(t, busy[0]); r.Wait == nil || r.Wait.Kind != "limit" {
		t.Fatalf("a run of a key at its cap: %s wait %+v, want parked on limit", r.Status, r.Wait)
	}
	// k-5's leased run ends: its slot lets the oldest parked run go, whose
	// start is the key's second in this window; the third waits for the
	// window's end.
	var k5 string
	if err := b.pool.QueryRow(b.ctx, `select id::text from workflow.workflow_run
		where type = $1 and concurrency_key = 'k-5' and status = 'leased'`, typ).Scan(&k5); err != nil {
		t.Fatal(err)
	}
	for _, r := range leased {
		if r.ID == k5 {
			b.completeAll(t, "w", []engine.ClaimedRun{r})
		}
	}
	next := b.claim(t, "w", []string{typ}, 500)
	if len(next) != 1 || (next[0].ID != busy[0] && next[0].ID != busy[1]) {
		t.Fatalf("after k-5's slot freed, claimed %d runs, want one of k-5's parked runs", len(next))
	}
	b.completeAll(t, "w", next)
	if again := b.claim(t, "w", []string{typ}, 500); len(again) != 0 {
		t.Fatalf("claimed %d runs; k-5 used its rate and fresh is at its cap", len(again))
	}
	third := busy[0]
	if next[0].ID == busy[0] {
		third = busy[1]
	}
	if r := b.get(t, third); r.Wait == nil || r.Wait.Kind != "limit" || r.Wait.Until == nil ||
		!r.Wait.Until.Equal(b.clockNow(t).Truncate(time.Hour).Add(time.Hour)) {
		t.Fatalf("k-5's third run: wait %+v, want parked until the window's end", r.Wait)
	}
	var starts int
	if err := b.pool.QueryRow(b.ctx, `select starts from workflow.workflow_flow_window
		where type = $1 and concurrency_key = 'k-5'`, typ).Scan(&starts); err != nil {
		t.Fatal(err)
	}
	if starts != 2 {
		t.Errorf("k-5's window counts %d starts, want 2", starts)
	}
}

// A claim over a limited type and an unlimited one leases every run the
// limits let start, whatever the other type's priority: the window counts
// only runs that started, and the unlimited type fills what is left.
func TestFlowAdmittedRunsAreAllLeased(t *testing.T) {
	t.Parallel()
	b := setup(t)
	const limited, plain = "flow.mixed.limited.v1", "flow.mixed.plain.v1"
	b.registerFlow(t, limited, engine.FlowLimits{RateLimit: i32(100), RatePeriod: time.Hour})
	now := b.clockNow(t)
	b.advanceClock(t, now.Truncate(time.Hour).Add(time.Hour+time.Second).Sub(now))
	// The limited type's runs come last by priority.
	urgent, late := 0, 1000
	ps := make([]engine.CreateParams, 15)
	for i := range ps {
		ps[i] = engine.CreateParams{Type: plain, Priority: &urgent}
		if i < 5 {
			ps[i] = engine.CreateParams{Type: limited, Priority: &late}
		}
	}
	if _, err := b.eng.CreateRuns(b.ctx, ps); err != nil {
		t.Fatal(err)
	}
	lim := ps[:5]

	got := b.claim(t, "w", []string{"flow.mixed."}, 10)
	byType := map[string]int{}
	for _, r := range got {
		byType[r.Type]++
	}
	if byType[limited] != len(lim) || byType[plain] != 10-len(lim) {
		t.Fatalf("claimed %v, want all %d runs the limit let start and %d of the other type", byType, len(lim), 10-len(lim))
	}
	var starts int
	if err := b.pool.QueryRow(b.ctx, `select starts from workflow.workflow_flow_window
		where type = $1 and concurrency_key = ''`, limited).Scan(&starts); err != nil {
		t.Fatal(err)
	}
	if starts != len(lim) {
		t.Errorf("the window counts %d starts, want the %d runs leased", starts, len(lim))
	}
}

// Keys that are valid but hostile to whatever builds text from them (255
// characters; quotes, backslashes, braces and commas of array and JSON
// literals; SQL; non-ASCII; leading and trailing space) are each limited
// on their own through the claim's key reads and window writes, and leave
// another team's runs of an unlimited type, claimed in the same calls,
// untouched.
func TestFlowHostileKeysBesideAnotherTeam(t *testing.T) {
	t.Parallel()
	b := setup(t)
	const typ, other = "flow.hostile.keys.v1", "flow.hostile.other.v1"
	b.registerFlow(t, typ, engine.FlowLimits{MaxLeasedPerKey: i32(1), RateLimit: i32(1), RatePeriod: time.Hour, RatePerKey: true})
	now := b.clockNow(t)
	b.advanceClock(t, now.Truncate(time.Hour).Add(time.Hour+time.Second).Sub(now))
	keys := []string{
		strings.Repeat("k", 255), `a"b`, `a\b`, `{x,y}`, `"{}"`, `NULL`, `'); drop table workflow.workflow_run; --`,
		"ключ-😀", " padded ", `{"k":1}`,
	}
	for _, k := range keys {
		b.createKeyed(t, typ, k, 2)
	}
	bystanders := b.createKeyed(t, other, "", 20)

	claimed := map[string]int{}
	for {
		got := b.claim(t, "w", []string{"flow.hostile."}, 500)
		if len(got) == 0 {
			break
		}
		for _, r := range got {
			claimed[r.ID]++
		}
		b.completeAll(t, "w", got)
	}
	for _, id := range bystanders {
		if claimed[id] != 1 {
			t.Errorf("another team's run %s claimed %d times, want once", id, claimed[id])
		}
	}
	// One start per key in the window (its rate), the key's second run
	// parked until the window's end, and the window row holds the key as given.
	rows, err := b.pool.Query(b.ctx, `select r.concurrency_key, count(*) filter (where r.status = 'succeeded'),
			count(*) filter (where r.wait_kind = 'limit'),
			(select w.starts from workflow.workflow_flow_window w where w.type = r.type and w.concurrency_key = r.concurrency_key)
		from workflow.workflow_run r where r.type = $1 group by r.type, r.concurrency_key`, typ)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	seen := 0
	for rows.Next() {
		var key string
		var done, parked int
		var starts *int
		if err := rows.Scan(&key, &done, &parked, &starts); err != nil {
			t.Fatal(err)
		}
		seen++
		if done != 1 || parked != 1 || starts == nil || *starts != 1 {
			t.Errorf("key %q: %d succeeded, %d parked, window starts %v; want 1, 1, 1", key, done, parked, starts)
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if seen != len(keys) {
		t.Errorf("%d keys in the inbox, want %d", seen, len(keys))
	}
}
