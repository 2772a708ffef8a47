package engine_test

import (
	"testing"
	"time"

	"github.com/simple-workflow/simple-workflow/internal/engine"
)

// listenCreated starts a listener on ChannelRunCreated and returns a
// function that waits for the next notification's payload.
func listenCreated(t *testing.T, b *bundle) func() string {
	t.Helper()
	got := make(chan string, 100)
	connected := make(chan struct{}, 1)
	ctx, cancel := b.ctxWithCancel()
	t.Cleanup(cancel)
	go func() {
		_ = b.eng.Listen(ctx, engine.ListenConfig{
			Channels:  []string{engine.ChannelRunCreated},
			OnNotify:  func(n engine.Notification) { got <- n.Payload },
			OnConnect: func() { connected <- struct{}{} },
		})
	}()
	select {
	case <-connected:
	case <-time.After(10 * time.Second):
		t.Fatal("listener did not connect")
	}
	return func() string {
		t.Helper()
		select {
		case p := <-got:
			return p
		case <-time.After(5 * time.Second):
			t.Fatal("no notification")
			return ""
		}
	}
}

// Inserts notify at commit, once per type and transaction; what a
// rolled-back savepoint inserted is not announced.
func TestWakeUpOncePerTypeAtCommit(t *testing.T) {
	t.Parallel()
	b := setup(t)
	next := listenCreated(t, b)
	tx, err := b.pool.Begin(b.ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(b.ctx) }()
	for _, sql := range []string{
		`insert into workflow.workflow_run (type) values ('wake.a.v1'), ('wake.a.v1')`,
		`insert into workflow.workflow_run (type) values ('wake.b.v1'), ('wake.a.v1')`,
		`savepoint s`,
		`insert into workflow.workflow_run (type) values ('wake.c.v1')`,
		`rollback to savepoint s`,
	} {
		if _, err := tx.Exec(b.ctx, sql); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	if err := tx.Commit(b.ctx); err != nil {
		t.Fatal(err)
	}
	// A marker after the transaction: everything it announced comes first.
	if _, err := b.pool.Exec(b.ctx, `insert into workflow.workflow_run (type) values ('wake.z.v1')`); err != nil {
		t.Fatal(err)
	}
	var seq []string
	for p := ""; p != "wake.z.v1"; {
		p = next()
		seq = append(seq, p)
	}
	if len(seq) != 3 || seq[0] != "wake.a.v1" || seq[1] != "wake.b.v1" {
		t.Fatalf("notifications %v, want wake.a.v1, wake.b.v1, then the marker", seq)
	}
}

// While another committing transaction is about to announce a type (it
// holds the type's wake lock), an insert of that type leaves the
// announcement to it and commits without waiting; once the lock is free,
// inserts announce themselves again.
func TestWakeUpLeftToTheTransactionAnnouncingTheType(t *testing.T) {
	t.Parallel()
	b := setup(t)
	next := listenCreated(t, b)
	// The owner's session holds wake.t.v1's wake-up row, as a committing
	// transaction announcing it does.
	holder, err := b.pool.Begin(b.ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = holder.Rollback(b.ctx) }()
	if _, err := holder.Exec(b.ctx, `select 1 from workflow.workflow_lock
		where id = 1 + (hashtext($1) & 4095) for update`, "default/wake.t.v1"); err != nil {
		t.Fatal(err)
	}
	if _, err := b.pool.Exec(b.ctx, `insert into workflow.workflow_run (type) values ('wake.t.v1')`); err != nil {
		t.Fatal(err)
	}
	if _, err := b.pool.Exec(b.ctx, `insert into workflow.workflow_run (type) values ('wake.m.v1')`); err != nil {
		t.Fatal(err)
	}
	if p := next(); p != "wake.m.v1" {
		t.Fatalf("notification %q while wake.t.v1's lock was held, want only the marker wake.m.v1", p)
	}
	if err := holder.Rollback(b.ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := b.pool.Exec(b.ctx, `insert into workflow.workflow_run (type) values ('wake.t.v1')`); err != nil {
		t.Fatal(err)
	}
	if p := next(); p != "wake.t.v1" {
		t.Fatalf("notification %q, want wake.t.v1", p)
	}
}
