package simpleworkflow_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	simpleworkflow "github.com/simple-workflow/simple-workflow/pkg/simpleworkflow"
)

// hostileValue is a JSON text a careless or hostile producer or handler may
// hand over, and whether the database stores it.
type hostileValue struct {
	name   string
	raw    string
	stored bool
}

// hostileValues is the corpus: depth, size, NUL, invalid UTF-8, huge
// numbers, duplicate keys. Each is an object, so it may stand for a payload.
func hostileValues() []hostileValue {
	deep := func(n int) string { return `{"v":` + strings.Repeat("[", n) + strings.Repeat("]", n) + `}` }
	return []hostileValue{
		{"depth at the bound", deep(simpleworkflow.MaxJSONDepth - 1), true},
		{"depth one past the bound", deep(simpleworkflow.MaxJSONDepth), false},
		{"depth 5,000", deep(5000), false},
		{"depth 20,000", deep(20000), false},
		{"2 MiB", `{"v":"` + strings.Repeat("x", 2<<20) + `"}`, false},
		{"NUL escape", `{"v":"a\u0000b"}`, false},
		{"invalid UTF-8", "{\"v\":\"\xff\xfe\"}", false},
		{"huge exponent", `{"v":1e400}`, true},
		{"5,000 digits", `{"v":1` + strings.Repeat("0", 5000) + `}`, true},
		{"duplicate keys", `{"v":1,"v":2}`, true},
	}
}

