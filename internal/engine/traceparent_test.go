package engine_test

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/simple-workflow/simple-workflow/internal/engine"
)

const (
	tpValid   = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	tpValid2  = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-00"
	tpMaxSize = engine.TraceParentLength
)

// hostileTraceParents are values the column and the Go check both refuse.
var hostileTraceParents = map[string]string{
	"uppercase":          "00-4BF92F3577B34DA6A3CE929D0E0E4736-00F067AA0BA902B7-01",
	"version ff":         "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
	"version 01":         "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
	"zero trace id":      "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
	"zero span id":       "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
	"short trace id":     "00-4bf92f3577b34da6a3ce929d0e0e473-00f067aa0ba902b7-01",
	"trailing newline":   tpValid + "\n",
	"leading space":      " " + tpValid,
	"with a suffix":      tpValid + "-extra",
	"oversized":          tpValid + strings.Repeat("a", 1<<20),
	"underscores":        "00_4bf92f3577b34da6a3ce929d0e0e4736_00f067aa0ba902b7_01",
	"non-hex flags":      "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-zz",
	"non-ascii":          "00-4bf92f3577b34da6a3ce929d0e0e47é-00f067aa0ba902b7-01",
	"sql":                "00-'; drop table workflow.workflow_run; --",
	"empty string":       "",
	"tracestate smuggle": tpValid + ",congo=t61rcWkgMzE",
}

// The traceparent column takes null or a version-00 W3C traceparent, and
// nothing else: the rule says itself (SW001), and the engine's own check
// refuses the same values before they reach the database.
func TestTraceParentColumnRefusesHostileValues(t *testing.T) {
	t.Parallel()
	b := setup(t)
	for name, tp := range hostileTraceParents {
		_, err := b.pool.Exec(b.ctx, `insert into workflow.workflow_run (type, traceparent) values ('tp.bad.v1', $1)`, tp)
		var pgErr *pgconn.PgError
		if !errors.As(err, &pgErr) || pgErr.Code != "SW001" || pgErr.ConstraintName != "workflow_run_traceparent_format" ||
			!strings.Contains(pgErr.Message, "W3C traceparent") {
			t.Errorf("%s: insert gave %v, want SW001 saying workflow_run_traceparent_format's sentence", name, err)
		}
		if tp == "" {
			continue // empty means "none" to the Go client
		}
		if err := engine.ValidateTraceParent(tp); !errors.Is(err, engine.ErrInvalid) {
			t.Errorf("%s: ValidateTraceParent gave %v, want ErrInvalid", name, err)
		}
		_, err = b.eng.CreateRun(b.ctx, engine.CreateParams{Type: "tp.bad.v1", TraceParent: tp})
		if !errors.Is(err, engine.ErrInvalid) || !strings.Contains(err.Error(), "W3C traceparent") {
			t.Errorf("%s: CreateRun gave %v, want ErrInvalid naming the rule", name, err)
		}
		if len(err.Error()) > 400 {
			t.Errorf("%s: the error repeats the whole value (%d bytes)", name, len(err.Error()))
		}
	}
	// A NUL never reaches the column: Postgres text cannot hold one.
	if _, err := b.pool.Exec(b.ctx, `insert into workflow.workflow_run (type, traceparent) values ('tp.bad.v1', $1)`,
		"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-0\x00"); err == nil {
		t.Error("a traceparent with a NUL was stored")
	}
	var n int
	if err := b.pool.QueryRow(b.ctx, `select count(*) from workflow.workflow_run`).Scan(&n); err != nil || n != 0 {
		t.Fatalf("%d runs stored (%v), want none", n, err)
	}

	for _, tp := range []string{tpValid, tpValid2, "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-ff"} {
		id := b.create(t, engine.CreateParams{Type: "tp.ok.v1", TraceParent: tp})
		if got := b.get(t, id).TraceParent; got != tp {
			t.Errorf("stored %q, read back %q", tp, got)
		}
	}
	if got := b.get(t, b.create(t, engine.CreateParams{Type: "tp.ok.v1"})).TraceParent; got != "" {
		t.Errorf("a run created without a traceparent has %q", got)
	}
	if len(tpValid) != tpMaxSize {
		t.Fatalf("test value is %d characters", len(tpValid))
	}
}

