package engine_test

// Least privilege in the database. Workers, producers and
// consoles connect as login users granted the roles of roles.sql; these
// tests create such users in their own database (role names are global to
// the cluster, so each test user gets a random name, and the roles script
// tolerates running in many databases at once) and show what each role can
// and cannot do.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/simple-workflow/simple-workflow/internal/engine"
)

// The seed's SQL, verbatim (DESIGN.md, "The inbox contract").
const (
	seedInsert = `insert into workflow.workflow_run (type, payload, idempotency_key)
values ('content.thumbnail.v1', '{"content_id":"c_123"}', 'content:c_123:thumbnail:300x300')
on conflict (idempotency_key) do nothing
returning id;`
	seedCancel = `update workflow.workflow_run set status = 'cancelled', updated_at = now()
where id = $1 and status in ('pending', 'leased');`
)

// setupRoles is setup with the roles script applied to the test database.
func setupRoles(t *testing.T) *bundle {
	t.Helper()
	b := setup(t)
	var canCreate bool
	if err := b.pool.QueryRow(b.ctx,
		"select rolsuper or rolcreaterole from pg_roles where rolname = current_user").Scan(&canCreate); err != nil {
		t.Fatal(err)
	}
	if !canCreate {
		t.Skip("the test server's user may not create roles")
	}
	if err := engine.CreateRoles(b.ctx, b.pool); err != nil {
		t.Fatal(err)
	}
	return b
}

// login is a test user: a login role granted some of the inbox roles, with
// a pool and an engine connected as it.
type login struct {
	name string
	pool *pgxpool.Pool
	eng  *engine.Engine
}

// loginAs creates a login user that is a member of roles and connects as
// it, with a password in the URL like any application would. The user (and
// whatever it owns in the test database) is dropped when the test ends.
func (b *bundle) loginAs(t *testing.T, roles ...string) login {
	t.Helper()
	name := "sw_user_" + randomID() + randomID()
	password := randomID() + randomID()
	quoted := make([]string, len(roles))
	for i, r := range roles {
		quoted[i] = pgx.Identifier{r}.Sanitize()
	}
	if _, err := b.pool.Exec(b.ctx, fmt.Sprintf("create role %s login password '%s' in role %s",
		pgx.Identifier{name}.Sanitize(), password, strings.Join(quoted, ", "))); err != nil {
		t.Fatalf("create login %s: %v", name, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		for _, sql := range []string{"drop owned by ", "drop role "} {
			if _, err := b.pool.Exec(ctx, sql+pgx.Identifier{name}.Sanitize()); err != nil {
				t.Logf("%s%s: %v", sql, name, err)
			}
		}
	})
	// Bound to the default namespace in each role's capacity, as an
	// install that uses one namespace binds its logins (docs/security.md).
	for _, r := range roles {
		if as := capacityOf(r); as != "" {
			if err := b.eng.GrantNamespace(b.ctx, name, engine.DefaultNamespace, as); err != nil {
				t.Fatalf("bind %s to namespace default as %s: %v", name, as, err)
			}
		}
	}
	u, err := url.Parse(b.url)
	if err != nil {
		t.Fatal(err)
	}
	u.User = url.UserPassword(name, password)
	cfg, err := pgxpool.ParseConfig(u.String())
	if err != nil {
		t.Fatal(err)
	}
	cfg.MaxConns = 4
	pool, err := pgxpool.NewWithConfig(b.ctx, cfg)
	if err != nil {
		t.Fatalf("connect as %s: %v", name, err)
	}
	t.Cleanup(pool.Close) // before the user is dropped
	var who string
	if err := pool.QueryRow(b.ctx, "select current_user").Scan(&who); err != nil || who != name {
		t.Fatalf("connected as %q (%v), want %q", who, err, name)
	}
	eng, err := engine.New(pool)
	if err != nil {
		t.Fatal(err)
	}
	return login{name: name, pool: pool, eng: eng}
}

// capacityOf is the namespace capacity an inbox role acts in ("" for
// another role).
func capacityOf(role string) string {
	switch role {
	case engine.RoleProducer:
		return engine.AsProducer
	case engine.RoleWorker:
		return engine.AsWorker
	case engine.RoleReader:
		return engine.AsReader
	}
	return ""
}

