package engine_test

import (
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/simple-workflow/simple-workflow/internal/engine"
)

// A function that changes statuses marks the transaction while it runs
// (workflow.via_function) so that the plain-SQL audit trigger does not write
// a second event; whichever way it returns, it gives back the caller's own
// value of the setting, to the letter. A plain-SQL status change later in
// the same transaction is still audited. Most calls below leave their
// function early: park_run refused, fenced out, resolved at once;
// dag_advance on a run that is no DAG; expire_deadlines with nothing due;
// then a heartbeat and a fenced-out release run to their end.
func TestAuditMarkIsGivenBackOnEarlyReturns(t *testing.T) {
	t.Parallel()
	b := setup(t)
	leased := b.create(t, engine.CreateParams{Type: "mark.held.v1"})
	c := b.claimOne(t, "w", "mark.held.")
	if c.ID != leased {
		t.Fatalf("claimed %s, want %s", c.ID, leased)
	}
	bystander := b.create(t, engine.CreateParams{Type: "mark.plain.v1"})

	tx, err := b.pool.Begin(b.ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(b.ctx) }()
	// The caller's own value of the setting, long and full of quotes, is
	// what each function must give back, to the letter.
	own := strings.Repeat(`x'"; on `, 1000)
	if _, err := tx.Exec(b.ctx, `select set_config('workflow.via_function', $1, true)`, own); err != nil {
		t.Fatal(err)
	}
	mark := func(after string) {
		t.Helper()
		var v, frees string
		if err := tx.QueryRow(b.ctx, `select coalesce(current_setting('workflow.via_function', true), ''),
			coalesce(current_setting('workflow.frees_slots', true), '')`).Scan(&v, &frees); err != nil {
			t.Fatal(err)
		}
		if v != own {
			t.Fatalf("after %s the mark is %.40q..., want the caller's own value back", after, v)
		}
		if frees == "on" {
			t.Fatalf("after %s the transaction still says its batch frees slots itself", after)
		}
	}
	calls := []struct {
		name, sql string
		args      []any
		want      string
	}{
		{"park_run with a bad step name", `select status from workflow.park_run('w', $1, $2, 'sleep', '', 0, null, 1000, null)`,
			[]any{c.ID, c.LeaseToken}, "invalid"},
		{"park_run with a wait over 100 years", `select status from workflow.park_run('w', $1, $2, 'sleep', 'nap', 0, null, 3153600000001, null)`,
			[]any{c.ID, c.LeaseToken}, "invalid"},
		{"park_run with another claim's token", `select status from workflow.park_run('w', $1, $2, 'sleep', 'nap', 0, null, 1000, null)`,
			[]any{c.ID, c.LeaseToken + 1}, "lease_lost"},
		{"park_run with a sleep already over", `select status from workflow.park_run('w', $1, $2, 'sleep', 'nap', 0, null, 0, null)`,
			[]any{c.ID, c.LeaseToken}, "resolved"},
		{"dag_advance of a run that is no DAG", `select 'advanced' from workflow.dag_advance($1)`,
			[]any{bystander}, "advanced"},
		{"expire_deadlines with nothing due", `select 'expired' from (select count(*) from workflow.expire_deadlines(null, 10)) x`,
			nil, "expired"},
		{"heartbeat_runs to its end", `select owned::text from workflow.heartbeat_runs('w', array[$1]::uuid[], array[$2]::bigint[], 30000)`,
			[]any{c.ID, c.LeaseToken}, "true"},
		{"release_runs under another claim's token", `select count(*)::text from workflow.release_runs('w', array[$1]::uuid[], array[$2]::bigint[])`,
			[]any{c.ID, c.LeaseToken + 1}, "0"},
	}
	for _, call := range calls {
		var got string
		if err := tx.QueryRow(b.ctx, call.sql, call.args...).Scan(&got); err != nil {
			t.Fatalf("%s: %v", call.name, err)
		}
		if got != call.want {
			t.Fatalf("%s: %s, want %s", call.name, got, call.want)
		}
		mark(call.name)
	}
	if _, err := tx.Exec(b.ctx, `update workflow.workflow_run set status = 'failed', finished_at = now(),
        last_error = 'given up by hand' where id = $1`, bystander); err != nil {
		t.Fatal(err)
	}
	var data string
	err = tx.QueryRow(b.ctx, `select data::text from workflow.workflow_event
        where workflow_id = $1 and event_type = 'failed'`, bystander).Scan(&data)
	if err == pgx.ErrNoRows || (err == nil && !strings.Contains(data, `"plain_sql"`)) {
		t.Fatalf("the plain-SQL change after the functions was not audited (event %q, %v)", data, err)
	}
	if err != nil {
		t.Fatal(err)
	}
}
