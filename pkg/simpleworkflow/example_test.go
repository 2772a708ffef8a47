package simpleworkflow_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log"
	"log/slog"
	"time"

	"github.com/simple-workflow/simple-workflow/internal/pgtest"
	"github.com/simple-workflow/simple-workflow/pkg/simpleworkflow"
)

// databaseURL returns a migrated database of the examples' own. In a real
// program this is your Postgres URL.
func databaseURL() string {
	u, _, err := pgtest.CreateDatabase(context.Background())
	if err != nil {
		log.Fatal(err)
	}
	return u
}

// A producer records an intent. Once Create returns, the run is durable and
// will run whether or not a worker is up; the idempotency key makes a retried
// request harmless.
func ExampleClient_Create() {
	ctx := context.Background()
	client, err := simpleworkflow.Connect(ctx, databaseURL())
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()

	opts := &simpleworkflow.CreateOptions{IdempotencyKey: "content:c_123:thumbnail:300x300"}
	first, err := client.Create(ctx, "content.thumbnail.v1", map[string]any{"content_id": "c_123"}, opts)
	if err != nil {
		log.Fatal(err)
	}
	again, err := client.Create(ctx, "content.thumbnail.v1", map[string]any{"content_id": "c_123"}, opts)
	if err != nil {
		log.Fatal(err)
	}
	run, err := client.Get(ctx, first.ID)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(first.Created, again.Created, again.ID == first.ID, run.Status)
	// Output: true false true pending
}

// A worker claims runs by type prefix and executes them with its handlers.
func ExamplePoller() {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	client, err := simpleworkflow.Connect(ctx, databaseURL())
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()

	poller, err := simpleworkflow.NewPoller(client, simpleworkflow.PollerConfig{
		TypePrefixes:  []string{"billing."},
		LeaseDuration: 30 * time.Second,
		WorkerID:      "billing-worker-1",
		Logger:        slog.New(slog.DiscardHandler),
	})
	if err != nil {
		log.Fatal(err)
	}
	err = poller.Handle("billing.invoice.v1", func(ctx context.Context, task *simpleworkflow.Task) (json.RawMessage, error) {
		var in struct {
			Customer string `json:"customer"`
		}
		if err := task.Decode(&in); err != nil {
			return nil, simpleworkflow.Permanent(err) // bad input: do not retry
		}
		return simpleworkflow.JSONResult(map[string]string{"invoice": "INV-1", "customer": in.Customer})
	})
	if err != nil {
		log.Fatal(err)
	}
	done := make(chan error)
	go func() { done <- poller.Run(ctx) }()

	res, err := client.Create(ctx, "billing.invoice.v1", map[string]string{"customer": "acme"}, nil)
	if err != nil {
		log.Fatal(err)
	}
	for {
		run, err := client.Get(ctx, res.ID)
		if err != nil {
			log.Fatal(err)
		}
		if run.Status == simpleworkflow.StatusSucceeded {
			fmt.Println(run.Status, run.Attempt, string(run.Result))
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	cancel() // graceful shutdown
	if err := <-done; err != nil {
		fmt.Println("poller:", err)
	}
	// Output: succeeded 1 {"invoice": "INV-1", "customer": "acme"}
}
