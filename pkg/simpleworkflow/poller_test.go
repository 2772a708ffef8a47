package simpleworkflow_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/simple-workflow/simple-workflow/pkg/simpleworkflow"
)

// 8 pollers × 16 handlers work 5,000 runs, a tenth of which fail their first
// attempt: every run succeeds, every attempt executes exactly once, and no run
// is ever executed by two handlers at the same time.
func TestManyPollersWorkEveryRunExactlyOncePerAttempt(t *testing.T) {
	t.Parallel()
	b := setup(t)
	const (
		runs        = 5000
		pollers     = 8
		concurrency = 16
	)
	pool, err := pgxpool.New(b.ctx, b.url)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	// Bulk insert as a producer would, with a fast retry policy.
	if _, err := pool.Exec(b.ctx, `insert into workflow.workflow_run (type, payload, retry_base_delay, idempotency_key)
		select 'load.work.v1', jsonb_build_object('n', g), interval '50 milliseconds', 'load:' || g
		from generate_series(1, $1) g`, runs); err != nil {
		t.Fatal(err)
	}

	var (
		inFlight   sync.Map // run id -> struct{}
		executions sync.Map // "id#attempt" -> *atomic.Int32
		overlaps   atomic.Int32
		doneCount  atomic.Int32
	)
	handler := func(ctx context.Context, task *simpleworkflow.Task) (json.RawMessage, error) {
		if _, busy := inFlight.LoadOrStore(task.ID, struct{}{}); busy {
			overlaps.Add(1)
		}
		defer inFlight.Delete(task.ID)
		c, _ := executions.LoadOrStore(fmt.Sprintf("%s#%d", task.ID, task.Attempt), new(atomic.Int32))
		c.(*atomic.Int32).Add(1)
		var in struct{ N int }
		if err := task.Decode(&in); err != nil {
			return nil, simpleworkflow.Permanent(err)
		}
		if in.N%10 == 0 && task.Attempt == 1 {
			return nil, errTest
		}
		doneCount.Add(1)
		return simpleworkflow.JSONResult(map[string]int{"n": in.N})
	}
	for i := range pollers {
		b.startPoller(t, simpleworkflow.PollerConfig{
			TypePrefixes: []string{"load."}, WorkerID: fmt.Sprintf("load-worker-%d", i),
			Concurrency: concurrency, PollInterval: 50 * time.Millisecond, LeaseDuration: 30 * time.Second,
		}, map[string]simpleworkflow.HandlerFunc{"load.work.v1": handler})
	}
	waitFor(t, 2*time.Minute, "all runs to succeed", func() (bool, error) {
		var n int
		err := pool.QueryRow(b.ctx, "select count(*) from workflow.workflow_run where status = 'succeeded'").Scan(&n)
		return n == runs, err
	})

	if n := overlaps.Load(); n != 0 {
		t.Fatalf("%d times a run was executed by two handlers at once", n)
	}
	attempts := 0
	executions.Range(func(k, v any) bool {
		attempts++
		if c := v.(*atomic.Int32).Load(); c != 1 {
			t.Errorf("attempt %s executed %d times", k, c)
		}
		return true
	})
	if want := runs + runs/10; attempts != want {
		t.Fatalf("%d distinct attempts executed, want %d", attempts, want)
	}
	if got := doneCount.Load(); got != runs {
		t.Fatalf("%d successful handler calls, want %d", got, runs)
	}
	// The audit trail agrees: per run, one created, one started (the
	// lease) per attempt and no separate leased event, the right number of retries, one succeeded.
	rows, err := pool.Query(b.ctx, `select r.attempt,
			count(*) filter (where e.event_type = 'created'),
			count(*) filter (where e.event_type = 'leased'),
			count(*) filter (where e.event_type = 'started'),
			count(*) filter (where e.event_type = 'retried'),
			count(*) filter (where e.event_type = 'succeeded'),
			count(*) filter (where e.event_type = 'failed')
		from workflow.workflow_run r join workflow.run_event e on e.workflow_id = r.id
		group by r.id, r.attempt`)
	if err != nil {
		t.Fatal(err)
	}
	checked := 0
	for rows.Next() {
		var attempt, created, leased, started, retried, succeeded, failed int
		if err := rows.Scan(&attempt, &created, &leased, &started, &retried, &succeeded, &failed); err != nil {
			t.Fatal(err)
		}
		if created != 1 || leased != 0 || started != attempt || retried != attempt-1 || succeeded != 1 || failed != 0 {
			t.Fatalf("event counts for a run with %d attempts: created %d leased %d started %d retried %d succeeded %d failed %d",
				attempt, created, leased, started, retried, succeeded, failed)
		}
		checked++
	}
	if rows.Err() != nil || checked != runs {
		t.Fatalf("checked %d runs (%v), want %d", checked, rows.Err(), runs)
	}
}

