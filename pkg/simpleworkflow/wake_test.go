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
// one's, claims once more shortly after it. Here the run falls due a second
// after it is recorded, so the claim the notification triggers finds
// nothing, and only the follow-up claim can find it before the poll
// interval (a minute) passes.
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
	waitFor(t, 10*time.Second, "the worker to listen and poll once", func() (bool, error) {
		var listening, polled int
		err := pool.QueryRow(b.ctx, `select count(*) filter (where query ilike 'listen%'),
                count(*) filter (where query like '%claim_runs%' and state = 'idle')
            from pg_stat_activity where datname = current_database()`).Scan(&listening, &polled)
		return listening > 0 && polled > 0, err
	})

	// Another transaction is announcing follow.up.v1: it holds the type's
	// wake lock while the producer commits, then its notification arrives.
	holder, err := pool.Acquire(b.ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Release()
	const key = `hashtext('workflow_run_created:' || $1), hashtext($1)`
	if _, err := holder.Exec(b.ctx, `select pg_advisory_lock(`+key+`)`, "follow.up.v1"); err != nil {
		t.Fatal(err)
	}
	res, err := b.client.Create(b.ctx, "follow.up.v1", nil, &simpleworkflow.CreateOptions{RunAt: time.Now().Add(time.Second)})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := holder.Exec(b.ctx, `select pg_notify('workflow_run_created', $1), pg_advisory_unlock(`+key+`)`, "follow.up.v1"); err != nil {
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

// An insert notification names the type's namespace: a poller wakes for
// its own namespace's types under its prefixes (and for a payload naming
// no namespace), never for another namespace's.
func TestInsertNotificationsWakeTheirNamespaceOnly(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		ns       string
		prefixes []string
		payload  string
		want     bool
	}{
		{"team-a", []string{"billing."}, "team-a/billing.charge.v1", true},
		{"team-a", []string{"billing."}, "team-b/billing.charge.v1", false},
		{"team-a", nil, "team-b/billing.charge.v1", false},
		{"team-a", nil, "team-a/any.job.v1", true},
		{"team-a", []string{"billing."}, "team-a/shipping.label.v1", false},
		{"default", []string{"billing."}, "billing.charge.v1", true},
		{"default", []string{"billing."}, "default/billing.charge.v1", true},
		{"default", []string{"billing."}, "/billing.charge.v1", true},
	} {
		if got := simpleworkflow.WakesFor(c.ns, c.prefixes, c.payload); got != c.want {
			t.Errorf("a poller of %s with prefixes %v woken by %q: %v, want %v", c.ns, c.prefixes, c.payload, got, c.want)
		}
	}
}
