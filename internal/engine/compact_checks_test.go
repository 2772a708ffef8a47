package engine_test

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// compactedChecks are the rules of workflow_run written in a compact form
// because they are evaluated on the hot path: CHECKs of the table
// (status_valid, wait_kind_valid) and of the columns' domains
// (idempotency_key_length, traceparent_format), read from the catalog.
var compactedChecks = []string{
	"workflow_run_traceparent_format", "workflow_run_status_valid", "workflow_run_wait_kind_valid",
	"workflow_run_idempotency_key_length",
}

// insertRules are the rules on columns a run is written with once, which
// on_run_inserted checks at insert (no catalog holds them as an
// expression): the test inserts each case and compares what the schema
// refuses with their plain forms.
var insertRules = []string{
	"workflow_run_reserved_key", "workflow_run_dag_key", "workflow_run_retry_policy_valid",
	"workflow_run_parent_step_set",
}

// domainColumns names the run column each domain's rule is written for
// (a domain's check reads VALUE).
var domainColumns = map[string]string{
	"workflow_run_traceparent_format":     "traceparent",
	"workflow_run_idempotency_key_length": "idempotency_key",
}

// checkRules reads the rule of each named constraint of workflow_run, or
// of the domain of its column, as an expression over the run's columns.
func checkRules(t *testing.T, b *bundle, names []string) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, name := range names {
		var def string
		if err := b.pool.QueryRow(b.ctx, `select pg_get_constraintdef(c.oid) from pg_constraint c
			where c.conname = $1 and (c.conrelid = 'workflow.workflow_run'::regclass
			      or c.contypid = (select a.atttypid from pg_attribute a
			                       where a.attrelid = 'workflow.workflow_run'::regclass and a.attname = $2))`,
			name, domainColumns[name]).Scan(&def); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		rule, ok := strings.CutPrefix(strings.TrimSuffix(def, " NOT VALID"), "CHECK ")
		if !ok {
			t.Fatalf("%s is not a check constraint: %s", name, def)
		}
		// A rule a caller can break raises its sentence in the ELSE branch
		// of a CASE (rule_broken); the rule is the condition it tests.
		if strings.Contains(rule, "workflow.rule_broken(") {
			i, j := strings.Index(rule, "WHEN ("), strings.Index(rule, " IS NOT FALSE) THEN true")
			if i < 0 || j < i {
				t.Fatalf("%s: not the form CASE WHEN (rule) IS NOT FALSE THEN true ELSE rule_broken: %s", name, def)
			}
			rule = "(" + rule[i+len("WHEN ("):j] + ")"
		}
		if col := domainColumns[name]; col != "" {
			rule = strings.ReplaceAll(rule, "VALUE", col)
		}
		out[name] = rule
	}
	return out
}

// plainRules are the compacted rules written out plainly, as a reader would
// first write them (null handled explicitly, every branch spelled out): the
// schema's compact forms must accept and refuse exactly the same rows.
var plainRules = map[string]string{
	"workflow_run_dag_key": `idempotency_key is null or left(idempotency_key, 4) <> 'dag:'
		or idempotency_key !~ '^dag:[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}:'
		or coalesce(idempotency_key = 'dag:' || parent_id::text || ':' || parent_step, false)`,
	"workflow_run_idempotency_key_length": `idempotency_key is null
		or (char_length(idempotency_key) >= 1 and char_length(idempotency_key) <= 512)`,
	"workflow_run_reserved_key": `idempotency_key is null
		or (left(idempotency_key, 4) <> 'k8s:' and left(idempotency_key, 8) <> 'k8s-uid:')
		or coalesce(left(idempotency_key, 4) = 'k8s:' and source_uid is not null
		            and left(idempotency_key, char_length(source_namespace) + 5) = 'k8s:' || source_namespace || ':', false)
		or coalesce(left(idempotency_key, 8) = 'k8s-uid:' and idempotency_key = 'k8s-uid:' || source_uid, false)`,
	"workflow_run_retry_policy_valid": `(retry_base_delay is null or retry_base_delay > '0')
		and (retry_max_delay is null or retry_max_delay > '0')
		and (retry_base_delay is null or retry_max_delay is null or retry_max_delay >= retry_base_delay)`,
	"workflow_run_status_valid": `status in ('pending', 'leased', 'succeeded', 'failed', 'cancelled')`,
	"workflow_run_traceparent_format": `traceparent is null
		or (octet_length(traceparent) = 55 and traceparent ~ '^00-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}$'
		    and substr(traceparent, 4, 32) <> '00000000000000000000000000000000'
		    and substr(traceparent, 37, 16) <> '0000000000000000')`,
	"workflow_run_wait_kind_valid": `wait_kind is null or wait_kind in ('sleep', 'signal', 'child', 'dag')`,
	"workflow_run_parent_step_set": `(parent_id is null) = (parent_step is null)`,
}

