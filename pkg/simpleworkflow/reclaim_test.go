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

// A worker whose attempt lost its lease (reaped while the handler still ran)
// may claim the same run again before that handler returns. The older
// attempt is told its lease is gone; its outcome, written first, must not
// take the newer attempt's place with it: the newer attempt's result is
// written at once (not after its lease runs out), and every slot of the
// worker is free afterwards.
func TestReclaimedRunOutlivesItsOlderAttempt(t *testing.T) {
	t.Parallel()
	b := setup(t)
	watch := outcomeWatch{once: new(sync.Once), seen: make(chan struct{})}
	firstIn, secondIn := make(chan struct{}), make(chan struct{})
	firstCause := make(chan error, 1)
	handler := func(ctx context.Context, task *simpleworkflow.Task) (json.RawMessage, error) {
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
			firstCause <- context.Cause(ctx)
			return simpleworkflow.JSONResult(map[string]int{"attempt": 1})
		}
		close(secondIn)
		// Return only after the older attempt's outcome was written, the
		// order in which that outcome used to take this attempt's entry.
		select {
		case <-watch.seen:
		case <-time.After(30 * time.Second):
			return nil, errors.New("the first attempt's outcome was never logged")
		}
		time.Sleep(200 * time.Millisecond)
		return simpleworkflow.JSONResult(map[string]int{"attempt": task.Attempt})
	}
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
	b.startPoller(t, simpleworkflow.PollerConfig{
		TypePrefixes:  []string{"reclaim."},
		Concurrency:   2,
		LeaseDuration: time.Minute, // far beyond the waits below: its expiry rescues nothing
		PollInterval:  50 * time.Millisecond,
		Logger:        slog.New(watch),
	}, map[string]simpleworkflow.HandlerFunc{"reclaim.a.v1": handler, "reclaim.pair.v1": together})

	res, err := b.client.Create(b.ctx, "reclaim.a.v1", nil, &simpleworkflow.CreateOptions{
		RetryPolicy: &simpleworkflow.RetryPolicy{BaseDelay: time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-firstIn:
	case <-time.After(30 * time.Second):
		t.Fatal("the first attempt never ran")
	}
	// The lease expires and is reaped while the first handler still runs.
	b.expireLease(t, res.ID)

	run := b.waitStatus(t, res.ID, simpleworkflow.StatusSucceeded, 20*time.Second)
	if run.Attempt != 2 || string(run.Result) != `{"attempt": 2}` {
		t.Fatalf("run finished at attempt %d with %s, want attempt 2's result", run.Attempt, run.Result)
	}
	select {
	case cause := <-firstCause:
		if !errors.Is(cause, simpleworkflow.ErrLeaseLost) {
			t.Fatalf("the first attempt's context ended with %v, want ErrLeaseLost", cause)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the first attempt never returned")
	}

	// Both slots are free: two runs that finish only together both finish.
	var ids []string
	for range 2 {
		r, err := b.client.Create(b.ctx, "reclaim.pair.v1", nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, r.ID)
	}
	for _, id := range ids {
		if r := b.waitStatus(t, id, simpleworkflow.StatusSucceeded, 30*time.Second); r.Attempt != 1 {
			t.Fatalf("run %s finished at attempt %d, want 1: a slot was not freed", id, r.Attempt)
		}
	}
}