// Hostile JSON through every input path of the
// Go SDK: as a payload (Create, CreateMany), a signal payload, a step
// output, a child's payload and a handler's result. Producers get a clear
// error and nothing is stored; a worker fails only the run that carries the
// value; bystanders of the same batches, claimed with concurrency, all
// succeed.
func TestHostileJSONThroughEveryGoPath(t *testing.T) {
	t.Parallel()
	b := setup(t)
	values := hostileValues()

	// Producers.
	for _, v := range values {
		_, err := b.client.Create(b.ctx, "hostile.create.v1", json.RawMessage(v.raw), nil)
		if v.stored != (err == nil) || err != nil && !errors.Is(err, simpleworkflow.ErrInvalid) {
			t.Errorf("Create %s: %v", v.name, err)
		}
		_, err = b.client.CreateMany(b.ctx, []simpleworkflow.NewRun{{Type: "hostile.create.v1"}, {Type: "hostile.create.v1", Payload: json.RawMessage(v.raw)}})
		if v.stored != (err == nil) || err != nil && !errors.Is(err, simpleworkflow.ErrInvalid) {
			t.Errorf("CreateMany %s: %v", v.name, err)
		}
	}
	var stored int
	if err := b.client.Pool().QueryRow(b.ctx, `select count(*) from workflow.workflow_run where type = 'hostile.create.v1'`).Scan(&stored); err != nil {
		t.Fatal(err)
	}
	if want := 3 * 4; stored != want { // each storable value once by Create, twice by CreateMany (with its neighbour); a refused batch stores neither
		t.Errorf("%d runs stored by the producers, want %d", stored, want)
	}

	// Workers: one run per value and path, between bystanders.
	var bystanders []string
	addBystanders := func(n int) {
		for range n {
			res, err := b.client.Create(b.ctx, "hostile.bystander.v1", map[string]int{"n": len(bystanders)}, nil)
			if err != nil {
				t.Fatal(err)
			}
			bystanders = append(bystanders, res.ID)
		}
	}
	type hostileRun struct {
		id, path string
		v        hostileValue
	}
	var runs []hostileRun
	for i, v := range values {
		addBystanders(3)
		for _, path := range []string{"result", "step", "child", "signal"} {
			res, err := b.client.Create(b.ctx, "hostile."+path+".v1", map[string]int{"value": i}, &simpleworkflow.CreateOptions{MaxAttempts: 3})
			if err != nil {
				t.Fatal(err)
			}
			runs = append(runs, hostileRun{id: res.ID, path: path, v: v})
		}
	}
	addBystanders(3)
	value := func(task *simpleworkflow.Task) hostileValue {
		var p struct{ Value int }
		if err := task.Decode(&p); err != nil {
			panic(err)
		}
		return values[p.Value]
	}
	var signalErrs atomic.Int64
	handlers := map[string]simpleworkflow.HandlerFunc{
		"hostile.bystander.v1": func(context.Context, *simpleworkflow.Task) (json.RawMessage, error) {
			return json.RawMessage(`{"ok":true}`), nil
		},
		"hostile.result.v1": func(_ context.Context, task *simpleworkflow.Task) (json.RawMessage, error) {
			return json.RawMessage(value(task).raw), nil
		},
		"hostile.step.v1": func(ctx context.Context, task *simpleworkflow.Task) (json.RawMessage, error) {
			v := value(task)
			if _, err := task.Step(ctx, "hostile", func(context.Context) (json.RawMessage, error) { return json.RawMessage(v.raw), nil }); err != nil {
				return nil, err
			}
			return json.RawMessage(`{"ok":true}`), nil
		},
		"hostile.child.v1": func(ctx context.Context, task *simpleworkflow.Task) (json.RawMessage, error) {
			v := value(task)
			if _, err := task.StartChild(ctx, "kid", "hostile.bystander.v1", &simpleworkflow.ChildOptions{Payload: json.RawMessage(v.raw)}); err != nil {
				return nil, err
			}
			return json.RawMessage(`{"ok":true}`), nil
		},
		"hostile.signal.v1": func(ctx context.Context, task *simpleworkflow.Task) (json.RawMessage, error) {
			// The run signals itself through the producer API.
			if _, err := b.client.Signal(ctx, task.ID, "poke", json.RawMessage(value(task).raw), nil); err != nil {
				signalErrs.Add(1)
				return nil, simpleworkflow.Permanent(err)
			}
			return json.RawMessage(`{"ok":true}`), nil
		},
	}
	b.startPoller(t, simpleworkflow.PollerConfig{TypePrefixes: []string{"hostile."}, Concurrency: 8, ClaimBatchSize: 50,
		PollInterval: 50 * time.Millisecond}, handlers)

	for _, id := range bystanders {
		if r := b.waitStatus(t, id, simpleworkflow.StatusSucceeded, time.Minute); r.Attempt != 1 {
			t.Errorf("bystander %s took %d attempts", id, r.Attempt)
		}
	}
	for _, r := range runs {
		t.Logf("waiting for %s via %s", r.v.name, r.path)
		got := b.waitFinished(t, r.id, time.Minute)
		switch {
		case r.v.stored && r.path == "result" && r.v.name == "duplicate keys":
			if got.Status != simpleworkflow.StatusSucceeded || string(got.Result) != `{"v": 2}` {
				t.Errorf("%s via %s: %s %s", r.v.name, r.path, got.Status, got.Result)
			}
		case r.v.stored:
			if got.Status != simpleworkflow.StatusSucceeded {
				t.Errorf("%s via %s: %s %q", r.v.name, r.path, got.Status, got.LastError)
			}
		default:
			if got.Status != simpleworkflow.StatusFailed || got.Attempt != 1 || got.LastError == "" {
				t.Errorf("%s via %s: %s at attempt %d: %q; want failed at once, saying why", r.v.name, r.path, got.Status, got.Attempt, got.LastError)
			}
		}
	}
	if signalErrs.Load() == 0 {
		t.Error("no hostile signal was refused")
	}
}

// A run whose journal the worker cannot
// decode (a signal payload 10,001 levels deep, stored before the bound or
// by hand) fails alone, at once and for good; the runs of its claim batch
// succeed and the worker goes on.
func TestUndecodableRunFailsAlone(t *testing.T) {
	t.Parallel()
	b := setup(t)
	pool := b.client.Pool()
	var ids []string
	for range 9 {
		res, err := b.client.Create(b.ctx, "undec.a.v1", nil, &simpleworkflow.CreateOptions{MaxAttempts: 5})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, res.ID)
	}
	bad := ids[4]
	insertDeepStep(t, b.ctx, pool, bad, 10001)
	b.startPoller(t, simpleworkflow.PollerConfig{TypePrefixes: []string{"undec."}, Concurrency: 4, ClaimBatchSize: 20,
		PollInterval: 50 * time.Millisecond}, map[string]simpleworkflow.HandlerFunc{
		"undec.a.v1": func(context.Context, *simpleworkflow.Task) (json.RawMessage, error) { return nil, nil },
	})
	for _, id := range ids {
		if id == bad {
			continue
		}
		b.waitStatus(t, id, simpleworkflow.StatusSucceeded, 30*time.Second)
	}
	r := b.waitFinished(t, bad, 30*time.Second)
	if r.Status != simpleworkflow.StatusFailed || r.Attempt != 1 || !strings.Contains(r.LastError, "cannot be decoded") {
		t.Fatalf("the undecodable run: %s at attempt %d: %q", r.Status, r.Attempt, r.LastError)
	}
	// The worker is still serving.
	res, err := b.client.Create(b.ctx, "undec.a.v1", nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	b.waitStatus(t, res.ID, simpleworkflow.StatusSucceeded, 30*time.Second)
}

