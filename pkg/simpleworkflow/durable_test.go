package simpleworkflow_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/simple-workflow/simple-workflow/pkg/simpleworkflow"
)

// counters counts how often each step body ran.
type counters struct {
	mu sync.Mutex
	n  map[string]int
}

func (c *counters) inc(key string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.n == nil {
		c.n = map[string]int{}
	}
	c.n[key]++
}

func (c *counters) get(key string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n[key]
}

// A retried attempt replays recorded steps instead of running them again.
func TestStepsReplayOnRetry(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var runs counters
	handler := func(ctx context.Context, task *simpleworkflow.Task) (json.RawMessage, error) {
		a, err := simpleworkflow.Step(ctx, task, "reserve", func(context.Context) (int, error) {
			runs.inc("reserve")
			return 7, nil
		})
		if err != nil {
			return nil, err
		}
		c, err := simpleworkflow.Step(ctx, task, "charge", func(context.Context) (string, error) {
			runs.inc("charge")
			return fmt.Sprintf("charged-%d", a), nil
		})
		if err != nil {
			return nil, err
		}
		if task.Attempt == 1 {
			return nil, errTest
		}
		return simpleworkflow.JSONResult(map[string]any{"a": a, "c": c})
	}
	b.startPoller(t, simpleworkflow.PollerConfig{TypePrefixes: []string{"replay."}},
		map[string]simpleworkflow.HandlerFunc{"replay.a.v1": handler})
	res, err := b.client.Create(b.ctx, "replay.a.v1", nil, &simpleworkflow.CreateOptions{
		RetryPolicy: &simpleworkflow.RetryPolicy{BaseDelay: time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	run := b.waitStatus(t, res.ID, simpleworkflow.StatusSucceeded, 20*time.Second)
	if run.Attempt != 2 || string(run.Result) != `{"a": 7, "c": "charged-7"}` {
		t.Fatalf("run %+v result %s", run, run.Result)
	}
	if runs.get("reserve") != 1 || runs.get("charge") != 1 {
		t.Fatalf("step bodies ran %v times, want once each", runs.n)
	}
	steps, err := b.client.Steps(b.ctx, res.ID)
	if err != nil || len(steps) != 2 || steps[0].Name != "reserve" || steps[1].Attempt != 1 {
		t.Fatalf("journal %+v %v", steps, err)
	}
}

// A sleeping run frees its slot: a concurrency-1 worker runs other runs
// meanwhile, and the sleeper wakes within a second of its time.
func TestSleepFreesTheSlotAndWakesOnTime(t *testing.T) {
	t.Parallel()
	b := setup(t)
	const nap = 1500 * time.Millisecond
	var woke atomic.Int64
	handlers := map[string]simpleworkflow.HandlerFunc{
		"nap.sleep.v1": func(ctx context.Context, task *simpleworkflow.Task) (json.RawMessage, error) {
			if err := task.Sleep(ctx, "nap", nap); err != nil {
				return nil, err
			}
			woke.Store(time.Now().UnixNano())
			return nil, nil
		},
		"nap.quick.v1": func(context.Context, *simpleworkflow.Task) (json.RawMessage, error) { return nil, nil },
	}
	b.startPoller(t, simpleworkflow.PollerConfig{TypePrefixes: []string{"nap."}, Concurrency: 1, PollInterval: 10 * time.Second}, handlers)
	sleeper, err := b.client.Create(b.ctx, "nap.sleep.v1", nil, &simpleworkflow.CreateOptions{MaxAttempts: 1})
	if err != nil {
		t.Fatal(err)
	}
	var until time.Time
	waitFor(t, 10*time.Second, "the sleeper to park", func() (bool, error) {
		r, err := b.client.Get(b.ctx, sleeper.ID)
		if err != nil || r.Wait == nil {
			return false, err
		}
		until = *r.Wait.Until
		return r.Status == simpleworkflow.StatusPending, nil
	})
	quick, err := b.client.Create(b.ctx, "nap.quick.v1", nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	b.waitStatus(t, quick.ID, simpleworkflow.StatusSucceeded, 5*time.Second)
	if r, _ := b.client.Get(b.ctx, sleeper.ID); r.Status != simpleworkflow.StatusPending {
		t.Fatalf("the other run finished while the sleeper was %s", r.Status)
	}
	b.waitStatus(t, sleeper.ID, simpleworkflow.StatusSucceeded, 10*time.Second)
	late := time.Unix(0, woke.Load()).Sub(until)
	if late > time.Second || late < 0 {
		t.Fatalf("woke %s after its time, want within 1s (the poll interval is 10s, so only the wake-up timer can do it)", late)
	}
	t.Logf("sleeper woke %s after its time", late)
	assertTrail(t, b.events(t, sleeper.ID), simpleworkflow.EventCreated, simpleworkflow.EventStarted,
		simpleworkflow.EventWaiting, simpleworkflow.EventWoken, simpleworkflow.EventStarted,
		simpleworkflow.EventSucceeded)
}

// Signals: sent before the wait, deduplicated by key, and the timeout path.
func TestWaitForSignal(t *testing.T) {
	t.Parallel()
	b := setup(t)
	type out struct {
		Payload  json.RawMessage `json:"payload"`
		Received bool            `json:"received"`
	}
	handler := func(ctx context.Context, task *simpleworkflow.Task) (json.RawMessage, error) {
		var in struct {
			TimeoutMS int `json:"timeoutMs"`
		}
		if err := task.Decode(&in); err != nil {
			return nil, err
		}
		var got []out
		for range 2 {
			p, ok, err := task.WaitForSignal(ctx, "approve", time.Duration(in.TimeoutMS)*time.Millisecond)
			if err != nil {
				return nil, err
			}
			got = append(got, out{p, ok})
		}
		return simpleworkflow.JSONResult(got)
	}
	b.startPoller(t, simpleworkflow.PollerConfig{TypePrefixes: []string{"sig."}}, map[string]simpleworkflow.HandlerFunc{"sig.a.v1": handler})

	// Sent before the wait (the run is not due yet), twice with one key:
	// received once; the second wait times out.
	res, err := b.client.Create(b.ctx, "sig.a.v1", map[string]any{"timeoutMs": 400}, &simpleworkflow.CreateOptions{RunAt: time.Now().Add(time.Second)})
	if err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if _, err := b.client.Signal(b.ctx, res.ID, "approve", map[string]any{"by": "alice"}, &simpleworkflow.SignalOptions{IdempotencyKey: "k"}); err != nil {
			t.Fatal(err)
		}
	}
	run := b.waitStatus(t, res.ID, simpleworkflow.StatusSucceeded, 15*time.Second)
	if string(run.Result) != `[{"payload": {"by": "alice"}, "received": true}, {"payload": null, "received": false}]` {
		t.Fatalf("result %s", run.Result)
	}
	// Signals to a waiting run wake it.
	res2, err := b.client.Create(b.ctx, "sig.a.v1", map[string]any{"timeoutMs": 0}, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		waitFor(t, 10*time.Second, "the run to wait", func() (bool, error) {
			r, err := b.client.Get(b.ctx, res2.ID)
			return err == nil && r.Wait != nil && r.Wait.Kind == "signal", err
		})
		sr, err := b.client.Signal(b.ctx, res2.ID, "approve", i, nil)
		if err != nil || !sr.Delivered {
			t.Fatalf("signal %d: %+v %v", i, sr, err)
		}
	}
	run = b.waitStatus(t, res2.ID, simpleworkflow.StatusSucceeded, 10*time.Second)
	if string(run.Result) != `[{"payload": 0, "received": true}, {"payload": 1, "received": true}]` {
		t.Fatalf("result %s", run.Result)
	}
	if _, err := b.client.Signal(b.ctx, res2.ID, "approve", nil, nil); !errors.Is(err, simpleworkflow.ErrRunFinished) {
		t.Fatalf("signal to a finished run: %v", err)
	}
	if _, err := b.client.Signal(b.ctx, "7b0c2f5e-0000-4000-8000-000000000000", "approve", nil, nil); !errors.Is(err, simpleworkflow.ErrNotFound) {
		t.Fatalf("signal to an unknown run: %v", err)
	}
}

// Children: started once across replays, awaited with their result or
// error; cancelling the parent cancels the child.
func TestChildRunsFromHandlers(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var starts atomic.Int32
	handlers := map[string]simpleworkflow.HandlerFunc{
		"fam.parent.v1": func(ctx context.Context, task *simpleworkflow.Task) (json.RawMessage, error) {
			var in struct {
				Child string `json:"child"`
			}
			if err := task.Decode(&in); err != nil {
				return nil, err
			}
			id, err := task.StartChild(ctx, "kid", in.Child, &simpleworkflow.ChildOptions{Payload: map[string]any{"n": 2}})
			if err != nil {
				return nil, err
			}
			starts.Add(1)
			res, err := task.AwaitChild(ctx, "kid")
			var failed *simpleworkflow.ChildFailedError
			if errors.As(err, &failed) {
				return simpleworkflow.JSONResult(map[string]any{"child": id, "error": failed.Message})
			}
			if err != nil {
				return nil, err
			}
			return simpleworkflow.JSONResult(map[string]any{"child": id, "result": res})
		},
		"fam.double.v1": func(ctx context.Context, task *simpleworkflow.Task) (json.RawMessage, error) {
			// Finish only once the parent has parked in AwaitChild, so that
			// the parent must wake and replay StartChild.
			self, err := b.client.Get(ctx, task.ID)
			if err != nil {
				return nil, err
			}
			for end := time.Now().Add(10 * time.Second); time.Now().Before(end); time.Sleep(10 * time.Millisecond) {
				if p, err := b.client.Get(ctx, self.ParentID); err == nil && p.Wait != nil {
					break
				}
			}
			var in struct{ N int }
			if err := task.Decode(&in); err != nil {
				return nil, err
			}
			return simpleworkflow.JSONResult(in.N * 2)
		},
		"fam.broken.v1": func(context.Context, *simpleworkflow.Task) (json.RawMessage, error) {
			return nil, simpleworkflow.Permanent(errors.New("out of stock"))
		},
	}
	b.startPoller(t, simpleworkflow.PollerConfig{TypePrefixes: []string{"fam."}}, handlers)

	ok, err := b.client.Create(b.ctx, "fam.parent.v1", map[string]any{"child": "fam.double.v1"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	run := b.waitStatus(t, ok.ID, simpleworkflow.StatusSucceeded, 15*time.Second)
	var got struct {
		Child  string `json:"child"`
		Result int    `json:"result"`
	}
	if err := json.Unmarshal(run.Result, &got); err != nil || got.Result != 4 {
		t.Fatalf("parent result %s (%v)", run.Result, err)
	}
	if starts.Load() < 2 {
		t.Fatalf("the parent ran %d times; it must have replayed StartChild after parking", starts.Load())
	}
	var children int
	if err := b.client.Pool().QueryRow(b.ctx, "select count(*) from workflow.workflow_run where parent_id = $1", ok.ID).Scan(&children); err != nil || children != 1 {
		t.Fatalf("%d children (%v), want exactly 1 after replays", children, err)
	}
	bad, err := b.client.Create(b.ctx, "fam.parent.v1", map[string]any{"child": "fam.broken.v1"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	run = b.waitStatus(t, bad.ID, simpleworkflow.StatusSucceeded, 15*time.Second)
	if !strings.Contains(string(run.Result), `"error": "out of stock"`) {
		t.Fatalf("parent of a failed child: %s", run.Result)
	}
	// Cancelling a parent waiting for a child that no worker serves cancels
	// the child.
	stuck, err := b.client.Create(b.ctx, "fam.parent.v1", map[string]any{"child": "nobody.serves.v1"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	var childID string
	waitFor(t, 10*time.Second, "the parent to wait for its child", func() (bool, error) {
		r, err := b.client.Get(b.ctx, stuck.ID)
		if err != nil || r.Wait == nil {
			return false, err
		}
		steps, err := b.client.Steps(b.ctx, stuck.ID)
		if err != nil || len(steps) == 0 {
			return false, err
		}
		childID = steps[0].ChildID
		return true, nil
	})
	if _, err := b.client.Cancel(b.ctx, stuck.ID); err != nil {
		t.Fatal(err)
	}
	b.waitStatus(t, childID, simpleworkflow.StatusCancelled, 5*time.Second)
}

// A deadline passing while the handler runs cancels its context with
// ErrDeadlineExceeded and fails the run.
func TestDeadlineCancelsARunningHandler(t *testing.T) {
	t.Parallel()
	b := setup(t)
	cause := make(chan error, 1)
	handler := func(ctx context.Context, _ *simpleworkflow.Task) (json.RawMessage, error) {
		<-ctx.Done()
		cause <- context.Cause(ctx)
		return nil, ctx.Err()
	}
	b.startPoller(t, simpleworkflow.PollerConfig{TypePrefixes: []string{"late."}, LeaseDuration: 3 * time.Second, HeartbeatInterval: 200 * time.Millisecond},
		map[string]simpleworkflow.HandlerFunc{"late.a.v1": handler})
	res, err := b.client.Create(b.ctx, "late.a.v1", nil, &simpleworkflow.CreateOptions{Deadline: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-cause:
		if !errors.Is(err, simpleworkflow.ErrDeadlineExceeded) {
			t.Fatalf("handler cancelled with %v, want ErrDeadlineExceeded", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the handler was not cancelled at its deadline")
	}
	run := b.waitStatus(t, res.ID, simpleworkflow.StatusFailed, 5*time.Second)
	if run.LastError != "deadline exceeded" {
		t.Fatalf("last error %q", run.LastError)
	}
}

// Code that reaches a different step than the journal holds fails the run
// for good with the non-determinism in words.
func TestNonDeterminismFailsTheRun(t *testing.T) {
	t.Parallel()
	b := setup(t)
	handler := func(ctx context.Context, task *simpleworkflow.Task) (json.RawMessage, error) {
		name := "charge"
		if task.Attempt > 1 {
			name = "refund"
		}
		if _, err := simpleworkflow.Step(ctx, task, "reserve", func(context.Context) (int, error) { return 1, nil }); err != nil {
			return nil, err
		}
		if _, err := simpleworkflow.Step(ctx, task, name, func(context.Context) (int, error) { return 2, nil }); err != nil {
			return nil, err
		}
		if task.Attempt == 1 {
			return nil, errTest
		}
		return nil, nil
	}
	b.startPoller(t, simpleworkflow.PollerConfig{TypePrefixes: []string{"nd."}}, map[string]simpleworkflow.HandlerFunc{"nd.a.v1": handler})
	res, err := b.client.Create(b.ctx, "nd.a.v1", nil, &simpleworkflow.CreateOptions{MaxAttempts: 5,
		RetryPolicy: &simpleworkflow.RetryPolicy{BaseDelay: time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	run := b.waitStatus(t, res.ID, simpleworkflow.StatusFailed, 15*time.Second)
	if run.Attempt != 2 || run.LastError != `non-deterministic: expected step "charge" at position 1, got "refund"` {
		t.Fatalf("attempt %d, error %q", run.Attempt, run.LastError)
	}
}

// Limits fail loudly at write time.
func TestStepLimitsFromHandlers(t *testing.T) {
	t.Parallel()
	b := setup(t)
	errs := make(chan error, 3)
	handler := func(ctx context.Context, task *simpleworkflow.Task) (json.RawMessage, error) {
		_, err := task.Step(ctx, "bad name!", func(context.Context) (json.RawMessage, error) { return nil, nil })
		errs <- err
		_, err = task.Step(ctx, "big", func(context.Context) (json.RawMessage, error) {
			return json.RawMessage(`"` + strings.Repeat("x", simpleworkflow.MaxStepOutputBytes) + `"`), nil
		})
		errs <- err
		return nil, err
	}
	b.startPoller(t, simpleworkflow.PollerConfig{TypePrefixes: []string{"lim."}}, map[string]simpleworkflow.HandlerFunc{"lim.a.v1": handler})
	res, err := b.client.Create(b.ctx, "lim.a.v1", nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"may contain only letters", "the limit is 1048576"} {
		err := <-errs
		if !errors.Is(err, simpleworkflow.ErrInvalid) || !simpleworkflow.IsPermanent(err) || !strings.Contains(err.Error(), want) {
			t.Fatalf("error %v, want a permanent ErrInvalid saying %q", err, want)
		}
	}
	run := b.waitStatus(t, res.ID, simpleworkflow.StatusFailed, 10*time.Second)
	if run.Attempt != 1 {
		t.Fatalf("a limit error was retried: attempt %d", run.Attempt)
	}
}

// A handler that succeeds just after the shutdown grace
// period (its context already cancelled) is completed, not handed back and
// run again.
func TestSuccessAfterTheGracePeriodIsCompleted(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var calls atomic.Int32
	started := make(chan struct{})
	handler := func(ctx context.Context, _ *simpleworkflow.Task) (json.RawMessage, error) {
		calls.Add(1)
		close(started)
		<-ctx.Done()
		time.Sleep(100 * time.Millisecond) // finishes its work regardless
		return json.RawMessage(`{"done":true}`), nil
	}
	stop := b.startPoller(t, simpleworkflow.PollerConfig{TypePrefixes: []string{"grace."}, ShutdownGracePeriod: 200 * time.Millisecond},
		map[string]simpleworkflow.HandlerFunc{"grace.a.v1": handler})
	res, err := b.client.Create(b.ctx, "grace.a.v1", nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	<-started
	stop()
	run, err := b.client.Get(b.ctx, res.ID)
	if err != nil {
		t.Fatal(err)
	}
	if run.Status != simpleworkflow.StatusSucceeded || string(run.Result) != `{"done": true}` || calls.Load() != 1 {
		t.Fatalf("run %s result %s after %d calls, want succeeded once", run.Status, run.Result, calls.Load())
	}
}

// A worker claims only the types it has handlers for, so
// a v2 reaching an old worker during a rolling deploy waits for a new one
// instead of burning its attempts on "no handler".
func TestWorkerClaimsOnlyHandledTypes(t *testing.T) {
	t.Parallel()
	b := setup(t)
	noop := func(context.Context, *simpleworkflow.Task) (json.RawMessage, error) { return nil, nil }
	b.startPoller(t, simpleworkflow.PollerConfig{TypePrefixes: []string{"roll."}}, map[string]simpleworkflow.HandlerFunc{"roll.job.v1": noop})
	v2, err := b.client.Create(b.ctx, "roll.job.v2", nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	v1, err := b.client.Create(b.ctx, "roll.job.v1", nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	b.waitStatus(t, v1.ID, simpleworkflow.StatusSucceeded, 10*time.Second)
	if r, _ := b.client.Get(b.ctx, v2.ID); r.Status != simpleworkflow.StatusPending || r.Attempt != 0 {
		t.Fatalf("the unhandled v2 run is %s at attempt %d, want untouched", r.Status, r.Attempt)
	}
	// The new worker, with the v2 handler, takes it.
	b.startPoller(t, simpleworkflow.PollerConfig{TypePrefixes: []string{"roll."}}, map[string]simpleworkflow.HandlerFunc{"roll.job.v2": noop})
	b.waitStatus(t, v2.ID, simpleworkflow.StatusSucceeded, 10*time.Second)
	p, err := simpleworkflow.NewPoller(b.client, simpleworkflow.PollerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Run(b.ctx); !errors.Is(err, simpleworkflow.ErrInvalid) {
		t.Fatalf("a poller without handlers ran: %v", err)
	}
}

// A result Postgres cannot store (\u0000) and an error text
// with NUL bytes and invalid UTF-8 no longer fail the whole batch of
// outcomes: the bad result fails its own run for good, saying why; the
// error text is cleaned (and says so); the neighbours are recorded.
func TestPoisonOutcomesAffectOnlyTheirRun(t *testing.T) {
	t.Parallel()
	b := setup(t)
	release := make(chan struct{})
	var arrived sync.WaitGroup
	arrived.Add(3)
	wait := func() { arrived.Done(); <-release }
	handlers := map[string]simpleworkflow.HandlerFunc{
		"poison.nulresult.v1": func(context.Context, *simpleworkflow.Task) (json.RawMessage, error) {
			wait()
			return json.RawMessage(`{"s":"a\u0000b"}`), nil
		},
		"poison.nulerror.v1": func(context.Context, *simpleworkflow.Task) (json.RawMessage, error) {
			wait()
			return nil, simpleworkflow.Permanent(errors.New("bad\x00byte and \xff\xfe"))
		},
		"poison.fine.v1": func(context.Context, *simpleworkflow.Task) (json.RawMessage, error) {
			wait()
			return json.RawMessage(`{"ok":true}`), nil
		},
	}
	b.startPoller(t, simpleworkflow.PollerConfig{TypePrefixes: []string{"poison."}, Concurrency: 3}, handlers)
	ids := map[string]string{}
	for _, typ := range []string{"poison.nulresult.v1", "poison.nulerror.v1", "poison.fine.v1"} {
		res, err := b.client.Create(b.ctx, typ, nil, &simpleworkflow.CreateOptions{MaxAttempts: 3})
		if err != nil {
			t.Fatal(err)
		}
		ids[typ] = res.ID
	}
	arrived.Wait()
	close(release) // all three return at once: one batch of outcomes
	fine := b.waitStatus(t, ids["poison.fine.v1"], simpleworkflow.StatusSucceeded, 10*time.Second)
	if string(fine.Result) != `{"ok": true}` {
		t.Fatalf("neighbour result %s", fine.Result)
	}
	bad := b.waitStatus(t, ids["poison.nulresult.v1"], simpleworkflow.StatusFailed, 10*time.Second)
	if bad.Attempt != 1 || !strings.Contains(bad.LastError, "result could not be stored") {
		t.Fatalf("NUL result: attempt %d, error %q", bad.Attempt, bad.LastError)
	}
	nul := b.waitStatus(t, ids["poison.nulerror.v1"], simpleworkflow.StatusFailed, 10*time.Second)
	if !strings.HasPrefix(nul.LastError, "badbyte and \uFFFD") ||
		!strings.HasSuffix(nul.LastError, "[cleaned: NUL bytes removed, invalid UTF-8 replaced]") {
		t.Fatalf("cleaned error %q: want the text without NUL, invalid bytes replaced, saying so", nul.LastError)
	}
}

// A claim in flight when the worker is told to stop is not
// abandoned. The server commits the claim while a proxy holds back its
// answer; the worker is stopped, then the answer arrives: the claimed run is
// executed (or handed back) at once, never left leased until its lease
// expires with an attempt spent.
func TestClaimInFlightAtShutdownIsNotAbandoned(t *testing.T) {
	t.Parallel()
	b := setup(t)
	proxy, proxyURL := startGateProxy(t, b.url)
	workerClient, err := simpleworkflow.Connect(b.ctx, proxyURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(workerClient.Close)
	var calls atomic.Int32
	p, err := simpleworkflow.NewPoller(workerClient, simpleworkflow.PollerConfig{
		TypePrefixes: []string{"cut."}, LeaseDuration: time.Minute, PollInterval: 50 * time.Millisecond,
		ShutdownGracePeriod: 5 * time.Second, Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Handle("cut.a.v1", func(context.Context, *simpleworkflow.Task) (json.RawMessage, error) {
		calls.Add(1)
		return json.RawMessage(`{"ok":true}`), nil
	}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(b.ctx)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx) }()
	proxy.hold("cut.a.v1") // the claim's answer names the run's type
	defer proxy.release()
	res, err := b.client.Create(b.ctx, "cut.a.v1", nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "the server to commit the claim", func() (bool, error) {
		r, err := b.client.Get(b.ctx, res.ID)
		return err == nil && r.Status == simpleworkflow.StatusLeased, err
	})
	cancel() // shutdown begins while the claim's answer is on its way
	returnedEarly := false
	select {
	case err := <-done:
		returnedEarly = true
		if err != nil {
			t.Logf("poller returned %v", err)
		}
	case <-time.After(2 * time.Second):
	}
	proxy.release()
	if !returnedEarly {
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("poller returned %v", err)
			}
		case <-time.After(20 * time.Second):
			t.Fatal("the worker did not stop within 20 s of its claim's answer")
		}
	}
	run, err := b.client.Get(b.ctx, res.ID)
	if err != nil {
		t.Fatal(err)
	}
	switch {
	case run.Status == simpleworkflow.StatusSucceeded && calls.Load() == 1:
	case run.Status == simpleworkflow.StatusPending && run.Attempt == 0 && calls.Load() == 0:
	default:
		t.Fatalf("the run claimed during shutdown is %s at attempt %d after %d calls: left leased or its attempt spent",
			run.Status, run.Attempt, calls.Load())
	}
}
