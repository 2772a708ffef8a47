package simpleworkflow_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/simple-workflow/simple-workflow/internal/pgtest"
	"github.com/simple-workflow/simple-workflow/pkg/simpleworkflow"
)

// The client contract, shared with the Python SDK's tests: the cases live in
// testdata/contract as data, and both SDKs must answer each the same way.

// loadContract decodes one file of testdata/contract.
func loadContract(t *testing.T, name string, v any) {
	t.Helper()
	path, err := pgtest.RepoFile("testdata/contract/" + name)
	if err != nil {
		t.Fatal(err)
	}
	text, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(text, v); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
}

// validInvalid is the shape of types.json, names.json and traceparents.json.
type validInvalid struct {
	Valid   []string `json:"valid"`
	Invalid []struct {
		Value string `json:"value"`
		Why   string `json:"why"`
	} `json:"invalid"`
}

// refusedLeavesNothing asserts err is the SDK's invalid-input error and that
// nothing holds the idempotency key the refused call used.
func (b *bundle) refusedLeavesNothing(t *testing.T, err error, key, what string) {
	t.Helper()
	if !errors.Is(err, simpleworkflow.ErrInvalid) {
		t.Errorf("%s: got %v, want ErrInvalid", what, err)
		return
	}
	res, err := b.client.Create(b.ctx, "contract.probe.v1", nil, &simpleworkflow.CreateOptions{IdempotencyKey: key})
	if err != nil || !res.Created {
		t.Errorf("%s: a refused create left a run behind (%+v, %v)", what, res, err)
	}
}

func TestContractTypes(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var c validInvalid
	loadContract(t, "types.json", &c)
	for _, typ := range c.Valid {
		if _, err := b.client.Create(b.ctx, typ, nil, nil); err != nil {
			t.Errorf("type %q: %v", typ, err)
		}
	}
	for i, bad := range c.Invalid {
		key := fmt.Sprintf("contract-type-%d", i)
		_, err := b.client.Create(b.ctx, bad.Value, nil, &simpleworkflow.CreateOptions{IdempotencyKey: key})
		b.refusedLeavesNothing(t, err, key, "type "+bad.Why)
	}
}

func TestContractTraceparents(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var c validInvalid
	loadContract(t, "traceparents.json", &c)
	for _, tp := range c.Valid {
		res, err := b.client.Create(b.ctx, "contract.trace.v1", nil, &simpleworkflow.CreateOptions{TraceParent: tp})
		if err != nil {
			t.Errorf("traceparent %q: %v", tp, err)
			continue
		}
		if run, err := b.client.Get(b.ctx, res.ID); err != nil || run.TraceParent != tp {
			t.Errorf("traceparent %q stored as %+v (%v)", tp, run, err)
		}
	}
	for i, bad := range c.Invalid {
		key := fmt.Sprintf("contract-trace-%d", i)
		_, err := b.client.Create(b.ctx, "contract.trace.v1", nil,
			&simpleworkflow.CreateOptions{IdempotencyKey: key, TraceParent: bad.Value})
		b.refusedLeavesNothing(t, err, key, "traceparent "+bad.Why)
	}
}

func TestContractNames(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var c validInvalid
	loadContract(t, "names.json", &c)
	run, err := b.client.Create(b.ctx, "contract.names.v1", nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range c.Valid {
		if _, err := b.client.Signal(b.ctx, run.ID, name, map[string]int{"n": 1}, nil); err != nil {
			t.Errorf("name %q: %v", name, err)
		}
	}
	for _, bad := range c.Invalid {
		if _, err := b.client.Signal(b.ctx, run.ID, bad.Value, nil, nil); !errors.Is(err, simpleworkflow.ErrInvalid) {
			t.Errorf("name (%s): got %v, want ErrInvalid", bad.Why, err)
		}
	}
	signals, err := b.client.Steps(b.ctx, run.ID)
	if err != nil || len(signals) != 0 {
		t.Errorf("signals wrote journal entries: %+v %v", signals, err)
	}
}

// payloadCase is one case of payloads.json.
type payloadCase struct {
	JSON   *string         `json:"json"`
	Nested int             `json:"nested"`
	Bytes  int             `json:"bytes"`
	Why    string          `json:"why"`
	Stored json.RawMessage `json:"stored"`
}

// text is the case's payload as JSON text.
func (c payloadCase) text() string {
	switch {
	case c.JSON != nil:
		return *c.JSON
	case c.Nested > 0:
		return strings.Repeat(`{"a":`, c.Nested) + "{}" + strings.Repeat("}", c.Nested)
	default:
		const head, tail = `{"s":"`, `"}`
		return head + strings.Repeat("x", c.Bytes-len(head)-len(tail)) + tail
	}
}

func TestContractPayloads(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var c struct {
		Recorded []payloadCase `json:"recorded"`
		Refused  []payloadCase `json:"refused"`
	}
	loadContract(t, "payloads.json", &c)
	for _, p := range c.Recorded {
		res, err := b.client.Create(b.ctx, "contract.payload.v1", json.RawMessage(p.text()), nil)
		if err != nil {
			t.Errorf("payload %s: %v", p.Why, err)
			continue
		}
		if p.Stored != nil {
			run, err := b.client.Get(b.ctx, res.ID)
			if err != nil {
				t.Fatal(err)
			}
			if !jsonEqual(t, run.Payload, p.Stored) {
				t.Errorf("payload %s stored as %s, want %s", p.Why, run.Payload, p.Stored)
			}
		}
	}
	for i, p := range c.Refused {
		key := fmt.Sprintf("contract-payload-%d", i)
		_, err := b.client.Create(b.ctx, "contract.payload.v1", json.RawMessage(p.text()),
			&simpleworkflow.CreateOptions{IdempotencyKey: key})
		b.refusedLeavesNothing(t, err, key, "payload "+p.Why)
	}
}

func jsonEqual(t *testing.T, a, b json.RawMessage) bool {
	t.Helper()
	var x, y any
	if err := json.Unmarshal(a, &x); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &y); err != nil {
		t.Fatal(err)
	}
	return fmt.Sprint(x) == fmt.Sprint(y)
}

