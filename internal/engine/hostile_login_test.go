package engine_test

// What a hostile database login of another team tries against a team's
// runs: forging a lease holder's writes, retrying runs it may not, taking
// schedule ticks, and holding locks the engine waits for. Each attempt
// fails, and the team's runs finish beside it.

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/simple-workflow/simple-workflow/internal/engine"
)

// eventUsers is the db_user of each of a run's events of type typ.
func (b *bundle) eventUsers(t *testing.T, id, typ string) []string {
	t.Helper()
	rows, err := b.pool.Query(b.ctx, `select coalesce(db_user, '') from workflow.run_event
		where workflow_id = $1 and event_type = $2 order by id`, id, typ)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var u string
		if err := rows.Scan(&u); err != nil {
			t.Fatal(err)
		}
		out = append(out, u)
	}
	return out
}

// A lease's token goes to its claimer alone: the row keeps a one-way
// fence of it, so whoever reads the row (the owner here; a login of the
// same namespace) cannot complete the run as its holder, and a login of
// another namespace sees no row at all. Tokens are unpredictable (derived
// from a secret each claim draws at random), not in sequence. Every event names the database login that made it.
func TestLeaseTokensCannotBeReadOrForged(t *testing.T) {
	t.Parallel()
	b := setupRoles(t)
	producer := b.tenantLogin(t, engine.RoleProducer, "team-b")
	worker := b.tenantLogin(t, engine.RoleWorker, "team-b")
	attacker := b.tenantLogin(t, engine.RoleWorker, "team-a")
	reader := b.tenantLogin(t, engine.RoleProducer, "team-a")

	res, err := producer.eng.CreateRuns(b.ctx, []engine.CreateParams{{Type: "fence.job.v1"}})
	if err != nil {
		t.Fatal(err)
	}
	id := res[0].ID
	held, err := worker.eng.ClaimRuns(b.ctx, engine.ClaimParams{WorkerID: "wb", TypePrefixes: []string{"fence."},
		Runtime: "go", Limit: 1, LeaseDuration: time.Minute, Namespace: "team-b"})
	if err != nil || len(held) != 1 {
		t.Fatalf("team-b's claim: %+v %v", held, err)
	}
	stored := b.get(t, id).LeaseToken
	if stored == held[0].LeaseToken {
		t.Fatal("the row keeps the lease token itself")
	}
	// Forged with what the row shows, by the holder's worker id.
	forged := engine.LeaseRef{ID: id, Token: stored, Attempt: held[0].Attempt}
	if done, err := b.eng.CompleteRuns(b.ctx, "wb", []engine.Completion{{LeaseRef: forged,
		Result: []byte(`{"forged": true}`)}}); err != nil || len(done) != 0 {
		t.Fatalf("a completion with the stored fence: %+v %v", done, err)
	}
	if n := reader.visibleIDs(t, b, "select id::text from workflow.workflow_run where lease_token is not null"); len(n) != 0 {
		t.Fatalf("team-a's login reads leased runs of team-b: %v", n)
	}
	if done, err := attacker.eng.CompleteRuns(b.ctx, "wb", []engine.Completion{{LeaseRef: forged}}); err == nil && len(done) != 0 {
		t.Fatal("team-a's login completed team-b's run")
	}
	if r := b.get(t, id); r.Status != engine.StatusLeased {
		t.Fatalf("after the forgeries the run is %s (%s)", r.Status, r.Result)
	}
	if done, err := worker.eng.CompleteRuns(b.ctx, "wb", []engine.Completion{{LeaseRef: held[0].Ref(),
		Result: []byte(`{"by": "wb"}`)}}); err != nil || len(done) != 1 || done[0].Status != engine.StatusSucceeded {
		t.Fatalf("the holder's completion: %+v %v", done, err)
	}
	if r := b.get(t, id); r.Status != engine.StatusSucceeded || string(r.Result) != `{"by": "wb"}` {
		t.Fatalf("the run: %s %s", r.Status, r.Result)
	}
	for typ, want := range map[string]string{"created": producer.name, "started": worker.name, "succeeded": worker.name} {
		if got := b.eventUsers(t, id, typ); len(got) != 1 || got[0] != want {
			t.Errorf("%s event made by %v, want %s", typ, got, want)
		}
	}

	// Tokens of many claims: all different, and no two in sequence.
	var ps []engine.CreateParams
	for range 200 {
		ps = append(ps, engine.CreateParams{Type: "fence.many.v1"})
	}
	if _, err := b.eng.CreateRuns(b.ctx, ps); err != nil {
		t.Fatal(err)
	}
	claimed := b.claim(t, "wm", []string{"fence.many."}, 200)
	seen := map[int64]bool{}
	for _, c := range claimed {
		if seen[c.LeaseToken] || seen[c.LeaseToken-1] || seen[c.LeaseToken+1] {
			t.Fatalf("token %d repeats or follows another", c.LeaseToken)
		}
		seen[c.LeaseToken] = true
	}
}

