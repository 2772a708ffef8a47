package engine_test

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/simple-workflow/simple-workflow/internal/engine"
)

// The table's own CHECKs are the state machine's rules, which read columns
// that claims and completions write; every other rule is a column's domain
// or checked at insert, so that no statement of the hot path rebuilds it.
func TestRunTableChecksReadOnlyWhatTransitionsWrite(t *testing.T) {
	t.Parallel()
	b := setup(t)
	rows, err := b.pool.Query(b.ctx, `select c.conname::text,
		       array(select a.attname::text from pg_attribute a
		             where a.attrelid = c.conrelid and a.attnum = any (c.conkey) order by 1)
		from pg_constraint c
		where c.conrelid = 'workflow.workflow_run'::regclass and c.contype = 'c' order by 1`)
	if err != nil {
		t.Fatal(err)
	}
	type check struct {
		name    string
		columns []string
	}
	checks, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (check, error) {
		var c check
		err := r.Scan(&c.name, &c.columns)
		return c, err
	})
	if err != nil {
		t.Fatal(err)
	}
	written := []string{"status", "attempt", "max_attempts", "leased_by", "lease_until", "wait_kind"}
	if len(checks) == 0 {
		t.Fatal("workflow_run has no CHECK at all")
	}
	for _, c := range checks {
		for _, col := range c.columns {
			if !slices.Contains(written, col) {
				t.Errorf("CHECK %s reads %s, which no transition writes: make it a domain or an insert rule", c.name, col)
			}
		}
	}
	// The single-column rules are domains of their columns.
	for col, domain := range map[string]string{
		"type": "workflow.run_type", "payload": "workflow.run_payload", "priority": "workflow.run_priority",
		"run_at": "workflow.run_time", "deadline_at": "workflow.run_time",
		"idempotency_key": "workflow.run_idempotency_key", "concurrency_key": "workflow.run_concurrency_key",
		"result": "workflow.run_result", "traceparent": "workflow.run_traceparent",
		"source_uid": "workflow.run_source_uid",
	} {
		var got string
		if err := b.pool.QueryRow(b.ctx, `select atttypid::regtype::text from pg_attribute
			where attrelid = 'workflow.workflow_run'::regclass and attname = $1`, col).Scan(&got); err != nil {
			t.Fatal(err)
		}
		if got != domain {
			t.Errorf("column %s is of type %s, want the domain %s", col, got, domain)
		}
	}
}

// What a run is recorded with once is not rewritten by plain SQL, even the
// owner's: the statement is refused and the run, and its neighbour, keep
// their values. The functions that must (retry_run detaching a retried
// child) still may; a domain's rule refuses a bad value in any statement.
func TestWrittenOnceColumnsRefusePlainUpdates(t *testing.T) {
	t.Parallel()
	b := setup(t)
	id := b.create(t, engine.CreateParams{Type: "once.job.v1", IdempotencyKey: "kept-key"})
	bystander := b.create(t, engine.CreateParams{Type: "once.job.v1", IdempotencyKey: "other-key"})
	for _, sql := range []string{
		"update workflow.workflow_run set idempotency_key = 'dag:' || id::text || ':x' where id = $1",
		"update workflow.workflow_run set parent_id = id, parent_step = 's' where id = $1",
		"update workflow.workflow_run set source_uid = 'u-1' where id = $1",
		"update workflow.workflow_run set retry_base_delay = '-1 second' where id = $1",
		"update workflow.workflow_run set idempotency_key = idempotency_key where id = $1",
		"update workflow.workflow_run set idempotency_key = 'x' where id <> $1",
	} {
		_, err := b.pool.Exec(b.ctx, sql, id)
		var pgErr *pgconn.PgError
		if !errors.As(err, &pgErr) || pgErr.Code != "SW001" || !strings.Contains(pgErr.Message, "written once") {
			t.Errorf("%s: %v, want the written-once refusal (SW001)", sql, err)
		}
	}
	for run, key := range map[string]string{id: "kept-key", bystander: "other-key"} {
		var got string
		var parent, uid, base *string
		if err := b.pool.QueryRow(b.ctx, `select idempotency_key, parent_id::text, source_uid, retry_base_delay::text
			from workflow.workflow_run where id = $1`, run).Scan(&got, &parent, &uid, &base); err != nil {
			t.Fatal(err)
		}
		if got != key || parent != nil || uid != nil || base != nil {
			t.Errorf("run %s: key %q parent %v uid %v base %v after refused updates, want %q and nulls",
				run, got, parent, uid, base, key)
		}
	}
	// A domain's rule holds in an UPDATE too: a producer's columns are
	// not writable, but the owner's plain SQL meets the rule.
	_, err := b.pool.Exec(b.ctx, "update workflow.workflow_run set priority = -1 where id = $1", id)
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != "SW001" || pgErr.ConstraintName != "workflow_run_priority_range" ||
		pgErr.Message != "priority must be between 0 and 1000000" {
		t.Fatalf("priority -1: %v, want workflow_run_priority_range's sentence (SW001)", err)
	}
}

