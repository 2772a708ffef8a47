package main

import (
	"context"
	"fmt"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/simple-workflow/simple-workflow/internal/pgtest"
	"github.com/simple-workflow/simple-workflow/pkg/simpleworkflow"
)

// A worker process SIGKILLed at each point of a transactional step (inside
// the body after its write; after the journal write, before the commit;
// after the commit, before the run's outcome): another worker process
// finishes the run, and the transfer row is written exactly once. The body
// runs again only when the first one's work was rolled back.
func TestTransferIsWrittenOnceWhereverTheWorkerDies(t *testing.T) {
	t.Parallel()
	bin := buildWorker(t)
	cases := []struct {
		name    string
		payload map[string]any
		// holdJournal makes the journal write wait on a lock the test
		// holds (a trigger on workflow_step).
		holdJournal bool
		// at returns when the first worker is at the point where it dies.
		at func(t *testing.T, c *simpleworkflow.Client, runID string)
		// bodies is how many times the body runs in all; survivor is the
		// attempt whose write stays.
		bodies, survivor int
	}{
		{
			name:    "inside the body, after its write",
			payload: map[string]any{"holdInBodySeconds": 60},
			at: func(t *testing.T, c *simpleworkflow.Client, runID string) {
				waitFor(t, 30*time.Second, "the body to run", func() bool { return bodyRuns(t, c, runID) == 1 })
			},
			bodies: 2, survivor: 2,
		},
		{
			name:        "after the journal write, before the commit",
			payload:     map[string]any{},
			holdJournal: true,
			at: func(t *testing.T, c *simpleworkflow.Client, runID string) {
				// Waits while the test holds the lock a trigger on the
				// journal takes after the step's entry is inserted: the
				// worker has written its row and its journal entry and not
				// yet sent its commit.
				waitFor(t, 30*time.Second, "the journal write to wait on the lock", func() bool {
					var n int
					err := c.Pool().QueryRow(context.Background(), `select count(*) from pg_locks
                        where locktype = 'advisory' and not granted and objid = 4242`).Scan(&n)
					return err == nil && n == 1
				})
			},
			bodies: 2, survivor: 2,
		},
		{
			name:    "after the commit, before the outcome",
			payload: map[string]any{"holdAfterStepSeconds": 60},
			at: func(t *testing.T, c *simpleworkflow.Client, runID string) {
				waitFor(t, 30*time.Second, "the step to be journaled", func() bool {
					steps, err := c.Steps(context.Background(), runID)
					return err == nil && len(steps) == 1
				})
			},
			bodies: 1, survivor: 1,
		},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			url := pgtest.NewDatabase(t)
			client := connect(t, url)
			ctx := context.Background()
			first := startWorker(t, bin, url, fmt.Sprintf("transfer-a-%d", i))
			// The worker creates its tables as it starts.
			waitFor(t, 30*time.Second, "the transfer table", func() bool {
				var ok bool
				err := client.Pool().QueryRow(ctx, `select to_regclass('public.demo_transfer') is not null`).Scan(&ok)
				return err == nil && ok
			})
			held := tc.holdJournal
			lock, err := client.Pool().Acquire(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer lock.Release()
			if held {
				path, err := pgtest.RepoFile("testdata/steptx/hold_journal.sql")
				if err != nil {
					t.Fatal(err)
				}
				hold, err := os.ReadFile(path)
				if err != nil {
					t.Fatal(err)
				}
				if _, err := client.Pool().Exec(ctx, string(hold)); err != nil {
					t.Fatal(err)
				}
				if _, err := lock.Exec(ctx, `select pg_advisory_lock(0, 4242)`); err != nil {
					t.Fatal(err)
				}
			}
			payload := map[string]any{"transferId": fmt.Sprintf("t-%d", i), "amount": 10}
			for k, v := range tc.payload {
				payload[k] = v
			}
			res, err := client.Create(ctx, "demo.transfer.v1", payload, nil)
			if err != nil {
				t.Fatal(err)
			}
			tc.at(t, client, res.ID)
			if err := first.Process.Signal(syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
			_ = first.Wait()
			if held {
				// The orphaned session goes on once the lock is free, finds
				// its client gone and rolls back: no commit was ever sent.
				if _, err := lock.Exec(ctx, `select pg_advisory_unlock(0, 4242)`); err != nil {
					t.Fatal(err)
				}
			}
			startWorker(t, bin, url, fmt.Sprintf("transfer-b-%d", i))
			var run *simpleworkflow.Run
			waitFor(t, 60*time.Second, "the transfer to succeed", func() bool {
				r, err := client.Get(ctx, res.ID)
				run = r
				return err == nil && r.Status == simpleworkflow.StatusSucceeded
			})
			if run.Attempt != 2 {
				t.Fatalf("finished at attempt %d, want 2", run.Attempt)
			}
			var rows, attempt int
			if err := client.Pool().QueryRow(ctx, `select count(*), min(attempt) from public.demo_transfer where run_id = $1`,
				res.ID).Scan(&rows, &attempt); err != nil {
				t.Fatal(err)
			}
			if rows != 1 || attempt != tc.survivor {
				t.Fatalf("%d transfer rows (the first from attempt %d), want exactly 1 from attempt %d", rows, attempt, tc.survivor)
			}
			if n := bodyRuns(t, client, res.ID); n != tc.bodies {
				t.Fatalf("the body ran %d times, want %d", n, tc.bodies)
			}
			steps, err := client.Steps(ctx, res.ID)
			if err != nil || len(steps) != 1 || steps[0].Name != "transfer" || steps[0].Attempt != tc.survivor {
				t.Fatalf("journal %+v (%v), want the transfer step from attempt %d", steps, err, tc.survivor)
			}
		})
	}
}

// bodyRuns is how many times demo.transfer.v1's step body ran for a run
// (counted outside its transaction).
func bodyRuns(t *testing.T, c *simpleworkflow.Client, runID string) int {
	t.Helper()
	var n int
	err := c.Pool().QueryRow(context.Background(), `select coalesce(sum(n), 0) from public.demo_step_counter
        where run_id = $1 and step = 'transfer-body'`, runID).Scan(&n)
	if err != nil {
		return -1
	}
	return n
}