// requireDenied runs sql as l and fails the test unless Postgres refuses it
// for lack of privilege (SQLSTATE 42501).
func (l login) requireDenied(t *testing.T, ctx context.Context, sql string, args ...any) {
	t.Helper()
	_, err := l.pool.Exec(ctx, sql, args...)
	if code := sqlState(err); code != "42501" {
		t.Errorf("%s\n  ran as %s: got %v (SQLSTATE %q), want permission denied (42501)", sql, l.name, err, code)
	}
}

// requireAllowed runs sql as l and fails the test on any error.
func (l login) requireAllowed(t *testing.T, ctx context.Context, sql string, args ...any) pgconn.CommandTag {
	t.Helper()
	tag, err := l.pool.Exec(ctx, sql, args...)
	if err != nil {
		t.Fatalf("%s\n  ran as %s: %v", sql, l.name, err)
	}
	return tag
}

// brokenRule returns the rule a database error says was broken: the
// constraint of an SW001, "" for any other error.
func brokenRule(err error) string {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "SW001" {
		return pgErr.ConstraintName
	}
	return ""
}

func sqlState(err error) string {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return pgErr.Code
	}
	return ""
}

// Every function that touches a table pins its
// search_path; the ones a restricted role calls (and the triggers that write
// beside a producer's statements) run as their owner and are not executable
// by PUBLIC; the small SQL helpers stay inlinable (no SET clause), as do the
// two that only set the audit marks. A later
// migration that redefines a function and forgets this fails here.
func TestFunctionsPinSearchPath(t *testing.T) {
	t.Parallel()
	b := setup(t)
	inlinable := map[string]bool{
		"prefix_pattern": true, "retry_delay": true, "far_future": true, "new_run_id": true, "stored_value_problem": true,
		"step_name_problem": true, "output_problem": true, "nondeterminism_message": true,
		"traceparent_valid": true, "json_too_deep": true, "result_problem": true,
		"run_id_at": true, "run_id_time": true, "history_span_start": true, "history_span_bounds": true, "list_filter_match": true,
		"dag_ready_steps": true, "dag_step_states": true, "child_runs": true, "holds_lease": true,
		"namespace_valid": true, "namespaces_valid": true, "session_is_owner": true, "acts_on": true,
		"new_lease_token": true, "lease_fence": true, "log_message_cut": true,
	}
	// Touch no table and call pg_catalog's functions by their full names:
	// no SET clause, which would cost more than the work they do.
	unpinned := map[string]bool{"set_marks": true, "restore_marks": true}
	// The clock is PL/pgSQL (a SQL body that reads a table is never
	// inlined), with every name qualified and no SET clause: it is called
	// in nearly every statement.
	clock := map[string]bool{"now": true}
	definer := map[string]bool{
		// worker
		"claim_runs": true, "heartbeat_runs": true, "complete_runs": true, "fail_runs": true,
		"release_runs": true, "record_steps": true, "park_run": true, "start_child": true,
		"reap_expired_leases": true, "expire_deadlines": true, "append_run_logs": true,
		// reader (and the helper it calls)
		"queue_depth": true, "active_types": true, "type_depths": true, "inbox_version": true, "run_trail": true,
		"schema_version": true,
		"run_logs":       true, "run_log_attempts": true, "run_log_visible": true,
		// producer
		"cancel_run": true, "retry_run": true, "send_signal": true, "create_runs": true,
		// triggers writing beside a producer's INSERT or UPDATE, or a DELETE
		"on_run_inserted": true, "on_run_cancelled": true, "on_run_soft_deleted": true,
		"on_child_finished": true, "on_parent_ended": true, "on_runs_deleted": true,
		"on_status_changed_by_sql": true, "on_run_inserting": true, "on_flow_slot_freed": true,
		// a producer's commit locks its type's wake-up row (workflow_lock)
		"on_run_committing": true,
		// namespaces: which ones the caller acts on (row-level security asks
		// them as the caller), a plain INSERT's namespace, what is shared
		"caller_namespaces": true, "default_namespace": true, "type_shared": true,
		// schedules: producers keep their own, readers list them
		"put_schedule": true, "delete_schedule": true, "list_schedules": true, "fire_due_schedules": true,
		"cron_next": true, "cron_problem": true, "on_schedule_written": true, "schedule_latest_runs": true,
	}
	rows, err := b.pool.Query(b.ctx, `
select p.proname, p.oid::regprocedure::text, p.prosecdef, coalesce(p.proconfig, '{}'),
       exists (select 1 from aclexplode(coalesce(p.proacl, acldefault('f', p.proowner))) a
               where a.grantee = 0 and a.privilege_type = 'EXECUTE')
from pg_proc p
where p.pronamespace = 'workflow'::regnamespace
order by 2`)
	if err != nil {
		t.Fatal(err)
	}
	type fn struct {
		name, signature string
		secdef          bool
		config          []string
		public          bool
	}
	fns, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (fn, error) {
		var f fn
		return f, r.Scan(&f.name, &f.signature, &f.secdef, &f.config, &f.public)
	})
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, f := range fns {
		seen[f.name] = true
		pinned := false
		for _, c := range f.config {
			if c == "search_path=pg_catalog, pg_temp" {
				pinned = true
			}
		}
		switch {
		case inlinable[f.name] || unpinned[f.name] || clock[f.name]:
			if len(f.config) > 0 || f.secdef {
				t.Errorf("%s: an inlinable or table-free helper must have no SET clause and not be security definer (config %v)", f.signature, f.config)
			}
			if unpinned[f.name] && f.public {
				t.Errorf("%s: the audit marks' helpers are for the functions that run as the owner, not PUBLIC", f.signature)
			}
		case definer[f.name]:
			if !f.secdef || !pinned || f.public {
				t.Errorf("%s: security definer %v, config %v, PUBLIC may execute %v; want security definer, search_path=pg_catalog, pg_temp, no PUBLIC",
					f.signature, f.secdef, f.config, f.public)
			}
		default:
			if f.secdef || !pinned {
				t.Errorf("%s: security definer %v, config %v; want search_path=pg_catalog, pg_temp and the caller's privileges",
					f.signature, f.secdef, f.config)
			}
		}
	}
	for name := range definer {
		if !seen[name] {
			t.Errorf("function workflow.%s is missing", name)
		}
	}
}

