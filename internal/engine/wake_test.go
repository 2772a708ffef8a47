package engine_test

import (
	"slices"
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

// Inserts notify at commit, once per type (of a namespace) and
// transaction; what a rolled-back savepoint inserted is not announced.
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
		`insert into workflow.workflow_run (type, namespace) values ('wake.a.v1', 'team-a'), ('wake.a.v1', 'team-a')`,
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
	for p := ""; p != "default/wake.z.v1"; {
		p = next()
		seq = append(seq, p)
	}
	// Each names the type's namespace: team-a's runs of a type of the same
	// name are announced apart, to team-a's workers.
	if want := []string{"default/wake.a.v1", "default/wake.b.v1", "team-a/wake.a.v1", "default/wake.z.v1"}; !slices.Equal(seq, want) {
		t.Fatalf("notifications %v, want %v", seq, want)
	}
	if ns, typ := engine.SplitWakePayload(seq[2]); ns != "team-a" || typ != "wake.a.v1" {
		t.Fatalf("SplitWakePayload(%q) = %q, %q", seq[2], ns, typ)
	}
	if ns, typ := engine.SplitWakePayload("wake.a.v1"); ns != "" || typ != "wake.a.v1" {
		t.Fatalf("a payload without a namespace splits into %q, %q", ns, typ)
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
	if p := next(); p != "default/wake.m.v1" {
		t.Fatalf("notification %q while wake.t.v1's lock was held, want only the marker wake.m.v1", p)
	}
	if err := holder.Rollback(b.ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := b.pool.Exec(b.ctx, `insert into workflow.workflow_run (type) values ('wake.t.v1')`); err != nil {
		t.Fatal(err)
	}
	if p := next(); p != "default/wake.t.v1" {
		t.Fatalf("notification %q, want wake.t.v1", p)
	}
}
