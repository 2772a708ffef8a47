package simpleworkflow_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log"
	"log/slog"
	"time"

	"github.com/simple-workflow/simple-workflow/pkg/simpleworkflow"
)

// runUntilFinished runs a poller with the given handlers until the run
// finishes, then returns it.
func runUntilFinished(ctx context.Context, client *simpleworkflow.Client, handlers map[string]simpleworkflow.HandlerFunc, prefix string, started func(runID string), create func() string) *simpleworkflow.Run {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	poller, err := simpleworkflow.NewPoller(client, simpleworkflow.PollerConfig{
		TypePrefixes: []string{prefix}, Logger: slog.New(slog.DiscardHandler),
	})
	if err != nil {
		log.Fatal(err)
	}
	for typ, h := range handlers {
		if err := poller.Handle(typ, h); err != nil {
			log.Fatal(err)
		}
	}
	done := make(chan error)
	go func() { done <- poller.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			fmt.Println("poller:", err)
		}
	}()
	id := create()
	if started != nil {
		started(id)
	}
	for {
		run, err := client.Get(ctx, id)
		if err != nil {
			log.Fatal(err)
		}
		if run.Status.Finished() {
			return run
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// A durable workflow: each step runs once for the whole life of the run,
// whatever happens to the worker; the sleep parks the run without holding a
// worker; the wait takes an "approve" signal sent by any producer.
func ExampleTask_Step() {
	ctx := context.Background()
	client, err := simpleworkflow.Connect(ctx, databaseURL())
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()

	order := func(ctx context.Context, task *simpleworkflow.Task) (json.RawMessage, error) {
		reservation, err := simpleworkflow.Step(ctx, task, "reserve", func(ctx context.Context) (string, error) {
			return "R-1", nil // talk to the inventory service here
		})
		if err != nil {
			return nil, err
		}
		if err := task.Sleep(ctx, "cool-off", 100*time.Millisecond); err != nil {
			return nil, err // ErrParked: the run resumes here after the sleep
		}
		approval, ok, err := task.WaitForSignal(ctx, "approve", time.Hour)
		if err != nil {
			return nil, err
		}
		if !ok {
			return nil, simpleworkflow.Permanent(fmt.Errorf("not approved in time"))
		}
		return simpleworkflow.JSONResult(map[string]any{"reservation": reservation, "approval": approval})
	}
	run := runUntilFinished(ctx, client, map[string]simpleworkflow.HandlerFunc{"shop.order.v1": order}, "shop.",
		func(id string) {
			// Signals are buffered: this one is kept until the run waits.
			if _, err := client.Signal(ctx, id, "approve", map[string]string{"by": "ops"},
				&simpleworkflow.SignalOptions{IdempotencyKey: "approve:" + id}); err != nil {
				log.Fatal(err)
			}
		},
		func() string {
			res, err := client.Create(ctx, "shop.order.v1", nil, nil)
			if err != nil {
				log.Fatal(err)
			}
			return res.ID
		})
	steps, err := client.Steps(ctx, run.ID)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(run.Status, string(run.Result))
	for _, s := range steps {
		fmt.Println(s.Position, s.Kind, s.Name, s.Outcome)
	}
	// Output:
	// succeeded {"approval": {"by": "ops"}, "reservation": "R-1"}
	// 0 step reserve ok
	// 1 sleep cool-off ok
	// 2 signal approve ok
}

// A parent starts a child run of another type (served by whichever worker
// claims it) and awaits its result; replays find the same child.
func ExampleTask_StartChild() {
	ctx := context.Background()
	client, err := simpleworkflow.Connect(ctx, databaseURL())
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()

	handlers := map[string]simpleworkflow.HandlerFunc{
		"media.album.v1": func(ctx context.Context, task *simpleworkflow.Task) (json.RawMessage, error) {
			if _, err := task.StartChild(ctx, "cover", "media.thumbnail.v1",
				&simpleworkflow.ChildOptions{Payload: map[string]int{"size": 300}}); err != nil {
				return nil, err
			}
			cover, err := task.AwaitChild(ctx, "cover") // parks until the child ends
			if err != nil {
				return nil, err // a *ChildFailedError when the child failed
			}
			return simpleworkflow.JSONResult(map[string]json.RawMessage{"cover": cover})
		},
		"media.thumbnail.v1": func(_ context.Context, task *simpleworkflow.Task) (json.RawMessage, error) {
			var in struct{ Size int }
			if err := task.Decode(&in); err != nil {
				return nil, simpleworkflow.Permanent(err)
			}
			return simpleworkflow.JSONResult(fmt.Sprintf("thumb-%d.png", in.Size))
		},
	}
	run := runUntilFinished(ctx, client, handlers, "media.", nil, func() string {
		res, err := client.Create(ctx, "media.album.v1", nil, &simpleworkflow.CreateOptions{Deadline: time.Minute})
		if err != nil {
			log.Fatal(err)
		}
		return res.ID
	})
	fmt.Println(run.Status, string(run.Result))
	// Output: succeeded {"cover": "thumb-300.png"}
}