// A producer may set the traceparent in its plain INSERT, and only to a
// valid value; a worker's claim returns it.
func TestTraceParentProducerInsertAndClaim(t *testing.T) {
	t.Parallel()
	b := setupRoles(t)
	p := b.loginAs(t, engine.RoleProducer)
	var id string
	if err := p.pool.QueryRow(b.ctx, `insert into workflow.workflow_run (type, payload, traceparent)
values ('tpp.job.v1', '{}', $1) returning id`, tpValid).Scan(&id); err != nil {
		t.Fatalf("producer insert with traceparent: %v", err)
	}
	_, err := p.pool.Exec(b.ctx, `insert into workflow.workflow_run (type, traceparent) values ('tpp.job.v1', $1)`,
		hostileTraceParents["version ff"])
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.ConstraintName != "workflow_run_traceparent_format" {
		t.Errorf("producer insert of a bad traceparent: %v", err)
	}
	// The Go client's insert names the column too.
	created, err := p.eng.CreateRun(b.ctx, engine.CreateParams{Type: "tpp.job.v1", TraceParent: tpValid2})
	if err != nil {
		t.Fatalf("producer CreateRun: %v", err)
	}

	w := b.loginAs(t, engine.RoleWorker)
	claimed, err := w.eng.ClaimRuns(b.ctx, engine.ClaimParams{
		WorkerID: "w", TypePrefixes: []string{"tpp."}, Runtime: "go", Limit: 10, LeaseDuration: 30e9,
	})
	if err != nil || len(claimed) != 2 {
		t.Fatalf("claim as worker: %d runs, %v", len(claimed), err)
	}
	got := map[string]string{}
	for _, c := range claimed {
		got[c.ID] = c.TraceParent
	}
	if got[id] != tpValid || got[created.ID] != tpValid2 {
		t.Errorf("claimed traceparents %v, want %s=%s and %s=%s", got, id, tpValid, created.ID, tpValid2)
	}
}

// create_runs takes a traceparent per row, names a bad row, and records
// none for a null element.
func TestTraceParentCreateMany(t *testing.T) {
	t.Parallel()
	b := setup(t)
	res, err := b.eng.CreateRuns(b.ctx, []engine.CreateParams{
		{Type: "tpm.job.v1", TraceParent: tpValid},
		{Type: "tpm.job.v1"},
		{Type: "tpm.job.v1", TraceParent: tpValid2, IdempotencyKey: "tpm-1"},
	})
	if err != nil {
		t.Fatal(err)
	}
	for i, want := range []string{tpValid, "", tpValid2} {
		if got := b.get(t, res[i].ID).TraceParent; got != want {
			t.Errorf("row %d: traceparent %q, want %q", i+1, got, want)
		}
	}
	_, err = b.pool.Exec(b.ctx, `select * from workflow.create_runs('{tpm.job.v1,tpm.job.v1}', '{"{}","{}"}',
		p_traceparents => $1)`, []*string{nil, new(hostileTraceParents["uppercase"])})
	if err == nil || !strings.Contains(err.Error(), "row 2: traceparent must be a W3C traceparent") {
		t.Errorf("bad row: %v", err)
	}
	_, err = b.pool.Exec(b.ctx, `select * from workflow.create_runs('{tpm.job.v1,tpm.job.v1}', '{"{}","{}"}',
		p_traceparents => $1)`, []string{tpValid})
	if err == nil || !strings.Contains(err.Error(), "traceparents has 1 elements, types has 2") {
		t.Errorf("short array: %v", err)
	}
	// Nine arguments, as before the traceparents: still a call.
	if _, err := b.pool.Exec(b.ctx, `select * from workflow.create_runs('{tpm.job.v1}', '{"{}"}', null, null, null, null, null, null, null)`); err != nil {
		t.Errorf("create_runs without traceparents: %v", err)
	}
}

