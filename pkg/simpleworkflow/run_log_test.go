package simpleworkflow_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	simpleworkflow "github.com/simple-workflow/simple-workflow/pkg/simpleworkflow"
)

// lockedBuffer is a bytes.Buffer safe for a logger's concurrent writes.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// logMessages reads a run's whole log as "attempt level message" lines.
func (b *bundle) logMessages(t *testing.T, id string) []string {
	t.Helper()
	lines, err := b.client.Logs(b.ctx, id, 0, 0, 10000)
	if err != nil {
		t.Fatal(err)
	}
	out := make([]string, len(lines))
	for i, l := range lines {
		out[i] = fmt.Sprintf("%d %s %s", l.Attempt, l.Level, l.Message)
	}
	return out
}

// What a handler logs through Task.Logger is kept with the run, per
// attempt, at the poller's run log level and above (attributes and groups
// as key=value), lines logged before a durable wait included; the worker's
// own logger gets every record with the run's id and attempt.
func TestHandlerLogsAreKeptPerAttempt(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var workerLog lockedBuffer
	b.startPoller(t, simpleworkflow.PollerConfig{TypePrefixes: []string{"logs."}, PollInterval: 50 * time.Millisecond,
		Logger: slog.New(slog.NewJSONHandler(&workerLog, &slog.HandlerOptions{Level: slog.LevelDebug}))},
		map[string]simpleworkflow.HandlerFunc{
			"logs.flaky.v1": func(ctx context.Context, task *simpleworkflow.Task) (json.RawMessage, error) {
				log := task.Logger().With("order", 7).WithGroup("g")
				log.InfoContext(ctx, "charging", "amount", "12.50")
				log.DebugContext(ctx, "not kept: below the run log level")
				if task.Attempt == 1 {
					log.Warn("card declined")
					return nil, errTest
				}
				task.Logger().Error("second try", "card", "other")
				return nil, nil
			},
			"logs.sleepy.v1": func(ctx context.Context, task *simpleworkflow.Task) (json.RawMessage, error) {
				task.Logger().Info("before the nap", "attempt", task.Attempt)
				if err := task.Sleep(ctx, "nap", 200*time.Millisecond); err != nil {
					return nil, err
				}
				task.Logger().Info("after the nap", "attempt", task.Attempt)
				return nil, nil
			},
		})
	flaky, err := b.client.Create(b.ctx, "logs.flaky.v1", nil, &simpleworkflow.CreateOptions{
		MaxAttempts: 2, RetryPolicy: &simpleworkflow.RetryPolicy{BaseDelay: 50 * time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	sleepy, err := b.client.Create(b.ctx, "logs.sleepy.v1", nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	b.waitStatus(t, flaky.ID, simpleworkflow.StatusSucceeded, 30*time.Second)
	b.waitStatus(t, sleepy.ID, simpleworkflow.StatusSucceeded, 30*time.Second)

	want := []string{
		"1 info charging order=7 g.amount=12.50",
		"1 warn card declined order=7",
		"2 info charging order=7 g.amount=12.50",
		"2 error second try card=other",
	}
	if got := b.logMessages(t, flaky.ID); strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("log of the flaky run:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	// The wait parked the run; its next claim (the same attempt) replayed
	// the handler up to the nap: "before the nap" is not kept twice.
	want = []string{"1 info before the nap attempt=1", "1 info after the nap attempt=1"}
	if got := b.logMessages(t, sleepy.ID); strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("log of the sleepy run:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	out := workerLog.String()
	for _, s := range []string{`"msg":"charging"`, `"msg":"not kept: below the run log level"`, `"run_id":"` + flaky.ID + `"`} {
		if !strings.Contains(out, s) {
			t.Fatalf("the worker's own log lacks %s:\n%s", s, out)
		}
	}
	atts, err := b.client.LogAttempts(b.ctx, flaky.ID)
	if err != nil || len(atts) != 2 || atts[0].Lines != 2 || atts[0].Dropped != 0 {
		t.Fatalf("attempts %+v, %v", atts, err)
	}
}

// A hostile handler logs 200,000 lines, a 1 MiB line, NUL bytes and
// invalid UTF-8: its run keeps the newest lines within the owner's limit,
// says how many it dropped, stores the odd lines cleaned and cut; the
// bystanders beside it, on the same worker, keep every line and succeed.
func TestHostileHandlerLogsHarmNoOtherRun(t *testing.T) {
	t.Parallel()
	b := setup(t)
	if _, err := b.client.Pool().Exec(b.ctx, "update workflow.workflow_settings set max_log_lines = 100"); err != nil {
		t.Fatal(err)
	}
	const flood = 200_000
	b.startPoller(t, simpleworkflow.PollerConfig{TypePrefixes: []string{"noisy."}, PollInterval: 50 * time.Millisecond,
		Concurrency: 8},
		map[string]simpleworkflow.HandlerFunc{
			"noisy.flood.v1": func(ctx context.Context, task *simpleworkflow.Task) (json.RawMessage, error) {
				log := task.Logger()
				for i := range flood {
					log.Info("x", "i", i)
				}
				log.Info(strings.Repeat("y", 1<<20))
				log.Info("nul\x00byte")
				log.Info("bad \xff\xfe utf-8")
				return nil, nil
			},
			"noisy.calm.v1": func(ctx context.Context, task *simpleworkflow.Task) (json.RawMessage, error) {
				for i := range 3 {
					task.Logger().Info("calm", "i", i)
				}
				return nil, nil
			},
		})
	hostile, err := b.client.Create(b.ctx, "noisy.flood.v1", nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	var bystanders []string
	for range 10 {
		r, err := b.client.Create(b.ctx, "noisy.calm.v1", nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		bystanders = append(bystanders, r.ID)
	}
	b.waitStatus(t, hostile.ID, simpleworkflow.StatusSucceeded, 2*time.Minute)
	for _, id := range bystanders {
		b.waitStatus(t, id, simpleworkflow.StatusSucceeded, 30*time.Second)
		if got := b.logMessages(t, id); strings.Join(got, ",") != "1 info calm i=0,1 info calm i=1,1 info calm i=2" {
			t.Fatalf("bystander %s's log: %q", id, got)
		}
	}
	got := b.logMessages(t, hostile.ID)
	if len(got) != 100 {
		t.Fatalf("the flood kept %d lines, want the newest 100", len(got))
	}
	last := got[len(got)-3:]
	if !strings.HasSuffix(last[0], fmt.Sprintf("[cut: %d bytes]", 1<<20)) || len(last[0]) > 8300 {
		t.Fatalf("the 1 MiB line kept as %d octets: ...%s", len(last[0]), last[0][max(0, len(last[0])-40):])
	}
	if last[1] != "1 info nul\uFFFDbyte" || last[2] != "1 info bad \uFFFD utf-8" {
		t.Fatalf("the odd lines kept as %q", last[1:])
	}
	if got[0] != fmt.Sprintf("1 info x i=%d", flood-97) {
		t.Fatalf("the oldest line kept: %q", got[0])
	}
	atts, err := b.client.LogAttempts(b.ctx, hostile.ID)
	if err != nil || len(atts) != 1 || atts[0].Dropped != flood+3-100 {
		t.Fatalf("attempts %+v, %v; want %d lines dropped", atts, err, flood+3-100)
	}
}

// Attributes keep their keys whatever they are, "level", "msg" and "time"
// included, values with spaces quoted.
func TestRunLogKeepsEveryAttribute(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.startPoller(t, simpleworkflow.PollerConfig{TypePrefixes: []string{"attrs."}, PollInterval: 50 * time.Millisecond},
		map[string]simpleworkflow.HandlerFunc{
			"attrs.job.v1": func(ctx context.Context, task *simpleworkflow.Task) (json.RawMessage, error) {
				task.Logger().Info("x", "level", "high", "msg", "m", "time", 3, "note", "two words",
					slog.Group("g", "k", ""), "err", errTest)
				return nil, nil
			},
		})
	r, err := b.client.Create(b.ctx, "attrs.job.v1", nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	b.waitStatus(t, r.ID, simpleworkflow.StatusSucceeded, 30*time.Second)
	want := `1 info x level=high msg=m time=3 note="two words" g.k="" err="planned failure"`
	if got := b.logMessages(t, r.ID); len(got) != 1 || got[0] != want {
		t.Fatalf("log %q, want %q", got, want)
	}
}

// The last lines a handler logs before it fails are kept even while a
// send of its earlier lines is under way: the failure (which puts the run
// back in the queue, ending the attempt's hold) is written after them.
func TestLastLinesBeforeAFailureAreKeptWhileASendIsUnderWay(t *testing.T) {
	t.Parallel()
	b := setup(t)
	logged, goOn := make(chan struct{}), make(chan struct{})
	b.startPoller(t, simpleworkflow.PollerConfig{TypePrefixes: []string{"inflight."}, PollInterval: 50 * time.Millisecond,
		LogFlushInterval: 50 * time.Millisecond},
		map[string]simpleworkflow.HandlerFunc{
			"inflight.job.v1": func(ctx context.Context, task *simpleworkflow.Task) (json.RawMessage, error) {
				if task.Attempt > 1 {
					return nil, nil
				}
				task.Logger().Info("first")
				<-logged
				task.Logger().Error("last words")
				<-goOn
				return nil, errTest
			},
		})
	r, err := b.client.Create(b.ctx, "inflight.job.v1", nil, &simpleworkflow.CreateOptions{
		MaxAttempts: 2, RetryPolicy: &simpleworkflow.RetryPolicy{BaseDelay: time.Hour}})
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, "the first line to be kept", func() (bool, error) {
		lines, err := b.client.Logs(b.ctx, r.ID, 0, 0, 10)
		return len(lines) == 1, err
	})
	// Hold the attempt's log row: the next send waits for it.
	tx, err := b.client.Pool().Begin(b.ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(b.ctx) }()
	if _, err := tx.Exec(b.ctx, "select 1 from workflow.workflow_run_log_attempt where run_id = $1 for update", r.ID); err != nil {
		t.Fatal(err)
	}
	close(logged)
	waitFor(t, 30*time.Second, "a send of the last words to wait for the row", func() (bool, error) {
		var n int
		err := b.client.Pool().QueryRow(b.ctx, `select count(*) from pg_stat_activity
			where wait_event_type = 'Lock' and query like '%append_run_logs%'`).Scan(&n)
		return n > 0, err
	})
	close(goOn) // the handler fails while that send waits
	time.Sleep(300 * time.Millisecond)
	if run, err := b.client.Get(b.ctx, r.ID); err != nil || run.Status != simpleworkflow.StatusLeased {
		t.Fatalf("the failure was written before the send under way answered: %v %v", run.Status, err)
	}
	if err := tx.Commit(b.ctx); err != nil {
		t.Fatal(err)
	}
	b.waitStatus(t, r.ID, simpleworkflow.StatusPending, 30*time.Second)
	if got := b.logMessages(t, r.ID); strings.Join(got, ",") != "1 info first,1 error last words" {
		t.Fatalf("log %q, want both lines of attempt 1", got)
	}
}
