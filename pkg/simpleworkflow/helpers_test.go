package simpleworkflow_test

import (
	"context"
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/simple-workflow/simple-workflow/internal/pgtest"
	"github.com/simple-workflow/simple-workflow/pkg/simpleworkflow"
)

type bundle struct {
	ctx    context.Context
	url    string
	client *simpleworkflow.Client
}

func setup(t *testing.T) *bundle {
	t.Helper()
	pool, url := pgtest.NewPool(t)
	client, err := simpleworkflow.NewClient(pool)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	t.Cleanup(cancel)
	return &bundle{ctx: ctx, url: url, client: client}
}

func quietLogger() *slog.Logger { return slog.New(slog.DiscardHandler) }

// startPoller runs a poller until the test ends (or stop is called) and
// returns a function that stops it and waits for Run to return.
func (b *bundle) startPoller(t *testing.T, cfg simpleworkflow.PollerConfig, handlers map[string]simpleworkflow.HandlerFunc) (stop func()) {
	t.Helper()
	if cfg.Logger == nil {
		cfg.Logger = quietLogger()
	}
	p, err := simpleworkflow.NewPoller(b.client, cfg)
	if err != nil {
		t.Fatal(err)
	}
	for typ, h := range handlers {
		if err := p.Handle(typ, h); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithCancel(b.ctx)
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx) }()
	stopped := false
	stop = func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("poller returned %v", err)
			}
		case <-time.After(time.Minute):
			t.Error("poller did not stop within a minute")
		}
	}
	t.Cleanup(stop)
	return stop
}

// waitFor polls cond until it holds or the timeout passes.
func waitFor(t *testing.T, timeout time.Duration, what string, cond func() (bool, error)) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		ok, err := cond()
		if err != nil {
			t.Fatalf("waiting for %s: %v", what, err)
		}
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", timeout, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (b *bundle) waitStatus(t *testing.T, id string, want simpleworkflow.Status, timeout time.Duration) *simpleworkflow.Run {
	t.Helper()
	var run *simpleworkflow.Run
	waitFor(t, timeout, "run "+id+" to be "+string(want), func() (bool, error) {
		r, err := b.client.Get(b.ctx, id)
		if err != nil {
			return false, err
		}
		run = r
		return r.Status == want, nil
	})
	return run
}

func (b *bundle) events(t *testing.T, id string) []simpleworkflow.EventType {
	t.Helper()
	evs, err := b.client.Events(b.ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	out := make([]simpleworkflow.EventType, 0, len(evs))
	for _, e := range evs {
		if e.Type != simpleworkflow.EventHeartbeat {
			out = append(out, e.Type)
		}
	}
	return out
}

func assertTrail(t *testing.T, got []simpleworkflow.EventType, want ...simpleworkflow.EventType) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("event trail %v, want %v", got, want)
	}
	for i := range got {
		if got[i] != want[i] {
			t.Fatalf("event trail %v, want %v", got, want)
		}
	}
}

var errTest = errors.New("planned failure")

// expireLease moves the database clock an hour on, past the run's lease, and
// reaps it in the same transaction, so that no worker heartbeat renews the
// lease in between; it fails the test unless the run's lease was reaped.
func (b *bundle) expireLease(t *testing.T, id string) {
	t.Helper()
	tx, err := b.client.Pool().Begin(b.ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(b.ctx) }()
	if _, err := tx.Exec(b.ctx, `update workflow.workflow_settings set clock_offset = clock_offset + interval '1 hour'`); err != nil {
		t.Fatal(err)
	}
	var reaped int
	if err := tx.QueryRow(b.ctx, `select count(*) from workflow.reap_expired_leases(100) where id = $1`, id).Scan(&reaped); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(b.ctx); err != nil {
		t.Fatal(err)
	}
	if reaped != 1 {
		t.Fatalf("reaped %d, want the run's lease", reaped)
	}
}
