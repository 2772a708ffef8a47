package simpleworkflow_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/simple-workflow/simple-workflow/pkg/simpleworkflow"
)

// A producer that commits while another transaction announces the same
// type sends no notification of its own; the worker, woken by the other
// one's, claims once more shortly after it and finds the run (its poll
// interval is a minute, so only that follow-up can have found it).
func TestPollerClaimsAgainAfterANotification(t *testing.T) {
	defer simpleworkflow.SetWakeFollowUp(2 * time.Second)() // not parallel: it changes a package setting
	b := setup(t)
	pool := b.client.Pool()
	started := make(chan string, 2)
	b.startPoller(t, simpleworkflow.PollerConfig{TypePrefixes: []string{"follow."}, PollInterval: time.Minute},
		map[string]simpleworkflow.HandlerFunc{"follow.up.v1": func(_ context.Context, task *simpleworkflow.Task) (json.RawMessage, error) {
			started <- task.ID
			return nil, nil
		}})
	claimedSince := func(since time.Time) func() (bool, error) {
		return func() (bool, error) {
			var listening, polled int
			err := pool.QueryRow(b.ctx, `select count(*) filter (where query ilike 'listen%'),
                    count(*) filter (where query like '%claim_runs%' and state = 'idle' and state_change > $1)
                from pg_stat_activity where datname = current_database()`, since).Scan(&listening, &polled)
			return listening > 0 && polled > 0, err
		}
	}
	waitFor(t, 10*time.Second, "the worker to listen and poll once", claimedSince(time.Time{}))

	// Another transaction is announcing follow.up.v1: it holds the type's
	// wake lock, and its notification arrives.
	holder, err := pool.Acquire(b.ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Release()
	var notifiedAt time.Time
	if err := holder.QueryRow(b.ctx, `select now() from (select pg_advisory_lock(hashtext('workflow_run_created:' || $1), hashtext($1)),
		pg_notify('workflow_run_created', $1)) n`, "follow.up.v1").Scan(&notifiedAt); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "the worker to claim on the notification", claimedSince(notifiedAt))

	// Now the producer commits, without a notification of its own.
	res, err := b.client.Create(b.ctx, "follow.up.v1", nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	select {
	case id := <-started:
		if id != res.ID {
			t.Fatalf("ran %s, want %s", id, res.ID)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the run was not claimed after the notification")
	}
}