// A worker does its whole job through the functions
// (claim, heartbeat, journal, child, park, complete, fail, release, reap,
// deadlines) and can touch no table directly beyond reading the registry.
func TestWorkerRoleWorksThroughFunctionsOnly(t *testing.T) {
	t.Parallel()
	b := setupRoles(t)
	w := b.loginAs(t, engine.RoleWorker)
	ids := map[string]string{}
	for _, typ := range []string{"priv.done.v1", "priv.fail.v1", "priv.back.v1", "priv.nap.v1"} {
		ids[typ] = b.create(t, engine.CreateParams{Type: typ, MaxAttempts: 1})
	}

	claimed, err := w.eng.ClaimRuns(b.ctx, engine.ClaimParams{
		WorkerID: "w", TypePrefixes: []string{"priv."}, Runtime: "go", Limit: 10, LeaseDuration: 30 * time.Second,
	})
	if err != nil || len(claimed) != 4 {
		t.Fatalf("claim as worker: %d runs, %v", len(claimed), err)
	}
	held := map[string]engine.ClaimedRun{}
	refs := make([]engine.LeaseRef, 0, len(claimed))
	for _, c := range claimed {
		held[c.Type] = c
		refs = append(refs, c.Ref())
	}
	hb, err := w.eng.HeartbeatRuns(b.ctx, "w", refs, 30*time.Second)
	if err != nil || len(hb) != 4 || !hb[0].Owned {
		t.Fatalf("heartbeat as worker: %+v %v", hb, err)
	}
	done := held["priv.done.v1"]
	rec, err := w.eng.RecordSteps(b.ctx, "w", []engine.StepWrite{{LeaseRef: done.Ref(), Name: "fetch", Position: 0, Output: json.RawMessage(`{"n":1}`)}})
	if err != nil || rec[0].Status != engine.WriteRecorded {
		t.Fatalf("record step as worker: %+v %v", rec, err)
	}
	child, err := w.eng.StartChild(b.ctx, engine.ChildParams{LeaseRef: done.Ref(), WorkerID: "w", Step: "kid", Position: 1, Type: "other.kid.v1"})
	if err != nil || child.Status != engine.WriteStarted {
		t.Fatalf("start child as worker: %+v %v", child, err)
	}
	nap := held["priv.nap.v1"]
	if p, err := w.eng.ParkRun(b.ctx, engine.ParkParams{LeaseRef: nap.Ref(), WorkerID: "w", Kind: engine.StepKindSleep, Step: "nap", Delay: dur(time.Hour)}); err != nil || p.Status != engine.WriteParked {
		t.Fatalf("park as worker: %+v %v", p, err)
	}
	if got, err := w.eng.CompleteRuns(b.ctx, "w", []engine.Completion{{LeaseRef: done.Ref(), Result: json.RawMessage(`{"ok":true}`)}}); err != nil || len(got) != 1 {
		t.Fatalf("complete as worker: %v %v", got, err)
	}
	if got, err := w.eng.FailRuns(b.ctx, "w", []engine.Failure{{LeaseRef: held["priv.fail.v1"].Ref(), Error: "boom"}}); err != nil || len(got) != 1 {
		t.Fatalf("fail as worker: %v %v", got, err)
	}
	if got, err := w.eng.ReleaseRuns(b.ctx, "w", []engine.LeaseRef{held["priv.back.v1"].Ref()}); err != nil || len(got) != 1 {
		t.Fatalf("release as worker: %v %v", got, err)
	}
	if _, err := w.eng.ReapExpiredLeases(b.ctx, 10); err != nil {
		t.Fatalf("reap as worker: %v", err)
	}
	if _, err := w.eng.ExpireDeadlines(b.ctx, 10); err != nil {
		t.Fatalf("expire deadlines as worker: %v", err)
	}
	for typ, want := range map[string]engine.Status{
		"priv.done.v1": engine.StatusSucceeded, "priv.fail.v1": engine.StatusFailed,
		"priv.back.v1": engine.StatusPending, "priv.nap.v1": engine.StatusPending,
	} {
		if r := b.get(t, ids[typ]); r.Status != want {
			t.Errorf("%s is %s, want %s", typ, r.Status, want)
		}
	}
	if ev := b.eventTypes(t, ids["priv.done.v1"]); ev[len(ev)-1] != engine.EventSucceeded {
		t.Errorf("events of the completed run: %v", ev)
	}

	// The registry is readable; nothing else is, and nothing is writable.
	w.requireAllowed(t, b.ctx, "select * from workflow.workflow_registry")
	id := ids["priv.back.v1"]
	for _, sql := range []string{
		"select * from workflow.workflow_run",
		"select * from workflow.workflow_event",
		"select * from workflow.workflow_step",
		"select * from workflow.workflow_signal",
		"insert into workflow.workflow_run (type) values ('priv.sneak.v1')",
		"insert into workflow.workflow_event (workflow_id, event_type) values (gen_random_uuid(), 'created')",
		"insert into workflow.workflow_registry (workflow_name, runtime) values ('priv.sneak.v1', 'go')",
		"delete from workflow.workflow_run",
		"truncate workflow.workflow_event",
		"create table workflow.sneak (id int)",
		"drop table workflow.workflow_signal",
		"alter function workflow.claim_runs(text, text[], text, integer, bigint, text[], text, uuid[], boolean) security invoker",
		"select workflow.lease_fence(1)",
		"select workflow.delete_finished_runs(interval '1 day', 10)",
		"select workflow.held_run('w', gen_random_uuid(), 1)",
	} {
		w.requireDenied(t, b.ctx, sql)
	}
	w.requireDenied(t, b.ctx, "update workflow.workflow_run set status = 'succeeded' where id = $1", id)
	w.requireDenied(t, b.ctx, "select workflow.cancel_run($1)", id)
	w.requireDenied(t, b.ctx, "select * from workflow.send_signal($1, 'go', null, null)", id)
	if r := b.get(t, id); r.Status != engine.StatusPending {
		t.Errorf("the worker's refused writes changed the run: %s", r.Status)
	}
}