// Only a run's own namespace retries it, a run mirrored from a WorkflowRun
// only through its object (the operator), and never one spec.cancel
// cancelled; the retried event names the login that retried.
func TestRetryRunStaysInItsNamespace(t *testing.T) {
	t.Parallel()
	b := setupRoles(t)
	a := b.tenantLogin(t, engine.RoleProducer, "team-a")
	bp := b.tenantLogin(t, engine.RoleProducer, "team-b")

	mirrored := b.create(t, engine.CreateParams{Type: "retry.mirror.v1",
		Source: &engine.Source{Namespace: "team-b", Name: "nightly", UID: "uid-1"}})
	if _, err := b.eng.CancelRunAs(b.ctx, mirrored, "spec.cancel of WorkflowRun team-b/nightly"); err != nil {
		t.Fatal(err)
	}
	own := b.teamRun(t, "team-b", "retry.own.v1")
	if _, err := bp.eng.CancelRun(b.ctx, own); err != nil {
		t.Fatal(err)
	}

	if err := a.eng.RetryRun(b.ctx, engine.RetryParams{ID: mirrored, By: "team-a", Attempts: 1000}); !errors.Is(err, engine.ErrNotFound) {
		t.Fatalf("team-a retrying team-b's mirrored run: %v", err)
	}
	if err := a.eng.RetryRun(b.ctx, engine.RetryParams{ID: own, By: "team-a"}); !errors.Is(err, engine.ErrNotFound) {
		t.Fatalf("team-a retrying team-b's run: %v", err)
	}
	err := bp.eng.RetryRun(b.ctx, engine.RetryParams{ID: mirrored, By: "team-b"})
	if !errors.Is(err, engine.ErrInvalid) || !strings.Contains(err.Error(), "mirrors WorkflowRun team-b/nightly") {
		t.Fatalf("team-b's SQL producer retrying a mirrored run: %v", err)
	}
	err = b.eng.RetryRun(b.ctx, engine.RetryParams{ID: mirrored, By: "spec.retries of WorkflowRun team-b/nightly"})
	if !errors.Is(err, engine.ErrInvalid) || !strings.Contains(err.Error(), "cancelled by spec.cancel") {
		t.Fatalf("the operator retrying a run spec.cancel cancelled: %v", err)
	}
	if r := b.get(t, mirrored); r.Status != engine.StatusCancelled {
		t.Fatalf("the mirrored run is %s", r.Status)
	}

	if err := bp.eng.RetryRun(b.ctx, engine.RetryParams{ID: own, By: "someone else"}); err != nil {
		t.Fatalf("team-b retrying its own run: %v", err)
	}
	if got := b.eventUsers(t, own, "retried"); len(got) != 1 || got[0] != bp.name {
		t.Fatalf("the retried event was made by %v, want %s", got, bp.name)
	}
	if c := b.claimIn(t, "team-b", "wb", []string{"retry."}, 10); len(c) != 1 || c[0].ID != own {
		t.Fatalf("team-b's worker claimed %+v, want its retried run", c)
	}
}

