package simpleworkflow_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/simple-workflow/simple-workflow/pkg/simpleworkflow"
)

// The transactional outbox: a run created in the caller's transaction is
// rolled back with it (no run, no event, no worker woken) and, committed,
// wakes a worker at once (its poll interval is a minute, so only the
// commit's notification can have woken it).
func TestCreateInTheCallersTransaction(t *testing.T) {
	t.Parallel()
	b := setup(t)
	pool := b.client.Pool()
	if _, err := pool.Exec(b.ctx, `create table public.shop_order (id int primary key, run_id uuid)`); err != nil {
		t.Fatal(err)
	}
	started := make(chan string, 4)
	b.startPoller(t, simpleworkflow.PollerConfig{TypePrefixes: []string{"outbox."}, PollInterval: time.Minute},
		map[string]simpleworkflow.HandlerFunc{"outbox.ship.v1": func(_ context.Context, task *simpleworkflow.Task) (json.RawMessage, error) {
			started <- task.ID
			return nil, nil
		}})
	// The worker is listening and its first claim has been answered: from
	// now on only a notification can wake it before a minute passes.
	waitFor(t, 10*time.Second, "the worker to listen and poll once", func() (bool, error) {
		var listening, polled int
		err := pool.QueryRow(b.ctx, `select count(*) filter (where query ilike 'listen%'),
                count(*) filter (where query like '%claim_runs%' and state = 'idle')
            from pg_stat_activity where datname = current_database()`).Scan(&listening, &polled)
		return listening > 0 && polled > 0, err
	})
	order := func(id int, commit bool) string {
		tx, err := pool.Begin(b.ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = tx.Rollback(context.Background()) }()
		res, err := b.client.CreateIn(b.ctx, tx, "outbox.ship.v1", map[string]any{"order": id}, nil)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := tx.Exec(b.ctx, `insert into public.shop_order values ($1, $2)`, id, res.ID); err != nil {
			t.Fatal(err)
		}
		if commit {
			if err := tx.Commit(b.ctx); err != nil {
				t.Fatal(err)
			}
		}
		return res.ID
	}

	rolledBack := order(1, false)
	var runs, events int
	if err := pool.QueryRow(b.ctx, `select (select count(*) from workflow.workflow_run where id = $1),
        (select count(*) from workflow.run_event where workflow_id = $1)`, rolledBack).Scan(&runs, &events); err != nil {
		t.Fatal(err)
	}
	if runs != 0 || events != 0 {
		t.Fatalf("after rollback: %d runs, %d events", runs, events)
	}
	select {
	case id := <-started:
		t.Fatalf("a worker ran %s after a rollback", id)
	case <-time.After(500 * time.Millisecond):
	}

	committed := order(2, true)
	select {
	case id := <-started:
		if id != committed {
			t.Fatalf("ran %s, want %s", id, committed)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the committed run did not wake a worker within 5 s")
	}
}

// A signal sent in a transaction that rolls back never reaches its run; one
// that commits does.
func TestSignalInTheCallersTransaction(t *testing.T) {
	t.Parallel()
	b := setup(t)
	res, err := b.client.Create(b.ctx, "outbox.wait.v1", nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	send := func(key string, commit bool) {
		tx, err := b.client.Pool().Begin(b.ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = tx.Rollback(context.Background()) }()
		if _, err := b.client.SignalIn(b.ctx, tx, res.ID, "approve", map[string]any{"key": key},
			&simpleworkflow.SignalOptions{IdempotencyKey: key}); err != nil {
			t.Fatal(err)
		}
		if commit {
			if err := tx.Commit(b.ctx); err != nil {
				t.Fatal(err)
			}
		}
	}
	send("rolled-back", false)
	send("committed", true)
	var keys []string
	rows, err := b.client.Pool().Query(b.ctx, "select idempotency_key from workflow.workflow_signal where run_id = $1", res.ID)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var k string
		if err := rows.Scan(&k); err != nil {
			t.Fatal(err)
		}
		keys = append(keys, k)
	}
	if len(keys) != 1 || keys[0] != "committed" {
		t.Fatalf("signals stored: %v, want only the committed one", keys)
	}
}