// A producer runs the seed's INSERT and cancel UPDATE
// verbatim, the Go client's insert, a soft delete, cancel_run and
// send_signal, and the triggers still write the audit trail (and follow
// parents and children); it cannot claim or complete, set any other status,
// write the columns a worker owns, or pose as a Kubernetes object.
func TestProducerRoleWritesThroughTheSeedSQL(t *testing.T) {
	t.Parallel()
	b := setupRoles(t)
	p := b.loginAs(t, engine.RoleProducer)

	var id string
	if err := p.pool.QueryRow(b.ctx, seedInsert).Scan(&id); err != nil {
		t.Fatalf("seed insert as producer: %v", err)
	}
	if err := p.pool.QueryRow(b.ctx, seedInsert).Scan(&id); !errors.Is(err, pgx.ErrNoRows) {
		t.Fatalf("seed insert again: %v, want no row (deduplicated)", err)
	}
	if tag := p.requireAllowed(t, b.ctx, seedCancel, id); tag.RowsAffected() != 1 {
		t.Fatalf("seed cancel as producer changed %d rows", tag.RowsAffected())
	}
	evs, err := p.eng.ListEvents(b.ctx, id) // the producer reads the trail too
	if err != nil {
		t.Fatal(err)
	}
	if len(evs) != 2 || evs[0].Type != engine.EventCreated || evs[1].Type != engine.EventCancelled {
		t.Fatalf("events after the seed insert and cancel: %+v", evs)
	}

	// The Go client's insert names more columns (all granted).
	res, err := p.eng.CreateRun(b.ctx, engine.CreateParams{Type: "prod.sig.v1", IdempotencyKey: "prod-1", Priority: ptr(5), MaxAttempts: 2, Deadline: time.Hour,
		RetryPolicy: &engine.RetryPolicy{BaseDelay: time.Second, MaxDelay: time.Minute}})
	if err != nil || !res.Created {
		t.Fatalf("Go client insert as producer: %+v %v", res, err)
	}
	if again, err := p.eng.CreateRun(b.ctx, engine.CreateParams{Type: "prod.sig.v1", IdempotencyKey: "prod-1"}); err != nil || again.Created || again.ID != res.ID {
		t.Fatalf("Go client insert again: %+v %v", again, err)
	}
	batch, err := p.eng.CreateRuns(b.ctx, []engine.CreateParams{{Type: "prod.many.v1"}, {Type: "prod.sig.v1", IdempotencyKey: "prod-1"}})
	if err != nil || len(batch) != 2 || !batch[0].Created || batch[1].Created || batch[1].ID != res.ID {
		t.Fatalf("create_runs as producer: %+v %v", batch, err)
	}
	if _, err := p.eng.CreateRuns(b.ctx, []engine.CreateParams{{Type: "prod.many.v1", IdempotencyKey: "k8s:default:x"}}); !errors.Is(err, engine.ErrInvalid) {
		t.Fatalf("create_runs with a reserved key as producer: %v, want invalid", err)
	}
	if s, err := p.eng.SendSignal(b.ctx, engine.SignalParams{RunID: res.ID, Name: "approve", Payload: json.RawMessage(`{"by":"alice"}`)}); err != nil || s.SignalID == 0 {
		t.Fatalf("send_signal as producer: %+v %v", s, err)
	}
	if ev := b.eventTypes(t, res.ID); countOf(ev, engine.EventSignalReceived) != 1 {
		t.Fatalf("events after a signal: %v", ev)
	}
	if ok, err := p.eng.CancelRun(b.ctx, res.ID); err != nil || !ok {
		t.Fatalf("cancel_run as producer: %v %v", ok, err)
	}

	// A soft delete cancels, with its event.
	soft := b.create(t, engine.CreateParams{Type: "prod.soft.v1"})
	p.requireAllowed(t, b.ctx, "update workflow.workflow_run set deleted_at = now() where id = $1", soft)
	if r := b.get(t, soft); r.Status != engine.StatusCancelled || r.DeletedAt == nil {
		t.Fatalf("soft-deleted run: %+v", r)
	}

	// Parents and children follow a producer's cancel: cancelling a child
	// writes the parent's journal and wakes it; cancelling a parent cancels
	// its children.
	parent := b.create(t, engine.CreateParams{Type: "prod.parent.v1"})
	c := b.claimOne(t, "w", "prod.parent.")
	kid, err := b.eng.StartChild(b.ctx, engine.ChildParams{LeaseRef: c.Ref(), WorkerID: "w", Step: "kid", Position: 0, Type: "prod.kid.v1"})
	if err != nil {
		t.Fatal(err)
	}
	kid2, err := b.eng.StartChild(b.ctx, engine.ChildParams{LeaseRef: c.Ref(), WorkerID: "w", Step: "kid2", Position: 1, Type: "prod.kid.v1"})
	if err != nil {
		t.Fatal(err)
	}
	if pr := b.park(t, engine.ParkParams{LeaseRef: c.Ref(), WorkerID: "w", Kind: engine.StepKindChild, Step: "kid", Position: 0}); pr.Status != engine.WriteParked {
		t.Fatalf("park on the child: %+v", pr)
	}
	p.requireAllowed(t, b.ctx, seedCancel, kid.ChildID)
	if ev := b.eventTypes(t, parent); ev[len(ev)-1] != engine.EventWoken {
		t.Fatalf("parent events after its child was cancelled: %v", ev)
	}
	p.requireAllowed(t, b.ctx, seedCancel, parent)
	if r := b.get(t, kid2.ChildID); r.Status != engine.StatusCancelled {
		t.Fatalf("child of a cancelled parent is %s", r.Status)
	}

	// What a producer cannot do.
	pending := b.create(t, engine.CreateParams{Type: "prod.other.v1"})
	leased := b.create(t, engine.CreateParams{Type: "prod.leased.v1"})
	lc := b.claimOne(t, "w", "prod.leased.")
	p.requireDenied(t, b.ctx, "select * from workflow.claim_runs('p', '{prod.}', 'go', 10, 30000)")
	p.requireDenied(t, b.ctx, "select * from workflow.complete_runs('w', $1, $2, '{null}')", []string{leased}, []int64{lc.LeaseToken})
	p.requireDenied(t, b.ctx, "select * from workflow.fail_runs('w', $1, $2, '{x}', '{false}')", []string{leased}, []int64{lc.LeaseToken})
	p.requireDenied(t, b.ctx, "select * from workflow.reap_expired_leases(10)")
	p.requireDenied(t, b.ctx, "update workflow.workflow_run set status = 'succeeded', updated_at = now() where id = $1", pending)
	p.requireDenied(t, b.ctx, "update workflow.workflow_run set status = 'pending', updated_at = now() where id = $1", leased)
	p.requireDenied(t, b.ctx, "update workflow.workflow_run set result = '{}' where id = $1", pending)
	p.requireDenied(t, b.ctx, "update workflow.workflow_run set leased_by = 'me', lease_until = now() where id = $1", leased)
	p.requireDenied(t, b.ctx, "delete from workflow.workflow_run where id = $1", pending)
	for _, sql := range []string{
		"insert into workflow.workflow_run (type, status) values ('prod.sneak.v1', 'succeeded')",
		"insert into workflow.workflow_run (type, attempt) values ('prod.sneak.v1', 2)",
		"insert into workflow.workflow_run (type, parent_id, parent_step) values ('prod.sneak.v1', gen_random_uuid(), 'x')",
		"insert into workflow.workflow_run (type, idempotency_key) values ('prod.sneak.v1', 'k8s:default:order-1')",
		"insert into workflow.workflow_run (type, idempotency_key) values ('prod.sneak.v1', 'k8s-uid:0b1c')",
		"insert into workflow.workflow_run (type, source_namespace, source_name, source_uid) values ('prod.sneak.v1', 'default', 'x', 'u')",
		"insert into workflow.workflow_event (workflow_id, event_type) values (gen_random_uuid(), 'succeeded')",
		"insert into workflow.workflow_step (run_id, name, position, kind, attempt) values (gen_random_uuid(), 'x', 0, 'step', 1)",
		"insert into workflow.workflow_signal (run_id, name) values (gen_random_uuid(), 'x')",
		"create table workflow.sneak (id int)",
	} {
		p.requireDenied(t, b.ctx, sql)
	}
	if _, err := p.eng.CreateRun(b.ctx, engine.CreateParams{Type: "prod.sneak.v1", Source: &engine.Source{Namespace: "default", Name: "x", UID: "u"}}); sqlState(err) != "42501" {
		t.Errorf("Go client insert with a Kubernetes source as producer: %v, want permission denied", err)
	}
	if r := b.get(t, pending); r.Status != engine.StatusPending {
		t.Errorf("refused writes changed a pending run: %s", r.Status)
	}
	if r := b.get(t, leased); r.Status != engine.StatusLeased || r.LeasedBy != "w" {
		t.Errorf("refused writes changed a leased run: %s by %q", r.Status, r.LeasedBy)
	}
}