// A producer of team-a sends hostile values in a batch beside a good row:
// each statement is refused whole, nothing of team-a is recorded, and a
// producer cannot rewrite a written-once column of team-b's run either.
// Team-b's run keeps its key, stays pending, and its worker claims it.
func TestHostileRunValuesStayWithTheirProducer(t *testing.T) {
	t.Parallel()
	b := setupRoles(t)
	theirs := b.create(t, engine.CreateParams{Type: "hostile.job.v1", Namespace: "team-b", IdempotencyKey: "b-key"})
	producer := b.tenantLogin(t, "workflow_producer", "team-a")
	good := `('hostile.job.v1', '{"ok": true}', null, null, null, null, 100)`
	// Each bad row, with the SQLSTATE that refuses it (a rule of the
	// schema, never a missing privilege: the control below is taken).
	for name, c := range map[string]struct{ row, code string }{
		"a key of 513 characters":        {`('hostile.job.v1', '{}', '` + strings.Repeat("k", 513) + `', null, null, null, 100)`, "SW001"},
		"a dag: key naming team-b's run": {`('hostile.job.v1', '{}', 'dag:` + theirs + `:s', null, null, null, 100)`, "SW001"},
		"a k8s: key of team-b":           {`('hostile.job.v1', '{}', 'k8s:team-b:b-key', null, null, null, 100)`, "42501"},
		"a negative retry delay":         {`('hostile.job.v1', '{}', null, '-1 second', null, null, 100)`, "SW001"},
		"a payload 200 levels deep":      {`('hostile.job.v1', '` + nested(200) + `', null, null, null, null, 100)`, "SW001"},
		"a NUL in the payload":           {`('hostile.job.v1', '{"a": "\u0000"}', null, null, null, null, 100)`, "22P05"},
		"a malformed traceparent":        {`('hostile.job.v1', '{}', null, null, '00-zz', null, 100)`, "SW001"},
		"a concurrency key of 256":       {`('hostile.job.v1', '{}', null, null, null, '` + strings.Repeat("c", 256) + `', 100)`, "SW001"},
		"a priority out of range":        {`('hostile.job.v1', '{}', null, null, null, null, 2000000)`, "SW001"},
		"a type that is no type":         {`('Hostile Job', '{}', null, null, null, null, 100)`, "SW001"},
	} {
		_, err := producer.pool.Exec(b.ctx, `insert into workflow.workflow_run (type, payload, idempotency_key,
			retry_base_delay, traceparent, concurrency_key, priority)
			values `+good+`, `+c.row)
		var pgErr *pgconn.PgError
		if !errors.As(err, &pgErr) || pgErr.Code != c.code {
			t.Errorf("%s: %v, want SQLSTATE %s", name, err, c.code)
		}
	}
	// The control: the good row alone is taken, and is the only run of team-a.
	if _, err := producer.pool.Exec(b.ctx, `insert into workflow.workflow_run (type, payload, idempotency_key,
		retry_base_delay, traceparent, concurrency_key, priority) values `+good); err != nil {
		t.Fatalf("the good row alone: %v", err)
	}
	var mine int
	if err := b.pool.QueryRow(b.ctx, `select count(*) from workflow.workflow_run where namespace = 'team-a'`).Scan(&mine); err != nil {
		t.Fatal(err)
	}
	if mine != 1 {
		t.Errorf("%d runs of team-a were recorded, want the control's alone: every other statement had a bad row", mine)
	}
	// Team-b's run, through the producer of team-a: no column of it is the
	// producer's to write, and a cancel finds no row.
	if _, err := producer.pool.Exec(b.ctx, `update workflow.workflow_run set idempotency_key = 'taken' where id = $1`,
		theirs); err == nil {
		t.Error("a producer rewrote an idempotency key")
	}
	tag, err := producer.pool.Exec(b.ctx, `update workflow.workflow_run set status = 'cancelled' where id = $1`, theirs)
	if err != nil || tag.RowsAffected() != 0 {
		t.Errorf("cancel of team-b's run by team-a: %v, %d rows", err, tag.RowsAffected())
	}
	var key, status string
	if err := b.pool.QueryRow(b.ctx, `select idempotency_key, status from workflow.workflow_run where id = $1`,
		theirs).Scan(&key, &status); err != nil {
		t.Fatal(err)
	}
	if key != "b-key" || status != "pending" {
		t.Fatalf("team-b's run: key %q status %s, want b-key pending", key, status)
	}
	if got := b.claimIn(t, "team-b", "wb", []string{"hostile."}, 10); len(got) != 1 || got[0].ID != theirs {
		t.Fatalf("team-b's worker claimed %+v, want its run %s", got, theirs)
	}
}