// Keys of a schedule's ticks are the firing function's alone: a producer
// of another team cannot record one (plain INSERT or create_runs), so a
// Forbid schedule is never held back by a run that is not its own.
func TestScheduleKeysAreReserved(t *testing.T) {
	t.Parallel()
	b := setupRoles(t)
	owner := b.tenantLogin(t, engine.RoleProducer, "team-a")
	attacker := b.tenantLogin(t, engine.RoleProducer, "team-b")
	s, err := owner.eng.PutSchedule(b.ctx, engine.ScheduleSpec{Name: "nightly", Cron: "* * * * *",
		Type: "sched.own.v1", ConcurrencyPolicy: engine.ConcurrencyForbid})
	if err != nil {
		t.Fatal(err)
	}
	key := sqlKey(s.ID, s.NextTickAt)
	_, err = attacker.pool.Exec(b.ctx, `insert into workflow.workflow_run (type, idempotency_key) values ('sched.squat.v1', $1)`, key)
	if sqlState(err) != "SW001" || !strings.Contains(err.Error(), "reserved for the runs schedules record") {
		t.Fatalf("a plain INSERT of a tick's key: %v", err)
	}
	_, err = attacker.eng.CreateRuns(b.ctx, []engine.CreateParams{{Type: "sched.squat.v1", IdempotencyKey: "schedule:" + s.ID + ":1999"}})
	if !errors.Is(err, engine.ErrInvalid) {
		t.Fatalf("create_runs with a schedule's key: %v", err)
	}
	for range 3 {
		b.clockTo(t, b.getSchedule(t, "", "nightly").NextTickAt.Add(time.Second))
		got := b.fire(t)
		if len(got) != 1 || got[0].Outcome != engine.FiringFired {
			t.Fatalf("firing: %+v", got)
		}
		if r := b.get(t, got[0].RunID); r.Namespace != "team-a" || r.Type != "sched.own.v1" {
			t.Fatalf("the tick's run: %s of %s", r.Type, r.Namespace)
		}
		b.completeAll(t, "wa", b.claimIn(t, "team-a", "wa", []string{"sched."}, 10))
	}
	if got := b.claimIn(t, "team-b", "wb", []string{"sched."}, 10); len(got) != 0 {
		t.Fatalf("team-b recorded runs: %+v", got)
	}
}

// The locks the engine waits for are rows and tables no login but the
// schema's owner may lock: a hostile login holding every advisory key the
// engine once used, and trying to lock what it uses now, stops neither
// another team's limited claims, nor its wake-ups, nor a registry write,
// nor an upgrade.
func TestLocksOnlyTheEngineTakes(t *testing.T) {
	t.Parallel()
	b := setupRoles(t)
	attacker := b.tenantLogin(t, engine.RoleWorker, "team-a")
	if err := b.eng.UpsertRegistryEntry(b.ctx, engine.RegistryEntry{WorkflowName: "lim.job.v1", Runtime: "go",
		Enabled: true, OwnerNamespace: "team-b", OwnerName: "reg", Flow: engine.FlowLimits{MaxLeased: i32(5)}}); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		b.teamRun(t, "team-b", "lim.job.v1")
	}

	conn, err := attacker.pool.Acquire(b.ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	for _, sql := range []string{
		"select pg_advisory_lock(hashtext('workflow_flow:team-b/lim.job.v1'), 0)",
		"select pg_advisory_lock(hashtext('workflow_run_created:wake.b.v1'), hashtext('wake.b.v1'))",
		"select pg_advisory_lock(hashtext('workflow.workflow_registry.definition'))",
		"select pg_advisory_lock(8320239136064823668)",
	} {
		if _, err := conn.Exec(b.ctx, sql); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	tx, err := conn.Begin(b.ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(b.ctx)) }()
	if _, err := tx.Exec(b.ctx, "select count(*) from workflow.workflow_registry"); err != nil {
		t.Fatal(err)
	}
	for _, sql := range []string{
		"select 1 from workflow.workflow_registry for key share",
		"select 1 from workflow.workflow_lock for update",
		"select 1 from workflow.workflow_claimer for update",
		"insert into workflow.workflow_claimer values ('default', 0)",
		"do $$ begin lock table workflow.schema_version in share row exclusive mode; end $$",
		"do $$ begin lock table workflow.workflow_registry in share mode; end $$",
	} {
		attacker.requireDenied(t, b.ctx, sql)
	}

	next := listenCreated(t, b)
	b.teamRun(t, "team-b", "wake.b.v1")
	if p := next(); p != "team-b/wake.b.v1" {
		t.Fatalf("notification %q, want team-b/wake.b.v1", p)
	}
	if got := b.claimIn(t, "team-b", "wb", []string{"lim."}, 10); len(got) != 3 {
		t.Fatalf("team-b's limited claim took %d of 3", len(got))
	}
	ctx, cancel := context.WithTimeout(b.ctx, 20*time.Second)
	defer cancel()
	if err := b.eng.UpsertRegistryEntry(ctx, engine.RegistryEntry{WorkflowName: "lim.flow.v1", Enabled: true,
		OwnerNamespace: "team-b", OwnerName: "reg", Definition: &engine.DAGDefinition{Steps: []engine.DAGStepDefinition{
			step("a", "lim.step.v1")}}}); err != nil {
		t.Fatalf("a registry write beside the attacker: %v", err)
	}
	if _, err := engine.Migrate(ctx, b.pool); err != nil {
		t.Fatalf("an upgrade beside the attacker: %v", err)
	}
}

