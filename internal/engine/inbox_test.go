package engine_test

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/simple-workflow/simple-workflow/internal/engine"
)

func TestMigrateIsIdempotentAndConcurrent(t *testing.T) {
	t.Parallel()
	b := setup(t) // already migrated from the template
	errs := make(chan error, 4)
	for range 4 {
		go func() {
			applied, err := engine.Migrate(b.ctx, b.pool)
			if err == nil && len(applied) != 0 {
				err = errors.New("a migrated database applied migrations again")
			}
			errs <- err
		}()
	}
	for range 4 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	var n, version int
	if err := b.pool.QueryRow(b.ctx, "select count(*), max(version) from workflow.schema_version").Scan(&n, &version); err != nil {
		t.Fatal(err)
	}
	want, err := engine.SchemaVersion()
	if err != nil {
		t.Fatal(err)
	}
	if n != 1 || version != want {
		t.Fatalf("bookkeeping has %d rows up to version %d, want one row of version %d", n, version, want)
	}
}

func TestMigrateFreshDatabaseFromManyProcesses(t *testing.T) {
	t.Parallel()
	b := setup(t)
	// Start from an empty schema to exercise the first application.
	if _, err := b.pool.Exec(b.ctx, "drop schema workflow cascade"); err != nil {
		t.Fatal(err)
	}
	const n = 5
	pools := make([]*pgxpool.Pool, n)
	for i := range pools {
		p, err := pgxpool.New(b.ctx, b.url)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(p.Close)
		pools[i] = p
	}
	results := make(chan []int, n)
	errs := make(chan error, n)
	for _, p := range pools {
		go func() {
			applied, err := engine.Migrate(b.ctx, p)
			errs <- err
			results <- applied
		}()
	}
	total := 0
	for range n {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
		total += len(<-results)
	}
	if total != 1 {
		t.Fatalf("the schema was recorded %d times across processes, want once", total)
	}
}

// The seed's producer INSERT and cancel UPDATE must work verbatim.
func TestSeedSQLVerbatim(t *testing.T) {
	t.Parallel()
	b := setup(t)
	const insert = `insert into workflow.workflow_run (
  type,
  payload,
  idempotency_key
) values (
  'content.thumbnail.v1',
  '{"content_id":"c_123", "width": 300, "height": 300}',
  'content:c_123:thumbnail:300x300'
)
on conflict (idempotency_key) do nothing
returning id;`
	var id string
	if err := b.pool.QueryRow(b.ctx, insert).Scan(&id); err != nil {
		t.Fatalf("seed insert: %v", err)
	}
	// The second insert of the same intent returns no row.
	rows, err := b.pool.Query(b.ctx, insert)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for rows.Next() {
		n++
	}
	rows.Close()
	if n != 0 {
		t.Fatalf("duplicate seed insert returned %d rows, want 0", n)
	}
	r := b.get(t, id)
	if r.Status != engine.StatusPending || r.Priority != 100 || r.MaxAttempts != 3 || r.Attempt != 0 {
		t.Fatalf("unexpected defaults: %+v", r)
	}

	const cancel = `update workflow.workflow_run
set status = 'cancelled', updated_at = now()
where id = $1
  and status in ('pending', 'leased');`
	tag, err := b.pool.Exec(b.ctx, cancel, id)
	if err != nil || tag.RowsAffected() != 1 {
		t.Fatalf("seed cancel: %v (%d rows)", err, tag.RowsAffected())
	}
	tag, err = b.pool.Exec(b.ctx, cancel, id)
	if err != nil || tag.RowsAffected() != 0 {
		t.Fatalf("second seed cancel: %v (%d rows), want no change", err, tag.RowsAffected())
	}
	r = b.get(t, id)
	if r.Status != engine.StatusCancelled || r.FinishedAt == nil {
		t.Fatalf("after cancel: status %s finished_at %v", r.Status, r.FinishedAt)
	}
	assertEvents(t, b.eventTypes(t, id), engine.EventCreated, engine.EventCancelled)

	// The seed's own claiming query still finds pending work by prefix.
	other := b.create(t, engine.CreateParams{Type: "billing.invoice.v1"})
	var claimed string
	err = b.pool.QueryRow(b.ctx, `select id
from workflow.workflow_run
where status = 'pending'
  and (type like 'billing.%' or type like 'payment.%')
  and run_at <= now()
  and deleted_at is null
order by priority asc, created_at asc
for update skip locked
limit 1`).Scan(&claimed)
	if err != nil || claimed != other {
		t.Fatalf("seed claim query: %v, got %s want %s", err, claimed, other)
	}
}

