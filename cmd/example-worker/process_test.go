package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/simple-workflow/simple-workflow/internal/pgtest"
	"github.com/simple-workflow/simple-workflow/pkg/simpleworkflow"
)

// buildWorker compiles this command into a temporary directory.
func buildWorker(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "example-worker")
	out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// startWorker starts an example-worker process; it is killed when the test
// ends if still running.
func startWorker(t *testing.T, bin, url, id string, extra ...string) *exec.Cmd {
	t.Helper()
	args := append([]string{"--database-url", url, "--worker-id", id, "--type-prefixes", "demo.",
		"--lease-duration", "2s", "--reap-interval", "300ms"}, extra...)
	return startLogged(t, exec.Command(bin, args...), id)
}

// startLogged starts cmd with its output in a log file named for id; the
// process is killed when the test ends if still running, and its log is
// shown when the test failed.
func startLogged(t *testing.T, cmd *exec.Cmd, id string) *exec.Cmd {
	t.Helper()
	logFile, err := os.Create(filepath.Join(t.TempDir(), id+".log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = logFile, logFile
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		if t.Failed() {
			out, _ := os.ReadFile(logFile.Name())
			t.Logf("%s log:\n%s", id, out)
		}
	})
	return cmd
}

func waitFor(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", timeout, what)
		}
		time.Sleep(25 * time.Millisecond)
	}
}

func connect(t *testing.T, url string) *simpleworkflow.Client {
	t.Helper()
	c, err := simpleworkflow.Connect(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

// A worker process killed with SIGKILL mid-run loses its lease; the lease
// expires and another worker process finishes the run with attempt 2.
func TestKilledWorkerRunIsFinishedByAnother(t *testing.T) {
	t.Parallel()
	bin := buildWorker(t)
	url := pgtest.NewDatabase(t)
	client := connect(t, url)
	ctx := context.Background()

	first := startWorker(t, bin, url, "worker-a")
	res, err := client.Create(ctx, "demo.sleep.v1", map[string]any{"seconds": 3}, nil)
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, 20*time.Second, "worker-a to lease the run", func() bool {
		r, err := client.Get(ctx, res.ID)
		return err == nil && r.Status == simpleworkflow.StatusLeased && r.LeasedBy == "worker-a"
	})
	if err := first.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = first.Wait()

	startWorker(t, bin, url, "worker-b")
	var run *simpleworkflow.Run
	waitFor(t, 30*time.Second, "the run to succeed", func() bool {
		r, err := client.Get(ctx, res.ID)
		run = r
		return err == nil && r.Status == simpleworkflow.StatusSucceeded
	})
	if run.Attempt != 2 || run.LeasedBy != "worker-b" {
		t.Fatalf("finished with attempt %d by %s, want attempt 2 by worker-b", run.Attempt, run.LeasedBy)
	}
	evs, err := client.Events(ctx, res.ID)
	if err != nil {
		t.Fatal(err)
	}
	var trail []string
	for _, e := range evs {
		if e.Type == simpleworkflow.EventHeartbeat {
			continue
		}
		var d map[string]any
		_ = json.Unmarshal(e.Data, &d)
		w, _ := d["worker_id"].(string)
		step := string(e.Type)
		if w != "" {
			step += "/" + w
		}
		if r, _ := d["reason"].(string); r != "" {
			step += "/" + r
		}
		trail = append(trail, step)
	}
	want := []string{"created", "started/worker-a", "retried/worker-a/lease_expired",
		"started/worker-b", "succeeded/worker-b"}
	if len(trail) != len(want) {
		t.Fatalf("trail %v, want %v", trail, want)
	}
	for i := range want {
		if trail[i] != want[i] {
			t.Fatalf("trail %v, want %v", trail, want)
		}
	}
}

// SIGTERM stops the worker gracefully: a run that cannot finish within the
// grace period is handed back, not left to lease expiry, and the process
// exits 0.
func TestSIGTERMHandsRunsBack(t *testing.T) {
	t.Parallel()
	bin := buildWorker(t)
	url := pgtest.NewDatabase(t)
	client := connect(t, url)
	ctx := context.Background()

	w := startWorker(t, bin, url, "worker-t", "--shutdown-grace-period", "300ms")
	res, err := client.Create(ctx, "demo.sleep.v1", map[string]any{"seconds": 60}, nil)
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, 20*time.Second, "the run to be leased", func() bool {
		r, err := client.Get(ctx, res.ID)
		return err == nil && r.Status == simpleworkflow.StatusLeased
	})
	at := time.Now()
	if err := w.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := w.Wait(); err != nil {
		t.Fatalf("worker exit: %v, want status 0", err)
	}
	if d := time.Since(at); d > 5*time.Second {
		t.Fatalf("graceful stop took %s", d)
	}
	r, err := client.Get(ctx, res.ID)
	if err != nil {
		t.Fatal(err)
	}
	if r.Status != simpleworkflow.StatusPending || r.Attempt != 0 {
		t.Fatalf("after SIGTERM: status %s attempt %d, want pending 0", r.Status, r.Attempt)
	}
}

func TestDemoHandlers(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	out, err := echo(ctx, &simpleworkflow.Task{Payload: json.RawMessage(`{"a":1}`)})
	if err != nil || string(out) != `{"a":1}` {
		t.Fatalf("echo: %s %v", out, err)
	}
	if _, err := failTimes(ctx, &simpleworkflow.Task{Attempt: 2, Payload: json.RawMessage(`{"failTimes":2}`)}); err == nil {
		t.Fatal("demo.fail.v1 succeeded on attempt 2 of failTimes 2")
	}
	if out, err := failTimes(ctx, &simpleworkflow.Task{Attempt: 3, Payload: json.RawMessage(`{"failTimes":2}`)}); err != nil || string(out) != `{"attempts":3}` {
		t.Fatalf("demo.fail.v1 attempt 3: %s %v", out, err)
	}
	if _, err := sleep(ctx, &simpleworkflow.Task{Payload: json.RawMessage(`{"seconds":-1}`)}); !simpleworkflow.IsPermanent(err) {
		t.Fatalf("negative sleep: %v, want a permanent error", err)
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := sleep(cctx, &simpleworkflow.Task{Payload: json.RawMessage(`{"seconds":60}`)}); err == nil {
		t.Fatal("sleep ignored cancellation")
	}
}

// The example worker's handlers log through Task.Logger: a real worker
// process's lines are kept with the run, per attempt, after it is gone.
func TestExampleWorkerLogsReachTheRun(t *testing.T) {
	t.Parallel()
	bin := buildWorker(t)
	url := pgtest.NewDatabase(t)
	client := connect(t, url)
	ctx := context.Background()
	w := startWorker(t, bin, url, "worker-logs")
	res, err := client.Create(ctx, "demo.fail.v1", map[string]any{"failTimes": 1}, &simpleworkflow.CreateOptions{
		MaxAttempts: 2, RetryPolicy: &simpleworkflow.RetryPolicy{BaseDelay: 50 * time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, "the run to succeed", func() bool {
		r, err := client.Get(ctx, res.ID)
		return err == nil && r.Status == simpleworkflow.StatusSucceeded
	})
	if err := w.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := w.Wait(); err != nil {
		t.Fatalf("worker exit: %v", err)
	}
	lines, err := client.Logs(ctx, res.ID, 0, 0, 100)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, l := range lines {
		got = append(got, fmt.Sprintf("%d %s %s", l.Attempt, l.Level, l.Message))
	}
	want := []string{"1 error failing as planned attempt=1 failTimes=1", "2 info succeeding attempt=2"}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("the run's log:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}
