package simpleworkflow_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"net/url"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/simple-workflow/simple-workflow/pkg/simpleworkflow"
)

// plainLogin connects as a new login role that is granted nothing: no inbox
// role, no namespace. Any such login may still send any notification. The
// role is dropped when the test ends.
func (b *bundle) plainLogin(t *testing.T) *pgx.Conn {
	t.Helper()
	pool := b.client.Pool()
	var canCreate bool
	if err := pool.QueryRow(b.ctx, "select rolsuper or rolcreaterole from pg_roles where rolname = current_user").Scan(&canCreate); err != nil {
		t.Fatal(err)
	}
	if !canCreate {
		t.Skip("the test server's user may not create roles")
	}
	var raw [8]byte
	_, _ = rand.Read(raw[:])
	name, password := "sw_plain_"+hex.EncodeToString(raw[:]), hex.EncodeToString(raw[:])+"pw"
	if _, err := pool.Exec(b.ctx, "create role "+pgx.Identifier{name}.Sanitize()+" login password '"+password+"'"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if _, err := pool.Exec(ctx, "drop role "+pgx.Identifier{name}.Sanitize()); err != nil {
			t.Logf("drop role %s: %v", name, err)
		}
	})
	u, err := url.Parse(b.url)
	if err != nil {
		t.Fatal(err)
	}
	u.User = url.UserPassword(name, password)
	conn, err := pgx.Connect(b.ctx, u.String())
	if err != nil {
		t.Fatalf("connect as %s: %v", name, err)
	}
	t.Cleanup(func() { _ = conn.Close(context.Background()) }) // before the role is dropped
	return conn
}

// forge sends n cancellation notifications for each of ids from conn, each
// in its own transaction: within one, Postgres folds equal notifications.
func forge(ctx context.Context, conn *pgx.Conn, n int, ids ...string) error {
	for range n {
		for _, id := range ids {
			if _, err := conn.Exec(ctx, "select pg_notify('workflow_run_cancelled', $1)", id); err != nil {
				return err
			}
		}
	}
	return nil
}

