package engine_test

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/simple-workflow/simple-workflow/internal/engine"
)

// tenantLogin is a login of role bound, in that role's capacity, to the
// given namespaces only (none: bound to nothing).
func (b *bundle) tenantLogin(t *testing.T, role string, namespaces ...string) login {
	t.Helper()
	l := b.loginAs(t, role)
	if _, err := b.eng.RevokeNamespace(b.ctx, l.name, engine.DefaultNamespace, capacityOf(role)); err != nil {
		t.Fatal(err)
	}
	for _, ns := range namespaces {
		if err := b.eng.GrantNamespace(b.ctx, l.name, ns, capacityOf(role)); err != nil {
			t.Fatal(err)
		}
	}
	return l
}

// teamRun records, as the owner, a run of typ in namespace ns.
func (b *bundle) teamRun(t *testing.T, ns, typ string) string {
	t.Helper()
	return b.create(t, engine.CreateParams{Type: typ, Namespace: ns})
}

// visibleIDs is what l's plain SELECT of a table returns (the ids of runs,
// or the run ids of events, steps and signals).
func (l login) visibleIDs(t *testing.T, b *bundle, sql string) []string {
	t.Helper()
	rows, err := l.pool.Query(b.ctx, sql)
	if err != nil {
		t.Fatalf("%s as %s: %v", sql, l.name, err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	return ids
}

// A SQL producer bound to team-a: its plain INSERT lands in team-a; it
// reads, cancels, signals and retries team-a's runs only. Team-b's runs, of
// the very same type, are invisible to it (runs, events, journal,
// signals), and every attempt on them leaves them as they were; team-b's
// worker then finishes them.
func TestProducerOfOneNamespaceReachesNoOther(t *testing.T) {
	t.Parallel()
	b := setupRoles(t)
	a := b.tenantLogin(t, engine.RoleProducer, "team-a")

	// Team-b's runs: one pending, one parked on a signal with a journal,
	// one failed for good.
	pending := b.teamRun(t, "team-b", "pay.refund.v1")
	parked := b.teamRun(t, "team-b", "pay.wait.v1")
	failed := b.teamRun(t, "team-b", "pay.broken.v1")
	w := b.claimIn(t, "team-b", "wb", []string{"pay.wait.", "pay.broken."}, 10)
	for _, c := range w {
		switch c.ID {
		case parked:
			if _, err := b.eng.ParkRun(b.ctx, engine.ParkParams{LeaseRef: c.Ref(), WorkerID: "wb", Step: "approval",
				Position: 0, Kind: engine.StepKindSignal, Signal: "approve"}); err != nil {
				t.Fatal(err)
			}
		case failed:
			if _, err := b.eng.FailRuns(b.ctx, "wb", []engine.Failure{{LeaseRef: c.Ref(), Error: "boom"}}); err != nil {
				t.Fatal(err)
			}
		}
	}
	if got := b.get(t, failed).Status; got != engine.StatusFailed {
		t.Fatalf("team-b's broken run is %s, want failed", got)
	}

	// The seed's INSERT, with no namespace, records into team-a.
	var mine string
	if err := a.pool.QueryRow(b.ctx, seedInsert).Scan(&mine); err != nil {
		t.Fatalf("the seed insert as team-a's producer: %v", err)
	}
	if r := b.get(t, mine); r.Namespace != "team-a" || r.TypeNamespace != "team-a" {
		t.Fatalf("the seed's run belongs to %q (type %q), want team-a", r.Namespace, r.TypeNamespace)
	}
	// Naming another namespace is refused, in both ways of recording.
	_, err := a.pool.Exec(b.ctx, `insert into workflow.workflow_run (type, namespace) values ('pay.refund.v1', 'team-b')`)
	if sqlState(err) != "42501" {
		t.Errorf("a plain INSERT into team-b: %v, want 42501", err)
	}
	_, err = a.eng.CreateRuns(b.ctx, []engine.CreateParams{{Type: "pay.refund.v1", Namespace: "team-b"}})
	if !errors.Is(err, engine.ErrForbidden) {
		t.Errorf("create_runs into team-b: %v, want ErrForbidden", err)
	}

	// Reads: only team-a's rows, through the tables and the view.
	for _, q := range []string{
		"select id::text from workflow.workflow_run",
		"select id::text from workflow.run_view",
		"select distinct workflow_id::text from workflow.workflow_event",
		"select distinct run_id::text from workflow.workflow_step",
		"select distinct run_id::text from workflow.workflow_signal",
	} {
		for _, id := range a.visibleIDs(t, b, q) {
			if id != mine {
				t.Errorf("%s as team-a's producer shows run %s of another namespace", q, id)
			}
		}
	}
	if got := a.visibleIDs(t, b, "select id::text from workflow.workflow_run"); !slices.Equal(got, []string{mine}) {
		t.Errorf("team-a's producer sees %v, want its own run", got)
	}
	// And through the engine's typed queries, with the login's own pool.
	for _, id := range []string{pending, parked, failed} {
		if _, err := a.eng.GetRun(b.ctx, id); !errors.Is(err, engine.ErrNotFound) {
			t.Errorf("get team-b's run %s as team-a's producer: %v, want not found", id, err)
		}
		evs, err1 := a.eng.ListEventsAfter(b.ctx, id, -1<<62)
		steps, err2 := a.eng.ListSteps(b.ctx, id)
		sigs, err3 := a.eng.ListSignals(b.ctx, id)
		if len(evs)+len(steps)+len(sigs) != 0 || err1 != nil || err2 != nil || err3 != nil {
			t.Errorf("team-b's run %s as team-a's producer: %d events, %d steps, %d signals (%v %v %v)",
				id, len(evs), len(steps), len(sigs), err1, err2, err3)
		}
	}
	if page, err := a.eng.ListRuns(b.ctx, engine.ListParams{Limit: 1000}); err != nil || len(page.Runs) != 1 || page.Runs[0].ID != mine {
		t.Errorf("ListRuns as team-a's producer: %+v (%v), want its own run alone", page.Runs, err)
	}

	// Writes on team-b's runs reach nothing.
	if tag := a.requireAllowed(t, b.ctx, seedCancel, pending); tag.RowsAffected() != 0 {
		t.Errorf("the seed's cancel of team-b's run changed %d rows", tag.RowsAffected())
	}
	if tag := a.requireAllowed(t, b.ctx,
		"update workflow.workflow_run set deleted_at = now() where id = $1", pending); tag.RowsAffected() != 0 {
		t.Errorf("a soft delete of team-b's run changed %d rows", tag.RowsAffected())
	}
	var cancelled bool
	if err := a.pool.QueryRow(b.ctx, "select workflow.cancel_run($1)", pending).Scan(&cancelled); err != nil || cancelled {
		t.Errorf("cancel_run of team-b's run: %v %v", cancelled, err)
	}
	if _, err := a.eng.SendSignal(b.ctx, engine.SignalParams{RunID: parked, Name: "approve"}); !errors.Is(err, engine.ErrNotFound) {
		t.Errorf("a signal to team-b's run: %v, want not found", err)
	}
	var status, msg string
	if err := a.pool.QueryRow(b.ctx, "select status, message from workflow.retry_run($1, 1000, 'mallory')", failed).
		Scan(&status, &msg); err != nil || status != "not_found" {
		t.Errorf("retry_run of team-b's failed run: %s %q %v, want not_found", status, msg, err)
	}

	// Team-b's runs are as they were, and its worker finishes them.
	if r := b.get(t, pending); r.Status != engine.StatusPending || r.DeletedAt != nil {
		t.Fatalf("team-b's pending run is %s (deleted %v)", r.Status, r.DeletedAt)
	}
	if r := b.get(t, failed); r.Status != engine.StatusFailed || r.Attempt != 1 {
		t.Fatalf("team-b's failed run is %s at attempt %d", r.Status, r.Attempt)
	}
	if sigs, err := b.eng.ListSignals(b.ctx, parked); err != nil || len(sigs) != 0 {
		t.Fatalf("team-b's parked run has signals %+v (%v)", sigs, err)
	}
	got := b.claimIn(t, "team-b", "wb", []string{"pay.refund."}, 10)
	if len(got) != 1 || got[0].ID != pending {
		t.Fatalf("team-b's worker claimed %+v, want its pending run", got)
	}
	b.completeAll(t, "wb", got)
	if r := b.get(t, pending); r.Status != engine.StatusSucceeded {
		t.Fatalf("team-b's run ended %s", r.Status)
	}
	// And team-a's own run stays team-a's: team-b's worker never saw it.
	if r := b.get(t, mine); r.Status != engine.StatusPending {
		t.Fatalf("team-a's run is %s", r.Status)
	}
}

// A producer bound to two namespaces names one; bound to none, it records
// and reads nothing. An idempotency key held by another namespace's run is
// refused without handing out that run.
func TestProducerNamespacesAreNamedOrRefused(t *testing.T) {
	t.Parallel()
	b := setupRoles(t)
	both := b.tenantLogin(t, engine.RoleProducer, "team-a", "team-c")
	none := b.tenantLogin(t, engine.RoleProducer)
	theirs := b.create(t, engine.CreateParams{Type: "ns.job.v1", Namespace: "team-b", IdempotencyKey: "order-42"})

	_, err := both.pool.Exec(b.ctx, `insert into workflow.workflow_run (type) values ('ns.job.v1')`)
	if sqlState(err) != "SW001" || !strings.Contains(err.Error(), "name one") {
		t.Errorf("an INSERT without a namespace by a producer of two: %v", err)
	}
	var id string
	if err := both.pool.QueryRow(b.ctx,
		`insert into workflow.workflow_run (type, namespace) values ('ns.job.v1', 'team-c') returning id`).Scan(&id); err != nil {
		t.Fatalf("an INSERT naming team-c: %v", err)
	}
	if r := b.get(t, id); r.Namespace != "team-c" {
		t.Fatalf("recorded in %q, want team-c", r.Namespace)
	}
	res, err := both.eng.CreateRuns(b.ctx, []engine.CreateParams{{Type: "ns.job.v1", Namespace: "team-a"}})
	if err != nil || b.get(t, res[0].ID).Namespace != "team-a" {
		t.Fatalf("create_runs naming team-a: %+v %v", res, err)
	}

	_, err = none.pool.Exec(b.ctx, seedInsert)
	if sqlState(err) != "SW002" || !strings.Contains(err.Error(), "bound to no namespace") {
		t.Errorf("the seed insert by a producer bound to none: %v", err)
	}
	if got := none.visibleIDs(t, b, "select id::text from workflow.workflow_run"); len(got) != 0 {
		t.Errorf("a producer bound to none sees %v", got)
	}

	// Another namespace's key: refused, and the run is not named.
	_, err = both.eng.CreateRuns(b.ctx, []engine.CreateParams{{Type: "ns.job.v1", Namespace: "team-a", IdempotencyKey: "order-42"}})
	if err == nil || strings.Contains(err.Error(), theirs) || !strings.Contains(err.Error(), "another namespace") {
		t.Errorf("a key held by team-b's run: %v", err)
	}
	_, err = both.eng.CreateRun(b.ctx, engine.CreateParams{Type: "ns.job.v1", Namespace: "team-a", IdempotencyKey: "order-42"})
	if err == nil || strings.Contains(err.Error(), theirs) || !strings.Contains(err.Error(), "another namespace") {
		t.Errorf("a key held by team-b's run, one run at a time: %v", err)
	}
	// Its own key, again: the run it holds, not an error.
	first, err := both.eng.CreateRun(b.ctx, engine.CreateParams{Type: "ns.job.v1", Namespace: "team-a", IdempotencyKey: "a:order-1"})
	if err != nil || !first.Created {
		t.Fatalf("a key of its own: %+v %v", first, err)
	}
	again, err := both.eng.CreateRun(b.ctx, engine.CreateParams{Type: "ns.job.v1", Namespace: "team-a", IdempotencyKey: "a:order-1"})
	if err != nil || again.Created || again.ID != first.ID {
		t.Fatalf("its own key again: %+v %v, want %s", again, err, first.ID)
	}
	if r := b.get(t, theirs); r.Namespace != "team-b" || r.Status != engine.StatusPending {
		t.Fatalf("team-b's keyed run: %+v", r)
	}
}

// Workers serve one namespace: the same type name in two namespaces is two
// queues, two registry entries (runtime, enabled, flow limits) and two
// depths. A worker login bound to team-a cannot claim for team-b.
func TestWorkersServeTheirNamespaceOnly(t *testing.T) {
	t.Parallel()
	b := setupRoles(t)
	wa := b.tenantLogin(t, engine.RoleWorker, "team-a")
	// Team-a runs billing.invoice.v1 in Go with one run at a time; team-b's
	// billing.invoice.v1 is Python's and disabled.
	for _, e := range []engine.RegistryEntry{
		{WorkflowName: "billing.invoice.v1", Runtime: "go", Enabled: true, OwnerNamespace: "team-a", OwnerName: "reg",
			Flow: engine.FlowLimits{MaxLeased: ptr(int32(1))}},
		{WorkflowName: "billing.invoice.v1", Runtime: "python", Enabled: false, OwnerNamespace: "team-b", OwnerName: "reg"},
	} {
		if err := b.eng.UpsertRegistryEntry(b.ctx, e); err != nil {
			t.Fatal(err)
		}
	}
	var as, bs []string
	for range 3 {
		as = append(as, b.teamRun(t, "team-a", "billing.invoice.v1"))
		bs = append(bs, b.teamRun(t, "team-b", "billing.invoice.v1"))
	}
	depth, err := b.eng.QueueDepths(b.ctx, []engine.PoolQuery{
		{TypePrefixes: []string{"billing."}, Runtime: "go", Namespace: "team-a"},
		{TypePrefixes: []string{"billing."}, Runtime: "python", Namespace: "team-b"},
		{TypePrefixes: []string{"billing."}, Runtime: "go"},
	})
	if err != nil {
		t.Fatal(err)
	}
	// Team-a: one may start (its cap); team-b: disabled; default: none.
	if depth[0].Runnable != 1 || depth[1].Runnable != 0 || depth[2].Runnable != 0 {
		t.Fatalf("depths %+v, want 1 for team-a (capped), 0 for disabled team-b, 0 for default", depth)
	}

	_, err = wa.eng.ClaimRuns(b.ctx, engine.ClaimParams{WorkerID: "wa", TypePrefixes: []string{"billing."}, Runtime: "go",
		Limit: 10, LeaseDuration: 30 * time.Second, Namespace: "team-b"})
	if !errors.Is(err, engine.ErrForbidden) {
		t.Fatalf("team-a's worker claiming for team-b: %v, want ErrForbidden", err)
	}
	got, err := wa.eng.ClaimRuns(b.ctx, engine.ClaimParams{WorkerID: "wa", TypePrefixes: []string{"billing."}, Runtime: "go",
		Limit: 10, LeaseDuration: 30 * time.Second, Namespace: "team-a"})
	if err != nil || len(got) != 1 || !slices.Contains(as, got[0].ID) {
		t.Fatalf("team-a's worker claimed %+v (%v), want one team-a run (its cap)", got, err)
	}
	// Team-a's cap does not hold team-b back: enabled, team-b's Python
	// worker takes all three at once.
	if err := b.eng.UpsertRegistryEntry(b.ctx, engine.RegistryEntry{WorkflowName: "billing.invoice.v1", Runtime: "python",
		Enabled: true, OwnerNamespace: "team-b", OwnerName: "reg"}); err != nil {
		t.Fatal(err)
	}
	theirs, err := b.eng.ClaimRuns(b.ctx, engine.ClaimParams{WorkerID: "wb", TypePrefixes: []string{"billing."},
		Runtime: "python", Limit: 10, LeaseDuration: 30 * time.Second, Namespace: "team-b"})
	if err != nil || len(theirs) != 3 {
		t.Fatalf("team-b's worker claimed %d (%v), want its 3", len(theirs), err)
	}
	for _, c := range theirs {
		if !slices.Contains(bs, c.ID) {
			t.Fatalf("team-b's worker claimed %s, not one of its runs", c.ID)
		}
	}
}

// Children, DAG steps and schedule ticks belong to their parent's (or
// schedule's) namespace: a DAG that team-a registered runs its steps in
// team-a, among team-a's workers only.
func TestWorkflowsKeepTheirNamespace(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.registerIn(t, "team-a", "flow.pipe.v1", step("one", "flowstep.one.v1"), step("two", "flowstep.two.v1", "one"))
	// The same name in team-b is a plain type there, with no steps.
	dag := b.teamRun(t, "team-a", "flow.pipe.v1")
	plain := b.teamRun(t, "team-b", "flow.pipe.v1")
	if r := b.get(t, plain); r.Wait != nil {
		t.Fatalf("team-b's flow.pipe.v1 took team-a's steps: %+v", r.Wait)
	}
	if got := b.claimIn(t, "team-b", "wb", []string{"flowstep."}, 10); len(got) != 0 {
		t.Fatalf("team-b's worker claimed team-a's steps: %+v", got)
	}
	for range 2 {
		got := b.claimIn(t, "team-a", "wa", []string{"flowstep."}, 10)
		if len(got) != 1 {
			t.Fatalf("team-a's worker claimed %d steps, want 1", len(got))
		}
		if r := b.get(t, got[0].ID); r.Namespace != "team-a" || r.TypeNamespace != "team-a" || r.ParentID != dag {
			t.Fatalf("a step of team-a's DAG: namespace %q, type namespace %q, parent %q", r.Namespace, r.TypeNamespace, r.ParentID)
		}
		b.completeAll(t, "wa", got)
	}
	if r := b.get(t, dag); r.Status != engine.StatusSucceeded {
		t.Fatalf("team-a's DAG is %s", r.Status)
	}
	if got := b.claimIn(t, "team-b", "wb", []string{"flow.pipe."}, 10); len(got) != 1 || got[0].ID != plain {
		t.Fatalf("team-b's plain run: %+v", got)
	}
}

// A type shared with a namespace runs among its owner's workers and stays
// the producer's run; a type not shared is refused before anything is
// recorded, naming nothing of the owner's registry; revoking a share stops
// new runs and leaves recorded ones running.
func TestSharedTypes(t *testing.T) {
	t.Parallel()
	b := setupRoles(t)
	p := b.tenantLogin(t, engine.RoleProducer, "team-b")
	share := func(with ...string) {
		t.Helper()
		if err := b.eng.UpsertRegistryEntry(b.ctx, engine.RegistryEntry{WorkflowName: "pay.refund.v1", Runtime: "go",
			Enabled: true, OwnerNamespace: "payments", OwnerName: "reg", SharedWith: with}); err != nil {
			t.Fatal(err)
		}
	}
	share()
	ask := func(typ string) error {
		_, err := p.eng.CreateRuns(b.ctx, []engine.CreateParams{{Type: typ, TypeNamespace: "payments"}})
		return err
	}
	unshared, missing := ask("pay.refund.v1"), ask("pay.nothing.v1")
	if !errors.Is(unshared, engine.ErrForbidden) || !errors.Is(missing, engine.ErrForbidden) {
		t.Fatalf("asking for an unshared type: %v; a missing one: %v", unshared, missing)
	}
	if strings.ReplaceAll(unshared.Error(), "pay.refund.v1", "T") != strings.ReplaceAll(missing.Error(), "pay.nothing.v1", "T") {
		t.Errorf("the refusals differ, telling an unshared type from a missing one:\n%v\n%v", unshared, missing)
	}
	_, err := p.pool.Exec(b.ctx, `insert into workflow.workflow_run (type, type_namespace) values ('pay.refund.v1', 'payments')`)
	if sqlState(err) != "42501" {
		t.Errorf("a plain INSERT asking for an unshared type: %v", err)
	}
	if got := b.claimIn(t, "payments", "wp", []string{"pay."}, 10); len(got) != 0 {
		t.Fatalf("the owner's workers saw a refused run: %+v", got)
	}

	share("team-b", "team-c")
	res, err := p.eng.CreateRuns(b.ctx, []engine.CreateParams{{Type: "pay.refund.v1", TypeNamespace: "payments"}})
	if err != nil {
		t.Fatalf("asking for a shared type: %v", err)
	}
	id := res[0].ID
	if r := b.get(t, id); r.Namespace != "team-b" || r.TypeNamespace != "payments" {
		t.Fatalf("the shared run: namespace %q, type namespace %q", r.Namespace, r.TypeNamespace)
	}
	if got := b.claimIn(t, "team-b", "wb", []string{"pay."}, 10); len(got) != 0 {
		t.Fatalf("team-b's own workers claimed the shared run: %+v", got)
	}
	share() // revoked: the recorded run goes on
	if ask("pay.refund.v1") == nil {
		t.Fatal("a revoked share still records runs")
	}
	got := b.claimIn(t, "payments", "wp", []string{"pay."}, 10)
	if len(got) != 1 || got[0].ID != id {
		t.Fatalf("the owner's worker claimed %+v, want the shared run", got)
	}
	b.completeAll(t, "wp", got)
	// The producer reads its run's outcome; the owner's namespace is not its.
	if ids := p.visibleIDs(t, b, "select id::text from workflow.workflow_run where status = 'succeeded'"); !slices.Equal(ids, []string{id}) {
		t.Fatalf("team-b's producer sees %v, want its shared run", ids)
	}
}

// A reader bound to team-a lists team-a's schedules and type depths only.
func TestReaderOfOneNamespace(t *testing.T) {
	t.Parallel()
	b := setupRoles(t)
	r := b.tenantLogin(t, engine.RoleReader, "team-a")
	b.teamRun(t, "team-a", "reada.job.v1")
	b.teamRun(t, "team-b", "readb.secret.v1")
	for _, ns := range []string{"team-a", "team-b"} {
		if _, err := b.eng.PutSchedule(b.ctx, engine.ScheduleSpec{Namespace: ns, UID: "u-" + ns, Name: "nightly",
			Cron: "@daily", Type: "read.job.v1"}); err != nil {
			t.Fatal(err)
		}
	}
	rows, err := r.pool.Query(b.ctx, "select type from workflow.type_depths()")
	if err != nil {
		t.Fatal(err)
	}
	types, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil || !slices.Equal(types, []string{"reada.job.v1"}) {
		t.Fatalf("type_depths as team-a's reader: %v %v", types, err)
	}
	list, err := r.eng.ListSchedules(b.ctx, engine.ScheduleFilter{})
	if err != nil || len(list) != 1 || list[0].Namespace != "team-a" {
		t.Fatalf("schedules listed to team-a's reader: %+v %v", list, err)
	}
	if ids := r.visibleIDs(t, b, "select type from workflow.workflow_run"); !slices.Equal(ids, []string{"reada.job.v1"}) {
		t.Fatalf("team-a's reader reads runs of %v", ids)
	}
}

// A worker login reaps expired leases and fails passed deadlines of the
// namespaces it works for only; another team's are left to its own workers
// (and the manager).
func TestWorkersReapTheirNamespaceOnly(t *testing.T) {
	t.Parallel()
	b := setupRoles(t)
	wa := b.tenantLogin(t, engine.RoleWorker, "team-a")
	mine := b.teamRun(t, "team-a", "reap.job.v1")
	theirs := b.teamRun(t, "team-b", "reap.job.v1")
	b.claimIn(t, "team-a", "w", []string{"reap."}, 1)
	b.claimIn(t, "team-b", "w", []string{"reap."}, 1)
	late := b.create(t, engine.CreateParams{Type: "reapd.job.v1", Namespace: "team-a", Deadline: time.Second})
	lateTheirs := b.create(t, engine.CreateParams{Type: "reapd.job.v1", Namespace: "team-b", Deadline: time.Second})
	b.advanceClock(t, time.Hour)

	if _, err := wa.eng.ReapExpiredLeases(b.ctx, 100); err != nil {
		t.Fatal(err)
	}
	if _, err := wa.eng.ExpireDeadlines(b.ctx, 100); err != nil {
		t.Fatal(err)
	}
	if r := b.get(t, mine); r.Status != engine.StatusPending || r.LeasedBy != "" {
		t.Fatalf("team-a's expired lease: %s by %q, want pending again", r.Status, r.LeasedBy)
	}
	if r := b.get(t, late); r.Status != engine.StatusFailed {
		t.Fatalf("team-a's run past its deadline is %s", r.Status)
	}
	if r := b.get(t, theirs); r.Status != engine.StatusLeased {
		t.Fatalf("team-a's worker reaped team-b's run: %s", r.Status)
	}
	if r := b.get(t, lateTheirs); r.Status != engine.StatusPending {
		t.Fatalf("team-a's worker expired team-b's run: %s", r.Status)
	}
	// The manager (the owner) reaps everyone's.
	if _, err := b.eng.ReapExpiredLeases(b.ctx, 100); err != nil {
		t.Fatal(err)
	}
	if _, err := b.eng.ExpireDeadlines(b.ctx, 100); err != nil {
		t.Fatal(err)
	}
	if r := b.get(t, theirs); r.Status == engine.StatusLeased {
		t.Fatalf("the owner did not reap team-b's run")
	}
	if r := b.get(t, lateTheirs); r.Status != engine.StatusFailed {
		t.Fatalf("the owner did not expire team-b's late run: %s", r.Status)
	}
}

// A durable run's child and a schedule's ticks belong to their parent's and
// schedule's namespace: a SQL producer of team-a schedules runs in team-a
// only, and team-b's worker never sees them.
func TestChildrenAndTicksKeepTheirNamespace(t *testing.T) {
	t.Parallel()
	b := setupRoles(t)
	if _, err := b.pool.Exec(b.ctx, `grant execute on function
		workflow.put_schedule(text, text, text, jsonb, text, integer, integer, interval, text, integer, boolean, text, text,
			interval, interval, text) to workflow_producer`); err != nil {
		t.Fatal(err)
	}
	p := b.tenantLogin(t, engine.RoleProducer, "team-a")

	parent := b.teamRun(t, "team-a", "kids.parent.v1")
	c := b.claimIn(t, "team-a", "wa", []string{"kids.parent."}, 1)
	child, err := b.eng.StartChild(b.ctx, engine.ChildParams{LeaseRef: c[0].Ref(), WorkerID: "wa", Step: "kid", Position: 0,
		Type: "kids.child.v1"})
	if err != nil || child.ChildID == "" {
		t.Fatalf("start child: %+v %v", child, err)
	}
	if r := b.get(t, child.ChildID); r.Namespace != "team-a" || r.TypeNamespace != "team-a" || r.ParentID != parent {
		t.Fatalf("the child: namespace %q, type namespace %q, parent %q", r.Namespace, r.TypeNamespace, r.ParentID)
	}
	if got := b.claimIn(t, "team-b", "wb", []string{"kids."}, 10); len(got) != 0 {
		t.Fatalf("team-b's worker claimed team-a's child: %+v", got)
	}

	s, err := p.eng.PutSchedule(b.ctx, engine.ScheduleSpec{Name: "every-minute", Cron: "* * * * *", Type: "tick.job.v1"})
	if err != nil {
		t.Fatal(err)
	}
	b.clockTo(t, s.NextTickAt.Add(time.Second))
	fired := b.fire(t)
	if len(fired) != 1 || fired[0].Outcome != engine.FiringFired {
		t.Fatalf("fired %+v", fired)
	}
	if r := b.get(t, fired[0].RunID); r.Namespace != "team-a" {
		t.Fatalf("the tick's run belongs to %q, want team-a", r.Namespace)
	}
	if got := b.claimIn(t, "team-b", "wb", []string{"tick."}, 10); len(got) != 0 {
		t.Fatalf("team-b's worker claimed team-a's tick: %+v", got)
	}
	if got := b.claimIn(t, "team-a", "wa", []string{"tick."}, 10); len(got) != 1 || got[0].ID != fired[0].RunID {
		t.Fatalf("team-a's worker claimed %+v, want the tick", got)
	}
}

// Hostile namespace values are refused with a clear error before anything
// is recorded, whichever way they come (a producer's INSERT or batch, a
// type namespace, a binding, a registry's share list): 100,000 characters,
// a NUL, capitals, quotes, a path, 257 shares, a null share. Another team's
// run beside them is unharmed and its worker claims it as before.
func TestHostileNamespaceValuesAreRefused(t *testing.T) {
	t.Parallel()
	b := setupRoles(t)
	p := b.tenantLogin(t, engine.RoleProducer, "team-a")
	bystander := b.teamRun(t, "team-b", "hostile.job.v1")
	hostile := []string{strings.Repeat("n", 100000), "team\x00b", "Team-B", "team-b'; drop table x; --", "../team-b",
		"-team", "team-", "team_b", ""}
	for _, ns := range hostile {
		if _, err := p.pool.Exec(b.ctx, `insert into workflow.workflow_run (type, namespace) values ('hostile.job.v1', $1)`, ns); err == nil {
			t.Errorf("a plain INSERT with namespace %.40q was recorded", ns)
		}
		if _, err := b.pool.Exec(b.ctx, `select * from workflow.create_runs(array['hostile.job.v1'], array['{}'], p_namespace => $1)`, ns); err == nil && ns != "" {
			t.Errorf("create_runs with namespace %.40q recorded a run", ns)
		}
		if _, err := b.pool.Exec(b.ctx, `select * from workflow.create_runs(array['hostile.job.v1'], array['{}'], p_type_namespace => $1)`, ns); err == nil && ns != "" {
			t.Errorf("create_runs with type namespace %.40q recorded a run", ns)
		}
		if err := b.eng.GrantNamespace(b.ctx, p.name, ns, engine.AsProducer); err == nil {
			t.Errorf("a binding to namespace %.40q was made", ns)
		}
		if err := b.eng.UpsertRegistryEntry(b.ctx, engine.RegistryEntry{WorkflowName: "hostile.job.v1", Runtime: "go", Enabled: true,
			OwnerNamespace: "team-c", OwnerName: "reg", SharedWith: []string{"team-a", ns}}); err == nil {
			t.Errorf("a share with namespace %.40q was stored", ns)
		}
	}
	many := make([]string, 257)
	for i := range many {
		many[i] = fmt.Sprintf("team-%d", i)
	}
	if err := b.eng.UpsertRegistryEntry(b.ctx, engine.RegistryEntry{WorkflowName: "hostile.job.v1", Runtime: "go", Enabled: true,
		OwnerNamespace: "team-c", OwnerName: "reg", SharedWith: many}); err == nil {
		t.Error("a registry entry shared with 257 namespaces was stored")
	}
	if _, err := b.pool.Exec(b.ctx, `select workflow.put_registry('hostile.job.v1', 'go', true, '', 'team-c', 'reg', null,
		p_shared_with => array['team-a', null])`); err == nil {
		t.Error("a share list holding a null was stored")
	}
	if err := b.eng.GrantNamespace(b.ctx, p.name, "team-a", "admin"); err == nil {
		t.Error("a binding as admin was made")
	}
	var n int
	if err := b.pool.QueryRow(b.ctx, `select count(*) from workflow.workflow_run where type = 'hostile.job.v1'`).Scan(&n); err != nil || n != 1 {
		t.Fatalf("%d runs of the type (%v), want the bystander's alone", n, err)
	}
	// Bindings are the owner's to read and write.
	p.requireDenied(t, b.ctx, "select * from workflow.workflow_namespace_grant")
	p.requireDenied(t, b.ctx, "select workflow.grant_namespace($1, 'team-b', 'producer')", p.name)
	if got := b.claimIn(t, "team-b", "wb", []string{"hostile."}, 10); len(got) != 1 || got[0].ID != bystander {
		t.Fatalf("team-b's worker claimed %+v, want its run", got)
	}
}