// A producer cannot lock another team's runs: row security hides them
// from its FOR KEY SHARE, so claims and the reaper never skip them.
func TestProducerCannotLockAnotherTeamsRuns(t *testing.T) {
	t.Parallel()
	b := setupRoles(t)
	attacker := b.tenantLogin(t, engine.RoleProducer, "team-a")
	id := b.teamRun(t, "team-b", "lockr.job.v1")
	tx, err := attacker.pool.Begin(b.ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(b.ctx)) }()
	var locked int
	if err := tx.QueryRow(b.ctx, `select count(*) from (select id from workflow.workflow_run
		where namespace = 'team-b' for key share) x`).Scan(&locked); err != nil {
		t.Fatal(err)
	}
	if locked != 0 {
		t.Fatalf("team-a's producer locked %d of team-b's runs", locked)
	}
	got := b.claimIn(t, "team-b", "wb", []string{"lockr."}, 10)
	if len(got) != 1 || got[0].ID != id {
		t.Fatalf("team-b's worker claimed %+v beside the open transaction", got)
	}
	b.completeAll(t, "wb", got)
}

// One team's idle transaction holding its own run (the run its Replace
// schedule must cancel) holds back that schedule alone, for a bounded
// wait: another team's due schedule fires in the same call, and the held
// one fires once the transaction ends.
func TestScheduleFiringIsNotHeldByAnotherTeam(t *testing.T) {
	t.Parallel()
	b := setupRoles(t)
	a := b.tenantLogin(t, engine.RoleProducer, "team-a")
	bp := b.tenantLogin(t, engine.RoleProducer, "team-b")
	held, err := a.eng.PutSchedule(b.ctx, engine.ScheduleSpec{Name: "held", Cron: "* * * * *", Type: "schedh.a.v1",
		ConcurrencyPolicy: engine.ConcurrencyReplace})
	if err != nil {
		t.Fatal(err)
	}
	b.clockTo(t, held.NextTickAt.Add(time.Second))
	first := b.fire(t)
	if len(first) != 1 || first[0].Outcome != engine.FiringFired {
		t.Fatalf("first firing: %+v", first)
	}
	other, err := bp.eng.PutSchedule(b.ctx, engine.ScheduleSpec{Name: "other", Cron: "* * * * *", Type: "schedh.b.v1"})
	if err != nil {
		t.Fatal(err)
	}

	tx, err := a.pool.Begin(b.ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(b.ctx)) }()
	if _, err := tx.Exec(b.ctx, "select id from workflow.workflow_run where id = $1 for update", first[0].RunID); err != nil {
		t.Fatal(err)
	}
	b.clockTo(t, other.NextTickAt.Add(time.Minute))
	start := time.Now()
	got := b.fire(t)
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("firing waited %s", d)
	}
	byID := map[string]engine.FiringOutcome{}
	for _, f := range got {
		byID[f.ScheduleID] = f.Outcome
	}
	if byID[held.ID] != engine.FiringBusy || byID[other.ID] != engine.FiringFired {
		t.Fatalf("firings %+v: want team-a's busy and team-b's fired", got)
	}
	if r := b.get(t, first[0].RunID); r.Status != engine.StatusPending {
		t.Fatalf("the held run is %s", r.Status)
	}
	if err := tx.Rollback(b.ctx); err != nil {
		t.Fatal(err)
	}
	again := b.fire(t)
	if len(again) == 0 || again[len(again)-1].ScheduleID != held.ID || again[len(again)-1].Outcome != engine.FiringReplaced {
		t.Fatalf("after the transaction ended: %+v", again)
	}
}

