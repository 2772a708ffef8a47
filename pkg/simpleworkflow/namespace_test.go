package simpleworkflow_test

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/simple-workflow/simple-workflow/pkg/simpleworkflow"
)

// A poller serves one namespace: a poller of team-a runs team-a's runs of a
// type while team-b's runs of the very same type wait untouched, until
// team-b's own poller runs them.
func TestPollerServesItsNamespaceOnly(t *testing.T) {
	t.Parallel()
	b := setup(t)
	create := func(ns string, n int) []string {
		var ids []string
		for range n {
			res, err := b.client.Create(b.ctx, "team.job.v1", map[string]any{"ns": ns},
				&simpleworkflow.CreateOptions{Namespace: ns})
			if err != nil {
				t.Fatal(err)
			}
			ids = append(ids, res.ID)
		}
		return ids
	}
	mine, theirs := create("team-a", 5), create("team-b", 3)

	var mu sync.Mutex
	seen := map[string]string{} // run id -> namespace the handler's poller serves
	handler := func(ns string) simpleworkflow.HandlerFunc {
		return func(_ context.Context, task *simpleworkflow.Task) (json.RawMessage, error) {
			mu.Lock()
			defer mu.Unlock()
			seen[task.ID] = ns
			return json.RawMessage(`{}`), nil
		}
	}
	stopA := b.startPoller(t, simpleworkflow.PollerConfig{TypePrefixes: []string{"team."}, Namespace: "team-a",
		PollInterval: 50 * time.Millisecond}, map[string]simpleworkflow.HandlerFunc{"team.job.v1": handler("team-a")})
	status := func(id string) simpleworkflow.Status {
		r, err := b.client.Get(b.ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		return r.Status
	}
	waitFor(t, 30*time.Second, "team-a's runs to succeed", func() (bool, error) {
		for _, id := range mine {
			if status(id) != simpleworkflow.StatusSucceeded {
				return false, nil
			}
		}
		return true, nil
	})
	stopA()
	for _, id := range theirs {
		r, err := b.client.Get(b.ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if r.Status != simpleworkflow.StatusPending || r.Attempt != 0 || r.Namespace != "team-b" {
			t.Fatalf("team-b's run after team-a's poller: %s, attempt %d, namespace %q", r.Status, r.Attempt, r.Namespace)
		}
	}
	b.startPoller(t, simpleworkflow.PollerConfig{TypePrefixes: []string{"team."}, Namespace: "team-b",
		PollInterval: 50 * time.Millisecond}, map[string]simpleworkflow.HandlerFunc{"team.job.v1": handler("team-b")})
	waitFor(t, 30*time.Second, "team-b's runs to succeed", func() (bool, error) {
		for _, id := range theirs {
			if status(id) != simpleworkflow.StatusSucceeded {
				return false, nil
			}
		}
		return true, nil
	})
	mu.Lock()
	defer mu.Unlock()
	for _, id := range mine {
		if seen[id] != "team-a" {
			t.Errorf("team-a's run %s ran on %q's poller", id, seen[id])
		}
	}
	for _, id := range theirs {
		if seen[id] != "team-b" {
			t.Errorf("team-b's run %s ran on %q's poller", id, seen[id])
		}
	}
}

// A poller's namespace must be a namespace name.
func TestPollerRefusesABadNamespace(t *testing.T) {
	t.Parallel()
	b := setup(t)
	for _, ns := range []string{"Team-A", "team_a", "-a", "a-", "x\x00y", string(make([]byte, 64))} {
		if _, err := simpleworkflow.NewPoller(b.client, simpleworkflow.PollerConfig{Namespace: ns}); !errors.Is(err, simpleworkflow.ErrInvalid) {
			t.Errorf("namespace %q: %v, want ErrInvalid", ns, err)
		}
	}
}
