package simpleworkflow_test

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/simple-workflow/simple-workflow/pkg/simpleworkflow"
)

// outcomeWatch is a log handler that closes seen once the worker logged the
// outcome of attempt 1 of a run (whatever it was).
type outcomeWatch struct {
	once *sync.Once
	seen chan struct{}
}

func (w outcomeWatch) Enabled(context.Context, slog.Level) bool { return true }
func (w outcomeWatch) WithAttrs([]slog.Attr) slog.Handler       { return w }
func (w outcomeWatch) WithGroup(string) slog.Handler            { return w }
func (w outcomeWatch) Handle(_ context.Context, r slog.Record) error {
	if r.Message != "Run stopped" && r.Message != "Run result discarded: the lease was no longer held" {
		return nil
	}
	r.Attrs(func(a slog.Attr) bool {
		if a.Key == "attempt" && a.Value.Int64() == 1 {
			w.once.Do(func() { close(w.seen) })
			return false
		}
		return true
	})
	return nil
}

// reclaim is a worker whose run loses the lease of its first attempt while
// the handler still runs, so that the worker claims the run again before
// that handler returns.
type reclaim struct {
	id string
	// firstCause receives the first attempt's context cause when it returns.
	firstCause chan error
}

// startReclaim starts the worker (two slots, with the handlers of extra
// too) and a run, and expires the run's first lease while its handler
// runs. The second attempt's handler calls newer once the first attempt's
// outcome was written: the order in which that outcome used to take the
// second attempt's place in the worker.
func startReclaim(t *testing.T, b *bundle, newer simpleworkflow.HandlerFunc, extra map[string]simpleworkflow.HandlerFunc) *reclaim {
	t.Helper()
	watch := outcomeWatch{once: new(sync.Once), seen: make(chan struct{})}
	firstIn, secondIn := make(chan struct{}), make(chan struct{})
	r := &reclaim{firstCause: make(chan error, 1)}
	handlers := map[string]simpleworkflow.HandlerFunc{"reclaim.a.v1": func(ctx context.Context, task *simpleworkflow.Task) (json.RawMessage, error) {
		if task.Attempt == 1 {
			close(firstIn)
			select {
			case <-secondIn:
			case <-time.After(30 * time.Second):
			}
			// Give the cancel that came with the new claim a moment to be the
			// context's cause, if it is coming.
			select {
			case <-ctx.Done():
			case <-time.After(2 * time.Second):
			}
			r.firstCause <- context.Cause(ctx)
			return simpleworkflow.JSONResult(map[string]int{"attempt": 1})
		}
		close(secondIn)
		select {
		case <-watch.seen:
		case <-time.After(30 * time.Second):
			return nil, errors.New("the first attempt's outcome was never logged")
		}
		time.Sleep(200 * time.Millisecond)
		return newer(ctx, task)
	}}
	for typ, h := range extra {
		handlers[typ] = h
	}
	b.startPoller(t, simpleworkflow.PollerConfig{
		TypePrefixes:  []string{"reclaim."},
		Concurrency:   2,
		LeaseDuration: time.Minute, // far beyond the waits of the tests: its expiry rescues nothing
		PollInterval:  50 * time.Millisecond,
		Logger:        slog.New(watch),
	}, handlers)
	res, err := b.client.Create(b.ctx, "reclaim.a.v1", nil, &simpleworkflow.CreateOptions{
		RetryPolicy: &simpleworkflow.RetryPolicy{BaseDelay: time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	r.id = res.ID
	select {
	case <-firstIn:
	case <-time.After(30 * time.Second):
		t.Fatal("the first attempt never ran")
	}
	// The lease expires and is reaped while the first handler still runs.
	b.expireLease(t, res.ID)
	return r
}

// assertFirstToldLeaseLost fails unless the first attempt's context ended
// with ErrLeaseLost.
func (r *reclaim) assertFirstToldLeaseLost(t *testing.T) {
	t.Helper()
	select {
	case cause := <-r.firstCause:
		if !errors.Is(cause, simpleworkflow.ErrLeaseLost) {
			t.Fatalf("the first attempt's context ended with %v, want ErrLeaseLost", cause)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the first attempt never returned")
	}
}

// A worker whose attempt lost its lease may claim the same run again
// before that handler returns. The older attempt is told its lease is
// gone; its outcome, written first, must not take the newer attempt's
// place with it: the newer attempt's result is written at once (not after
// its lease runs out), and every slot of the worker is free afterwards.
func TestReclaimedRunOutlivesItsOlderAttempt(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var barrier sync.WaitGroup
	barrier.Add(2)
	together := func(ctx context.Context, task *simpleworkflow.Task) (json.RawMessage, error) {
		barrier.Done()
		done := make(chan struct{})
		go func() { barrier.Wait(); close(done) }()
		select {
		case <-done:
			return simpleworkflow.JSONResult(true)
		case <-time.After(20 * time.Second):
			return nil, simpleworkflow.Permanent(errors.New("the other run never ran beside this one"))
		}
	}
	r := startReclaim(t, b, func(_ context.Context, task *simpleworkflow.Task) (json.RawMessage, error) {
		return simpleworkflow.JSONResult(map[string]int{"attempt": task.Attempt})
	}, map[string]simpleworkflow.HandlerFunc{"reclaim.pair.v1": together})

	run := b.waitStatus(t, r.id, simpleworkflow.StatusSucceeded, 20*time.Second)
	if run.Attempt != 2 || string(run.Result) != `{"attempt": 2}` {
		t.Fatalf("run finished at attempt %d with %s, want attempt 2's result", run.Attempt, run.Result)
	}
	r.assertFirstToldLeaseLost(t)

	// Both slots are free: two runs that finish only together both finish.
	var ids []string
	for range 2 {
		res, err := b.client.Create(b.ctx, "reclaim.pair.v1", nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, res.ID)
	}
	for _, id := range ids {
		if run := b.waitStatus(t, id, simpleworkflow.StatusSucceeded, 30*time.Second); run.Attempt != 1 {
			t.Fatalf("run %s finished at attempt %d, want 1: a slot was not freed", id, run.Attempt)
		}
	}
}

// After the older attempt's outcome is written, the newer attempt is still
// the worker's: a cancel of the run reaches its handler.
func TestReclaimedRunStillHearsItsCancel(t *testing.T) {
	t.Parallel()
	b := setup(t)
	waiting := make(chan struct{})
	cause := make(chan error, 1)
	r := startReclaim(t, b, func(ctx context.Context, _ *simpleworkflow.Task) (json.RawMessage, error) {
		close(waiting)
		select {
		case <-ctx.Done():
		case <-time.After(20 * time.Second):
		}
		cause <- context.Cause(ctx)
		return nil, context.Cause(ctx)
	}, nil)
	select {
	case <-waiting:
	case <-time.After(30 * time.Second):
		t.Fatal("the second attempt never ran")
	}
	if ok, err := b.client.Cancel(b.ctx, r.id); err != nil || !ok {
		t.Fatalf("cancel: %v %v", ok, err)
	}
	select {
	case c := <-cause:
		if !errors.Is(c, simpleworkflow.ErrRunCancelled) {
			t.Fatalf("the second attempt's context ended with %v, want ErrRunCancelled", c)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the cancel never reached the second attempt")
	}
	r.assertFirstToldLeaseLost(t)
}