// A namespace has at most the owner's max_schedules_per_namespace
// schedules: one more is refused with the reason; changing one it has
// still works, and another namespace's are counted apart.
func TestSchedulesPerNamespaceAreBounded(t *testing.T) {
	t.Parallel()
	b := setupRoles(t)
	if _, err := b.pool.Exec(b.ctx, "update workflow.workflow_settings set max_schedules_per_namespace = 3"); err != nil {
		t.Fatal(err)
	}
	a := b.tenantLogin(t, engine.RoleProducer, "team-a")
	bp := b.tenantLogin(t, engine.RoleProducer, "team-b")
	put := func(l login, name string) error {
		_, err := l.eng.PutSchedule(b.ctx, engine.ScheduleSpec{Name: name, Cron: "* * * * *", Type: "schedn.job.v1"})
		return err
	}
	for _, n := range []string{"a1", "a2", "a3"} {
		if err := put(a, n); err != nil {
			t.Fatal(err)
		}
	}
	err := put(a, "a4")
	if !errors.Is(err, engine.ErrInvalid) || !strings.Contains(err.Error(), "namespace team-a has 3 schedules") {
		t.Fatalf("a fourth schedule: %v", err)
	}
	if _, err := a.eng.PutSchedule(b.ctx, engine.ScheduleSpec{Name: "a1", Cron: "*/5 * * * *", Type: "schedn.job.v1"}); err != nil {
		t.Fatalf("changing a schedule at the bound: %v", err)
	}
	if err := put(bp, "b1"); err != nil {
		t.Fatalf("team-b's first schedule: %v", err)
	}
	if _, err := b.pool.Exec(b.ctx, "update workflow.workflow_settings set max_schedules_per_namespace = 0"); sqlState(err) != "23514" {
		t.Fatalf("a bound of 0: %v", err)
	}
}