// checkCase is one row's worth of the columns those constraints read.
type checkCase struct {
	key, namespace, uid, parent, step, traceparent *string
	baseDelay, maxDelay                            *string
	status                                         string
	waitKind                                       *string
}

// checkCases are the rows that tell the rules apart: every branch of each
// rule, its edges, and values that only look alike.
func checkCases() []checkCase {
	const parent = "0b8f2c1e-3a4d-4e5f-8a9b-0c1d2e3f4a5b"
	const trace = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	var out []checkCase
	// Reserved keys of the operator.
	for _, k := range []*string{nil, ptr(""), ptr("plain"), ptr("k8s"), ptr("k8s:"), ptr("k8s-uid:"), ptr("k8sx:a"),
		ptr("K8S:ns1:a"), ptr("k8s:ns1:a"), ptr("k8s:ns1"), ptr("k8s:ns10:a"), ptr("k8s::a"), ptr("k8s:a.b:x"), ptr("k8s:aXb:x"),
		ptr("k8s:n%_:x"), ptr("k8s-uid:u-1"), ptr("k8s-uid:u-2"), ptr("k8s-uid:"), ptr("k8s-uidx:u-1"), ptr("k8s-uid:u-1:x")} {
		for _, ns := range []*string{nil, ptr(""), ptr("ns1"), ptr("a.b"), ptr("n%_")} {
			for _, uid := range []*string{nil, ptr("u-1")} {
				out = append(out, checkCase{key: k, namespace: ns, uid: uid, status: "pending"})
			}
		}
	}
	// Keys of DAG steps.
	for _, k := range []*string{ptr("dag:"), ptr("dag:nightly:x"), ptr("dag:" + parent + ":s"), ptr("dag:" + parent + ":t"),
		ptr("dag:" + strings.ToUpper(parent) + ":s"), ptr("xdag:" + parent + ":s"), ptr("dag:" + parent), ptr("dag:" + parent + ":")} {
		for _, p := range []*string{nil, ptr(parent), ptr("1b8f2c1e-3a4d-4e5f-8a9b-0c1d2e3f4a5b")} {
			for _, st := range []*string{nil, ptr("s"), ptr("")} {
				out = append(out, checkCase{key: k, parent: p, step: st, status: "pending"})
			}
		}
	}
	// Trace contexts.
	for _, tp := range []*string{nil, ptr(trace), ptr(""), ptr("00-00000000000000000000000000000000-00f067aa0ba902b7-01"),
		ptr("00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01"), ptr("01" + trace[2:]), ptr(strings.ToUpper(trace)),
		ptr(trace + "0"), ptr(trace[:54]), ptr(trace + "\n"), ptr("00-00000000000000000000000000000001-0000000000000001-00"),
		ptr("00-10000000000000000000000000000000-1000000000000000-ff"), ptr("00-4bf92f3577b34da6a3ce929d0e0e473-600f067aa0ba902b7-01")} {
		out = append(out, checkCase{traceparent: tp, status: "pending"})
	}
	// Retry policies.
	delays := []*string{nil, ptr("0"), ptr("-1 second"), ptr("1 second"), ptr("2 seconds"), ptr("1 hour"),
		ptr("1 mon"), ptr("30 days"), ptr("1 day -25 hours"), ptr("-1 mon 31 days")}
	for _, b := range delays {
		for _, m := range delays {
			out = append(out, checkCase{baseDelay: b, maxDelay: m, status: "pending"})
		}
	}
	// States, waits and key lengths.
	for _, st := range []string{"pending", "leased", "succeeded", "failed", "cancelled", "Pending", "", "bogus"} {
		for _, w := range []*string{nil, ptr("sleep"), ptr("signal"), ptr("child"), ptr("dag"), ptr("Sleep"), ptr("")} {
			out = append(out, checkCase{status: st, waitKind: w})
		}
	}
	for _, n := range []int{1, 511, 512, 513} {
		out = append(out, checkCase{key: ptr(strings.Repeat("k", n)), status: "pending"},
			checkCase{key: ptr(strings.Repeat("é", n)), status: "pending"}) // two bytes a character
	}
	// Empty uids and namespaces, and lines after a reserved prefix.
	for _, k := range []*string{ptr("k8s-uid:"), ptr("k8s::x"), ptr("k8s:ns1:\nx"), ptr("k8s-uid:u-1\n"), ptr("dag:" + parent + ":s\n")} {
		for _, uid := range []*string{ptr(""), ptr("u-1\n")} {
			out = append(out, checkCase{key: k, namespace: ptr(""), uid: uid, parent: ptr(parent), step: ptr("s\n"), status: "pending"})
		}
	}
	return out
}