func (b *bundle) heartbeatCount(t *testing.T, id string) int {
	t.Helper()
	var n int
	if err := b.client.Pool().QueryRow(b.ctx, "select heartbeat_count from workflow.workflow_run where id = $1", id).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// A flood of cancellation notifications forged by a login granted nothing,
// for a run a worker is handling, does not stop its handler: the worker
// asks the database (an immediate heartbeat of that run) and carries on;
// the flood costs at most one such call per confirmGap (100ms). The run
// then succeeds, and its audit trail has no cancellation and no lost lease.
func TestForgedCancelNotificationDoesNotStopTheHandler(t *testing.T) {
	t.Parallel()
	b := setup(t)
	forger := b.plainLogin(t)
	started := make(chan string, 1)
	release := make(chan struct{})
	ended := make(chan error, 1)
	b.startPoller(t, simpleworkflow.PollerConfig{
		TypePrefixes: []string{"forged."}, LeaseDuration: 30 * time.Second, // heartbeat every 10s
	}, map[string]simpleworkflow.HandlerFunc{"forged.wait.v1": func(ctx context.Context, task *simpleworkflow.Task) (json.RawMessage, error) {
		started <- task.ID
		select {
		case <-ctx.Done():
			ended <- context.Cause(ctx)
			return nil, ctx.Err()
		case <-release:
			ended <- nil
			return json.RawMessage(`{"ok":true}`), nil
		}
	}})
	res, err := b.client.Create(b.ctx, "forged.wait.v1", nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-started:
	case <-time.After(30 * time.Second):
		t.Fatal("the handler did not start")
	}
	if n := b.heartbeatCount(t, res.ID); n != 0 {
		t.Fatalf("heartbeat count %d before the flood, want 0", n)
	}
	at := time.Now()
	// The run's id, and ids the worker does not hold: another run's, a
	// random one, and no id at all.
	other, err := b.client.Create(b.ctx, "elsewhere.idle.v1", nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := forge(b.ctx, forger, 200, res.ID, other.ID, "00000000-0000-0000-0000-000000000000", "not a uuid"); err != nil {
		t.Fatalf("forging as a plain login: %v", err)
	}
	// The worker asked the database at least once (no regular heartbeat
	// is due for 10s)...
	waitFor(t, 5*time.Second, "the worker to confirm the notification", func() (bool, error) {
		select {
		case cause := <-ended:
			t.Fatalf("a forged notification stopped the handler: %v", cause)
		default:
		}
		return b.heartbeatCount(t, res.ID) >= 1, nil
	})
	time.Sleep(300 * time.Millisecond) // the confirmation of the flood's tail
	elapsed := time.Since(at)
	// ...and at most once per 100ms, plus the regular heartbeats.
	n, most := b.heartbeatCount(t, res.ID), 2+int(elapsed/(100*time.Millisecond))+int(elapsed/(10*time.Second))
	t.Logf("%d confirming heartbeats for 800 forged notifications in %s", n, elapsed)
	if n > most {
		t.Fatalf("%d heartbeats of the run in %s of forged notifications, want at most %d", n, elapsed, most)
	}
	select {
	case cause := <-ended:
		t.Fatalf("a forged notification stopped the handler: %v", cause)
	default:
	}
	close(release)
	if cause := <-ended; cause != nil {
		t.Fatalf("the handler's context ended with %v", cause)
	}
	run := b.waitStatus(t, res.ID, simpleworkflow.StatusSucceeded, 30*time.Second)
	if run.Attempt != 1 {
		t.Fatalf("run succeeded at attempt %d, want 1", run.Attempt)
	}
	assertTrail(t, b.events(t, res.ID), simpleworkflow.EventCreated,
		simpleworkflow.EventStarted, simpleworkflow.EventSucceeded)
	if r, err := b.client.Get(b.ctx, other.ID); err != nil || r.Status != simpleworkflow.StatusPending {
		t.Fatalf("the run no worker holds: %+v, %v", r, err)
	}
}

// A real cancellation, the seed's UPDATE, stops the handler at once
// (well within the 10s heartbeat) even while forged notifications for the
// same run keep the worker busy confirming.
func TestRealCancelStopsTheHandlerAmidForgedNotifications(t *testing.T) {
	t.Parallel()
	b := setup(t)
	forger := b.plainLogin(t)
	started := make(chan string, 1)
	stopped := make(chan error, 1)
	b.startPoller(t, simpleworkflow.PollerConfig{
		TypePrefixes: []string{"forgedreal."}, LeaseDuration: 30 * time.Second, // heartbeat every 10s
	}, map[string]simpleworkflow.HandlerFunc{"forgedreal.wait.v1": func(ctx context.Context, task *simpleworkflow.Task) (json.RawMessage, error) {
		started <- task.ID
		<-ctx.Done()
		stopped <- context.Cause(ctx)
		return nil, ctx.Err()
	}})
	res, err := b.client.Create(b.ctx, "forgedreal.wait.v1", nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-started:
	case <-time.After(30 * time.Second):
		t.Fatal("the handler did not start")
	}
	fctx, stopForging := context.WithCancel(b.ctx)
	var wg sync.WaitGroup
	wg.Go(func() {
		for fctx.Err() == nil {
			if err := forge(fctx, forger, 1, res.ID); err != nil && fctx.Err() == nil {
				t.Errorf("forging: %v", err)
				return
			}
		}
	})
	defer func() {
		stopForging()
		wg.Wait()
	}()
	time.Sleep(300 * time.Millisecond)
	select {
	case cause := <-stopped:
		t.Fatalf("forged notifications stopped the handler: %v", cause)
	default:
	}
	at := time.Now()
	tag, err := b.client.Pool().Exec(b.ctx, `update workflow.workflow_run set status = 'cancelled', updated_at = now()
		where id = $1 and status in ('pending', 'leased')`, res.ID)
	if err != nil || tag.RowsAffected() != 1 {
		t.Fatalf("cancel: %v, %v", tag, err)
	}
	select {
	case cause := <-stopped:
		if !errors.Is(cause, simpleworkflow.ErrRunCancelled) {
			t.Fatalf("handler context cause %v, want ErrRunCancelled", cause)
		}
		if d := time.Since(at); d > 2*time.Second {
			t.Fatalf("handler stopped %s after the cancel", d)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("handler still running 5s after the cancel (the heartbeat is 10s away)")
	}
	stopForging()
	wg.Wait()
	if r, err := b.client.Get(b.ctx, res.ID); err != nil || r.Status != simpleworkflow.StatusCancelled {
		t.Fatalf("run %+v, %v; want cancelled", r, err)
	}
	assertTrail(t, b.events(t, res.ID), simpleworkflow.EventCreated,
		simpleworkflow.EventStarted, simpleworkflow.EventCancelled)
}