func TestCreateIsIdempotent(t *testing.T) {
	t.Parallel()
	b := setup(t)
	p := engine.CreateParams{Type: "content.ocr.v1", Payload: json.RawMessage(`{"n":1}`), IdempotencyKey: "ocr:1"}
	first, err := b.eng.CreateRun(b.ctx, p)
	if err != nil || !first.Created {
		t.Fatalf("first create: %+v %v", first, err)
	}
	p.Payload = json.RawMessage(`{"n":2}`)
	second, err := b.eng.CreateRun(b.ctx, p)
	if err != nil {
		t.Fatal(err)
	}
	if second.Created || second.ID != first.ID {
		t.Fatalf("second create = %+v, want the first run %s, not created", second, first.ID)
	}
	if got := string(b.get(t, first.ID).Payload); got != `{"n": 1}` {
		t.Fatalf("payload changed to %s", got)
	}
	// Concurrent creates with one key make exactly one run.
	ids := make(chan engine.CreateResult, 20)
	for range 20 {
		go func() {
			r, err := b.eng.CreateRun(b.ctx, engine.CreateParams{Type: "content.ocr.v1", IdempotencyKey: "ocr:race"})
			if err != nil {
				t.Error(err)
			}
			ids <- r
		}()
	}
	created, seen := 0, map[string]bool{}
	for range 20 {
		r := <-ids
		seen[r.ID] = true
		if r.Created {
			created++
		}
	}
	if created != 1 || len(seen) != 1 {
		t.Fatalf("concurrent creates: %d created, %d distinct ids; want 1 and 1", created, len(seen))
	}
}

// Every constraint rejects its bad input, in the engine (before any write) and
// in the database (for producers writing SQL directly), with a clear message.
func TestConstraintsRejectBadInput(t *testing.T) {
	t.Parallel()
	b := setup(t)
	cases := []struct {
		name    string
		params  engine.CreateParams
		sql     string
		message string
	}{
		{"type without version", engine.CreateParams{Type: "content.thumbnail"},
			`insert into workflow.workflow_run (type) values ('content.thumbnail')`, "ending in a version"},
		{"type with capitals", engine.CreateParams{Type: "Content.thumb.v1"},
			`insert into workflow.workflow_run (type) values ('Content.thumb.v1')`, "lowercase"},
		{"type with empty segment", engine.CreateParams{Type: "content..v1"},
			`insert into workflow.workflow_run (type) values ('content..v1')`, "dot-separated"},
		{"type with dash", engine.CreateParams{Type: "content-x.v1"},
			`insert into workflow.workflow_run (type) values ('content-x.v1')`, "dot-separated"},
		{"payload array", engine.CreateParams{Type: "a.v1", Payload: json.RawMessage(`[1,2]`)},
			`insert into workflow.workflow_run (type, payload) values ('a.v1', '[1,2]')`, "JSON object"},
		{"payload string", engine.CreateParams{Type: "a.v1", Payload: json.RawMessage(`"x"`)},
			`insert into workflow.workflow_run (type, payload) values ('a.v1', '"x"')`, "JSON object"},
		{"max attempts too large", engine.CreateParams{Type: "a.v1", MaxAttempts: 5000},
			`insert into workflow.workflow_run (type, max_attempts) values ('a.v1', 5000)`, "max"},
		{"idempotency key too long", engine.CreateParams{Type: "a.v1", IdempotencyKey: strings.Repeat("k", 600)},
			`insert into workflow.workflow_run (type, idempotency_key) values ('a.v1', repeat('k', 600))`, "idempotency"},
		{"idempotency key with NUL", engine.CreateParams{Type: "a.v1", IdempotencyKey: "a\x00b"},
			`insert into workflow.workflow_run (type, idempotency_key) values ('a.v1', 'a' || chr(0) || 'b')`, "without NUL"},
		{"idempotency key not UTF-8", engine.CreateParams{Type: "a.v1", IdempotencyKey: "a\xffb"},
			`insert into workflow.workflow_run (type, idempotency_key) values ('a.v1', convert_from('\x61ff62'::bytea, 'UTF8'))`, "UTF-8"},
		{"retry max below base", engine.CreateParams{Type: "a.v1", RetryPolicy: &engine.RetryPolicy{BaseDelay: time.Minute, MaxDelay: time.Second}},
			`insert into workflow.workflow_run (type, retry_base_delay, retry_max_delay) values ('a.v1', '1 minute', '1 second')`, "delay"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := b.eng.CreateRun(b.ctx, tc.params)
			if !errors.Is(err, engine.ErrInvalid) || !strings.Contains(err.Error(), tc.message) {
				t.Errorf("engine: got %v, want ErrInvalid mentioning %q", err, tc.message)
			}
			_, err = b.pool.Exec(b.ctx, tc.sql)
			if err == nil {
				t.Fatalf("database accepted %s", tc.sql)
			}
		})
	}
	// Database-only rules.
	dbOnly := []struct{ name, sql string }{
		{"unknown status", `insert into workflow.workflow_run (type, status) values ('a.v1', 'running')`},
		{"negative attempt", `insert into workflow.workflow_run (type, attempt) values ('a.v1', -1)`},
		{"attempt above max", `insert into workflow.workflow_run (type, attempt, max_attempts) values ('a.v1', 4, 3)`},
		{"leased without holder", `insert into workflow.workflow_run (type, status) values ('a.v1', 'leased')`},
		{"unknown event type", `insert into workflow.workflow_event (workflow_id, event_type) select id, 'exploded' from workflow.workflow_run limit 1`},
		{"registry runtime", `insert into workflow.workflow_registry (workflow_name, runtime) values ('a.v1', 'ruby')`},
	}
	b.create(t, engine.CreateParams{Type: "a.v1"})
	for _, tc := range dbOnly {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := b.pool.Exec(b.ctx, tc.sql); err == nil {
				t.Fatalf("database accepted %s", tc.sql)
			}
		})
	}
	// Nothing of the rejected input was written.
	var n int
	if err := b.pool.QueryRow(b.ctx, "select count(*) from workflow.workflow_run").Scan(&n); err != nil || n != 1 {
		t.Fatalf("rows after rejected input: %d (%v), want 1", n, err)
	}
}