func ptr[T any](v T) *T { return &v }

// A console's role reads every table and can change
// nothing, not even through the functions.
func TestReaderRoleOnlyReads(t *testing.T) {
	t.Parallel()
	b := setupRoles(t)
	r := b.loginAs(t, engine.RoleReader)
	id := b.create(t, engine.CreateParams{Type: "read.a.v1"})
	for _, table := range []string{"workflow_run", "workflow_event", "workflow_step", "workflow_signal", "workflow_registry"} {
		r.requireAllowed(t, b.ctx, "select * from workflow."+table)
	}
	if got, err := r.eng.GetRun(b.ctx, id); err != nil || got.ID != id {
		t.Fatalf("read a run as reader: %v", err)
	}
	for _, fn := range []string{
		"workflow.claim_runs(text, text[], text, integer, bigint, text[], text, uuid[], boolean)",
		"workflow.complete_runs(text, uuid[], bigint[], jsonb[])",
		"workflow.cancel_run(uuid)",
		"workflow.send_signal(uuid, text, jsonb, text, text)",
	} {
		var may bool
		if err := r.pool.QueryRow(b.ctx, "select has_function_privilege($1, 'execute')", fn).Scan(&may); err != nil || may {
			t.Errorf("reader may execute %s: %v %v", fn, may, err)
		}
	}
	r.requireAllowed(t, b.ctx, "select * from workflow.queue_depth('{read.}', 'go')")
	r.requireAllowed(t, b.ctx, "select workflow.inbox_version()")
	r.requireDenied(t, b.ctx, "select * from workflow.active_types('default', '{read.}')")
	r.requireDenied(t, b.ctx, seedInsert)
	r.requireDenied(t, b.ctx, seedCancel, id)
	r.requireDenied(t, b.ctx, "select workflow.cancel_run($1)", id)
	r.requireDenied(t, b.ctx, "select * from workflow.claim_runs('r', null, null, 1, 30000)")
	r.requireDenied(t, b.ctx, "delete from workflow.workflow_event")
	if got := b.get(t, id); got.Status != engine.StatusPending {
		t.Errorf("the reader's refused writes changed the run: %s", got.Status)
	}
}

