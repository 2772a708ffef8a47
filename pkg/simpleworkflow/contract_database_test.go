package simpleworkflow_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// The SDK refuses a bad type, traceparent or name before it reaches the
// database, so the contract tests above never meet the database's own rule.
// Here each invalid case of the shared files goes to the schema's functions
// directly, as a plain-SQL producer would send it: the database refuses it
// as invalid input (SW001, testdata/contract/errors.json) with a sentence
// and records nothing. (Values with a
// NUL byte are left out: Postgres text cannot carry one, so the server
// refuses them before any rule is read.)
func TestContractDatabaseRefusesAlone(t *testing.T) {
	t.Parallel()
	b := setup(t)
	pool, err := pgxpool.New(b.ctx, b.url)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	refused := func(err error, what string) {
		t.Helper()
		var pgErr *pgconn.PgError
		if !errors.As(err, &pgErr) {
			t.Errorf("%s: the database took it (err %v)", what, err)
			return
		}
		// SW001: a rule or a function's own check, saying what is wrong.
		if pgErr.Code != "SW001" || pgErr.Message == "" {
			t.Errorf("%s: refused with %s %s, want SW001 with a sentence", what, pgErr.Code, pgErr.Message)
		}
	}
	nothingFor := func(key, what string) {
		t.Helper()
		var n int
		if err := pool.QueryRow(b.ctx, `select count(*) from workflow.run_by_key($1) r where r is not null`, key).Scan(&n); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if n != 0 {
			t.Errorf("%s: a refused create left a run behind", what)
		}
	}
	checked := 0

	// Each invalid type and traceparent, through create_run: the file, the
	// statement, and what the case puts where.
	creates := []struct{ file, what, sql string }{
		{"types.json", "type", `select * from workflow.create_run($1, '{}'::jsonb, p_idempotency_key => $2)`},
		{"traceparents.json", "traceparent", `select * from workflow.create_run('contract.trace.v1', '{}'::jsonb,
			p_traceparent => $1, p_idempotency_key => $2)`},
	}
	for _, c := range creates {
		var cases validInvalid
		loadContract(t, c.file, &cases)
		for i, bad := range cases.Invalid {
			if strings.ContainsRune(bad.Value, 0) {
				continue
			}
			key := fmt.Sprintf("db-%s-%d", c.what, i)
			_, err := pool.Exec(b.ctx, c.sql, bad.Value, key)
			refused(err, c.what+" "+bad.Why)
			nothingFor(key, c.what+" "+bad.Why)
			checked++
		}
	}

	var names validInvalid
	loadContract(t, "names.json", &names)
	var run string
	if err := pool.QueryRow(b.ctx, `select id::text from workflow.create_run('contract.names.v1', '{}'::jsonb)`).Scan(&run); err != nil {
		t.Fatal(err)
	}
	for _, bad := range names.Invalid {
		if strings.ContainsRune(bad.Value, 0) {
			continue
		}
		_, err := pool.Exec(b.ctx, `select * from workflow.send_signal($1::uuid, $2, null, null)`, run, bad.Value)
		refused(err, "signal name "+bad.Why)
		checked++
	}
	var signals int
	if err := pool.QueryRow(b.ctx, `select count(*) from workflow.run_signals($1::uuid)`, run).Scan(&signals); err != nil {
		t.Fatal(err)
	}
	if signals != 0 {
		t.Errorf("refused signals left %d behind", signals)
	}
	if checked < 10 {
		t.Errorf("only %d cases reached the database; the contract files hold more", checked)
	}
}