// A login bound to a namespace cannot sit idle in a transaction for
// longer than the owner's idle_transaction_timeout: its session ends, and
// dropping history is no longer busy. While it sits, the engine names it.
func TestIdleTransactionsAreBoundedAndNamed(t *testing.T) {
	t.Parallel()
	b := setupRoles(t)
	if _, err := b.pool.Exec(b.ctx, "update workflow.workflow_settings set idle_transaction_timeout = '2 seconds'"); err != nil {
		t.Fatal(err)
	}
	l := b.tenantLogin(t, engine.RoleProducer, "team-a")
	var bound string
	if err := l.pool.QueryRow(b.ctx, "show idle_in_transaction_session_timeout").Scan(&bound); err != nil || bound != "2s" {
		t.Fatalf("the login's idle bound: %q %v", bound, err)
	}
	id := b.teamRun(t, "team-a", "idle.job.v1")
	conn, err := l.pool.Acquire(b.ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	if _, err := conn.Exec(b.ctx, "begin"); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(b.ctx, "select count(*) from workflow.workflow_event where workflow_id = $1", id); err != nil {
		t.Fatal(err)
	}
	holders, err := b.eng.MaintenanceBlockers(b.ctx)
	if err != nil {
		t.Fatal(err)
	}
	named := false
	for _, h := range holders {
		named = named || h.User == l.name
	}
	if !named {
		t.Fatalf("the sessions holding maintenance back: %v, want %s's", holders, l.name)
	}
	deadline := time.Now().Add(15 * time.Second)
	for {
		_, err := conn.Exec(b.ctx, "select 1")
		if err != nil {
			break // the server ended the idle session
		}
		if time.Now().After(deadline) {
			t.Fatal("the idle session still runs statements after its bound")
		}
		// A statement resets the idle timer: wait past the bound before the next.
		time.Sleep(2500 * time.Millisecond)
	}
	conn.Conn().Close(b.ctx)
	holders, err = b.eng.MaintenanceBlockers(b.ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, h := range holders {
		if h.User == l.name {
			t.Fatalf("%s still holds: %v", l.name, h)
		}
	}
}

// A worker's heartbeat of a run it does not work for tells nothing of it
// ('missing') and extends nothing; the run's own worker still holds it.
func TestHeartbeatOfAnotherTeamsRunTellsNothing(t *testing.T) {
	t.Parallel()
	b := setupRoles(t)
	attacker := b.tenantLogin(t, engine.RoleWorker, "team-a")
	id := b.teamRun(t, "team-b", "hbx.job.v1")
	held := b.claimIn(t, "team-b", "wb", []string{"hbx."}, 1)
	if len(held) != 1 {
		t.Fatalf("team-b's claim: %+v", held)
	}
	before := b.get(t, id).LeaseUntil
	got, err := attacker.eng.HeartbeatRuns(b.ctx, "wb", []engine.LeaseRef{{ID: id, Token: 1}}, time.Hour)
	if err != nil || len(got) != 1 || got[0].Status != "missing" || got[0].Owned {
		t.Fatalf("team-a's heartbeat of team-b's run: %+v %v", got, err)
	}
	if after := b.get(t, id).LeaseUntil; after == nil || before == nil || !after.Equal(*before) {
		t.Fatalf("the lease moved from %v to %v", before, after)
	}
	own, err := b.eng.HeartbeatRuns(b.ctx, "wb", []engine.LeaseRef{held[0].Ref()}, time.Minute)
	if err != nil || len(own) != 1 || !own[0].Owned || own[0].Status != engine.StatusLeased {
		t.Fatalf("the holder's heartbeat: %+v %v", own, err)
	}
}

// A SQL schedule's name is its namespace's: two teams' producers both
// have a "nightly", each firing into its own namespace.
func TestScheduleNamesArePerNamespace(t *testing.T) {
	t.Parallel()
	b := setupRoles(t)
	a := b.tenantLogin(t, engine.RoleProducer, "team-a")
	bp := b.tenantLogin(t, engine.RoleProducer, "team-b")
	var first engine.Schedule
	for _, l := range []login{a, bp} {
		s, err := l.eng.PutSchedule(b.ctx, engine.ScheduleSpec{Name: "nightly", Cron: "* * * * *", Type: "schedp.job.v1"})
		if err != nil {
			t.Fatalf("%s's nightly: %v", l.name, err)
		}
		first = s
	}
	b.clockTo(t, first.NextTickAt.Add(time.Second))
	got := b.fire(t)
	namespaces := map[string]bool{}
	for _, f := range got {
		if f.Outcome != engine.FiringFired {
			t.Fatalf("firing %+v", f)
		}
		namespaces[b.get(t, f.RunID).Namespace] = true
	}
	if len(got) != 2 || !namespaces["team-a"] || !namespaces["team-b"] {
		t.Fatalf("firings %+v: want one run in each namespace", got)
	}
	if ok, err := bp.eng.DeleteSchedule(b.ctx, "", "nightly"); err != nil || !ok {
		t.Fatalf("team-b deletes its nightly: %v %v", ok, err)
	}
	if list, err := a.eng.ListSchedules(b.ctx, engine.ScheduleFilter{}); err != nil || len(list) != 1 {
		t.Fatalf("team-a's schedules after team-b's delete: %+v %v", list, err)
	}
}

// Wake-ups are debounced by rows a transaction holds only for the instant
// of its commit: a login that makes the wake-up trigger immediate and
// keeps its transaction open (holding, before, the row of its type's hash)
// notifies without the row, and another namespace's type whose row it
// would share is still announced.
func TestImmediateWakeUpHoldsNoRow(t *testing.T) {
	t.Parallel()
	b := setupRoles(t)
	attacker := b.tenantLogin(t, engine.RoleProducer, "team-a")
	var squat string
	if err := b.pool.QueryRow(b.ctx, `select t from generate_series(1, 1000000) g,
		lateral (select 'wakesq.t' || g || '.v1' as t) x
		where (hashtext('team-a/' || t) & 4095) = (hashtext('team-b/wakeh.b.v1') & 4095) limit 1`).Scan(&squat); err != nil {
		t.Fatal(err)
	}
	next := listenCreated(t, b)
	tx, err := attacker.pool.Begin(b.ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(b.ctx)) }()
	if _, err := tx.Exec(b.ctx, "set constraints all immediate"); err != nil {
		t.Fatal(err)
	}
	// The other team's very type, and one whose namespace and type share
	// its row.
	if _, err := tx.Exec(b.ctx, "insert into workflow.workflow_run (type) values ($1), ('wakeh.b.v1')", squat); err != nil {
		t.Fatal(err)
	}
	b.teamRun(t, "team-b", "wakeh.b.v1")
	if p := next(); p != "team-b/wakeh.b.v1" {
		t.Fatalf("notification %q while team-a's transaction stays open, want team-b/wakeh.b.v1", p)
	}
}

// A producer's open put_schedule holds nothing the operator's registry
// writes wait for; busy schedules go after the others in a batch; the
// owner acts on a SQL schedule of any namespace by its name, unless two
// namespaces have one of that name.
func TestSchedulesBusyAndOwnedFairly(t *testing.T) {
	t.Parallel()
	b := setupRoles(t)
	a := b.tenantLogin(t, engine.RoleProducer, "team-a")
	bp := b.tenantLogin(t, engine.RoleProducer, "team-b")

	tx, err := a.pool.Begin(b.ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(b.ctx)) }()
	if _, err := tx.Exec(b.ctx, `select * from workflow.put_schedule('held-open', '* * * * *', 'schedf.job.v1')`); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(b.ctx, 10*time.Second)
	defer cancel()
	if err := b.eng.UpsertRegistryEntry(ctx, engine.RegistryEntry{WorkflowName: "schedf.flow.v1", Enabled: true,
		Definition: &engine.DAGDefinition{Steps: []engine.DAGStepDefinition{step("a", "schedf.a.v1")}}}); err != nil {
		t.Fatalf("a registry write beside an open put_schedule: %v", err)
	}
	if err := tx.Rollback(b.ctx); err != nil {
		t.Fatal(err)
	}

	// Two Replace schedules whose runs team-a holds, one of team-b's due.
	var held []engine.Schedule
	for _, n := range []string{"r1", "r2"} {
		s, err := a.eng.PutSchedule(b.ctx, engine.ScheduleSpec{Name: n, Cron: "* * * * *", Type: "schedf.r.v1",
			ConcurrencyPolicy: engine.ConcurrencyReplace})
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, s)
	}
	b.clockTo(t, held[0].NextTickAt.Add(time.Second))
	var runs []string
	for _, f := range b.fire(t) {
		runs = append(runs, f.RunID)
	}
	lock, err := a.pool.Begin(b.ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = lock.Rollback(context.WithoutCancel(b.ctx)) }()
	if _, err := lock.Exec(b.ctx, "select id from workflow.workflow_run where id = any ($1::uuid[]) for update", runs); err != nil {
		t.Fatal(err)
	}
	other, err := bp.eng.PutSchedule(b.ctx, engine.ScheduleSpec{Name: "other", Cron: "* * * * *", Type: "schedf.o.v1"})
	if err != nil {
		t.Fatal(err)
	}
	b.clockTo(t, other.NextTickAt.Add(time.Second))
	for range 2 { // the first call finds both busy; the second fires team-b's first
		got, err := b.eng.FireDueSchedules(b.ctx, 2)
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range got {
			if f.ScheduleID == other.ID && f.Outcome == engine.FiringFired {
				goto fired
			}
		}
	}
	t.Fatal("team-b's schedule never fired within two batches of two beside two busy ones")
fired:
	if err := lock.Rollback(b.ctx); err != nil {
		t.Fatal(err)
	}

	// The owner deletes team-a's SQL schedule by name; a name two
	// namespaces have is refused.
	if ok, err := b.eng.DeleteSchedule(b.ctx, "", "r1"); err != nil || !ok {
		t.Fatalf("the owner deletes team-a's r1: %v %v", ok, err)
	}
	if _, err := bp.eng.PutSchedule(b.ctx, engine.ScheduleSpec{Name: "r2", Cron: "* * * * *", Type: "schedf.r.v1"}); err != nil {
		t.Fatal(err)
	}
	if _, err := b.eng.DeleteSchedule(b.ctx, "", "r2"); !errors.Is(err, engine.ErrInvalid) ||
		!strings.Contains(err.Error(), "namespaces team-a, team-b each have a SQL schedule") {
		t.Fatalf("the owner deletes a name two namespaces have: %v", err)
	}
}
