package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/simple-workflow/simple-workflow/internal/devenv"
	"github.com/simple-workflow/simple-workflow/internal/pgtest"
	"github.com/simple-workflow/simple-workflow/pkg/simpleworkflow"
)

// startCluster starts a Postgres cluster of the test's own, so that it can
// be restarted and frozen without disturbing other tests.
func startCluster(t *testing.T) *pgtest.Cluster {
	t.Helper()
	c, err := pgtest.StartCluster(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Stop)
	return c
}

// startPythonWorker starts the Python example worker process.
func startPythonWorker(t *testing.T, url, id string) *exec.Cmd {
	t.Helper()
	script, err := pgtest.RepoFile("hack/python-deps.sh")
	if err != nil {
		t.Fatal(err)
	}
	py, err := exec.Command("bash", script).Output()
	if err != nil {
		t.Fatalf("python with psycopg: %v", err)
	}
	worker, err := pgtest.RepoFile("sdk/python/examples/example_worker.py")
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(strings.TrimSpace(string(py)), worker, "--type-prefixes=demo.", "--runtime=python",
		"--worker-id="+id, "--lease-duration=3")
	cmd.Env = append(os.Environ(), "DATABASE_URL="+url)
	return startLogged(t, cmd, id)
}

// Postgres crash-restarted under load, then frozen for
// 10 s: Go and Python workers reconnect by themselves, nothing is lost, and
// a run starts more than once only where its lease truly expired.
func TestWorkersSurviveDatabaseOutages(t *testing.T) {
	t.Parallel()
	bin := buildWorker(t)
	pg := startCluster(t)
	ctx := context.Background()
	client := connect(t, pg.URL)
	if err := client.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	goWorker := startWorker(t, bin, pg.URL, "go-outage", "--runtime=go", "--lease-duration=3s")
	pyWorker := startPythonWorker(t, pg.URL, "py-outage")

	var ids []string
	create := func(n int, tag string) {
		for i := range n {
			var res simpleworkflow.CreateResult
			var err error
			for try := 0; try < 100; try++ { // the producer retries through an outage
				res, err = client.Create(ctx, "demo.sleep.v1", map[string]any{"seconds": 0.05},
					&simpleworkflow.CreateOptions{IdempotencyKey: fmt.Sprintf("%s-%d", tag, i), MaxAttempts: 10})
				if err == nil {
					break
				}
				time.Sleep(100 * time.Millisecond)
			}
			if err != nil {
				t.Fatalf("create %s-%d: %v", tag, i, err)
			}
			ids = append(ids, res.ID)
		}
	}
	succeeded := func() int {
		var n int
		if err := client.Pool().QueryRow(ctx, "select count(*) from workflow.workflow_run where status = 'succeeded'").Scan(&n); err != nil {
			return -1
		}
		return n
	}
	create(150, "before")
	waitFor(t, 60*time.Second, "some runs to finish", func() bool { return succeeded() >= 20 })
	if err := pg.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	create(150, "after-restart")
	waitFor(t, 120*time.Second, "every run to succeed after the restart", func() bool { return succeeded() == len(ids) })

	create(150, "during-pause")
	if err := pg.Pause(ctx, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	create(50, "after-pause")
	waitFor(t, 120*time.Second, "every run to succeed after the pause", func() bool { return succeeded() == len(ids) })

	for _, w := range []*exec.Cmd{goWorker, pyWorker} {
		if !devenv.Alive(w.Process.Pid) {
			t.Fatalf("worker %s exited during the outages", w.Args[len(w.Args)-1])
		}
	}
	// A run started twice must have lost a lease in between (expired or
	// handed back), never simply run again.
	var doubled, unexplained int
	if err := client.Pool().QueryRow(ctx, `
        with per_run as (
            select workflow_id,
                   count(*) filter (where event_type = 'started') as starts,
                   count(*) filter (where event_type = 'retried') as retries
            from workflow.run_event group by workflow_id)
        select count(*) filter (where starts > 1), count(*) filter (where starts > 1 + retries)
        from per_run`).Scan(&doubled, &unexplained); err != nil {
		t.Fatal(err)
	}
	if unexplained > 0 {
		t.Fatalf("%d runs started more often than their leases were lost", unexplained)
	}
	var byWorker []string
	rows, err := client.Pool().Query(ctx, "select leased_by || '=' || count(*) from workflow.workflow_run group by leased_by order by 1")
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var s string
		_ = rows.Scan(&s)
		byWorker = append(byWorker, s)
	}
	t.Logf("%d runs succeeded across a crash restart and a 10 s freeze; %d ran again after a lost lease; finished by %v",
		len(ids), doubled, byWorker)
}