// TestCompactChecksMatchTheirPlainRules evaluates each compacted check of
// workflow_run, as the schema holds it, beside its plain form (plainRules)
// over the same rows: a row one accepts and the other refuses fails the
// test.
func TestCompactChecksMatchTheirPlainRules(t *testing.T) {
	t.Parallel()
	b := setup(t)
	after := checkRules(t, b, compactedChecks)
	before := map[string]string{}
	for _, name := range compactedChecks {
		before[name] = "(" + plainRules[name] + ")"
	}
	cases := loadCheckCases(t, b)
	for _, name := range compactedChecks {
		// Both expressions are the schema's own text, never a value.
		q := fmt.Sprintf(`select n, (%s) is not false, (%s) is not false from check_case order by n`, before[name], after[name])
		got, err := b.pool.Query(b.ctx, q)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		defer got.Close()
		accepted, refused := 0, 0
		for got.Next() {
			var n int
			var was, is bool
			if err := got.Scan(&n, &was, &is); err != nil {
				t.Fatal(err)
			}
			if was != is {
				t.Errorf("%s: row %+v is accepted %v by the plain rule, %v by the schema", name, describe(cases[n]), was, is)
			}
			if is {
				accepted++
			} else {
				refused++
			}
		}
		if err := got.Err(); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		// The cases reach both outcomes of every rule, so an always-true or
		// always-false rewrite could not pass.
		if accepted == 0 || refused == 0 {
			t.Errorf("%s: %d cases accepted, %d refused; the cases must reach both", name, accepted, refused)
		}
	}
}

// loadCheckCases stores checkCases in the table check_case_text and
// makes the view check_case, which reads them with the columns' types.
func loadCheckCases(t *testing.T, b *bundle) []checkCase {
	t.Helper()
	if _, err := b.pool.Exec(b.ctx, `create table check_case_text (
		n int primary key, idempotency_key text, source_namespace text, source_uid text,
		parent_id text, parent_step text, traceparent text,
		retry_base_delay text, retry_max_delay text, status text, wait_kind text);
		create view check_case as
		select n, idempotency_key, source_namespace, source_uid, parent_id::uuid as parent_id, parent_step,
		       traceparent, retry_base_delay::interval as retry_base_delay,
		       retry_max_delay::interval as retry_max_delay, status, wait_kind
		from check_case_text`); err != nil {
		t.Fatal(err)
	}
	cases := checkCases()
	rows := make([][]any, len(cases))
	for i, c := range cases {
		rows[i] = []any{i, c.key, c.namespace, c.uid, c.parent, c.step, c.traceparent, c.baseDelay, c.maxDelay, c.status, c.waitKind}
	}
	if _, err := b.pool.CopyFrom(b.ctx, pgx.Identifier{"check_case_text"}, []string{"n", "idempotency_key", "source_namespace",
		"source_uid", "parent_id", "parent_step", "traceparent", "retry_base_delay", "retry_max_delay", "status", "wait_kind"},
		pgx.CopyFromRows(rows)); err != nil {
		t.Fatal(err)
	}
	return cases
}