// insertDeepStep writes a journal entry whose output nests depth arrays, as
// the owner and around the database's checks (a row from before them).
func insertDeepStep(t *testing.T, ctx context.Context, pool *pgxpool.Pool, runID string, depth int) {
	t.Helper()
	if _, err := pool.Exec(ctx, `insert into workflow.workflow_step (run_id, name, position, kind, outcome, output, attempt, started_at, finished_at)
		values ($1, 'approve', 0, 'signal', 'ok', $2::jsonb, 1, now(), now())`,
		runID, strings.Repeat("[", depth)+strings.Repeat("]", depth)); err != nil {
		t.Fatalf("insert a deep journal entry: %v", err)
	}
}

// waitFinished waits until the run has finished and returns it.
func (b *bundle) waitFinished(t *testing.T, id string, timeout time.Duration) *simpleworkflow.Run {
	t.Helper()
	var run *simpleworkflow.Run
	waitFor(t, timeout, fmt.Sprintf("run %s to finish", id), func() (bool, error) {
		r, err := b.client.Get(b.ctx, id)
		if err != nil {
			return false, err
		}
		run = r
		return r.Status == simpleworkflow.StatusSucceeded || r.Status == simpleworkflow.StatusFailed ||
			r.Status == simpleworkflow.StatusCancelled, nil
	})
	return run
}

// countingHandler counts the log records of each message.
type countingHandler struct {
	mu     *sync.Mutex
	counts map[string]int
}

func (h countingHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h countingHandler) Handle(_ context.Context, r slog.Record) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.counts[r.Message]++
	return nil
}
func (h countingHandler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h countingHandler) WithGroup(string) slog.Handler      { return h }

// A flood of runs with deadlines decades in
// the past is expired in batches and logged once a batch, not once a run.
func TestDeadlineFloodLoggedPerBatch(t *testing.T) {
	t.Parallel()
	b := setup(t)
	const n = 1200
	if _, err := b.client.Pool().Exec(b.ctx, `insert into workflow.workflow_run (type, payload, deadline_at)
		select 'flood.other.v1', '{}', now() - interval '30 years' from generate_series(1, $1) g`, n); err != nil {
		t.Fatal(err)
	}
	h := countingHandler{mu: &sync.Mutex{}, counts: map[string]int{}}
	b.startPoller(t, simpleworkflow.PollerConfig{TypePrefixes: []string{"flood.mine."}, ReapInterval: 100 * time.Millisecond,
		PollInterval: 50 * time.Millisecond, Logger: slog.New(h)}, map[string]simpleworkflow.HandlerFunc{
		"flood.mine.v1": func(context.Context, *simpleworkflow.Task) (json.RawMessage, error) { return nil, nil },
	})
	waitFor(t, time.Minute, "the flood to expire", func() (bool, error) {
		var left int
		err := b.client.Pool().QueryRow(b.ctx, `select count(*) from workflow.workflow_run where type = 'flood.other.v1' and status = 'pending'`).Scan(&left)
		return left == 0, err
	})
	h.mu.Lock()
	defer h.mu.Unlock()
	if per, batches := h.counts["Run failed: deadline exceeded"], h.counts["Runs failed: deadline exceeded"]; per != 0 || batches < 1 || batches > n/500+1 {
		t.Fatalf("%d lines for single runs and %d for batches, for %d expired runs", per, batches, n)
	}
}