// A cancelled run stops its handler within one heartbeat, and stays cancelled.
func TestCancelStopsHandlerWithinOneHeartbeat(t *testing.T) {
	t.Parallel()
	b := setup(t)
	started := make(chan struct{})
	stopped := make(chan error, 1)
	b.startPoller(t, simpleworkflow.PollerConfig{
		TypePrefixes: []string{"cancel."}, LeaseDuration: 3 * time.Second, // heartbeat every 1s
	}, map[string]simpleworkflow.HandlerFunc{"cancel.wait.v1": func(ctx context.Context, _ *simpleworkflow.Task) (json.RawMessage, error) {
		close(started)
		<-ctx.Done()
		stopped <- context.Cause(ctx)
		return nil, ctx.Err()
	}})
	res, err := b.client.Create(b.ctx, "cancel.wait.v1", nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	<-started
	at := time.Now()
	if ok, err := b.client.Cancel(b.ctx, res.ID); !ok || err != nil {
		t.Fatalf("cancel: %v %v", ok, err)
	}
	select {
	case cause := <-stopped:
		if !errors.Is(cause, simpleworkflow.ErrRunCancelled) {
			t.Fatalf("handler context cause %v, want ErrRunCancelled", cause)
		}
		// The notification usually stops it within milliseconds; the bound is
		// one heartbeat interval (1s) plus the heartbeat's round trip.
		if d := time.Since(at); d > 1500*time.Millisecond {
			t.Fatalf("handler stopped %s after the cancel, more than one heartbeat", d)
		}
	case <-time.After(3 * time.Second):
		t.Fatal("handler still running one heartbeat after the cancel")
	}
	// Over the next heartbeats nothing overwrites the cancellation.
	for deadline := time.Now().Add(1500 * time.Millisecond); time.Now().Before(deadline); {
		run, err := b.client.Get(b.ctx, res.ID)
		if err != nil || run.Status != simpleworkflow.StatusCancelled {
			t.Fatalf("run status %v (%v), want cancelled", run.Status, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	assertTrail(t, b.events(t, res.ID), simpleworkflow.EventCreated,
		simpleworkflow.EventStarted, simpleworkflow.EventCancelled)
}

// When the cancellation notification is lost, the next heartbeat still stops
// the handler.
func TestCancelSeenByHeartbeatWithoutNotification(t *testing.T) {
	t.Parallel()
	b := setup(t)
	started := make(chan struct{})
	stopped := make(chan error, 1)
	b.startPoller(t, simpleworkflow.PollerConfig{
		TypePrefixes: []string{"cancelhb."}, LeaseDuration: 3 * time.Second,
	}, map[string]simpleworkflow.HandlerFunc{"cancelhb.wait.v1": func(ctx context.Context, _ *simpleworkflow.Task) (json.RawMessage, error) {
		close(started)
		<-ctx.Done()
		stopped <- context.Cause(ctx)
		return nil, ctx.Err()
	}})
	res, err := b.client.Create(b.ctx, "cancelhb.wait.v1", nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	<-started
	conn, err := pgx.Connect(b.ctx, b.url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(b.ctx)
	// With triggers off for this session the cancellation sends no
	// notification, as if the worker had missed it: only the heartbeat can
	// notice.
	if _, err := conn.Exec(b.ctx, "set session_replication_role = replica"); err != nil {
		t.Fatal(err)
	}
	at := time.Now()
	if _, err := conn.Exec(b.ctx, `update workflow.workflow_run set status = 'cancelled', updated_at = now()
		where id = $1 and status in ('pending', 'leased')`, res.ID); err != nil {
		t.Fatal(err)
	}
	select {
	case cause := <-stopped:
		if !errors.Is(cause, simpleworkflow.ErrRunCancelled) {
			t.Fatalf("cause %v, want ErrRunCancelled", cause)
		}
		// One heartbeat interval (1s), plus the heartbeat's own round trip.
		if d := time.Since(at); d > 1500*time.Millisecond {
			t.Fatalf("handler stopped %s after the cancel, more than one heartbeat", d)
		}
	case <-time.After(3 * time.Second):
		t.Fatal("handler still running after a heartbeat")
	}
}

func TestRetriesThenSuccessWithEventTrail(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.startPoller(t, simpleworkflow.PollerConfig{TypePrefixes: []string{"retry."}, PollInterval: 50 * time.Millisecond},
		map[string]simpleworkflow.HandlerFunc{"retry.flaky.v1": func(_ context.Context, task *simpleworkflow.Task) (json.RawMessage, error) {
			if task.Attempt < 3 {
				return nil, fmt.Errorf("attempt %d: %w", task.Attempt, errTest)
			}
			return json.RawMessage(`{"ok":true}`), nil
		}})
	res, err := b.client.Create(b.ctx, "retry.flaky.v1", nil, &simpleworkflow.CreateOptions{
		MaxAttempts: 3, RetryPolicy: &simpleworkflow.RetryPolicy{BaseDelay: 100 * time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	run := b.waitStatus(t, res.ID, simpleworkflow.StatusSucceeded, 30*time.Second)
	if run.Attempt != 3 || string(run.Result) != `{"ok": true}` || run.LastError == "" {
		t.Fatalf("run %+v", run)
	}
	assertTrail(t, b.events(t, res.ID), simpleworkflow.EventCreated,
		simpleworkflow.EventStarted, simpleworkflow.EventRetried,
		simpleworkflow.EventStarted, simpleworkflow.EventRetried,
		simpleworkflow.EventStarted, simpleworkflow.EventSucceeded)

	// Out of attempts: failed, with a permanent error failing at once.
	b.startPoller(t, simpleworkflow.PollerConfig{TypePrefixes: []string{"doomed."}, PollInterval: 50 * time.Millisecond},
		map[string]simpleworkflow.HandlerFunc{
			"doomed.always.v1": func(context.Context, *simpleworkflow.Task) (json.RawMessage, error) { return nil, errTest },
			"doomed.permanent.v1": func(context.Context, *simpleworkflow.Task) (json.RawMessage, error) {
				return nil, simpleworkflow.Permanent(errTest)
			},
			"doomed.panics.v1": func(context.Context, *simpleworkflow.Task) (json.RawMessage, error) { panic("boom") },
		})
	always, _ := b.client.Create(b.ctx, "doomed.always.v1", nil, &simpleworkflow.CreateOptions{
		MaxAttempts: 2, RetryPolicy: &simpleworkflow.RetryPolicy{BaseDelay: 50 * time.Millisecond}})
	perm, _ := b.client.Create(b.ctx, "doomed.permanent.v1", nil, &simpleworkflow.CreateOptions{MaxAttempts: 5})
	panics, _ := b.client.Create(b.ctx, "doomed.panics.v1", nil, &simpleworkflow.CreateOptions{MaxAttempts: 1})
	if r := b.waitStatus(t, always.ID, simpleworkflow.StatusFailed, 30*time.Second); r.Attempt != 2 {
		t.Fatalf("exhausted run attempt %d, want 2", r.Attempt)
	}
	assertTrail(t, b.events(t, always.ID), simpleworkflow.EventCreated,
		simpleworkflow.EventStarted, simpleworkflow.EventRetried,
		simpleworkflow.EventStarted, simpleworkflow.EventFailed)
	if r := b.waitStatus(t, perm.ID, simpleworkflow.StatusFailed, 30*time.Second); r.Attempt != 1 {
		t.Fatalf("permanent failure took %d attempts, want 1", r.Attempt)
	}
	if r := b.waitStatus(t, panics.ID, simpleworkflow.StatusFailed, 30*time.Second); r.LastError == "" {
		t.Fatal("a panicking handler left no error")
	}
}

// Graceful shutdown: handlers that finish within the grace period are
// recorded; the others are cancelled and their runs handed back, pending at
// once with the attempt not counted.
func TestGracefulShutdownHandsRunsBack(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var started sync.WaitGroup
	started.Add(2)
	stop := b.startPoller(t, simpleworkflow.PollerConfig{
		TypePrefixes: []string{"shut."}, ShutdownGracePeriod: 700 * time.Millisecond, Concurrency: 4,
	}, map[string]simpleworkflow.HandlerFunc{
		"shut.quick.v1": func(ctx context.Context, _ *simpleworkflow.Task) (json.RawMessage, error) {
			started.Done()
			time.Sleep(300 * time.Millisecond) // finishes inside the grace period
			return json.RawMessage(`{"finished":true}`), nil
		},
		"shut.slow.v1": func(ctx context.Context, _ *simpleworkflow.Task) (json.RawMessage, error) {
			started.Done()
			<-ctx.Done()
			return nil, context.Cause(ctx)
		},
	})
	quick, _ := b.client.Create(b.ctx, "shut.quick.v1", nil, nil)
	slow, _ := b.client.Create(b.ctx, "shut.slow.v1", nil, nil)
	started.Wait()
	stop()
	if r := b.waitStatus(t, quick.ID, simpleworkflow.StatusSucceeded, 5*time.Second); string(r.Result) != `{"finished": true}` {
		t.Fatalf("quick run result %s", r.Result)
	}
	r, err := b.client.Get(b.ctx, slow.ID)
	if err != nil {
		t.Fatal(err)
	}
	if r.Status != simpleworkflow.StatusPending || r.Attempt != 0 || time.Until(r.RunAt) > 0 {
		t.Fatalf("slow run after shutdown: status %s attempt %d run_at %s; want pending, attempt 0, claimable now", r.Status, r.Attempt, r.RunAt)
	}
	evs, _ := b.client.Events(b.ctx, slow.ID)
	last := evs[len(evs)-1]
	if last.Type != simpleworkflow.EventRetried || !json.Valid(last.Data) {
		t.Fatalf("last event %s %s", last.Type, last.Data)
	}
	var data map[string]any
	_ = json.Unmarshal(last.Data, &data)
	if data["reason"] != "released" {
		t.Fatalf("hand-back event data %s", last.Data)
	}
	// Another worker picks it up at once with attempt 1.
	got := make(chan int, 1)
	b.startPoller(t, simpleworkflow.PollerConfig{TypePrefixes: []string{"shut."}},
		map[string]simpleworkflow.HandlerFunc{"shut.slow.v1": func(_ context.Context, task *simpleworkflow.Task) (json.RawMessage, error) {
			got <- task.Attempt
			return nil, nil
		}})
	select {
	case a := <-got:
		if a != 1 {
			t.Fatalf("reclaimed with attempt %d, want 1", a)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("handed-back run was not reclaimed")
	}
}

// A run inserted into an idle queue starts within moments: the worker is
// woken by the insert's notification, not by its poll interval.
func TestNotificationWakesIdleWorker(t *testing.T) {
	t.Parallel()
	b := setup(t)
	started := make(chan time.Time, 1)
	b.startPoller(t, simpleworkflow.PollerConfig{TypePrefixes: []string{"wake."}, PollInterval: time.Hour},
		map[string]simpleworkflow.HandlerFunc{"wake.up.v1": func(context.Context, *simpleworkflow.Task) (json.RawMessage, error) {
			started <- time.Now()
			return nil, nil
		}})
	// Wait until the worker is LISTENing, so only the notification can wake it.
	waitFor(t, 10*time.Second, "the worker to LISTEN", func() (bool, error) {
		var n int
		err := b.client.Pool().QueryRow(b.ctx, `select count(*) from pg_stat_activity
			where datname = current_database() and query ilike 'listen%'`).Scan(&n)
		return n > 0, err
	})
	at := time.Now()
	if _, err := b.client.Create(b.ctx, "wake.up.v1", nil, nil); err != nil {
		t.Fatal(err)
	}
	select {
	case s := <-started:
		if d := s.Sub(at); d > 2*time.Second {
			t.Fatalf("started %s after the insert", d)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("an idle worker with an hour-long poll interval was not woken by the insert")
	}
}