// TestInsertRulesMatchTheirPlainRules inserts every case as a run (each
// in a savepoint rolled back at once, so that keys never collide) and
// compares what the schema refuses with the plain forms of the rules an
// insert meets: a row is refused exactly when one of them refuses it, and
// the error names one of those. The rules on columns written once are not
// expressions in the catalog (on_run_inserted checks them), so only their
// behaviour can be compared.
func TestInsertRulesMatchTheirPlainRules(t *testing.T) {
	t.Parallel()
	b := setup(t)
	cases := loadCheckCases(t, b)
	rules := append(append([]string{}, insertRules...), "workflow_run_idempotency_key_length",
		"workflow_run_traceparent_format")
	var verdicts strings.Builder
	for i, name := range rules {
		if i > 0 {
			verdicts.WriteString(", ")
		}
		// The plain rules are the test's own constants.
		fmt.Fprintf(&verdicts, "(%s) is false", plainRules[name])
	}
	got, err := b.pool.Query(b.ctx, fmt.Sprintf(`select n, array[%s] from check_case order by n`, verdicts.String()))
	if err != nil {
		t.Fatal(err)
	}
	refusing := make([][]string, len(cases))
	for got.Next() {
		var n int
		var refused []bool
		if err := got.Scan(&n, &refused); err != nil {
			t.Fatal(err)
		}
		for i, r := range refused {
			if r {
				refusing[n] = append(refusing[n], rules[i])
			}
		}
	}
	if err := got.Err(); err != nil {
		t.Fatal(err)
	}
	tx, err := b.pool.Begin(b.ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(b.ctx) }()
	named := map[string]int{}
	for n := range cases {
		if _, err := tx.Exec(b.ctx, "savepoint one_case"); err != nil {
			t.Fatal(err)
		}
		_, err := tx.Exec(b.ctx, `insert into workflow.workflow_run (type, namespace, type_namespace, idempotency_key,
			source_namespace, source_uid, parent_id, parent_step, traceparent, retry_base_delay, retry_max_delay)
			select 'check.case.v1', 'default', 'default', idempotency_key, source_namespace, source_uid, parent_id,
			       parent_step, traceparent, retry_base_delay, retry_max_delay
			from check_case where n = $1`, n)
		var pgErr *pgconn.PgError
		switch {
		case err == nil && len(refusing[n]) > 0:
			t.Errorf("row %s is accepted by the schema, refused by %v", describe(cases[n]), refusing[n])
		case err != nil && !errors.As(err, &pgErr):
			t.Fatalf("row %s: %v", describe(cases[n]), err)
		case err != nil && (pgErr.Code != "SW001" || !slices.Contains(refusing[n], pgErr.ConstraintName)):
			t.Errorf("row %s is refused by the schema (%s %s: %s), by %v in plain rules", describe(cases[n]),
				pgErr.Code, pgErr.ConstraintName, pgErr.Message, refusing[n])
		case err != nil:
			named[pgErr.ConstraintName]++
		}
		if _, err := tx.Exec(b.ctx, "rollback to savepoint one_case"); err != nil {
			t.Fatal(err)
		}
	}
	// Every rule of the insert refuses some case by its own name, so a
	// rule that refused nothing could not pass.
	for _, name := range insertRules {
		if named[name] == 0 {
			t.Errorf("no case was refused by %s (refusals by name: %v)", name, named)
		}
	}
}

// describe prints a case with its null columns left out.
func describe(c checkCase) string {
	var parts []string
	for _, f := range []struct {
		name string
		v    *string
	}{{"key", c.key}, {"namespace", c.namespace}, {"uid", c.uid}, {"parent", c.parent}, {"step", c.step},
		{"traceparent", c.traceparent}, {"base", c.baseDelay}, {"max", c.maxDelay}, {"wait", c.waitKind}} {
		if f.v != nil {
			parts = append(parts, fmt.Sprintf("%s=%q", f.name, *f.v))
		}
	}
	return strings.Join(append(parts, fmt.Sprintf("status=%q", c.status)), " ")
}