func TestFinishedRunsAreNeverResurrected(t *testing.T) {
	t.Parallel()
	b := setup(t)
	id := b.create(t, engine.CreateParams{Type: "a.v1"})
	if ok, err := b.eng.CancelRun(b.ctx, id); err != nil || !ok {
		t.Fatalf("cancel: %v %v", ok, err)
	}
	if ok, err := b.eng.CancelRun(b.ctx, id); err != nil || ok {
		t.Fatalf("second cancel: %v %v, want false", ok, err)
	}
	_, err := b.pool.Exec(b.ctx, "update workflow.workflow_run set status = 'pending' where id = $1", id)
	if err == nil || !strings.Contains(err.Error(), "cannot become pending") {
		t.Fatalf("resurrecting a cancelled run: %v", err)
	}
	if got := b.claim(t, "w", nil, 10); len(got) != 0 {
		t.Fatalf("claimed a cancelled run: %+v", got)
	}
}

func TestGetListAndPaging(t *testing.T) {
	t.Parallel()
	b := setup(t)
	for i := range 7 {
		typ := "list.a.v1"
		if i%2 == 1 {
			typ = "list.b.v1"
		}
		b.create(t, engine.CreateParams{Type: typ})
	}
	b.create(t, engine.CreateParams{Type: "other.v1"})
	var all []engine.Run
	cursor := ""
	for {
		page, err := b.eng.ListRuns(b.ctx, engine.ListParams{TypePrefix: "list.", Limit: 3, Cursor: cursor})
		if err != nil {
			t.Fatal(err)
		}
		all = append(all, page.Runs...)
		if page.NextCursor == "" {
			break
		}
		cursor = page.NextCursor
	}
	if len(all) != 7 {
		t.Fatalf("listed %d runs with prefix list., want 7", len(all))
	}
	for i := 1; i < len(all); i++ {
		if all[i].CreatedAt.Before(all[i-1].CreatedAt) {
			t.Fatal("list is not in creation order")
		}
	}
	page, err := b.eng.ListRuns(b.ctx, engine.ListParams{TypePrefix: "list.b", Statuses: []engine.Status{engine.StatusPending}})
	if err != nil || len(page.Runs) != 3 {
		t.Fatalf("filtered list: %d runs, %v; want 3", len(page.Runs), err)
	}
	if _, err := b.eng.GetRun(b.ctx, "00000000-0000-0000-0000-000000000000"); !errors.Is(err, engine.ErrNotFound) {
		t.Fatalf("get missing run: %v, want ErrNotFound", err)
	}
	if _, err := b.eng.ListRuns(b.ctx, engine.ListParams{Cursor: "%%%"}); !errors.Is(err, engine.ErrInvalid) {
		t.Fatalf("bad cursor: %v, want ErrInvalid", err)
	}
}

func assertEvents(t *testing.T, got []engine.EventType, want ...engine.EventType) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("events %v, want %v", got, want)
	}
	for i := range got {
		if got[i] != want[i] {
			t.Fatalf("events %v, want %v", got, want)
		}
	}
}