func TestContractDefaults(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var c struct {
		Run struct {
			Priority    int    `json:"priority"`
			MaxAttempts int    `json:"max_attempts"`
			Status      string `json:"status"`
			Attempt     int    `json:"attempt"`
		} `json:"run"`
		Worker struct {
			LeaseSeconds         float64 `json:"lease_seconds"`
			Concurrency          int     `json:"concurrency"`
			PollIntervalSeconds  float64 `json:"poll_interval_seconds"`
			ClaimBatchSize       int     `json:"claim_batch_size"`
			ShutdownGraceSeconds float64 `json:"shutdown_grace_seconds"`
			ReapIntervalSeconds  float64 `json:"reap_interval_seconds"`
		} `json:"worker"`
	}
	loadContract(t, "defaults.json", &c)
	res, err := b.client.Create(b.ctx, "contract.defaults.v1", nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	run, err := b.client.Get(b.ctx, res.ID)
	if err != nil {
		t.Fatal(err)
	}
	if run.Priority != c.Run.Priority || run.MaxAttempts != c.Run.MaxAttempts ||
		string(run.Status) != c.Run.Status || run.Attempt != c.Run.Attempt {
		t.Errorf("a bare run: priority %d, max attempts %d, status %s, attempt %d; the contract says %+v",
			run.Priority, run.MaxAttempts, run.Status, run.Attempt, c.Run)
	}
	p, err := simpleworkflow.NewPoller(b.client, simpleworkflow.PollerConfig{TypePrefixes: []string{"contract."}})
	if err != nil {
		t.Fatal(err)
	}
	cfg := p.Config()
	seconds := func(f float64) time.Duration { return time.Duration(f * float64(time.Second)) }
	if cfg.LeaseDuration != seconds(c.Worker.LeaseSeconds) || cfg.Concurrency != c.Worker.Concurrency ||
		cfg.PollInterval != seconds(c.Worker.PollIntervalSeconds) || cfg.ClaimBatchSize != c.Worker.ClaimBatchSize ||
		cfg.ShutdownGracePeriod != seconds(c.Worker.ShutdownGraceSeconds) ||
		cfg.ReapInterval != seconds(c.Worker.ReapIntervalSeconds) {
		t.Errorf("the poller's defaults %+v differ from the contract's %+v", cfg, c.Worker)
	}
}

// replayCase is one scenario of replay.json.
type replayCase struct {
	Name     string   `json:"name"`
	First    []string `json:"first"`
	Second   []string `json:"second"`
	Expect   string   `json:"expect"`
	RanAgain []string `json:"ran_again"`
	Message  string   `json:"message"`
}

func TestContractReplay(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var cases []replayCase
	loadContract(t, "replay.json", &cases)
	var mu sync.Mutex
	ran := map[string][]string{} // run id -> step bodies run in the second attempt
	byType := map[string]replayCase{}
	handlers := map[string]simpleworkflow.HandlerFunc{}
	for i, c := range cases {
		typ := fmt.Sprintf("contract.replay%d.v1", i)
		byType[typ] = c
		handlers[typ] = func(ctx context.Context, task *simpleworkflow.Task) (json.RawMessage, error) {
			steps := c.First
			if task.Attempt > 1 {
				steps = c.Second
			}
			for _, name := range steps {
				_, err := task.Step(ctx, name, func(ctx context.Context) (json.RawMessage, error) {
					if task.Attempt > 1 {
						mu.Lock()
						ran[task.ID] = append(ran[task.ID], name)
						mu.Unlock()
					}
					return json.Marshal(name)
				})
				if err != nil {
					return nil, err
				}
			}
			if task.Attempt == 1 {
				return nil, errors.New("first attempt fails on purpose")
			}
			return json.RawMessage(`{}`), nil
		}
	}
	b.startPoller(t, simpleworkflow.PollerConfig{TypePrefixes: []string{"contract.replay"}}, handlers)
	ids := map[string]string{}
	for typ := range byType {
		res, err := b.client.Create(b.ctx, typ, nil, &simpleworkflow.CreateOptions{
			RetryPolicy: &simpleworkflow.RetryPolicy{BaseDelay: time.Millisecond}})
		if err != nil {
			t.Fatal(err)
		}
		ids[typ] = res.ID
	}
	for typ, c := range byType {
		id := ids[typ]
		switch c.Expect {
		case "succeeded":
			b.waitStatus(t, id, simpleworkflow.StatusSucceeded, 30*time.Second)
			mu.Lock()
			got := strings.Join(ran[id], ",")
			mu.Unlock()
			if want := strings.Join(c.RanAgain, ","); got != want {
				t.Errorf("%s: the second attempt ran %q, want %q", c.Name, got, want)
			}
		case "nondeterministic":
			run := b.waitStatus(t, id, simpleworkflow.StatusFailed, 30*time.Second)
			if !strings.Contains(run.LastError, c.Message) {
				t.Errorf("%s: last error %q, want it to hold %q", c.Name, run.LastError, c.Message)
			}
		default:
			t.Fatalf("%s: unknown expectation %q", c.Name, c.Expect)
		}
	}
}