// A child run (start_child, a DAG's step) takes its parent's traceparent,
// and its claim returns it.
func TestTraceParentChildInherits(t *testing.T) {
	t.Parallel()
	b := setup(t)
	parent := b.create(t, engine.CreateParams{Type: "tpc.parent.v1", TraceParent: tpValid})
	claimed := b.claim(t, "w", []string{"tpc.parent."}, 1)
	if len(claimed) != 1 || claimed[0].TraceParent != tpValid {
		t.Fatalf("claimed %+v", claimed)
	}
	res, err := b.eng.StartChild(b.ctx, engine.ChildParams{
		LeaseRef: claimed[0].Ref(), WorkerID: "w", Step: "kid", Position: 0, Type: "tpc.child.v1",
	})
	if err != nil || res.Status != engine.WriteStarted {
		t.Fatalf("start child: %+v %v", res, err)
	}
	if got := b.get(t, res.ChildID).TraceParent; got != tpValid {
		t.Errorf("child traceparent %q, want the parent's %q", got, tpValid)
	}
	kids := b.claim(t, "w", []string{"tpc.child."}, 1)
	if len(kids) != 1 || kids[0].TraceParent != tpValid {
		t.Errorf("claimed child %+v", kids)
	}

	// A parent without one gives its child none.
	b.create(t, engine.CreateParams{Type: "tpc.bare.v1"})
	bare := b.claim(t, "w", []string{"tpc.bare."}, 1)
	res, err = b.eng.StartChild(b.ctx, engine.ChildParams{
		LeaseRef: bare[0].Ref(), WorkerID: "w", Step: "kid", Position: 0, Type: "tpc.child.v1",
	})
	if err != nil {
		t.Fatal(err)
	}
	if got := b.get(t, res.ChildID).TraceParent; got != "" {
		t.Errorf("child of a parent without traceparent has %q", got)
	}

	// A DAG's steps, likewise.
	b.register(t, "tpd.flow.v1", step("a", "tpd.a.v1"))
	dag := b.create(t, engine.CreateParams{Type: "tpd.flow.v1", TraceParent: tpValid2})
	steps := b.claim(t, "w", []string{"tpd.a."}, 1)
	if len(steps) != 1 || steps[0].TraceParent != tpValid2 {
		t.Errorf("DAG %s step claimed as %+v, want traceparent %s", dag, steps, tpValid2)
	}
	_ = parent

	// Its later steps, the elements of a fan-out and the final step too,
	// and a child a producer records with plain SQL.
	b.register(t, "tpf.flow.v1", step("first", "tpf.first.v1"),
		forEachStep("each", "tpf.each.v1", "$.payload.items", "", "first"),
		engine.DAGStepDefinition{Name: "end", Type: "tpf.end.v1", Final: true})
	b.create(t, engine.CreateParams{Type: "tpf.flow.v1", TraceParent: tpValid, Payload: json.RawMessage(`{"items": [1, 2]}`)})
	for _, want := range []struct {
		prefix string
		n      int
	}{{"tpf.first.", 1}, {"tpf.each.", 2}, {"tpf.end.", 1}} {
		got := b.claim(t, "w", []string{want.prefix}, 10)
		if len(got) != want.n {
			t.Fatalf("claimed %d runs of %s, want %d", len(got), want.prefix, want.n)
		}
		var cs []engine.Completion
		for _, c := range got {
			if c.TraceParent != tpValid {
				t.Errorf("step %s claimed with traceparent %q, want its workflow's %q", c.Type, c.TraceParent, tpValid)
			}
			cs = append(cs, engine.Completion{LeaseRef: c.Ref()})
		}
		if _, err := b.eng.CompleteRuns(b.ctx, "w", cs); err != nil {
			t.Fatal(err)
		}
	}
	var sqlChild string
	if err := b.pool.QueryRow(b.ctx, `insert into workflow.workflow_run (type, parent_id, parent_step)
		values ('tpc.sqlchild.v1', $1, 'by-sql') returning coalesce(traceparent, '')`, parent).Scan(&sqlChild); err != nil {
		t.Fatal(err)
	}
	if sqlChild != tpValid {
		t.Errorf("a child inserted by plain SQL has traceparent %q, want its parent's %q", sqlChild, tpValid)
	}
}