// The functions that run as their owner ignore the
// caller's search_path. The caller here owns a schema of its own, puts it
// before pg_catalog, and defines now() and jsonb_strip_nulls() there (an
// unpinned function would call them, forging the audit trail and the
// timestamps), plus temporary tables named like the inbox's. None of them is
// ever called or written.
func TestSecurityDefinerIgnoresCallerSearchPath(t *testing.T) {
	t.Parallel()
	b := setupRoles(t)
	a := b.loginAs(t, engine.RoleProducer, engine.RoleWorker)
	schema := "sw_evil_" + randomID()
	if _, err := b.pool.Exec(b.ctx, fmt.Sprintf("create schema %s authorization %s", schema, pgx.Identifier{a.name}.Sanitize())); err != nil {
		t.Fatal(err)
	}
	conn, exec := session(t, b.ctx, a.pool)
	exec(strings.NewReplacer("evil", schema).Replace(`
create table evil.calls (fn text, by_user text);
create function evil.now() returns timestamptz language plpgsql as $$
begin
    insert into evil.calls values ('now', current_user);
    return timestamptz '2000-01-01 00:00:00+00';
end $$;
create function evil.jsonb_strip_nulls(jsonb) returns jsonb language plpgsql as $$
begin
    insert into evil.calls values ('jsonb_strip_nulls', current_user);
    return '{"forged": true}'::jsonb;
end $$;
create temp table workflow_run (id uuid, status text);
create temp table workflow_event (workflow_id uuid, event_type text, data jsonb);
set search_path = pg_temp, evil, pg_catalog;`))
	var shadowed string
	if err := conn.QueryRow(b.ctx, "select now()::date::text").Scan(&shadowed); err != nil || shadowed != "2000-01-01" {
		t.Fatalf("the caller's own now() is %q (%v); the trap is not set", shadowed, err)
	}
	exec("truncate " + schema + ".calls")

	// The seed's insert and cancel: the triggers write the events.
	var id string
	if err := conn.QueryRow(b.ctx, seedInsert).Scan(&id); err != nil {
		t.Fatal(err)
	}
	var cancelled bool
	if err := conn.QueryRow(b.ctx, "select workflow.cancel_run($1)", id).Scan(&cancelled); err != nil || !cancelled {
		t.Fatalf("cancel_run: %v %v", cancelled, err)
	}
	r := b.get(t, id)
	if r.UpdatedAt.Year() < 2020 || r.FinishedAt == nil || r.FinishedAt.Year() < 2020 {
		t.Errorf("cancelled run updated %v, finished %v: the caller's now() was used", r.UpdatedAt, r.FinishedAt)
	}
	evs, err := b.eng.ListEvents(b.ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if len(evs) != 2 {
		t.Fatalf("events %+v", evs)
	}
	for _, e := range evs {
		var data map[string]any
		if err := json.Unmarshal(e.Data, &data); err != nil || data["forged"] != nil {
			t.Errorf("%s event data %s: the caller's jsonb_strip_nulls() was used", e.Type, e.Data)
		}
	}
	if data := string(evs[0].Data); !strings.Contains(data, `"idempotency_key": "content:c_123:thumbnail:300x300"`) {
		t.Errorf("created event data %s", data)
	}
	// A worker's claim.
	b.create(t, engine.CreateParams{Type: "evil.claim.v1"})
	var leaseUntil time.Time
	err = conn.QueryRow(b.ctx, "select lease_until from workflow.claim_runs('w', '{evil.}', 'go', 1, 30000)").Scan(&leaseUntil)
	if errors.Is(err, pgx.ErrNoRows) {
		t.Errorf("claim_runs found no runnable run: the caller's now() was used")
	} else if err != nil {
		t.Fatalf("claim_runs: %v", err)
	}
	var dbNow time.Time
	if err := b.pool.QueryRow(b.ctx, "select now()").Scan(&dbNow); err != nil {
		t.Fatal(err)
	}
	if d := leaseUntil.Sub(dbNow); err == nil && (d < 20*time.Second || d > 40*time.Second) {
		t.Errorf("lease_until is %v, %v from now: the caller's now() was used", leaseUntil, d)
	}
	var calls, temps int
	if err := conn.QueryRow(b.ctx, "select (select count(*) from "+schema+".calls), "+
		"(select count(*) from pg_temp.workflow_run) + (select count(*) from pg_temp.workflow_event)").Scan(&calls, &temps); err != nil {
		t.Fatal(err)
	}
	if calls != 0 || temps != 0 {
		t.Errorf("the caller's functions were called %d times, its temporary tables got %d rows", calls, temps)
	}
}

// The roles script is idempotent and may run at once from
// several connections (and in several databases of one cluster: the other
// tests do that); running it again takes back privileges granted by hand.
func TestCreateRolesIsIdempotent(t *testing.T) {
	t.Parallel()
	b := setupRoles(t)
	if _, err := b.pool.Exec(b.ctx, "grant insert on workflow.workflow_event to workflow_worker"); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs <- engine.CreateRoles(b.ctx, b.pool)
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatalf("create roles again: %v", err)
		}
	}
	var extra bool
	if err := b.pool.QueryRow(b.ctx, "select has_table_privilege('workflow_worker', 'workflow.workflow_event', 'insert')").Scan(&extra); err != nil || extra {
		t.Errorf("a privilege granted by hand survived the script: %v %v", extra, err)
	}
	rows, err := b.pool.Query(b.ctx, "select rolname, rolcanlogin from pg_roles where rolname = any ($1) order by 1",
		[]string{engine.RoleWorker, engine.RoleProducer, engine.RoleReader})
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for rows.Next() {
		var name string
		var canLogin bool
		if err := rows.Scan(&name, &canLogin); err != nil {
			t.Fatal(err)
		}
		if canLogin {
			t.Errorf("role %s can log in; the script creates NOLOGIN roles", name)
		}
		n++
	}
	if err := rows.Err(); err != nil || n != 3 {
		t.Fatalf("%d roles (%v), want 3", n, err)
	}
	// Still works after the re-runs.
	w := b.loginAs(t, engine.RoleWorker)
	b.create(t, engine.CreateParams{Type: "again.a.v1"})
	if got, err := w.eng.ClaimRuns(b.ctx, engine.ClaimParams{WorkerID: "w", Limit: 1, LeaseDuration: time.Minute}); err != nil || len(got) != 1 {
		t.Fatalf("claim after the re-runs: %v %v", got, err)
	}
}
